"""What a key's history costs a run: KeyedScheduler fires with history=0 (none kept) and history=10 (the
default), on a MemoryStore and on a SQLiteStore (synchronous NORMAL and FULL), in the same run.

    python benchmarks/keyed_history.py [--keys N] [--seconds S] [--repeat R]

N keys fire every second on a ManualClock for S seconds (N * S runs, each a no-op job); the figure is the
time per run, the median of R runs, and the ratio of history=10 to history=0 on the same store.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from timerwheel import KeyedScheduler, MemoryStore, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2026, 1, 5, tzinfo=UTC).timestamp()


def every_second(now: datetime, key: Any, data: Any) -> datetime:
    return datetime.fromtimestamp(int(now.timestamp()) + 1, UTC)


def per_run(store: str, history: int, keys: int, seconds: int) -> float:
    """Microseconds per run."""
    with tempfile.TemporaryDirectory() as tmp:
        made: Any = MemoryStore() if store == "memory" else SQLiteStore(Path(tmp) / "k.db", synchronous=store)
        clock = ManualClock(0.0, wall=T0)
        sched = Scheduler(clock)
        keyed = KeyedScheduler(sched, every_second, lambda key, data: None, store=made, history=history)
        keyed.replace_all({f"k{i}": None for i in range(keys)})
        keyed.start()
        t = time.perf_counter()
        for _ in range(seconds):
            clock.advance(1.0)
            sched.run_pending()
        elapsed = time.perf_counter() - t
        runs = keyed.stats().finished
        keyed.close()
        assert runs == keys * seconds, runs
    return elapsed / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.keys} keys x {args.seconds} s, median of {args.repeat}: microseconds per run")
    for store in ("memory", "NORMAL", "FULL"):
        figures = {}
        for history in (0, 10):
            figures[history] = statistics.median(
                per_run(store, history, args.keys, args.seconds) for _ in range(args.repeat)
            )
        name = "MemoryStore" if store == "memory" else f"SQLiteStore({store})"
        print(
            f"{name:22} history=0 {figures[0]:8.1f}   history=10 {figures[10]:8.1f}   "
            f"ratio {figures[10] / figures[0]:.2f}"
        )


if __name__ == "__main__":
    main()
