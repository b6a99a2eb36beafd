"""Bad input not refused as documented:
(a) an int key of more than 4300 digits: upsert() raises a bare ValueError from int->str conversion that
    does not name the key argument (the docs: a key of another type -> TypeError naming it);
(b) SQLiteStore(":memory:") and SQLiteStore("") are accepted as durable stores (durable=True, WAL promised)
    though nothing they hold survives the process: journal_mode 'memory' / 'delete'."""

import os
import sys
import tempfile
from datetime import timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

fail = False
path = os.path.join(tempfile.mkdtemp(), "k.db")
k = KeyedScheduler(
    Scheduler(ManualClock()), lambda n, key, d: n + timedelta(seconds=1), print, store=SQLiteStore(path)
)
try:
    k.upsert(10**5000, {})
except Exception as exc:
    print("huge key:", type(exc).__name__, exc)
    if "key" not in str(exc):
        print("FAIL: the error does not name the key argument")
        fail = True
k.close()
for p in (":memory:", ""):
    try:
        s = SQLiteStore(p)
    except ValueError as exc:
        print(repr(p), "refused:", exc)
        if "path" not in str(exc):
            print("FAIL: the error does not name the path argument")
            fail = True
        continue
    print(f"FAIL: {p!r} accepted as a durable store")
    fail = True
    s.close()
sys.exit(1 if fail else 0)
