"""Reschedule.NONE (after a run the key is DISABLED until upserted again): the process dies during the
key's one run. At the next start, _recover_and_catch_up evaluates next_run from the interrupted fire
'as if the run ended on time' (AFTER_FINISH's rule) and counts missed fires from there: with
Recover.RERUN + CatchUp.ALL the one-shot key runs 1 + 9 times; with Recover.SKIP + CatchUp.ONCE it runs
once more although its only fire was abandoned; and fires that could never exist are reported missed."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from datetime import UTC, datetime, timedelta

from timerwheel import CatchUp, KeyedScheduler, Recover, Reschedule, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
every = lambda now, key, data: now + timedelta(seconds=data["every"])


def crashed_file():
    path = os.path.join(tempfile.mkdtemp(), "k.db")
    child = textwrap.dedent(f"""
        import os, signal
        from datetime import timedelta
        from timerwheel import KeyedScheduler, Scheduler, SQLiteStore, Reschedule
        from timerwheel.testing import ManualClock
        clock = ManualClock(0.0, wall={T0!r})
        s = Scheduler(clock)
        k = KeyedScheduler(s, lambda now, key, d: now + timedelta(seconds=d["every"]),
                           lambda key, data: os.kill(os.getpid(), signal.SIGKILL),
                           store=SQLiteStore({path!r}), reschedule=Reschedule.NONE)
        k.start(); k.upsert("job", {{"every": 10}})
        clock.advance(10); s.run_pending()
    """)
    r = subprocess.run([sys.executable, "-c", child])
    assert r.returncode == -signal.SIGKILL, r
    return path


def restart(path, **kw):
    clock = ManualClock(0.0, wall=T0 + 105)
    sched = Scheduler(clock)
    ran, missed = [], []
    keyed = KeyedScheduler(
        sched,
        every,
        lambda k, d: ran.append(k),
        store=SQLiteStore(path),
        reschedule=Reschedule.NONE,
        on_missed=lambda k, d, n, a, b: missed.append(n),
        **kw,
    )
    keyed.start()
    for _ in range(50):
        clock.advance(0.001)
        sched.run_pending()
    keyed.close()
    return len(ran), missed


fail = False
n, missed = restart(crashed_file(), recover=Recover.RERUN, catch_up=CatchUp.ALL)
print("NONE + RERUN + ALL: runs", n, "missed reported", missed)
if n != 1:
    print("FAIL: a Reschedule.NONE key ran", n, "times after a crash in its one run (expected 1: the rerun)")
    fail = True
n, missed = restart(crashed_file(), recover=Recover.SKIP)
print("NONE + SKIP + ONCE: runs", n, "missed reported", missed)
if n != 0:
    print("FAIL: a Reschedule.NONE key whose one fire was abandoned ran again")
    fail = True
sys.exit(1 if fail else 0)
