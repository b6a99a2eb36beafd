"""Bytes per pending timer: the Cython wheel against heapq + dict and asyncio's TimerHandle heap.

Each figure comes from a fresh interpreter that adds N timers (delays 1..100 s, every item the same None),
the way a program would, and divides by N the growth of
  - tracemalloc's traced memory (the extension allocates with PyMem_*, which tracemalloc sees), and
  - the resident set size (/proc/self/statm), measured in a separate run without tracemalloc.

    python benchmarks/memory.py [--timers N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import os
import subprocess
import sys
import tracemalloc
from typing import Any

from _workloads import delays, noop, wheel_with
from timerwheel import _core_c, _core_py


def build_heapq(pending: list[float]) -> Any:
    """heappush((due, seq, id)) and a dict entry per timer, as the add of the heapq scheduler does."""
    heap: list[tuple[float, int, int]] = []
    live: dict[int, Any] = {}
    push = heapq.heappush
    for n, d in enumerate(pending):
        push(heap, (d, n, n))
        live[n] = None
    return heap, live


def build_asyncio(pending: list[float]) -> Any:
    loop = asyncio.new_event_loop()
    for d in pending:
        loop.call_later(d, noop)
    return loop


BUILDERS = {
    "wheel_c": lambda pending: wheel_with(_core_c.TimerWheel, pending),
    "heapq": build_heapq,
    "asyncio": build_asyncio,
    "wheel_py": lambda pending: wheel_with(_core_py.TimerWheel, pending),
}


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(impl: str, timers: int, traced: bool) -> float:
    """Bytes per timer that building `timers` timers with `impl` adds, in this process."""
    pending = delays(timers)
    if impl == "asyncio":  # the empty loop is not part of the timers
        asyncio.new_event_loop().close()
    gc.collect()
    gc.disable()
    if traced:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if traced else rss()
    keep = BUILDERS[impl](pending)
    after = tracemalloc.get_traced_memory()[0] if traced else rss()
    del keep
    return (after - before) / timers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=10**6)
    parser.add_argument("--one", choices=BUILDERS, help=argparse.SUPPRESS)  # a child: print one figure
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(measure(args.one, args.timers, args.traced))
        return
    print(f"bytes per pending timer, {args.timers:,} timers, item None (shared)\n")
    print("| implementation | tracemalloc | RSS   |")
    print("| -------------- | ----------: | ----: |")
    for impl in BUILDERS:
        figures = []
        for traced in (True, False):
            cmd = [sys.executable, __file__, "--one", impl, "--timers", str(args.timers)]
            if traced:
                cmd.append("--traced")
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            figures.append(float(out.stdout))
        print(f"| {impl:<14} | {figures[0]:11.1f} | {figures[1]:5.1f} |")


if __name__ == "__main__":
    main()
