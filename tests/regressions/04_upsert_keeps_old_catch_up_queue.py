"""After start() with CatchUp.ALL, upsert() of a key with a new schedule (a new generation) does not drop
the old generation's catch-up queue: the new generation then runs every stale missed fire, one per
pass, right after its own first fire, with stale scheduled times."""

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
clock.set_wall(T0 + 100)  # down: fires 10..100 missed

ran = []
sched = Scheduler(clock)
k2 = KeyedScheduler(
    sched,
    every,
    lambda ctx, k, d: ran.append((d["every"], ctx.scheduled_for - T0)),
    context=True,
    store=SQLiteStore(path),
    catch_up=CatchUp.ALL,
)
k2.start()
sched.run_pending()  # the first catch-up fire runs (generation 1)
k2.upsert("k", {"every": 1000})  # generation 2: next run at now + 1000 s
print("after upsert:", k2.get("k").generation, k2.get("k").next_run_at.timestamp() - T0)
ran.clear()
clock.advance(1000.0)
sched.run_pending()  # generation 2's own first run is due
for _ in range(20):  # 20 ms more of passes: generation 2 is next due at +1000 s
    clock.advance(0.001)
    sched.run_pending()
print("ran after the upsert (every, scheduled_for):", ran)
k2.close()
if len(ran) != 1 or ran[0][1] < 1000:
    print(
        "FAIL: generation 2 ran the old generation's missed fires (stale scheduled times), "
        "not just its own run at 1100"
    )
    sys.exit(1)
print("ok")
