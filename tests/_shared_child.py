"""A child of test_shared.py (and of benchmarks/shared.py), and what they use around it (seed, spawn,
Journal): a KeyedScheduler on a PostgresStore, one of
several processes sharing the keys of the test (each fires every PERIOD seconds on a grid, at a phase of
its own), which journals every run it starts and finishes until it is stopped (SIGTERM) or killed.

    python tests/_shared_child.py DSN JOURNAL NAME LEASE [PERIOD]

Journal lines (one os.write each, to a file opened O_APPEND: a SIGKILL cannot lose a line that write()
returned):
    R name pid                       started: holds keys from now on
    S key scheduled_us name wall_us attempt
                                     a run starts (after its fire was taken in the database)
    F key scheduled_us name wall_us  a run ends (before its finish is committed)
    M key first_us last_us count     on_missed: fires not run (with CATCH_UP=once in the environment:
                                     CatchUp.ONCE; CatchUp.ALL otherwise)
    X name                           closed cleanly

Its ThreadedScheduler has 2 workers, or WORKERS from the environment.
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from timerwheel import CatchUp, KeyedScheduler, PostgresStore, ThreadedScheduler


def grid(period: float) -> Any:
    """next_run: the next point after `now` of the key's own grid (every `period` s, at a phase that
    spreads the keys over the period)."""

    def next_run(now: datetime, key: str, data: Any) -> datetime:
        phase = (int(key[1:]) % 100) * period / 100
        t = now.timestamp()
        return datetime.fromtimestamp(math.floor((t - phase) / period) * period + period + phase, UTC)

    return next_run


def seed(dsn: str, keys: int, period: float = 0.5) -> None:
    """`keys` keys k0..k{keys-1}, each due at its grid's first point 1 s from now, held by nobody."""
    import psycopg

    store = PostgresStore(dsn, lease=2.0)
    keyed = KeyedScheduler(ThreadedScheduler(wall_clock=store.wall), lambda *_: None, print, store=store)
    keyed.start()
    keyed.replace_all({f"k{i}": None for i in range(keys)})
    keyed.close()
    start = datetime.fromtimestamp(time.time() + 1, UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.cursor().executemany(
            "UPDATE timerwheel_keys SET state = 'pending', next_run_at = %s WHERE key = %s",
            [(round(grid(period)(start, f"k{i}", None).timestamp() * 1e6), f'"k{i}"') for i in range(keys)],
        )


def spawn(dsn: str, journal: Path, name: str, lease: float, period: float = 0.5) -> subprocess.Popen[bytes]:
    """A child process: this script."""
    return subprocess.Popen([sys.executable, __file__, dsn, str(journal), name, str(lease), str(period)])


class Journal:
    """What the children wrote: starts and finishes per (key, scheduled_us)."""

    def __init__(self, path: Path) -> None:
        self.starts: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        self.attempts: dict[tuple[str, int], list[int]] = collections.defaultdict(list)  # (ctx.fence)
        self.finished: dict[tuple[str, int], int] = {}
        self.late: list[float] = []
        self.late_of: dict[tuple[str, int], float] = {}  # the lateness of a fire's first start, in s
        self.started_at: dict[tuple[str, int], int] = {}  # the wall time of its last start, in us
        self.missed: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)  # on_missed ranges
        for line in path.read_text().splitlines():
            f = line.split()
            if f and f[0] == "M":
                self.missed[f[1]].append((int(f[2]), int(f[3])))
            elif f and f[0] == "S":
                fire = (f[1], int(f[2]))
                self.starts[fire].append(f[3])
                self.attempts[fire].append(int(f[5]) if len(f) > 5 else 1)
                self.late.append((int(f[4]) - int(f[2])) / 1e6)
                self.late_of.setdefault(fire, self.late[-1])
                self.started_at[fire] = int(f[4])
            elif f and f[0] == "F":
                self.finished[(f[1], int(f[2]))] = max(self.finished.get((f[1], int(f[2])), 0), int(f[4]))

    def check(self, killed: set[str], period: float = 0.5) -> dict[str, Any]:
        """Every fire ran once (a fire started by a killed life may run once more: RERUN, with a higher
        attempt, the simulation's at-most-once rule); and no fire was lost: each key's next fire is the
        next point of its grid after the previous one, or after the previous one's finish when it
        finished that late; or the points from that finish to the next fire were reported to
        on_missed (the points between a fire and its run's end are passed over by the run)."""
        twice = {k: v for k, v in self.starts.items() if len(v) > 1}
        wrong = {
            k: v
            for k, v in twice.items()
            if not set(v[:-1]) <= killed or any(a >= b for a, b in itertools.pairwise(self.attempts[k]))
        }
        per_key: dict[str, list[int]] = collections.defaultdict(list)
        for key, at in self.starts:
            per_key[key].append(at)
        p = round(period * 1e6)
        lost = []
        for key, ats in per_key.items():
            ats.sort()
            phase = (int(key[1:]) % 100) * p // 100

            def after(t: int) -> int:  # the key's next grid point after t
                return ((t - phase) // p) * p + p + phase  # noqa: B023 (used in this iteration only)

            reported = self.missed.get(key, [])
            for a, b in itertools.pairwise(ats):
                # (the run's end is journaled just before the scheduler reads the clock for next_run:
                # 50 ms of slack for that gap, on a loaded machine)
                end = max(a, self.finished.get((key, a), a))
                if b == after(a) or after(end) <= b <= after(end + 50_000):
                    continue

                # The points from the fire to its run's end were passed over by the run (AFTER_FINISH
                # asks next_run from the end: a run that started late, a catch-up fire whose take waited
                # for a loaded process or a frozen server, goes on over them, as the rule above allows);
                # those after it were reported to on_missed (CatchUp.ONCE, by whoever took the key up
                # next, from the next_run_at the run's end wrote), or lost.
                def covered(t: int) -> bool:
                    return any(first <= t <= last for first, last in reported)  # noqa: B023

                t = after(end)
                if t < b and not covered(t) and after(end + 50_000) > t:
                    t = after(end + 50_000)  # (the same 50 ms of slack)
                while t < b and covered(t):
                    t = after(t)
                if t < b:
                    lost.append((key, a, b))
        self.late.sort()
        n = len(self.late)
        return {
            "fires": len(self.starts),
            "reruns": len(twice) - len(wrong),
            "twice": wrong,
            "lost": lost,
            "p50": self.late[n // 2] if n else None,
            "p99": self.late[int(n * 0.99)] if n else None,
        }


def wait_started(journal: Path, names: list[str], timeout: float = 120.0) -> None:
    """Wait until each named child has journaled its start (its R line): a child signalled before then
    would be stopped before it held any key, and a test's measured span would not be the children's."""
    deadline = time.monotonic() + timeout
    while True:
        seen = {line.split()[1] for line in journal.read_text().splitlines() if line.startswith("R ")}
        if set(names) <= seen:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"children not started within {timeout} s: {sorted(set(names) - seen)}")
        time.sleep(0.05)


def main() -> None:
    stop = threading.Event()  # (first: a SIGTERM during start-up stops the child cleanly, once started)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    dsn, journal, name, lease = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    period = float(sys.argv[5]) if len(sys.argv) > 5 else 0.5
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    store = PostgresStore(dsn, lease=lease)

    def run(ctx: Any, key: str, data: Any) -> None:
        at = round(ctx.scheduled_for * 1_000_000)
        log(f"S {key} {at} {name} {round(store.wall() * 1_000_000)} {ctx.fence.attempt}")
        log(f"F {key} {at} {name} {round(store.wall() * 1_000_000)}")

    def missed(key: str, data: Any, count: int, first: datetime, last: datetime) -> None:
        log(f"M {key} {round(first.timestamp() * 1e6)} {round(last.timestamp() * 1e6)} {count}")

    once = os.environ.get("CATCH_UP") == "once"
    sched = ThreadedScheduler(wall_clock=store.wall, workers=int(os.environ.get("WORKERS", "2")))
    keyed = KeyedScheduler(
        sched,
        grid(period),
        run,
        context=True,
        store=store,
        catch_up=CatchUp.ONCE if once else CatchUp.ALL,
        max_catch_up=1000,
        on_missed=missed,
    )
    keyed.start()
    log(f"R {name} {os.getpid()}")
    stop.wait()
    keyed.close()
    log(f"X {name}")


if __name__ == "__main__":
    main()
