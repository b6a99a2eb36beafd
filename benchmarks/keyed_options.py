"""What a key's options (jitter=, spread=; start=, end=, max_runs=; late_grace=) cost to plan and run,
beside the same key without (the baseline, in the same run).

    python benchmarks/keyed_options.py [--keys N] [--repeat R]

KeyedSchedulers on Schedulers (their keys every 60 s, a calendar next_run), N keys each, one per case:
plain; jitter and spread (the KeyedScheduler's); a window and a run limit (each key's own: start a day
ago, end in a year, max_runs far off); late checks (late_grace: a timer armed as each fire comes). For R
rounds, the median time of an upsert of each key with its data unchanged (each upsert plans the key:
next_run, and, for the delayed keys, next_run again for the point after and a BLAKE2b hash), and of a run
of each key (its end plans the next fire). Per key in microseconds, and each case as a ratio of the plain one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any


def every_minute(now: datetime, key: Any, data: Any) -> datetime:
    return now.replace(second=0, microsecond=0) + timedelta(minutes=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from timerwheel import BACKEND, KeyedScheduler, Scheduler
    from timerwheel.testing import ManualClock

    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    cases: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "plain": ({}, {}),
        "jitter+spread": ({"jitter": 20.0, "spread": 30.0}, {}),
        "window+max_runs": (
            {},
            {"start": start - timedelta(days=1), "end": start + timedelta(days=365), "max_runs": 10**9},
        ),
        "late_grace": ({"late_grace": 60.0}, {}),
    }
    results: dict[str, dict[str, float]] = {}
    for name, (options, own) in cases.items():
        clock = ManualClock(0.0, wall=start.timestamp())
        sched = Scheduler(clock)
        keyed = KeyedScheduler(sched, every_minute, lambda key, data: None, **options)
        keys = [f"key-{i}" for i in range(args.keys)]
        for key in keys:
            keyed.upsert(key, 1, **own)
        keyed.start()
        upserts, runs = [], []
        for _ in range(args.repeat):
            upsert = keyed.upsert
            t = time.perf_counter()
            for key in keys:
                upsert(key, 1, **own)
            upserts.append((time.perf_counter() - t) / len(keys))
            clock.advance(60.0)  # every key's next fire comes (with its delay): each run plans the next
            t = time.perf_counter()
            ran = sched.run_pending()
            runs.append((time.perf_counter() - t) / len(keys))
            assert keyed.stats().started > 0 and ran >= 0
        keyed.close()
        results[name] = {"upsert": statistics.median(upserts), "run": statistics.median(runs)}
    print(f"timerwheel {BACKEND}, {args.keys:,} keys, median of {args.repeat} rounds, per key:")
    for what in ("upsert", "run"):
        plain = results["plain"][what]
        print(f"  {what:8} plain {plain * 1e6:6.2f} us")
        for name in list(cases)[1:]:
            print(
                f"  {'':8} {name:16} {results[name][what] * 1e6:6.2f} us x{results[name][what] / plain:.2f}"
            )


if __name__ == "__main__":
    main()
