"""A garbage-collector finalizer that calls back in (keyed.upsert) while the SQLiteStore is inside a
transaction: the store's lock is a plain threading.Lock, so the finalizer's store.put() waits forever for
the lock its own thread holds: the process hangs (and even with a reentrant lock, BEGIN inside the open
transaction would fail). KeyedScheduler's own lock is reentrant and its upsert() guards against
finalizers ('a finalizer that the allocation ran may have added the key'); the store does not.
A watchdog exits with FAIL after 10 s."""

import faulthandler
import gc
import os
import tempfile
import threading
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
path = os.path.join(tempfile.mkdtemp(), "k.db")
keyed = KeyedScheduler(
    Scheduler(ManualClock(0.0, wall=T0)),
    lambda now, k, d: now + timedelta(seconds=10),
    lambda k, d: None,
    store=SQLiteStore(path),
)
keyed.start()
store = keyed._store
done = threading.Event()


def watchdog():
    if not done.wait(10):
        print(
            "FAIL: deadlock: a finalizer's upsert() waits for the store lock its own thread holds", flush=True
        )
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)


threading.Thread(target=watchdog, daemon=True).start()


class Finalized:
    def __init__(self):
        self.me = self  # a cycle: only the cyclic GC frees it

    def __del__(self):
        if store._lock.locked():
            print("finalizer runs with the store's lock held by this thread", flush=True)
        keyed.upsert("from-finalizer", {"n": 1})


for threshold in range(2, 200):  # some allocation inside the store's transaction
    gc.set_threshold(threshold, 1000, 1000)  # ... triggers a collection, for some threshold
    for i in range(50):
        Finalized()  # garbage in a cycle: freed at a later collection
        keyed.upsert(f"k{i}", {"n": i})
gc.set_threshold(700, 10, 10)
done.set()
print("ok")
