"""Catch-up fires that a key has handed to the scheduler (popped from rec.catch_up by _fired) but whose runs
have not begun are invisible to _shared_shed's "idle" test (not running, no catch-up queue): the key is
shed, its handed-over fires go stale (generation bumped by _forget), and the row it gives back says
next_run_at = the LAST popped fire (finish_fire wrote catch_up[0] after the pops). The process that
claims it catches up from there: the fires in between never run anywhere, although catch_up=ALL.
(The same on close() or a SIGKILL during a catch-up. The tests' own child, 4 processes, loses 100+ fires
this way after a 2.5 s database outage: see 04b_db_outage_loses_fires.py.)
Here a slow on_finish keeps the only free worker busy while the handed-over fires wait (any backlog does
the same); a second process joins, so the first sheds a key. Deterministic."""

import collections
import math
import threading
import time
from datetime import UTC, datetime

from _common import fail, fresh_db, server, wait_for

from timerwheel import CatchUp, KeyedScheduler, PostgresStore, ThreadedScheduler
from timerwheel._stores import StoredKey

P = 0.5
G0 = 0.0  # the key's grid, G0 + n * P (set below)


def grid(now, key, data):
    return datetime.fromtimestamp(G0 + P * (math.floor((now.timestamp() - G0) / P) + 1), UTC)


srv = server()
try:
    dsn = fresh_db(srv)
    runs = collections.Counter()
    block_j = threading.Event()
    hold = threading.Event()
    in_hold = threading.Event()

    def run(ctx, key, data):
        if key == "j":
            block_j.wait(20)  # j's run keeps one worker (and j is not idle: never shed)
        else:
            runs[round(ctx.scheduled_for - G0, 3)] += 1

    def on_finish(key, data, error):
        if key == "k" and not in_hold.is_set():  # a slow callback on the other worker
            in_hold.set()
            hold.wait(20)

    sa = PostgresStore(dsn, lease=1.2)
    a_sched = ThreadedScheduler(wall_clock=sa.wall, workers=2)
    a_sched.start()
    a = KeyedScheduler(a_sched, grid, run, context=True, store=sa, catch_up=CatchUp.ALL, on_finish=on_finish)
    other = PostgresStore(dsn, lease=1.0)
    # k's fires at G0, G0 + 0.5, G0 + 1.0 are due: catch_up=ALL runs all three. (G0 on a whole
    # microsecond, as stored: else the grid's next point after the stored G0 may round back to it.)
    G0 = round((time.time() - 1.1) * 1e6) / 1e6
    other.put(StoredKey("k", "null", 1, "pending", round(G0 * 1e6), None, None))
    other.put(StoredKey("j", "null", 1, "pending", round((time.time() - 0.1) * 1e6), None, None))
    other.release({"k": 1, "j": 1})
    other.close()
    a.start()  # claims both
    if not in_hold.wait(5):
        fail("setup: k's catch-up did not run")
    sc = PostgresStore(dsn, lease=1.2)  # a second process joins: the first sheds down to its share (1)
    c_sched = ThreadedScheduler(wall_clock=sc.wall, workers=2)
    c = KeyedScheduler(c_sched, grid, run, context=True, store=sc, catch_up=CatchUp.ALL)
    c.start()
    moved = wait_for(lambda: "k" in c, 5)
    print("k shed by the first process and claimed by the second:", moved)
    hold.set()
    block_j.set()
    time.sleep(1.0)
    a.close()
    c.close()
    a_sched.close()
    print("k ran at (offsets from G0):", sorted(runs))
    missing = [t for t in (0.0, 0.5, 1.0) if t not in runs]
    print("catch-up fires that never ran:", missing, " twice:", {t: n for t, n in runs.items() if n > 1})
    if missing:
        fail(f"catch-up fire(s) {missing} of k never ran anywhere (catch_up=ALL): lost when k was shed")
    print("OK")
finally:
    srv.stop()
