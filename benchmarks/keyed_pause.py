"""What pausing and resuming keys costs, beside an upsert of the same keys (the baseline, in the same run).

    python benchmarks/keyed_pause.py [--keys N] [--repeat R] [--store memory|sqlite]

A KeyedScheduler on a Scheduler (its keys every 60 s) with N keys; for R rounds, the median time of:
pause() of each key, resume() of each key (the pause shorter than a period: each key's held fire is
still ahead, and is armed again), upsert() of each key with its data unchanged (the baseline), and
pause_all() and resume_all(). Per key in microseconds, and pause + resume as a ratio of the upsert.
With --store sqlite each pause and resume is a commit of the key's row (as an upsert is), and
pause_all()/resume_all() one transaction for all.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def every_minute(now: datetime, key: Any, data: Any) -> datetime:
    return now.replace(second=0, microsecond=0) + timedelta(minutes=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    args = parser.parse_args()
    from timerwheel import BACKEND, KeyedScheduler, MemoryStore, Scheduler, SQLiteStore

    store: Any = MemoryStore()
    if args.store == "sqlite":
        store = SQLiteStore(Path(tempfile.mkdtemp()) / "keys.db", synchronous="NORMAL")
    keyed = KeyedScheduler(Scheduler(), every_minute, lambda key, data: None, store=store)
    keys = [f"key-{i}" for i in range(args.keys)]
    for key in keys:
        keyed.upsert(key, 1)
    keyed.start()
    times: dict[str, list[float]] = {k: [] for k in ("pause", "resume", "upsert", "pause_all", "resume_all")}
    for _ in range(args.repeat):
        for name, call in (("pause", keyed.pause), ("resume", keyed.resume)):
            t = time.perf_counter()
            for key in keys:
                call(key)
            times[name].append((time.perf_counter() - t) / len(keys))
        upsert = keyed.upsert
        t = time.perf_counter()
        for key in keys:
            upsert(key, 1)
        times["upsert"].append((time.perf_counter() - t) / len(keys))
        for name, call_all in (("pause_all", keyed.pause_all), ("resume_all", keyed.resume_all)):
            t = time.perf_counter()
            assert call_all() == len(keys)
            times[name].append((time.perf_counter() - t) / len(keys))
    keyed.close()
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"backend {BACKEND}, store {args.store}, {args.keys} keys, median of {args.repeat}")
    for name in times:
        print(f"  {name:<11} {med[name]:8.2f} us per key")
    print(f"  pause + resume / upsert: {(med['pause'] + med['resume']) / med['upsert']:.2f}")


if __name__ == "__main__":
    main()
