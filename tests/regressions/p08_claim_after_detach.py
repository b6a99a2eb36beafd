"""close() while a run goes: detach() gives back every key not running, but a keeper round that began
before detach() (it checked _detached at its top) goes on to claim keys after it. _shared_adopt's work is
skipped (closed), so the claimed keys are held in the database by the closed process, renewed by its
detached keeper until its last run ends: armed nowhere (the p01 symptom, through the race).

The window is the length of _shut() (every key disarmed, on_state_change called for each, under the
lock): here on_state_change takes 30 ms a key, so _shut() lasts longer than a keeper round and the race
hits every time. Without a slow callback it hits when a keeper round starts within _shut() (large key
sets) or within its claim transaction."""

import os
import sys
import threading
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contextlib

from _common import fail, fresh_db, server, sql, wait_for

from timerwheel import KeyedScheduler, KeyState, PostgresStore, ThreadedScheduler

LEASE = 0.6


def every(p):
    return lambda now, key, data: now + timedelta(seconds=p)


srv = server()
scheds = []
try:
    dsn = fresh_db(srv)
    release = threading.Event()
    started = threading.Event()

    first = []

    def slow_run(key, data):
        if not first:  # (the first run in A, whichever key: a key may be shed to B before it runs)
            first.append(key)
            started.set()
            release.wait(30)

    def on_state(key, old, new):
        if new is KeyState.DISABLED:
            time.sleep(0.03)  # (a user callback that logs somewhere)

    sa = PostgresStore(dsn, lease=LEASE)
    sched_a = ThreadedScheduler(wall_clock=sa.wall, workers=2)
    scheds.append(sched_a)
    sched_a.start()
    a = KeyedScheduler(sched_a, every(0.2), slow_run, store=sa, on_state_change=on_state)
    a.start()
    a.replace_all({i: None for i in range(10)})
    sb = PostgresStore(dsn, lease=LEASE)
    sched_b = ThreadedScheduler(wall_clock=sb.wall, workers=2)
    scheds.append(sched_b)
    b = KeyedScheduler(sched_b, every(0.2), lambda k, d: None, store=sb)
    b.start()
    for i in range(10, 20):
        b.upsert(i, None)
    if not started.wait(5):
        fail("setup: no key ran in A")
    closer = threading.Thread(target=a.close)
    closer.start()  # A's _shut: ~0.3 s (10 keys x 30 ms)
    time.sleep(0.05)
    b.close()  # B gives its 10 keys back while A is closing
    closer.join()
    time.sleep(2 * LEASE)
    held_a = sql(dsn, "SELECT count(*) FROM timerwheel_keys WHERE owner = %s", sa.owner_id)[0][0]
    sc = PostgresStore(dsn, lease=LEASE)
    sched_c = ThreadedScheduler(wall_clock=sc.wall, workers=2)
    scheds.append(sched_c)
    c = KeyedScheduler(sched_c, every(0.2), lambda k, d: None, store=sc)
    c.start()
    got = wait_for(lambda: len(c) == 19, 4 * LEASE + 2)
    n_c = len(c)
    held_a2 = sql(dsn, "SELECT count(*) FROM timerwheel_keys WHERE owner = %s", sa.owner_id)[0][0]
    release.set()
    wait_for(lambda: len(c) == 20, 4 * LEASE + 2)
    c.close()
    print(f"closed A holds {held_a} keys in the DB (then {held_a2}); a new process C got {n_c} of 19")
    if held_a > 1 or not got:
        fail(
            f"the closed process holds {held_a2} keys (1 running) in the database, armed nowhere, "
            f"while its run goes; C could take only {n_c} of the 19 free keys"
        )
    print("OK")
finally:
    for s in scheds:
        with contextlib.suppress(Exception):
            s.close()
    srv.stop()
