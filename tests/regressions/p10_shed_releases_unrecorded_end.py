"""The same hole as 02 through _shared_shed: a key whose run ended during a short database outage (its
end kept in _unrecorded, "recorded with the next write") is idle, so when a second process joins, the
first sheds it (release) with its fire still unfinished in the database; the second claims it and
(recover=RERUN, the default) runs that fire again. _shared_flush() runs only before this process's own
claims; nothing records the ends before a release. Deterministic."""

import collections
import os
import sys
import threading
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contextlib

from _common import fail, fresh_db, pg_start, pg_stop, server, wait_for

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler

LEASE = 6.0
srv = server()
scheds = []
try:
    dsn = fresh_db(srv)
    runs = collections.Counter()
    gate = threading.Event()
    k0_started = threading.Event()
    done = set()

    def next_run(now, key, data):
        return now + timedelta(hours=1) if key in done else now + timedelta(seconds=0.2)

    def run(ctx, key, data):
        runs[(key, round(ctx.scheduled_for, 6))] += 1
        done.add(key)
        if key == 0:
            k0_started.set()
            gate.wait(20)

    sa = PostgresStore(dsn, lease=LEASE)
    sched_a = ThreadedScheduler(wall_clock=sa.wall, workers=4)
    scheds.append(sched_a)
    a = KeyedScheduler(sched_a, next_run, run, context=True, store=sa)
    a.start()
    for i in (1, 2, 3):
        a.upsert(i, None)
    wait_for(lambda: len(done) == 3, 5)
    a.upsert(0, None)
    if not k0_started.wait(5):
        fail("setup: no run of key 0")
    pg_stop(srv)
    gate.set()  # key 0's run ends while the database is down: its end is not recorded
    time.sleep(0.3)
    pg_start(srv)
    time.sleep(LEASE / 3 + 0.5)  # A's keeper renews (no claim: it holds its share)
    print("unrecorded ends in A:", len(a._unrecorded))
    sb = PostgresStore(dsn, lease=LEASE)
    sched_b = ThreadedScheduler(wall_clock=sb.wall, workers=2)
    scheds.append(sched_b)
    b = KeyedScheduler(sched_b, next_run, run, context=True, store=sb)
    b.start()
    wait_for(lambda: len(b) == 2, 4 * LEASE)  # A sheds two keys, B claims them
    time.sleep(0.5)
    print("B holds", sorted(b), "B stats:", b.stats())
    b.close()
    a.close()
    twice = {f: n for f, n in runs.items() if n > 1}
    if twice:
        fail(f"a fire whose run ended in A (end unrecorded) ran again in B after A shed the key: {twice}")
    print("OK")
finally:
    for s in scheds:
        with contextlib.suppress(Exception):
            s.close()
    srv.stop()
