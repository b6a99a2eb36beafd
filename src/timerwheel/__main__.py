"""`python -m timerwheel`: the backend in use and a side-by-side timing against heap schedulers.

A few seconds on a laptop. The numbers are medians of several rounds with the garbage collector off; the
benchmarks/ directory and docs/performance.md hold the full, reproducible measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import platform
import statistics
import sys
import time
from collections.abc import Callable

from . import BACKEND, TimerWheel, __version__

ROUNDS = 5


def _median_ns(run: Callable[[], int]) -> float:
    """Median over ROUNDS of the time per operation of `run` (which returns how many operations it did)."""
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        ops = run()
        samples.append((time.perf_counter_ns() - start) / ops)
    return statistics.median(samples)


def _median_timed(run: Callable[[], tuple[int, int]]) -> float:
    """Median over ROUNDS of ns per operation, where `run` times itself (its set-up excluded)."""
    samples = []
    for _ in range(ROUNDS):
        ops, elapsed = run()
        samples.append(elapsed / ops)
    return statistics.median(samples)


def _wheel_add_cancel(pending: int, ops: int) -> Callable[[], int]:
    wheel = TimerWheel()
    for i in range(pending):
        wheel.add(1.0 + i * 1e-4, None)
    add, cancel = wheel.add, wheel.cancel

    def run() -> int:
        for _ in range(ops):
            cancel(add(5.0, None))
        return ops

    return run


def _asyncio_add_cancel(loop: asyncio.AbstractEventLoop, pending: int, ops: int) -> Callable[[], int]:
    for i in range(pending):
        loop.call_later(1.0 + i * 1e-4, print)
    call_later = loop.call_later

    def run() -> int:
        for _ in range(ops):
            call_later(5.0, print).cancel()
        return ops

    return run


def _heapq_add_cancel(pending: int, ops: int) -> Callable[[], int]:
    """The classic heap scheduler: heappush of (due, seq), a dict of live entries, lazy deletion on cancel."""
    heap: list[tuple[float, int]] = []
    live: dict[int, object] = {}
    seq = itertools.count()
    for i in range(pending):
        n = next(seq)
        heap.append((1.0 + i * 1e-4, n))
        live[n] = None
    heapq.heapify(heap)
    push = heapq.heappush

    def run() -> int:
        for _ in range(ops):
            n = next(seq)
            push(heap, (5.0, n))
            live[n] = None
            live.pop(n, None)
        return ops

    return run


def _wheel_expire(timers: int) -> Callable[[], tuple[int, int]]:
    def run() -> tuple[int, int]:
        wheel = TimerWheel()
        for i in range(timers):
            wheel.add((i % 1000) * 0.001 + 0.0005, None)
        start = time.perf_counter_ns()
        for tick in range(1, 1001):
            wheel.advance(tick * 0.001)
        return timers, time.perf_counter_ns() - start

    return run


def _heapq_expire(timers: int) -> Callable[[], tuple[int, int]]:
    def run() -> tuple[int, int]:
        heap = [((i % 1000) * 0.001 + 0.0005, i) for i in range(timers)]
        heapq.heapify(heap)
        pop = heapq.heappop
        start = time.perf_counter_ns()
        for tick in range(1, 1001):
            now = tick * 0.001
            while heap and heap[0][0] <= now:
                pop(heap)
        return timers, time.perf_counter_ns() - start

    return run


def demo(pending: int, ops: int) -> None:
    """Print the backend and a short comparison table."""
    print(f"timerwheel {__version__}, backend: {BACKEND}")
    print(f"Python {platform.python_version()} ({platform.python_implementation()}) on {platform.machine()}")
    print(f"\nadd + cancel, {pending:,} timers pending, median of {ROUNDS} x {ops:,} (ns per pair):")
    gc.disable()
    try:
        wheel = _median_ns(_wheel_add_cancel(pending, ops))
        loop = asyncio.new_event_loop()
        try:
            asy = _median_ns(_asyncio_add_cancel(loop, pending, ops))
        finally:
            loop.close()
        heap = _median_ns(_heapq_add_cancel(pending, ops))
        rows = [("timerwheel", wheel), ("asyncio call_later + cancel", asy), ("heapq + dict", heap)]
        for name, ns in rows:
            print(f"  {name:<30} {ns:8.0f}   {ns / wheel:5.1f}x")
        expire = pending
        print(f"\nexpire {expire:,} timers over 1000 ticks (ns per timer):")
        wexp = _median_timed(_wheel_expire(expire))
        hexp = _median_timed(_heapq_expire(expire))
        for name, ns in [("timerwheel advance()", wexp), ("heapq heappop", hexp)]:
            print(f"  {name:<30} {ns:8.0f}   {ns / wexp:5.1f}x")
    finally:
        gc.enable()
    print("\nThe full benchmarks: docs/performance.md")


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m timerwheel`."""
    parser = argparse.ArgumentParser(prog="python -m timerwheel", description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=200_000, help="timers pending during add+cancel")
    parser.add_argument("--ops", type=int, default=50_000, help="operations per round")
    args = parser.parse_args(argv)
    if args.pending < 1 or args.ops < 1:
        parser.error("--pending and --ops must be >= 1")
    demo(args.pending, args.ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
