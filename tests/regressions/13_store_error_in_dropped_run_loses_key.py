"""A run dropped by backpressure (ThreadedScheduler, DROP): KeyedScheduler._dropped writes the key's new
row with store.put() unguarded. If that write fails (a transient full disk), the exception escapes
(the engine logs it) before the key is re-armed: the key is left PENDING with no timer and never runs
again (the bug the issue-14 review fixed for the memory store, back with a store error)."""

import os
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta

from timerwheel import Backpressure, KeyedScheduler, SQLiteStore, ThreadedScheduler
from timerwheel.testing import ManualClock, wait_until_idle

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
path = os.path.join(tempfile.mkdtemp(), "k.db")


class DiskFullWhenArmed(SQLiteStore):
    fail = False

    def put(self, row):
        if DiskFullWhenArmed.fail:
            DiskFullWhenArmed.fail = False
            raise sqlite3.OperationalError("database or disk is full")
        return super().put(row)


clock = ManualClock(100.0, wall=T0)
gate = threading.Event()
runs = []


def run(key, data):
    runs.append(key)
    if key == "blocker":
        gate.wait(20)


def wait_for(pred):
    end = time.monotonic() + 20
    while not pred():
        assert time.monotonic() < end
        time.sleep(0.001)


with ThreadedScheduler(clock=clock, workers=1, queue_size=1, backpressure=Backpressure.DROP) as sched:
    k = KeyedScheduler(
        sched, lambda now, key, d: now + timedelta(seconds=10), run, store=DiskFullWhenArmed(path)
    )
    k.start()
    for key in ("blocker", "queued", "victim"):
        k.upsert(key)
    DiskFullWhenArmed.fail = True  # the next put (the dropped run's) fails once
    clock.advance(10)
    wait_for(lambda: sched.stats().dropped == 1)
    gate.set()
    wait_until_idle(sched)
    for _ in range(5):
        clock.advance(10)
        wait_until_idle(sched)
    info = k.get("victim")
    print(
        "victim ran",
        runs.count("victim"),
        "times in 50 s | state",
        info.state.name,
        "| next_run_at",
        info.next_run_at,
        "| last_error",
        info.last_error,
    )
    k.close()
if runs.count("victim") == 0:
    print("FAIL: one failed store write in a dropped run left the key unarmed for ever")
    sys.exit(1)
print("ok")
