"""remove() from on_state_change during start() (an INVALID stored key is planned again, INVALID ->
PENDING) returns True, but start() writes the removed key's row back into the file."""

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, KeyState, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)
broken = {"on": True}


def next_run(now, key, data):
    if broken["on"]:
        raise RuntimeError("a bug in next_run")
    return now + timedelta(seconds=10)


k1 = KeyedScheduler(Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path))
k1.start()
k1.upsert("k", {})
assert k1.get("k").state is KeyState.INVALID
k1.close()
broken["on"] = False  # the code was fixed

holder = {}


def on_state_change(key, old, new):
    if new is KeyState.PENDING:
        assert holder["k"].remove(key)


k2 = KeyedScheduler(
    Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path), on_state_change=on_state_change
)
holder["k"] = k2
k2.start()
print("in memory:", list(k2))
k2.close()
k3 = KeyedScheduler(Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path))
print("in the file:", list(k3))
back = "k" in k3
k3.close()
if back:
    print("FAIL: a key removed from on_state_change during start() is back in the file")
    sys.exit(1)
print("ok")
