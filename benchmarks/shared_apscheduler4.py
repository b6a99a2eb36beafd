"""APScheduler 4 (its pre-release, 4.0.0a6) on the workload of benchmarks/shared.py, on the same kind of
PostgreSQL server: its SQLAlchemyDataStore (psycopg 3, asyncio) and PsycopgEventBroker, N processes each
an AsyncScheduler (role both: schedules and runs jobs), K schedules with an IntervalTrigger every P
seconds, started on the same staggered grid as timerwheel's keys. Every job journals its schedule id and
scheduled fire time when it starts, so fires per second, lateness and duplicate runs are counted as for
timerwheel (tests/_shared_child.py's Journal). With --takeover-keys K, also takeover: K keys every
--takeover-period seconds (a load both keep up with) on 4 processes, one SIGKILLed; for each key whose
last fire before the kill was the killed process's, how long until its next fire (shared.py's gaps).
With --plot FILE, a PNG of fires per second by processes and of takeover.

    pip install "apscheduler==4.0.0a6" "sqlalchemy[asyncio]>=2.0.24" "psycopg[binary]>=3.2" sniffio .
    python benchmarks/shared_apscheduler4.py [--keys K] [--period P] [--seconds S] [--takeover-keys K]
        [--plot docs/images/shared_apscheduler4.png]

(A separate virtual environment is simplest: APScheduler 4 and 3 cannot be installed side by side;
timerwheel is needed only for the grid of the keys and the journal's checks.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

JOURNAL_FD: int | None = None
NAME = ""


def tick(key: str) -> None:
    """The job: journal its start (the same line format as tests/_shared_child.py)."""
    from apscheduler import current_job

    job = current_job.get()
    at = round(job.scheduled_fire_time.timestamp() * 1_000_000)
    assert JOURNAL_FD is not None
    os.write(JOURNAL_FD, f"S {key} {at} {NAME} {round(time.time() * 1_000_000)}\n".encode())


def urls(port: int, name: str) -> tuple[str, str]:
    return (
        f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}",
        f"host=127.0.0.1 port={port} user=postgres dbname={name}",
    )


async def scheduler(url: str, conninfo: str) -> Any:
    from apscheduler import AsyncScheduler
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from apscheduler.eventbrokers.psycopg import PsycopgEventBroker
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    return AsyncScheduler(
        SQLAlchemyDataStore(engine), PsycopgEventBroker(conninfo), max_concurrent_jobs=100, lease_duration=2
    )


async def seed(url: str, conninfo: str, keys: int, period: float) -> None:
    from apscheduler import ConflictPolicy
    from apscheduler.triggers.interval import IntervalTrigger
    from tests._shared_child import grid

    start = datetime.fromtimestamp(time.time() + 3, UTC)
    async with await scheduler(url, conninfo) as sched:
        for i in range(keys):
            first = grid(period)(start, f"k{i}", None)
            await sched.add_schedule(
                tick,
                IntervalTrigger(seconds=period, start_time=first),
                id=f"k{i}",
                args=[f"k{i}"],
                conflict_policy=ConflictPolicy.replace,
            )


async def child(url: str, conninfo: str) -> None:
    sched = await scheduler(url, conninfo)
    async with sched:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(sched.stop()))
        await sched.run_until_stopped()


def children(port: int, processes: int, keys: int, period: float) -> tuple[Path, list[Any]]:
    """A database seeded with `keys` schedules, and `processes` schedulers on it: the journal, the
    children."""
    import psycopg

    name = f"a_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url, conninfo = urls(port, name)
    asyncio.run(seed(url, conninfo, keys, period))
    journal = Path(tempfile.mkdtemp()) / "journal"
    journal.touch()
    return journal, [
        subprocess.Popen([sys.executable, __file__, "--child", url, conninfo, str(journal), f"p{i}"])
        for i in range(processes)
    ]


def stop(procs: list[Any]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def run(port: int, processes: int, keys: int, period: float, seconds: float) -> dict[str, Any]:
    from tests._shared_child import Journal

    journal, procs = children(port, processes, keys, period)
    began = time.time()
    time.sleep(seconds)
    ended = time.time()
    stop(procs)
    j = Journal(journal)
    window = [fire for fire in j.starts if began + 4 <= j.started_at[fire] / 1e6 <= ended - 1]  # (run then)
    late = sorted(j.late_of[fire] for fire in window)
    twice = [fire for fire in window if len(j.starts[fire]) > 1]
    return {
        "processes": processes,
        "demanded": keys / period,
        "fires_per_s": len(window) / (ended - 1 - began - 4),
        "p50_ms": 1000 * late[len(late) // 2] if late else float("nan"),
        "p99_ms": 1000 * late[int(len(late) * 0.99)] if late else float("nan"),
        "twice": len(twice),
    }


def killed_run(port: int, keys: int, period: float) -> tuple[Path, float]:
    """4 schedulers, p0 SIGKILLed after 7 s (APScheduler's first fires come 3 s after the seeding), the
    others stopped 6 s later: the journal and when p0 was killed (as shared.py's killed_run)."""
    journal, procs = children(port, 4, keys, period)
    time.sleep(7.0)
    killed_at = time.time()
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    time.sleep(6.0)
    stop(procs[1:])
    return journal, killed_at


def plot(
    path: str, rows: list[tuple[int, str, dict[str, Any]]], takeovers: dict[str, dict[str, Any]]
) -> None:
    """Fires per second by processes, and takeover after a SIGKILL, for both schedulers, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate, take) = plt.subplots(1, 2, figsize=(10, 4))
    for label, marker in (("timerwheel", "o"), ("APScheduler 4.0.0a6", "s")):
        points = [(n, r["fires_per_s"]) for n, name, r in rows if name == label]
        rate.plot([n for n, _ in points], [f for _, f in points], marker=marker, label=label)
    demanded = rows[0][2]["demanded"]
    rate.axhline(demanded, color="grey", linestyle="--", label=f"demanded ({demanded:,.0f}/s)")
    rate.set_xlabel("processes")
    rate.set_ylabel("fires per second run")
    rate.set_xticks(sorted({n for n, _, _ in rows}))
    rate.set_yscale("log")
    rate.legend()
    rate.set_title(
        "Sustained fires per second (duplicates: "
        + ", ".join(f"{k} {sum(r['twice'] for _, n, r in rows if n == k)}" for k in takeovers)
        + ")",
        fontsize=9,
    )
    labels = list(takeovers)
    medians = [takeovers[k]["median_s"] or 0 for k in labels]
    maxima = [takeovers[k]["max_s"] or 0 for k in labels]
    xs = range(len(labels))
    take.bar([x - 0.2 for x in xs], medians, width=0.4, label="median")
    take.bar([x + 0.2 for x in xs], maxima, width=0.4, label="max")
    take.set_xticks(list(xs), [f"{k}\n(run twice: {takeovers[k]['twice']})" for k in labels])
    take.set_ylabel("s from the SIGKILL to the key's next fire")
    take.axhline(2.0, color="grey", linestyle="--", label="lease (2 s)")
    take.legend()
    take.set_title("Takeover of a killed process's keys (4 processes)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        global JOURNAL_FD, NAME
        url, conninfo, journal, NAME = sys.argv[2:6]
        JOURNAL_FD = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        asyncio.run(child(url, conninfo))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--period", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=14.0)
    parser.add_argument("--workers", type=int, default=16, help="each timerwheel process's workers")
    parser.add_argument("--processes", default="1,2,4", help="the process counts, e.g. 1,2,4")
    parser.add_argument("--takeover-keys", type=int, default=0, help="also measure takeover with K keys")
    parser.add_argument(
        "--takeover-period", type=float, default=1.0, help="their period (a load both keep up with)"
    )
    parser.add_argument("--plot", help="write a PNG of the results here (needs matplotlib)")
    args = parser.parse_args()
    os.environ["WORKERS"] = str(args.workers)  # (timerwheel's children: tests/_shared_child.py)
    import importlib.util

    from tests import _pg

    spec = importlib.util.spec_from_file_location("shared", Path(__file__).with_name("shared.py"))
    assert spec is not None and spec.loader is not None
    shared = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shared)
    server = _pg.Server()
    rows: list[tuple[int, str, dict[str, Any]]] = []
    takeovers: dict[str, dict[str, Any]] = {}
    try:
        print("| processes | scheduler | fires/s demanded | fires/s run | lateness p50 | p99 | run twice |")
        print("|---|---|---|---|---|---|---|")
        for n in (int(p) for p in args.processes.split(",")):
            for label, r in (
                ("timerwheel", shared.sustained(server, n, args.keys, args.period, args.seconds)),
                ("APScheduler 4.0.0a6", run(server.port, n, args.keys, args.period, args.seconds)),
            ):
                rows.append((n, label, r))
                print(
                    f"| {n} | {label} | {r['demanded']:.0f} | {r['fires_per_s']:.0f} | "
                    f"{r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {r['twice']} |",
                    flush=True,
                )
        if args.takeover_keys:
            from tests._shared_child import Journal

            for label, (journal, killed_at) in (
                ("timerwheel", shared.killed_run(server, args.takeover_keys, args.takeover_period)),
                ("APScheduler 4.0.0a6", killed_run(server.port, args.takeover_keys, args.takeover_period)),
            ):
                j = Journal(journal)
                gap = shared.gaps(j, killed_at)
                takeovers[label] = {
                    "keys": len(gap),
                    "median_s": statistics.median(gap) if gap else None,
                    "max_s": max(gap) if gap else None,
                    # (a fire started again after the kill, whose earlier start was the killed process's:
                    # its interrupted run, rerun; any other second start is a duplicate)
                    "twice": sum(1 for who in j.starts.values() if len(who) > 1 and set(who[:-1]) - {"p0"}),
                    "reruns": sum(1 for who in j.starts.values() if len(who) > 1 and set(who[:-1]) == {"p0"}),
                }
                t = takeovers[label]
                print(
                    f"takeover, {label}: {t['keys']} keys last run by the killed process fired again after "
                    f"median {t['median_s'] or float('nan'):.2f} s, max {t['max_s'] or float('nan'):.2f} s; "
                    f"run twice: {t['twice']} (reruns of its interrupted fires: {t['reruns']})",
                    flush=True,
                )
        if args.plot:
            plot(args.plot, rows, takeovers)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
