"""A timerwheel file with a row the loader cannot read (a state value it does not know, e.g. from a newer
or hand-edited file, same schema number): KeyedScheduler() raises a bare ValueError (not StoreError naming
the file), and the store's lock stays held by the suspended key generator (SQLiteStore._keys holds
self._lock across its yields), so store.close() in the handler hangs."""

import os
import sqlite3
import sys
import tempfile
import threading
from datetime import timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore, StoreError
from timerwheel.testing import ManualClock

path = os.path.join(tempfile.mkdtemp(), "k.db")
k = KeyedScheduler(
    Scheduler(ManualClock()), lambda n, key, d: n + timedelta(seconds=1), print, store=SQLiteStore(path)
)
k.upsert("a")
k.close()
c = sqlite3.connect(path)
c.execute("UPDATE timerwheel_keys SET state = 'paused'")
c.commit()
c.close()
store = SQLiteStore(path)
fail = False
try:
    KeyedScheduler(Scheduler(ManualClock()), lambda n, key, d: n, print, store=store)
except Exception as exc:
    print("raised", type(exc).__name__, exc)
    if not isinstance(exc, StoreError):
        print("FAIL: not a StoreError naming the file")
        fail = True
    t = threading.Thread(target=store.close, daemon=True)
    t.start()
    t.join(3)
    if t.is_alive():
        print("FAIL: store.close() hangs: the store's lock is still held by the abandoned row generator")
        fail = True
sys.exit(1 if fail else 0)
