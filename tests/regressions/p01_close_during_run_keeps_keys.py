"""close() while a run of one key is going (wait_running_on_close=False, the default): docs/shared.md says
close() gives the keys back at once, all but those whose runs still go (held until they end, so that
nobody runs them again meanwhile). The old code kept renewing (and claiming) every key until that run
ended: the keys were held in the database and armed nowhere. Deterministic."""

import threading
import time
from datetime import timedelta

from _common import fail, fresh_db, server, sql, wait_for

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler

LEASE = 0.6


def every(p):
    return lambda now, key, data: now + timedelta(seconds=p)


srv = server()
try:
    dsn = fresh_db(srv)
    release = threading.Event()
    started = threading.Event()

    def slow_run(key, data):
        if key == 0:
            started.set()
            release.wait(30)

    sa = PostgresStore(dsn, lease=LEASE)
    sched_a = ThreadedScheduler(wall_clock=sa.wall, workers=2)
    sched_a.start()  # (started by us: a.close() does not close it, so it does not wait for the run)
    a = KeyedScheduler(sched_a, every(0.2), slow_run, store=sa)
    a.start()
    a.replace_all({i: None for i in range(20)})
    if not started.wait(5):
        fail("setup: key 0 did not run")
    t0 = time.monotonic()
    a.close()  # key 0's run still goes
    print(f"a.close() returned after {time.monotonic() - t0:.2f} s")
    runs = []
    sb = PostgresStore(dsn, lease=LEASE)
    b = KeyedScheduler(
        ThreadedScheduler(wall_clock=sb.wall, workers=2), every(0.2), lambda k, d: runs.append(k), store=sb
    )
    b.start()
    got = wait_for(lambda: len(b) == 19, 6 * LEASE + 2)
    time.sleep(3 * LEASE)  # (key 0 stays with A while its run goes, past its lease: renewed)
    held_a = sql(dsn, "SELECT count(*) FROM timerwheel_keys WHERE owner = %s", sa.owner_id)[0][0]
    print(
        f"after {6 * LEASE + 2:.1f} s: B holds {len(b)} keys, the closed A still holds {held_a} in the DB; "
        f"keys run by B: {len(set(runs))}"
    )
    ran_0_meanwhile = 0 in runs
    release.set()
    after = wait_for(lambda: len(b) == 20, 6 * LEASE + 2)  # the run ended: A gives key 0 back too
    b.close()
    sched_a.close()
    if not got or held_a != 1:
        fail(
            f"close() did not give the keys back: the closed process holds {held_a} of 20 keys "
            "(armed nowhere) while its run goes"
        )
    if ran_0_meanwhile:
        fail("key 0, whose run was still going in A, was run by B meanwhile")
    if not after:
        fail("key 0 was not given back when its run ended")
    print("OK")
finally:
    srv.stop()
