"""A run that finishes while the database is down: its end cannot be recorded (kept in _unrecorded, "recorded
with the next write"). The lease lapses, the keys are dropped; when the database is back the keeper
claims the key again and reads its fire as unfinished: this same process, which knows the run finished,
plans it as an interrupted fire to RERUN (stats().recovered += 1), and, under catch_up=ONCE, that rerun
stands for the catch-up of the fires missed during the outage. The rerun is then refused (its end is
recorded first, in _begin), so NO catch-up run happens at all: the fires missed during the outage are
all skipped, and stats() says one was recovered and none caught up. (With recover=SKIP the finished run
is logged and counted as "interrupted ... abandoned".)
No process died. Deterministic."""

import collections
import threading
import time
from datetime import timedelta

from _common import fail, fresh_db, pg_start, pg_stop, server, wait_for

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler

LEASE = 1.0
srv = server()
try:
    dsn = fresh_db(srv)
    runs = collections.Counter()
    gate = threading.Event()
    first = threading.Event()

    def run(ctx, key, data):
        runs[round(ctx.scheduled_for, 6)] += 1
        if not first.is_set():
            first.set()
            gate.wait(20)  # the first run goes on while the database goes down

    store = PostgresStore(dsn, lease=LEASE)
    sched = ThreadedScheduler(wall_clock=store.wall, workers=2)
    keyed = KeyedScheduler(
        sched, lambda now, k, d: now + timedelta(seconds=0.5), run, context=True, store=store
    )
    keyed.start()
    keyed.upsert("k", None)
    if not first.wait(5):
        fail("setup: no run")
    pg_stop(srv)
    down_at = time.time()
    gate.set()  # the run ends: its end is not recorded (the database is down)
    time.sleep(LEASE * 2.5)  # the lease lapses: the key is dropped
    print("keys held here while the database is down:", len(keyed))
    pg_start(srv)
    up_at = time.time()
    wait_for(lambda: len(keyed) == 1, 10)
    time.sleep(2.0)
    keyed.close()
    sched.close()
    twice = {t: n for t, n in runs.items() if n > 1}
    print("runs per scheduled time:", dict(runs))
    print("stats:", keyed.stats())
    if twice:
        fail(f"a fire that had finished in this (living) process ran again after the outage: {twice}")
    st = keyed.stats()
    caught = [t for t in runs if down_at < t < up_at]
    print(
        f"runs of fires scheduled during the outage (catch_up=ONCE: expected 1): {len(caught)}; "
        f"stats: missed={st.missed} caught_up={st.caught_up} recovered={st.recovered}"
    )
    if not caught:
        fail(
            "catch_up=ONCE after the outage ran none of the missed fires (the refused 'rerun' of a "
            f"finished fire took the catch-up's place); stats say recovered={st.recovered}"
        )
    print("OK")
finally:
    srv.stop()
