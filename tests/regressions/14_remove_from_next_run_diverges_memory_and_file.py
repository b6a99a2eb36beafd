"""Re-entrancy from next_run with a durable store: upsert("k") evaluates next_run before it commits; a
next_run that removes the key (remove() returns True: committed) makes the outer upsert commit the row
again, while in memory the key stays removed (its record, no longer in the map, even gets a timer).
The snapshot says the key is gone, the file says it exists: it comes back at the next start."""

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)
holder = {}


def next_run(now, key, data):
    if data.get("drop") and key in holder["k"]:
        holder["k"].remove(key)
    return now + timedelta(seconds=10)


k1 = KeyedScheduler(Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path))
holder["k"] = k1
k1.start()
k1.upsert("k", {})
k1.upsert("k", {"drop": True})
in_memory = "k" in k1
k1.close()
k2 = KeyedScheduler(Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path))
in_file = "k" in k2
k2.close()
print("after upsert returned: in memory", in_memory, "| in the file", in_file)
if in_memory != in_file:
    print("FAIL: memory and file disagree about the key")
    sys.exit(1)
print("ok")
