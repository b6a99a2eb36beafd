"""CatchUp.ONCE when more fires were missed than max_catch_up + 1 steps count: the one run is given the
scheduled time of the oldest-but-(max_catch_up+1)th fire counted, not the latest missed fire (docs:
'one run now (its scheduled time: the latest missed fire)'); and with misfire_grace, nothing runs at all
although the latest missed fire is well within the grace."""

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
every = lambda now, key, data: now + timedelta(seconds=data["every"])


def life(**kw):
    path = os.path.join(tempfile.mkdtemp(), "k.db")
    clock = ManualClock(0.0, wall=T0)
    k1 = KeyedScheduler(Scheduler(clock), every, lambda k, d: None, store=SQLiteStore(path))
    k1.start()
    k1.upsert("k", {"every": 10})
    k1.close()  # next at 10
    clock.set_wall(T0 + 1000.5)  # down ~1000 s: fires 10..1000 (100) missed; latest 0.5 s ago
    ran, missed = [], []
    sched = Scheduler(clock)
    k2 = KeyedScheduler(
        sched,
        every,
        lambda ctx, k, d: ran.append(ctx.scheduled_for - T0),
        context=True,
        store=SQLiteStore(path),
        max_catch_up=10,
        on_missed=lambda k, d, n, a, b: missed.append(n),
        **kw,
    )
    k2.start()
    sched.run_pending()
    k2.close()
    return ran, missed


fail = False
ran, missed = life()
print("ONCE, max_catch_up=10: ran with scheduled_for", ran, "missed reported", missed)
# (an interval schedule, now + 10 s: the latest fire found back from now is at now, 1000.5; the old
# code ran the oldest-but-counted fire, 110)
if len(ran) != 1 or not 1000.0 <= ran[0] <= 1000.5:
    print("FAIL: the ONCE run is not the latest missed fire (1000 .. 1000.5)")
    fail = True
ran, missed = life(misfire_grace=5.0)
print("ONCE, max_catch_up=10, misfire_grace=5: ran", ran, "missed reported", missed)
if not ran:
    print("FAIL: the latest missed fire (0.5 s late, grace 5 s) was not run")
    fail = True
sys.exit(1 if fail else 0)
