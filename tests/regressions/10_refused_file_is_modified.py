"""docs/durable.md: a file ... of a schema version this timerwheel does not read, is refused with
StoreError, 'and left as it was'. SQLiteStore switches the file to WAL (PRAGMA journal_mode=WAL, a
persistent change of the file header) and runs its CREATE TABLEs before it reads the version: the refused
file comes back in WAL mode (an older sqlite reader/tool of that file's owner may no longer open it). And a SQLite database of
another application is not refused at all (the docstring: StoreError for a file that is "not a timerwheel
store"): timerwheel's tables are created in it."""

import os
import sqlite3
import sys
import tempfile

from timerwheel import SQLiteStore, StoreError

path = os.path.join(tempfile.mkdtemp(), "future.db")
db = sqlite3.connect(path)
db.execute("CREATE TABLE timerwheel_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
db.execute("INSERT INTO timerwheel_meta VALUES ('schema', '2')")
db.commit()
db.close()
before = open(path, "rb").read()
try:
    SQLiteStore(path)
    print("FAIL: not refused")
    sys.exit(1)
except StoreError as exc:
    print("refused:", exc)
after = open(path, "rb").read()
mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
print(
    "journal_mode now:",
    mode,
    "| bytes identical:",
    before == after,
    "| header bytes 18,19:",
    before[18:20],
    "->",
    after[18:20],
    "| extra files:",
    sorted(os.listdir(os.path.dirname(path))),
)
fail = before != after
if fail:
    print("FAIL: the refused file was modified")
# Another application's SQLite database (not a timerwheel store) is not refused at all: timerwheel's
# tables are written into it and it is switched to WAL.
app = os.path.join(os.path.dirname(path), "app.db")
db = sqlite3.connect(app)
db.execute("CREATE TABLE users (id INTEGER)")
db.commit()
db.close()
try:
    s = SQLiteStore(app)
    tables = [r[0] for r in s._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    s.close()
    print("another application's database accepted; its tables now:", tables)
    print("FAIL: a database that is not a timerwheel store was taken over")
    fail = True
except StoreError as exc:
    print("foreign database refused:", exc)
sys.exit(1 if fail else 0)
