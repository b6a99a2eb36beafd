"""10^6 pending asyncio.sleep()s, or wait_for()s, on asyncio's loop and on timerwheel.loop (and uvloop, and
timerwheel.loop on uvloop, where installed): the time to start them all, the time for the loop to go
through one iteration with them all pending, the time to cancel them all, and the memory they take.

    python benchmarks/loop_sleeps.py                  # every loop, 10^6 sleeps and 10^6 wait_fors
    python benchmarks/loop_sleeps.py --n 100000 --loops asyncio,timerwheel.loop

Each loop in a process of its own (the memory is its peak resident set, less the baseline before the
tasks). Medians of --reps runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

LOOPS = ("asyncio", "timerwheel.loop", "uvloop", "timerwheel.loop-uvloop")


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "asyncio":
        return asyncio.new_event_loop()
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    from timerwheel.loop import new_event_loop

    return new_event_loop("uvloop" if kind == "timerwheel.loop-uvloop" else "asyncio")


def one(kind: str, what: str, n: int) -> dict[str, float]:
    """In this process: n tasks each in asyncio.sleep(3600) (or wait_for(a future, 3600))."""
    loop = new_loop(kind)
    gc.collect()
    gc.disable()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def sleeper() -> None:
        await asyncio.sleep(3600)

    async def waiter() -> None:
        await asyncio.wait_for(loop.create_future(), 3600)

    body = sleeper if what == "sleep" else waiter

    async def main() -> dict[str, float]:
        began = time.perf_counter()
        tasks = [asyncio.ensure_future(body()) for _ in range(n)]
        await asyncio.sleep(0)  # (each task runs to its sleep: its timer is armed)
        await asyncio.sleep(0)
        started = time.perf_counter()
        await asyncio.sleep(0)  # one iteration with every timer pending
        idle = time.perf_counter()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        done = time.perf_counter()
        return {
            "start_ns": (started - began) / n * 1e9,
            "iteration_ms": (idle - started) * 1e3,
            "cancel_ns": (done - idle) / n * 1e9,
            "bytes": (peak - base) * 1024 / n,
        }

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
        gc.enable()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("LOOP", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args.n)))
        return 0
    print(f"{args.n:,} pending tasks each; medians of {args.reps} runs, each loop in its own process")
    print(f"{'':<32}{'start ns/task':>14}{'iteration ms':>14}{'cancel ns/task':>16}{'bytes/task':>12}")
    for what in ("sleep", "wait_for"):
        for kind in args.loops.split(","):
            runs: list[dict[str, Any]] = []
            for _ in range(args.reps):
                done = subprocess.run(
                    [sys.executable, __file__, "--n", str(args.n), "--one", kind, what],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    print(f"{what} {kind}: skipped ({done.stderr.strip().splitlines()[-1]})")
                    break
                runs.append(json.loads(done.stdout))
            if len(runs) == args.reps:
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(
                    f"{what + ' ' + kind:<32}{med['start_ns']:>14,.0f}{med['iteration_ms']:>14,.2f}"
                    f"{med['cancel_ns']:>16,.0f}{med['bytes']:>12,.0f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
