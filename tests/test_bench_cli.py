"""`python -m timerwheel bench`: each competitor's operations do what they claim, and the command works.

Correctness only: how fast anything is belongs in benchmarks/, never in a test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from timerwheel import BACKEND
from timerwheel import __main__ as cli
from timerwheel.bench import COMPETITORS, Competitor, Unsupported, format_report, worker

WHEEL = "timerwheel" if BACKEND == "cython" else "timerwheel-py"  # the wheel of the backend in use


def _usable(name: str) -> Competitor:
    competitor = COMPETITORS[name]()
    try:
        competitor.version()
    except Exception as exc:
        pytest.skip(f"{name} is not usable here: {exc}")
    return competitor


@pytest.mark.parametrize("name", list(COMPETITORS))
def test_each_competitor_does_what_its_operations_claim(name: str) -> None:
    competitor = _usable(name)
    competitor.build(300)
    try:
        before = len(competitor.items)
        try:
            competitor.schedule_cancel(50)
        except Unsupported:
            assert name in NO_SCHEDULE
        competitor.reset(400)  # more than one round-robin pass
        assert len(competitor.items) == before
        try:
            competitor.next_due(5)
        except Unsupported:
            assert name in NO_NEXT_DUE
    finally:
        competitor.close()
    try:
        assert _usable(name).schedule_expire(2500) == 2500  # every callback ran, once
    except Unsupported:
        assert name in NO_EXPIRE


# The competitors with no public way to ask for the next due, and those whose timers cannot expire here.
NO_NEXT_DUE = {"asyncio", "uvloop", "AsyncScheduler", "AsyncScheduler-jobs", "asyncio.timeout"}
NO_NEXT_DUE |= {"AsyncScheduler.timeout", "ThreadedScheduler", "timerwheel.loop", "timerwheel.loop-uvloop"}
NO_EXPIRE = {"asyncio.timeout", "AsyncScheduler.timeout", "ThreadedScheduler"}
NO_EXPIRE |= {"asyncio.timeout-uvloop", "AsyncScheduler.timeout-uvloop"}
NO_SCHEDULE = {"hand-kept", "hand-kept-uvloop"}  # a deadline kept by hand: it only has resets
NO_NEXT_DUE |= NO_SCHEDULE | {
    "AsyncScheduler-uvloop",
    "asyncio.timeout-uvloop",
    "AsyncScheduler.timeout-uvloop",
}
NO_EXPIRE |= NO_SCHEDULE


def test_the_worker_reports_every_operation_and_size() -> None:
    records = list(
        worker(WHEEL, [100, 1000], ["schedule_cancel", "reset", "schedule_expire", "memory"], 2, 0.001)
    )
    assert records[0]["version"]
    measured = {(r["op"], r["size"]) for r in records[1:]}
    assert measured == {
        (op, size) for op in ("schedule_cancel", "reset", "schedule_expire", "memory") for size in (100, 1000)
    }
    assert all(r.get("ns", r.get("bytes", 0)) > 0 for r in records[1:])


def test_a_competitor_that_is_not_installed_is_skipped_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "twisted", None)  # an import of it fails
    (record,) = list(worker("twisted", [100], ["reset"], 1, 0.001))
    assert "skipped" in record and "twisted" in record["skipped"]


def test_the_command_prints_a_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--sizes", "200", "--competitors", f"{WHEEL},HeapScheduler"]
    assert cli.main([*argv, "--ops", "schedule_cancel,memory", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "schedule_cancel" in text and "HeapScheduler" in text and "(1.0x)" in text
    report = json.loads(out.read_text())
    assert {r["competitor"] for r in report["results"]} == {WHEEL, "HeapScheduler"}
    assert report["machine"]["python"] and not report["skipped"]
    assert "Timer-wheel packages on PyPI" in format_report(report)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "0"], "sizes"),
        (["--sizes", "1e8"], "sizes"),
        (["--sizes", "ten"], "sizes"),
        (["--ops", "sort"], "operation"),
        (["--competitors", "heapy"], "competitor"),
        (["--rounds", "0"], "rounds"),
        (["--sizes", "inf"], "sizes"),
        (["--budget", "nan"], "budget"),
        (["--quick", "--json", "/nonexistent/dir/out.json"], "cannot write"),
        (["--budget", "0"], "budget"),
        (["--server", "0"], "server"),
        (["--server", "100000"], "server"),
    ],
)
def test_bad_options_are_refused_clearly(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_plot_without_matplotlib_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit):
        cli.main(["bench", "--quick", "--plot", str(tmp_path / "x.png")])
    assert "matplotlib" in capsys.readouterr().err


def test_plot_draws_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from timerwheel.bench import plot

    report = {
        "machine": {"python": "CPython 3.x"},
        "results": [
            {"competitor": name, "op": "reset", "size": size, "ns": ns}
            for name, ns in (("timerwheel", 60.0), ("asyncio", 1500.0))
            for size in (1000, 10000)
        ],
    }
    path = tmp_path / "bench.png"
    plot(report, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_puts_like_against_like_a_few_series_a_panel_with_the_tables_units(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from timerwheel.bench import COMPETITORS, plot

    report = {
        "machine": {"python": "CPython 3.x"},
        "results": [
            {"competitor": name, "op": op, "size": size, ("bytes" if op == "memory" else "ns"): 100.0 + i}
            for i, name in enumerate(COMPETITORS)
            for op in ("reset", "schedule_expire", "memory")
            for size in (1000, 10000)
        ],
    }
    panels = plot(report, str(tmp_path / "bench.png"))
    assert {op for op, _, _ in panels} == {"reset", "schedule_expire", "memory"}
    assert max(len(names) for _, _, names in panels) <= 4
    drawn = {name for _, _, names in panels for name in names}
    assert drawn == set(COMPETITORS)  # (every competitor, each in one group)
    groups = {group: names for op, group, names in panels if op == "reset"}
    assert set(groups["timer stores"]) == {"timerwheel", "timerwheel-py", "heapq", "sched"}
    from timerwheel.bench.report import unit

    assert unit("schedule_expire") == "ns per timer" and unit("memory") == "bytes per pending timer"


def test_progress_goes_to_a_terminal_only(capsys: pytest.CaptureFixture[str]) -> None:
    """Piped or written to a file, the bench prints its report, not a line per measurement."""
    assert cli.main(["bench", "--quick", "--competitors", "heapq", "--sizes", "1e3", "--ops", "reset"]) == 0
    captured = capsys.readouterr()
    assert "[#" not in captured.err and "[#" not in captured.out
    assert "reset: ns per operation" in captured.out


def test_unknown_arguments_print_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--bogus"]) == 2
    assert "python -m timerwheel bench" in capsys.readouterr().err


def test_the_plain_command_prints_the_backend_and_a_short_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import timerwheel

    monkeypatch.setattr(cli, "DEMO_SIZE", 1000)  # the real one is 10**5: a few seconds
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert f"backend: {timerwheel.BACKEND}" in out
    assert "schedule_cancel" in out and "asyncio" in out and "HeapScheduler" in out


def test_the_cursor_is_always_at_the_earliest_timer() -> None:
    """next_due moves the timer at the cursor and asks: that timer must be the earliest pending one."""
    competitor = _usable("Scheduler")
    competitor.build(300)
    competitor.reset(400)
    competitor.next_due(250)
    sched = competitor.sched  # type: ignore[attr-defined]
    dues = [sched.next_fire_time(task_id) for task_id in competitor.items]
    assert dues[competitor.pos] == min(dues)
    assert sched.next_run_in() == min(dues)  # the clock stands at 0


def test_memory_is_counted_net_of_set_up() -> None:
    """An event loop or an import is not charged to the timers: the figure is per timer at 10 as at 1000."""
    from timerwheel.bench import memory

    competitor = COMPETITORS["asyncio"]
    small, large = memory(competitor, 10), memory(competitor, 1000)
    assert 100 < large < 400 and abs(small - large) < 0.5 * large


def test_an_operation_asked_twice_is_measured_once(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--sizes", "100", "--competitors", f"{WHEEL},{WHEEL}", "--ops", "reset,reset"]
    assert cli.main([*argv, "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["results"]) == 1


def test_report_prints_a_saved_run_and_pytest_benchmark_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report reads the CLI's own JSON, and pytest-benchmark's from benchmarks/ (one format, one report)."""
    saved = tmp_path / "run.json"
    argv = ["bench", "--quick", "--sizes", "100", "--competitors", f"{WHEEL},heapq", "--ops", "reset"]
    assert cli.main([*argv, "--json", str(saved)]) == 0
    capsys.readouterr()
    assert cli.main(["bench", "--report", str(saved)]) == 0
    table = capsys.readouterr().out
    assert "reset: ns per operation" in table and "heapq" in table
    pytest_json = {
        "machine_info": {"python_implementation": "CPython", "python_version": "3.11.7", "platform": "x"},
        "benchmarks": [
            {
                "extra_info": {"competitor": "Scheduler", "op": "reset", "size": 1000, "ops": 10},
                "stats": {"median": 2e-6},
            },
            {
                "extra_info": {"competitor": "HeapScheduler", "op": "reset", "size": 1000, "ops": 10},
                "stats": {"median": 6e-6},
            },
            {"extra_info": {"unrelated": True}, "stats": {"median": 1.0}},
        ],
    }
    other = tmp_path / "pytest.json"
    other.write_text(json.dumps(pytest_json))
    assert cli.main(["bench", "--report", str(other), "--baseline", "Scheduler"]) == 0
    table = capsys.readouterr().out
    assert "ratio to Scheduler" in table
    assert cli.main(["bench", "--report", str(other)]) == 0  # no wheel in it: ratios to the first measured
    assert "ratio to Scheduler" in capsys.readouterr().out
    assert "200 (1.0x)" in table and "600 (3.0x)" in table  # 2 us / 10 ops = 200 ns; the heap 3x that


def test_an_operation_a_competitor_cannot_do_is_reported_and_the_rest_measured() -> None:
    """ThreadedScheduler cannot expire timers on a virtual clock: the worker says so and goes on."""
    records = list(worker("ThreadedScheduler", [100], ["schedule_expire", "memory"], 1, 0.001))
    assert records[1]["op"] == "schedule_expire" and "real time" in records[1]["unsupported"]
    assert records[2]["op"] == "memory" and records[2]["bytes"] > 0


def test_the_server_scenario_shows_beside_the_core_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--server: a tiny real run of the echo server and its load generator (processes, 127.0.0.1)."""
    from timerwheel.bench import scenario

    monkeypatch.setattr(scenario, "PATTERNS", ("none", "timerwheel"))  # two of them: a few seconds
    out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--sizes", "100", "--competitors", WHEEL, "--ops", "reset", "--server", "10"]
    assert cli.main([*argv, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "reset: ns per operation" in text and "server, 10 connections" in text
    server = json.loads(out.read_text())["server"]
    assert server["conns"] == 10 and "asyncio" in server["loops"]
    assert len(server["records"]) == 2 * len(server["loops"])  # each pattern on each loop, once
    for record in server["records"]:
        assert record["pattern"] in ("none", "timerwheel") and record["connected"] == 10
        for phase in ("saturated", "moderate"):
            assert record["phases"][phase]["messages"] > 0 and record["phases"][phase]["us_per_message"] > 0
        assert record["phases"]["in-process"]["us_per_message"] > 0
        assert record["closed"]["early"] == 0
    assert cli.main(["bench", "--report", str(out)]) == 0  # a saved run prints the same section
    assert "server, 10 connections" in capsys.readouterr().out
