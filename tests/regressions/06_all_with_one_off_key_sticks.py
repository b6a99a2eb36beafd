"""CatchUp.ALL and a one-off key (next_run keeps returning its date, the case docs/keyed.md names): the
catch-up count repeats the same date max_catch_up + 1 times, stats().caught_up says 100 fires were caught
up, one runs, and the key is then left PENDING with a next_run_at in the past and no timer: it never
runs and never becomes INVALID (docs: a next_run at or before the fire that ran makes the key INVALID)."""

import os
import sys
import tempfile
from datetime import UTC, datetime

from timerwheel import CatchUp, KeyedScheduler, KeyState, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()


def one_off(now, key, data):
    return datetime.fromtimestamp(T0 + data["at"], UTC)  # always its date


path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)
k1 = KeyedScheduler(Scheduler(clock), one_off, lambda k, d: None, store=SQLiteStore(path))
k1.start()
k1.upsert("once", {"at": 50})
k1.close()
clock.set_wall(T0 + 100)  # down over its date

ran = []
sched = Scheduler(clock)
k2 = KeyedScheduler(sched, one_off, lambda k, d: ran.append(k), store=SQLiteStore(path), catch_up=CatchUp.ALL)
k2.start()
for _ in range(300):
    clock.advance(0.001)
    sched.run_pending()
info = k2.get("once")
st = k2.stats()
print(
    "ran",
    len(ran),
    "| stats.caught_up",
    st.caught_up,
    "| state",
    info.state,
    "| next_run_at",
    info.next_run_at,
    "| last_error",
    info.last_error,
    "| timers armed",
    sched.next_run_in(),
)
k2.close()
fail = False
if st.caught_up != len(ran):
    print(f"FAIL: stats().caught_up={st.caught_up} but {len(ran)} run(s)")
    fail = True
if info.state is KeyState.PENDING and info.next_run_at.timestamp() < clock.wall():
    print("FAIL: the key is PENDING with a past next_run_at and nothing will ever run it")
    fail = True
sys.exit(1 if fail else 0)
