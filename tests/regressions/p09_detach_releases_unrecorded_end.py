"""close() while one run goes (wait_running_on_close=False): detach() gives back at once every key not
running, but the ends of runs that the store failed to record (_unrecorded) are recorded only in
_release_store(), when the last run ends. A key whose run ended during a short database outage is given
back with its fire still unfinished in the database; another process claims it and (recover=RERUN, the
default) runs that fire again: one fire, two runs. _shared_flush() protects this process's own claims
only. Deterministic."""

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
    k_started = threading.Event()
    k_gate = threading.Event()
    long_started = threading.Event()
    long_gate = threading.Event()
    first = {"k": True, "long": True}

    def next_run(now, key, data):
        if first[key]:
            first[key] = False
            return now + timedelta(seconds=0.2)
        return now + timedelta(hours=1)

    def run_a(ctx, key, data):
        runs[(key, round(ctx.scheduled_for, 6))] += 1
        if key == "k":
            k_started.set()
            k_gate.wait(20)
        else:
            long_started.set()
            long_gate.wait(30)

    sa = PostgresStore(dsn, lease=LEASE)
    sched_a = ThreadedScheduler(wall_clock=sa.wall, workers=4)
    scheds.append(sched_a)
    sched_a.start()
    a = KeyedScheduler(sched_a, next_run, run_a, context=True, store=sa)
    a.start()
    a.upsert("k", None)
    a.upsert("long", None)
    if not (k_started.wait(5) and long_started.wait(5)):
        fail("setup: no runs")
    pg_stop(srv)
    k_gate.set()  # k's run ends while the database is down: its end is kept in _unrecorded
    time.sleep(0.3)
    pg_start(srv)
    print("unrecorded ends in A:", len(a._unrecorded))
    a.close()  # "long" still runs: k is given back now, its end still unrecorded

    def run_b(ctx, key, data):
        runs[(key, round(ctx.scheduled_for, 6))] += 1

    sb = PostgresStore(dsn, lease=LEASE)
    sched_b = ThreadedScheduler(wall_clock=sb.wall, workers=2)
    scheds.append(sched_b)
    first = {"k": False, "long": False}
    b = KeyedScheduler(sched_b, next_run, run_b, context=True, store=sb)
    b.start()
    wait_for(lambda: "k" in b, 10)
    time.sleep(1.0)
    long_gate.set()
    b.close()
    twice = {f: n for f, n in runs.items() if n > 1}
    print("runs:", dict(runs), "B stats:", b.stats())
    if twice:
        fail(f"a fire that ended in A (end unrecorded at its close) ran again in B: {twice}")
    print("OK")
finally:
    for s in scheds:
        with contextlib.suppress(Exception):
            s.close()
    srv.stop()
