"""A store error during start() (a full disk while start() records an interrupted fire as abandoned,
recover=Recover.SKIP) propagates out of start() half-way: the KeyedScheduler is left "started" (start()
cannot be retried: 'started already'), and the keys after the failing one are never armed: 'b' is PENDING
with a next_run_at and never runs. Standard: a store error must never stop the scheduler or lose a fire."""

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Recover, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
every = lambda now, key, data: now + timedelta(seconds=data["every"])
path = os.path.join(tempfile.mkdtemp(), "k.db")
child = textwrap.dedent(f"""
    import os, signal
    from datetime import UTC, datetime, timedelta
    from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
    from timerwheel.testing import ManualClock
    clock = ManualClock(0.0, wall={T0!r})
    def run(key, data):
        if key == "a": os.kill(os.getpid(), signal.SIGKILL)   # the process dies during a's run
    s = Scheduler(clock)
    k = KeyedScheduler(s, lambda now, key, d: now + timedelta(seconds=d["every"]), run, store=SQLiteStore({path!r}))
    k.start(); k.upsert("a", {{"every": 10}}); k.upsert("b", {{"every": 30}})
    clock.advance(10); s.run_pending()
""")
r = subprocess.run([sys.executable, "-c", child])
assert r.returncode == -signal.SIGKILL, r


class DiskFullOnce(SQLiteStore):
    failed = False

    def finish_fire(self, *a):
        if not DiskFullOnce.failed:
            DiskFullOnce.failed = True
            raise sqlite3.OperationalError("database or disk is full")
        return super().finish_fire(*a)


clock = ManualClock(0.0, wall=T0 + 12)
sched = Scheduler(clock)
ran = []
keyed = KeyedScheduler(
    sched, every, lambda k, d: ran.append(k), store=DiskFullOnce(path), recover=Recover.SKIP
)
try:
    keyed.start()
except Exception as exc:
    print("start() raised:", repr(exc))
try:
    keyed.start()
except Exception as exc:
    print("start() again raised:", repr(exc))
for _ in range(100):
    clock.advance(1.0)
    sched.run_pending()
b = keyed.get("b")
print("after 100 s: ran", ran, "| b:", b.state.name, b.next_run_at, "| timers armed:", sched.next_run_in())
keyed.close()
if "b" not in ran:
    print("FAIL: one store error during start() left key 'b' (due at 30 s) never armed")
    sys.exit(1)
print("ok")
