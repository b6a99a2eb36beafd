"""upsert() called from on_missed during start() commits a new generation, planned afresh; then start()
goes on and re-arms the key at the OLD catch-up fire: the new generation runs at once, at a stale
scheduled time, and the file gets the stale next_run_at."""

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

k1 = KeyedScheduler(Scheduler(clock), every, lambda k, d: None, store=SQLiteStore(path))
k1.start()
k1.upsert("k", {"every": 10})
k1.close()
clock.set_wall(T0 + 100)  # down: 10 fires missed

ran = []
holder = {}


def on_missed(key, data, count, first, last):
    holder["k"].upsert(key, {"every": 1000})  # new schedule: next run at now + 1000 s


sched = Scheduler(clock)
k2 = KeyedScheduler(
    sched,
    every,
    lambda ctx, k, d: ran.append((d, ctx.scheduled_for - T0)),
    context=True,
    store=SQLiteStore(path),
    on_missed=on_missed,
)
holder["k"] = k2
k2.start()
info = k2.get("k")
print("after start:", info.data, info.generation, info.next_run_at.timestamp() - T0)
sched.run_pending()
print("ran right after start:", ran)
k2.close()
if ran or info.next_run_at.timestamp() - T0 < 1000:
    print("FAIL: the upsert from on_missed was overridden by the catch-up of the old generation")
    sys.exit(1)
print("ok")
