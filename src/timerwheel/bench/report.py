"""The parent of the worker processes (run_bench), the one JSON format, the tables and the plot.

A report is a dict (written as JSON by `python -m timerwheel bench --json`):

    {"machine": {"python", "platform", "cpu", "cpus"}, "sizes": [...], "versions": {competitor: version},
     "skipped": {competitor: why}, "results": [{"competitor", "op", "size", and "ns" (per operation),
     "bytes" (per pending timer) or "unsupported" (why not)}],
     "server": (with --server) {"conns", "loops", "skipped", "records": one per echo-server run}}

pytest-benchmark's JSON, from the files of benchmarks/ (each benchmark's extra_info names its competitor,
operation, size and operations per round), becomes one with from_pytest_benchmark(); load() reads either.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from typing import Any

from .competitors import COMPETITORS, PYPI_WHEELS
from .workloads import OPERATIONS

__all__ = ["format_report", "from_pytest_benchmark", "load", "machine", "plot", "run_bench"]


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": str(os.cpu_count()),
    }


class _Progress:
    """A one-line progress bar on stderr, updated in place; nothing when stderr is not a terminal (a file,
    a pipe, a CI log: the report says what ran)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        self.done = min(self.done + 1, self.total)
        if not self.tty:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done)  # (the measurements so far, as a rate)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        line += f"  {elapsed:.0f} s, about {left:.0f} s left"
        sys.stderr.write("\r" + line[:100].ljust(100))
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run_bench(
    competitors: list[str], sizes: list[int], ops: list[str], rounds: int, budget: float
) -> dict[str, Any]:
    """Run every competitor in its own process; return the machine, versions, results and skips."""
    steps = 0
    for name in competitors:
        for size in sizes:
            if size > 10**6 and not COMPETITORS[name].big:
                continue
            steps += len(ops)
    progress = _Progress(steps)
    report: dict[str, Any] = {
        "machine": machine(),
        "sizes": sizes,
        "versions": {},
        "skipped": {},
        "results": [],
    }
    for name in competitors:
        cmd = [sys.executable, "-m", "timerwheel", "bench", "--worker", name, "--rounds", str(rounds)]
        cmd += ["--budget", str(budget), "--sizes", ",".join(str(s) for s in sizes), "--ops", ",".join(ops)]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                record = json.loads(line)
                if "skipped" in record:
                    report["skipped"][name] = record["skipped"]
                elif "version" in record:
                    report["versions"][name] = record["version"]
                else:
                    report["results"].append(record)
                    progress.step(f"{name} {record['op']} @{record['size']:.0e}")
        if proc.returncode and name not in report["skipped"]:
            report["skipped"][name] = f"its worker process failed (exit code {proc.returncode})"
    progress.end()
    return report


def format_report(report: dict[str, Any], baseline: str | None = None) -> str:
    """The results as tables (one per operation): ns per operation, and the ratio to the baseline (by
    default the Cython wheel, or the pure-Python one where the extension is not in use)."""
    if baseline is None:  # the wheel of the backend in use, else the first competitor measured
        baseline = next(
            (n for n in ("timerwheel", "timerwheel-py", *report["versions"]) if n in report["versions"]),
            "timerwheel",
        )
    out = []
    machine = report["machine"]
    out.append(f"{machine['python']} on {machine['platform']}; {machine['cpu']} ({machine['cpus']} CPUs)")
    out.append("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    results = report["results"]
    sizes = sorted({r["size"] for r in results})
    names = [n for n in COMPETITORS if n in report["versions"]]
    names += [n for n in report["versions"] if n not in COMPETITORS]  # (from benchmarks/: their own)
    width = max([16, *(len(n) + 2 for n in names)])
    others = sorted({r["op"] for r in results} - set(OPERATIONS))  # (benchmarks/ measure more)
    for op in [*OPERATIONS, *others]:
        rows = [r for r in results if r["op"] == op]
        if not rows:
            continue
        out.append(f"\n{op}: {unit(op)}; in brackets, the ratio to {baseline}")
        out.append(f"  {'':<{width}}" + "".join(f"{_size(s):>24}" for s in sizes))
        base = {r["size"]: r.get("bytes", r.get("ns")) for r in rows if r["competitor"] == baseline}
        for name in names:
            cells = []
            for size in sizes:
                rec = next((r for r in rows if r["competitor"] == name and r["size"] == size), None)
                if rec is None:
                    cells.append("")
                elif "unsupported" in rec:
                    cells.append("n/a")
                else:
                    value = rec.get("bytes", rec.get("ns"))
                    ratio = f" ({_ratio(value / base[size])})" if base.get(size) else ""
                    cells.append(f"{value:,.0f}{ratio}")
            out.append(f"  {name:<{width}}" + "".join(f"{c:>24}" for c in cells))
    ran = {r["op"] for r in results}
    notes = [
        note
        for note in dict.fromkeys(COMPETITORS[n].note for n in names if n in COMPETITORS)
        if note and ("next_due" in ran or "next due" not in note)
    ]
    small = [n for n in names if n in COMPETITORS and not COMPETITORS[n].big]
    if small and report.get("sizes") and max(report["sizes"]) > 10**6:
        notes.append(f"{', '.join(small)}: up to 10^6 pending only (10^7 is for the wheel and the heap).")
    if notes:
        out.append("\n" + "\n".join(notes))
    for name, why in report["skipped"].items():
        out.append(f"skipped {name}: {why}")
    if report.get("server"):
        from .scenario import format_server_section  # (not at import: the server's process imports this)

        out.append(format_server_section(report["server"]))
    out.append("Timer-wheel packages on PyPI, not measured:")
    out.extend(f"  {pkg}: {why}" for pkg, why in PYPI_WHEELS.items())
    return "\n".join(out)


def _ratio(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio < 100 else f"{ratio:,.0f}x"


def _size(size: int) -> str:
    exponent = round(math.log10(size))
    return f"10^{exponent}" if 10**exponent == size else f"{size:,}"


#: The plot's panels: like against like, a few series each (competitors of benchmarks/ not named here go
#: to "others").
PLOT_GROUPS = [
    ("timer stores", ["timerwheel", "timerwheel-py", "heapq", "sched"]),
    ("job engines", ["Scheduler", "HeapScheduler", "ThreadedScheduler", "twisted"]),
    ("on asyncio's loop", ["AsyncScheduler", "AsyncScheduler-jobs", "asyncio", "hand-kept"]),
    ("on uvloop", ["AsyncScheduler-uvloop", "uvloop", "hand-kept-uvloop"]),
    ("event loops", ["asyncio", "timerwheel.loop", "uvloop", "timerwheel.loop-uvloop"]),
    (
        "timeouts",
        [
            "AsyncScheduler.timeout",
            "asyncio.timeout",
            "AsyncScheduler.timeout-uvloop",
            "asyncio.timeout-uvloop",
        ],
    ),
]


def unit(op: str) -> str:
    """What an operation's figure counts (the same words in the tables and on the plot's axes)."""
    return {"memory": "bytes per pending timer", "schedule_expire": "ns per timer"}.get(
        op, "ns per operation"
    )


def plot(report: dict[str, Any], path: str) -> list[tuple[str, str, list[str]]]:
    """A grid of panels: a row per operation, a column per group of like competitors (PLOT_GROUPS), each
    with at most a few series in distinct colours and markers (timerwheel's solid, the others dashed);
    cost against pending timers, log-log (sizes and costs span decades); the tables' unit on the axes.
    Returns the panels drawn: (operation, group, the competitors in it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in report["results"] if "unsupported" not in r and ("ns" in r or "bytes" in r)]
    named = {n for _, names in PLOT_GROUPS for n in names}
    groups = [*PLOT_GROUPS, ("others", sorted({r["competitor"] for r in results} - named))]
    groups = [
        (title, [n for n in names if any(r["competitor"] == n for r in results)]) for title, names in groups
    ]
    groups = [(title, names) for title, names in groups if names]
    ops = [op for op in OPERATIONS if any(r["op"] == op for r in results)]
    ops += sorted({r["op"] for r in results} - set(ops))
    if not ops:
        raise ValueError("the report has no figures to plot")
    fig, axes = plt.subplots(
        len(ops), len(groups), figsize=(4.3 * len(groups), 3.3 * len(ops)), squeeze=False
    )
    panels: list[tuple[str, str, list[str]]] = []
    colors = plt.get_cmap("tab10")
    markers = "osD^v<>ph*"
    for row, op in enumerate(ops):
        for column, (title, names) in enumerate(groups):
            ax = axes[row][column]
            drawn = 0
            for index, name in enumerate(names):
                rows = sorted(
                    (r for r in results if r["competitor"] == name and r["op"] == op), key=lambda r: r["size"]
                )
                if not rows:
                    continue
                ours = name.startswith(("timerwheel", "Scheduler", "AsyncScheduler", "ThreadedScheduler"))
                ax.plot(
                    [r["size"] for r in rows],
                    [r.get("bytes", r.get("ns")) for r in rows],
                    "-" if ours else "--",
                    marker=markers[index % len(markers)],
                    color=colors(index % 10),
                    label=name,
                    markersize=5,
                )
                drawn += 1
            ax.set_title(
                f"{op.replace('_', ' + ') if op.startswith('schedule') else op.replace('_', ' ')}: {title}"
            )
            if not drawn:
                ax.axis("off")
                continue
            panels.append((op, title, [line.get_label() for line in ax.get_lines()]))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("timers pending")
            ax.set_ylabel(unit(op))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(
        f"timerwheel against other timers ({report['machine']['python']}; lower is better; "
        "solid: timerwheel, dashed: others)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return panels


def from_pytest_benchmark(data: dict[str, Any]) -> dict[str, Any]:
    """A report from pytest-benchmark's JSON: one record per benchmark that names its competitor, op, size
    and ops (extra_info); ns per operation from the median round."""
    info = data.get("machine_info", {})
    cpu = info.get("cpu", {})
    report: dict[str, Any] = {
        "machine": {
            "python": f"{info.get('python_implementation', '?')} {info.get('python_version', '?')}",
            "platform": info.get("platform", "?"),
            "cpu": cpu.get("brand_raw", "?") if isinstance(cpu, dict) else str(cpu),
            "cpus": str(cpu.get("count", "?")) if isinstance(cpu, dict) else "?",
        },
        "versions": {},
        "skipped": {},
        "results": [],
    }
    for bench in data.get("benchmarks", []):
        extra = bench.get("extra_info", {})
        if not {"competitor", "op", "size", "ops"} <= extra.keys():
            continue
        report["versions"].setdefault(extra["competitor"], extra.get("version", ""))
        ns = bench["stats"]["median"] / extra["ops"] * 1e9
        report["results"].append(
            {"competitor": extra["competitor"], "op": extra["op"], "size": extra["size"], "ns": ns}
        )
    report["sizes"] = sorted({r["size"] for r in report["results"]})
    return report


def load(path: str) -> dict[str, Any]:
    """A report from a JSON file: this format, or pytest-benchmark's (converted)."""
    with open(path) as f:
        data = json.load(f)
    return from_pytest_benchmark(data) if "benchmarks" in data else data
