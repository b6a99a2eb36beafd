"""remove() called from on_missed during start() returns (committed), but start()'s final
store.replace() writes the removed key back: it is back at the next start."""

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import CatchUp, KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
every = lambda now, key, data: now + timedelta(seconds=data["every"])
path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)

k1 = KeyedScheduler(Scheduler(clock), every, lambda k, d: None, store=SQLiteStore(path))
k1.start()
k1.upsert("k", {"every": 10})
k1.close()
clock.set_wall(T0 + 100)  # down: 9 fires missed

holder = {}


def on_missed(key, data, count, first, last):
    assert holder["k"].remove(key) is True  # committed when it returns


k2 = KeyedScheduler(
    Scheduler(clock),
    every,
    lambda k, d: None,
    store=SQLiteStore(path),
    catch_up=CatchUp.SKIP,
    on_missed=on_missed,
)
holder["k"] = k2
k2.start()
print("in memory after start:", list(k2))
k2.close()

k3 = KeyedScheduler(Scheduler(clock), every, lambda k, d: None, store=SQLiteStore(path))
print("in the file at the next start:", list(k3))
back = "k" in k3
k3.close()
if back:
    print("FAIL: the key removed (remove() returned True) is back in the store")
    sys.exit(1)
print("ok")
