"""KeyedScheduler at 10**6 keys: bytes per key, snapshot time, and upsert costs, each in a fresh process.

    python benchmarks/keyed_scale.py [--keys N] [--repeat R]

Bytes per key: the growth of tracemalloc's traced memory (the Cython wheel allocates with PyMem_*, which
tracemalloc sees) while N keys are upserted on a started Scheduler (default clocks), divided by N, in one
process; and the growth of the resident set size (/proc/self/statm) in another, without tracemalloc. The
keys are made before the count starts (they are the user's). Times: the median of R runs of snapshot(),
of OPS upserts of known (then new) keys and of the removal of those new keys, in a third process, and of
the same OPS calls of next_run alone (with the datetime of now made for each, as upsert makes it): what
"beyond next_run" subtracts. next_run returns a datetime computed ahead, as in test_bench_keyed.py.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

OPS = 10_000


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build(n: int) -> tuple[Any, list[str], list[datetime]]:
    from timerwheel import KeyedScheduler, Scheduler

    t0 = time.time() + 3600
    whens = [datetime.fromtimestamp(t0 + i % 86400, UTC) for i in range(n + OPS)]
    keyed = KeyedScheduler(Scheduler(), lambda now, key, data: whens[data], lambda key, data: None)
    keyed.start()
    keys = [f"key-{i}" for i in range(n + OPS)]
    return keyed, keys, whens


def next_run_alone(keyed: Any, keys: list[str], n: int, r: int) -> float:
    """The same OPS calls of next_run as the known-key upserts make (its own cache misses included)."""
    from timerwheel._clock import utc_not_after

    next_run = keyed._table.next_run
    t = time.perf_counter()
    for i in range(OPS):
        next_run(utc_not_after(time.time()), keys[(i * 7919 + r) % n], (i + r) % n)
    return (time.perf_counter() - t) / OPS


def child(mode: str, n: int, repeat: int) -> dict[str, Any]:
    from timerwheel import BACKEND

    keyed, keys, _ = build(n)
    gc.collect()
    gc.disable()
    upsert, remove = keyed.upsert, keyed.remove
    out: dict[str, Any] = {"backend": BACKEND, "keys": n}
    if mode == "traced":
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            upsert(keys[i], i)
        out["traced_bytes_per_key"] = (tracemalloc.get_traced_memory()[0] - before) / n
    elif mode == "rss":
        before = rss()
        for i in range(n):
            upsert(keys[i], i)
        out["rss_bytes_per_key"] = (rss() - before) / n
    else:
        for i in range(n):
            upsert(keys[i], i)
        snaps, known, new, removed, alone = [], [], [], [], []
        for r in range(repeat):
            t = time.perf_counter()
            snap = keyed.snapshot()
            snaps.append(time.perf_counter() - t)
            assert len(snap) == n
            del snap
            t = time.perf_counter()
            for i in range(OPS):
                upsert(keys[(i * 7919 + r) % n], (i + r) % n)
            known.append((time.perf_counter() - t) / OPS)
            alone.append(next_run_alone(keyed, keys, n, r))
            t = time.perf_counter()
            for i in range(n, n + OPS):
                upsert(keys[i], i)
            new.append((time.perf_counter() - t) / OPS)
            t = time.perf_counter()
            for i in range(n, n + OPS):
                remove(keys[i])
            removed.append((time.perf_counter() - t) / OPS)
        out["snapshot_s"] = statistics.median(snaps)
        out["upsert_known_ns"] = statistics.median(known) * 1e9
        out["upsert_new_ns"] = statistics.median(new) * 1e9
        out["remove_ns"] = statistics.median(removed) * 1e9
        out["next_run_alone_ns"] = statistics.median(alone) * 1e9  # with the datetime of now it is given
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10**6)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", choices=["traced", "rss", "times"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.keys, args.repeat)))
        return
    result: dict[str, Any] = {}
    for mode in ("traced", "rss", "times"):
        cmd = [sys.executable, __file__, "--child", mode, "--keys", str(args.keys)]
        cmd += ["--repeat", str(args.repeat)]
        result.update(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
