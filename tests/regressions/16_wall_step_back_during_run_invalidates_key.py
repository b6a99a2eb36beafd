"""The wall clock steps backwards (an NTP correction) while a key's run goes: at the run's end next_run
is evaluated at the new, earlier 'now' and gives a time that is after now but not after the fire that
ran, so _advancing() declares the key INVALID ('would run again at once, without end'): a key with a
perfectly sound next_run (a Cron, or now + every) stops for good because of a clock step. Also with the
memory store; docs/keyed.md says a calendar timer follows a wall step (fires at its wall time)."""

import os
import sys
import tempfile
from datetime import UTC, datetime

from timerwheel import Cron, KeyedScheduler, KeyState, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)
sched = Scheduler(clock)


def run(key, data):
    clock.set_wall(clock.wall() - 120)  # NTP steps the wall clock back 2 minutes during the run


k = KeyedScheduler(sched, Cron("* * * * *"), run, store=SQLiteStore(path))
k.start()
k.upsert("minutely")
clock.advance(60)
sched.run_pending()
info = k.get("minutely")
print(info.state.name, "|", info.last_error)
k.close()
if info.state is KeyState.INVALID:
    print("FAIL: a wall-clock step during a run made a sound cron key INVALID for good")
    sys.exit(1)
print("ok")
