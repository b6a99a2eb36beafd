"""A store error when a run's end is recorded (finish_fire: a transient full disk) is only logged; the
fire stays 'started' in the log for ever, though later fires of the key are recorded fine. At the next
start, recover=RERUN runs that long-finished fire again (a fire run twice, with no crash at all), and
with CatchUp.ONCE it stands in for the catch-up, so the missed fires are reported instead of run."""

import os
import sqlite3
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
every = lambda now, key, data: now + timedelta(seconds=data["every"])
path = os.path.join(tempfile.mkdtemp(), "k.db")


class DiskFullOnce(SQLiteStore):
    failed = False

    def finish_fire(self, *a):
        if not DiskFullOnce.failed:
            DiskFullOnce.failed = True
            raise sqlite3.OperationalError("database or disk is full")
        return super().finish_fire(*a)


clock = ManualClock(0.0, wall=T0)
sched = Scheduler(clock)
ran = []
run = lambda ctx, k, d: ran.append(round(ctx.scheduled_for - T0))
k1 = KeyedScheduler(sched, every, run, context=True, store=DiskFullOnce(path))
k1.start()
k1.upsert("k", {"every": 10})
for _ in range(35):
    clock.advance(1.0)
    sched.run_pending()
print("first life ran:", ran)  # 10 (its end not recorded), 20, 30: each finished
k1.close()

clock2 = ManualClock(0.0, wall=T0 + 36)  # a clean restart a moment later: nothing missed
s2 = Scheduler(clock2)
ran.clear()
k2 = KeyedScheduler(s2, every, run, context=True, store=SQLiteStore(path))
k2.start()
for _ in range(3):
    clock2.advance(0.001)
    s2.run_pending()
print("second life ran at start:", ran, "stats:", k2.stats())
k2.close()
if 10 in ran:
    print("FAIL: the fire of 10 s, finished long ago, ran a second time")
    sys.exit(1)
print("ok")
