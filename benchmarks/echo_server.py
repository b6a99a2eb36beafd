"""An echo server on plain asyncio Protocols: the server's CPU time per message for each way of keeping its
idle and request deadlines, on the stdlib loop and on uvloop.

The server and the load generator are timerwheel.bench.server (each in its own process, 127.0.0.1 only).
Each connection's idle deadline is pushed back on every message and each message has a deadline of its own;
the patterns differ in nothing else: none (no timers, the baseline), call_later (cancel + call_later per
message, uvicorn's), asyncio.timeout, hand-kept (aiohttp's), timerwheel (handle.reset + sched.timeout) and
timerwheel-handles (handle.reset, and a second handle for the request deadline). Runs alternate between
patterns (interleaved repetitions); each run measures a saturated window (each connection one message in
flight) and a moderate one (10,000 messages/s in all), after a warm-up each, with the garbage collector on.
Reported per loop, load and pattern: the median and the spread (min to max) of the server's CPU time per
message over the runs, and the timers' share of the server's CPU, (pattern - none) / pattern.

    python benchmarks/echo_server.py                    # 10k connections, 3 repetitions (~10 minutes)
    python benchmarks/echo_server.py --conns 2000 --reps 1 --loops asyncio
    python benchmarks/echo_server.py --silent 100000    # mostly silent connections (as many as the file
                                                        # limit allows), a few active (~10 minutes)

--silent: N connections, of which --active (default 1,000) share 10,000 messages/s and the rest stay silent
with their idle deadlines pending (idle 300 s, so none closes); it reports the server's CPU per message and,
on the stdlib loop, per loop iteration. Each side needs N open files (plus a few): with a lower limit that
cannot be raised, the largest N that fits is used, and the report says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from timerwheel.bench.scenario import Phase, format_server_report, run_scenario, summarize
from timerwheel.bench.server import LOOPS, PATTERNS, raise_fd_limit

ROOT = Path(__file__).resolve().parent.parent
SPARE_FDS = 256  # listening sockets, pipes, the event loop's own


def _names(text: str, allowed: tuple[str, ...]) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in names if x not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {unknown or text!r}; choose from {', '.join(allowed)}")
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--conns", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every pattern and loop")
    parser.add_argument("--loops", type=lambda t: _names(t, LOOPS), default=list(LOOPS))
    parser.add_argument("--patterns", type=lambda t: _names(t, PATTERNS), default=None)
    parser.add_argument("--warm", type=float, default=2.0, help="seconds of load before each window")
    parser.add_argument("--window", type=float, default=3.0, help="seconds measured per load level")
    parser.add_argument("--rate", type=float, default=10_000.0, help="messages per second, moderate load")
    parser.add_argument("--silent", type=int, metavar="N", help="the mostly silent scenario, N connections")
    parser.add_argument("--active", type=int, default=1000, help="--silent: connections that send")
    parser.add_argument("--json", type=Path, default=None, help="default benchmarks/.build/echo_server*.json")
    args = parser.parse_args(argv)
    patterns = args.patterns or list(PATTERNS)
    note = ""
    if args.silent:
        want = args.silent
        limit = raise_fd_limit(want + SPARE_FDS)
        conns = min(want, limit - SPARE_FDS)
        if conns < want:
            note = f"{want:,} connections asked; the open-file limit ({limit:,}) allows {conns:,}"
        phases = [Phase("silent", args.rate, args.warm, args.window, active=args.active)]
        idle, name = 300.0, "echo_server_silent.json"
    else:
        conns = args.conns
        phases = [
            Phase("saturated", None, args.warm, args.window),
            Phase("moderate", args.rate, args.warm, args.window),
        ]
        idle, name = 10.0, "echo_server.json"
    if note:
        print(note, flush=True)
    start = time.monotonic()

    def progress(record: dict[str, Any]) -> None:
        cells = ", ".join(f"{k} {v['us_per_message']:.2f}" for k, v in record["phases"].items())
        print(
            f"[{time.monotonic() - start:5.0f} s] rep {record['rep']} {record['loop']:<8}"
            f"{record['pattern']:<19} {record['connected']:,} connected; us/message: {cells};"
            f" closed {record['closed']}",
            file=sys.stderr,
            flush=True,
        )

    records = run_scenario(patterns, args.loops, conns, phases, args.reps, idle=idle, progress=progress)
    out = args.json or ROOT / "benchmarks" / ".build" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"note": note, "conns": conns, "records": records}, indent=1))
    print(f"python {sys.version.split()[0]}; {args.reps} repetitions; wrote {out}")
    if note:
        print(note)
    for key in ("us_per_message", "messages_per_second", "us_per_iteration"):
        rows = summarize(records, key)
        if rows:  # (loop iterations are counted on the stdlib loop only)
            print(format_server_report(rows, conns, key))
    closes = {k: sum(r["closed"][k] for r in records) for k in ("idle_closed", "request_closed", "early")}
    print(f"\ndeadlines that passed during the runs: {closes}")


if __name__ == "__main__":
    main()
