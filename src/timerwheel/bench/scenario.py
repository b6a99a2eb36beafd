"""The echo-server scenario: the server (timerwheel.bench.server) and its load generator
(timerwheel.bench.loadgen), each in its own process, and the server's CPU time per message for each
pattern of timers, loop and load level, in interleaved runs.

One run (run_server): start the server, connect the generator's N connections, then for each phase (a load
level) let it warm up and ask the server for its CPU time (user + system, garbage collector on) and the
messages it echoed at the start and the end of a measured window: CPU per message. The phase "in-process"
then measures the server's own work per message without sockets, in the same process (see
server.in_process). run_scenario repeats runs over patterns and loops, interleaved; summarize gives per loop,
phase and pattern the median and spread, and the timers' share of the server's CPU.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .server import LOOPS, PATTERNS

__all__ = [
    "PORTS_PER_LISTENER",
    "Phase",
    "format_server_report",
    "run_scenario",
    "run_server",
    "server_section",
    "summarize",
]

PORTS_PER_LISTENER = 20_000  # connections per listening port: the ephemeral ports of one address are ~28k


@dataclass
class Phase:
    """A load level: `rate` messages per second over the first `active` connections (0: all), or
    saturated (rate None); `warm` seconds before the measured window of `window` seconds."""

    name: str
    rate: float | None
    warm: float
    window: float
    active: int = 0


class _Child:
    """A child process (`python -m timerwheel.bench.<module>`) that takes commands on stdin and answers
    with JSON lines on stdout."""

    def __init__(self, module: str, args: list[str]) -> None:
        self.module = module
        cmd = [sys.executable, "-m", f"timerwheel.bench.{module}", *args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # bounded: the child exits after its --max-seconds
        if not line:
            raise RuntimeError(f"the {self.module} process ended early (exit code {self.proc.wait(30)})")
        record: dict[str, Any] = json.loads(line)
        if "error" in record:
            raise RuntimeError(f"{self.module}: {record['error']}")
        return record

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str) -> dict[str, Any]:
        self.send(command)
        return self.read()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send("quit")
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _window(server: _Child, client: _Child, phase: Phase) -> dict[str, Any]:
    """The server's CPU time and messages over one measured window of `phase` (its load already on), the
    round trips the load generator saw meanwhile (p50, p99), and the server's peak memory so far."""
    time.sleep(phase.warm)  # the load runs in the other processes: this one only waits
    client.ask("latency")  # (from here on)
    start = server.ask("mark")
    time.sleep(phase.window)
    end = server.ask("mark")
    latency = client.ask("latency")
    messages, cpu = end["messages"] - start["messages"], end["cpu"] - start["cpu"]
    seconds = end["time"] - start["time"]
    result = {
        "messages": messages,
        "seconds": seconds,
        "cpu": cpu,
        "us_per_message": cpu / messages * 1e6 if messages else None,
        "messages_per_second": messages / seconds if seconds > 0 else 0.0,
        "p50_us": latency["p50_us"],
        "p99_us": latency["p99_us"],
        "server_mb": end["max_rss_kb"] / 1024 if end.get("max_rss_kb") is not None else None,
    }
    if start["iterations"] is not None:  # the stdlib loop counts its iterations
        iterations = end["iterations"] - start["iterations"]
        result["iterations"] = iterations
        result["us_per_iteration"] = cpu / iterations * 1e6 if iterations else None
    return result


def run_server(
    pattern: str,
    loop: str,
    conns: int,
    phases: list[Phase],
    *,
    idle: float = 10.0,
    request: float = 5.0,
    in_process: tuple[int, int] | None = (1000, 30),
    max_seconds: float = 600.0,
) -> dict[str, Any]:
    """One run: a server of `pattern` on `loop` (a process), `conns` connections from the load generator
    (another), then each phase (warm-up, measured window); then, if `in_process` = (connections, rounds),
    the server's own CPU per message without sockets, as the phase "in-process". One record per run."""
    listeners = max(1, -(-conns // PORTS_PER_LISTENER))
    args = ["--pattern", pattern, "--loop", loop, "--listeners", str(listeners), "--idle", str(idle)]
    args += ["--request", str(request), "--fds", str(conns + 256), "--max-seconds", str(max_seconds)]
    server = _Child("server", args)
    client: _Child | None = None
    record: dict[str, Any] = {"pattern": pattern, "loop": loop, "conns": conns, "phases": {}}
    try:
        hello = server.read()
        ports = ",".join(map(str, hello["ports"]))
        client = _Child(
            "loadgen", ["--ports", ports, "--conns", str(conns), "--max-seconds", str(max_seconds)]
        )
        connected = client.read()
        record["connected"] = connected["connected"]
        record["fd_limit"] = min(hello["fd_limit"], connected["fd_limit"])
        for phase in phases:
            client.send("saturate" if phase.rate is None else f"rate {phase.rate} {phase.active}")
            record["phases"][phase.name] = _window(server, client, phase)
            client.send("pause")
        client.close()
        client = None
        if in_process is not None:
            us = server.ask(f"in-process {in_process[0]} {in_process[1]}")["us_per_message"]
            record["phases"]["in-process"] = {"us_per_message": us, "messages_per_second": None}
        server.send("quit")
        closing = server.read()
        record["closed"] = closing["closed"]
        record["max_lateness"] = closing["max_lateness"]
    finally:
        if client is not None:
            client.close()
        server.close()
    return record


def _order(patterns: list[str], loops: list[str], reps: int) -> Iterator[tuple[int, str, str]]:
    """Interleaved: every pattern once per repetition, in an order that alternates between repetitions."""
    for rep in range(reps):
        for loop in loops:
            order = patterns if rep % 2 == 0 else patterns[::-1]
            for pattern in order:
                yield rep, loop, pattern


def run_scenario(
    patterns: list[str],
    loops: list[str],
    conns: int,
    phases: list[Phase],
    reps: int,
    *,
    idle: float = 10.0,
    request: float = 5.0,
    in_process: tuple[int, int] | None = (1000, 30),
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """run_server for each pattern and loop, `reps` times, interleaved; one record per run."""
    records = []
    for rep, loop, pattern in _order(patterns, loops, reps):
        record = run_server(pattern, loop, conns, phases, idle=idle, request=request, in_process=in_process)
        record["rep"] = rep
        records.append(record)
        if progress is not None:
            progress(record)
    return records


def summarize(records: list[dict[str, Any]], key: str = "us_per_message") -> list[dict[str, Any]]:
    """Per loop, phase and pattern: the median, min and max of `key` over the runs, the median messages per
    second, and the timers' share of the server's CPU, (pattern - none) / pattern from the medians, where
    `none` ran."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    rates: dict[tuple[str, str, str], list[float]] = {}
    for record in records:
        for phase, result in record["phases"].items():
            if result.get(key) is not None:
                k = (record["loop"], phase, record["pattern"])
                groups.setdefault(k, []).append(result[key])
                if result.get("messages_per_second") is not None:
                    rates.setdefault(k, []).append(result["messages_per_second"])
    rows = []
    for (loop, phase, pattern), values in groups.items():
        median = statistics.median(values)
        row: dict[str, Any] = {
            "loop": loop,
            "phase": phase,
            "pattern": pattern,
            "runs": len(values),
            "median": median,
            "min": min(values),
            "max": max(values),
            "messages_per_second": statistics.median(rates[loop, phase, pattern])
            if (loop, phase, pattern) in rates
            else None,
        }
        base = groups.get((loop, phase, "none"))
        if base and pattern != "none":
            row["timer_share"] = (median - statistics.median(base)) / median
        rows.append(row)
    rows.sort(
        key=lambda r: (_rank(LOOPS, r["loop"]), _rank(PHASES, r["phase"]), _rank(PATTERNS, r["pattern"]))
    )
    return rows


PHASES = ("saturated", "moderate", "silent", "in-process")


def _rank(names: tuple[str, ...], name: str) -> int:
    return names.index(name) if name in names else len(names)


UNITS = {
    "us_per_message": "CPU microseconds per message",
    "us_per_iteration": "CPU microseconds per loop iteration",
    "messages_per_second": "messages echoed per second",
    "p99_us": "99th percentile of the round trip, microseconds (as the load generator saw it)",
    "server_mb": "the server's peak resident memory, MB",
}


def format_server_report(rows: list[dict[str, Any]], conns: int, key: str = "us_per_message") -> str:
    """The summary of `key` as one table: a row per pattern, a column per loop and phase; each cell the
    median (min to max) over the runs and, for CPU, the timers' share of the server's CPU in brackets."""
    share = key == "us_per_message"
    columns = list(dict.fromkeys((r["loop"], r["phase"]) for r in rows))
    patterns = sorted({r["pattern"] for r in rows}, key=lambda p: _rank(PATTERNS, p))
    cell = {(r["loop"], r["phase"], r["pattern"]): r for r in rows}
    width = max(30, *(len(f"{loop}, {phase}") + 2 for loop, phase in columns))  # (cells stay apart)
    out = [f"\nserver, {conns:,} connections: {UNITS[key]}, median (min to max) of the runs"]
    out[0] += " [the timers' share of the server's CPU]" if share else ""
    out.append(f"  {'':<20}" + "".join(f"{loop + ', ' + phase:>{width}}" for loop, phase in columns))
    for pattern in patterns:
        cells = []
        for loop, phase in columns:
            r = cell.get((loop, phase, pattern))
            if r is None:
                cells.append("")
                continue
            digits = 0 if r["median"] >= 1000 else 1
            text = f"{r['median']:,.{digits}f}"
            if r["runs"] > 1:
                text += f" ({r['min']:,.{digits}f} to {r['max']:,.{digits}f})"
            if share and "timer_share" in r:
                text += f" [{r['timer_share']:.0%}]"
            cells.append(text)
        out.append(f"  {pattern:<20}" + "".join(f"{c:>{width}}" for c in cells))
    return "\n".join(out)


def server_section(conns: int, quick: bool = False, reps: int = 1) -> dict[str, Any]:
    """The scenario as `python -m timerwheel bench --server N` runs it: every pattern on the stdlib loop,
    on timerwheel.loop, and on uvloop and timerwheel.loop on uvloop (where uvloop is installed),
    saturated and at 10,000 messages/s, `reps` interleaved repetitions of
    short windows. Returns {"conns", "loops", "skipped", "records"} for the report."""
    loops, skipped = ["asyncio", "timerwheel.loop"], {}
    try:
        import uvloop  # noqa: F401

        loops += ["uvloop", "timerwheel.loop-uvloop"]
    except ImportError as exc:
        skipped["uvloop"] = f"{type(exc).__name__}: {exc}"
    warm, window = (0.2, 0.5) if quick else (1.0, 2.0)
    phases = [Phase("saturated", None, warm, window), Phase("moderate", 10_000.0, warm, window)]
    in_process = (min(conns, 1000), 10 if quick else 30)
    records = run_scenario(list(PATTERNS), loops, conns, phases, reps, in_process=in_process)
    return {"conns": conns, "loops": loops, "skipped": skipped, "records": records}


def format_server_section(section: dict[str, Any]) -> str:
    """The report of server_section: CPU per message (with the timers' share), and messages per second."""
    records, conns = section["records"], section["conns"]
    out = [
        format_server_report(summarize(records, key), conns, key)
        for key in UNITS
        if key != "us_per_iteration"
    ]
    out.append(
        "(in-process: the server's own work per message, without sockets; the timers' share is"
        " (pattern - none) / pattern; python -m timerwheel bench --help, docs/performance.md)"
    )
    out.extend(f"server scenario: skipped {name}: {why}" for name, why in section["skipped"].items())
    return "\n".join(out)
