"""close() while a key's run goes (here from the run itself, which docs/keyed.md allows): the run's end is
recorded in the fire log, but not the key's row (the KeyedScheduler is closed), which stays RUNNING with
next_run_at NULL. At the next start that key has nothing to count from and is 'planned afresh': the fires
it missed while the process was down are neither run (CatchUp.ONCE) nor reported (on_missed, stats)."""

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
every = lambda now, key, data: now + timedelta(seconds=data["every"])
path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)
sched = Scheduler(clock)
h = {}


def run(key, data):
    if key == "closer":
        h["k"].close()  # e.g. a shutdown job; any run going at close() is the same


k1 = KeyedScheduler(sched, every, run, store=SQLiteStore(path))
h["k"] = k1
k1.start()
k1.upsert("closer", {"every": 10})
k1.upsert("other", {"every": 10})
clock.advance(10)
sched.run_pending()  # both due at 10: "closer" runs first and closes
clock.set_wall(T0 + 1000)  # down until 1000: ~99 fires of each missed

ran, missed = [], {}
s2 = Scheduler(clock)
k2 = KeyedScheduler(
    s2,
    every,
    lambda k, d: ran.append(k),
    store=SQLiteStore(path),
    on_missed=lambda k, d, n, a, b: missed.__setitem__(k, n),
)
k2.start()
s2.run_pending()
print("ran at start:", ran, "| missed reported:", missed, "| stats:", k2.stats())
k2.close()
if "closer" not in ran and "closer" not in missed:
    print("FAIL: key 'closer' missed ~99 fires while down: none run (ONCE), none reported")
    sys.exit(1)
print("ok")
