"""A key the keeper claimed (its row read from the database) is adopted after the scheduler's lock is free;
if the user upserts that key in between, the adoption replaces the user's new generation with the stale
claimed row (_shared_adopt does not look at the key's stamp): right after upsert() returned, get() shows
the OLD data and generation, and the new generation cannot fire (fenced) until later keeper rounds
drop it, give it back and claim it again.
High hit rate (the main thread holds the scheduler's lock most of the time while it waits for the claim,
which is what a busy ThreadedScheduler does)."""

import time
from datetime import timedelta

from _common import fail, fresh_db, server, sql

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler
from timerwheel._stores import StoredKey

srv = server()
try:
    dsn = fresh_db(srv)
    sa = PostgresStore(dsn, lease=1.5)
    sched = ThreadedScheduler(wall_clock=sa.wall, workers=2)
    a = KeyedScheduler(sched, lambda now, k, d: now + timedelta(hours=1), lambda k, d: None, store=sa)
    a.start()
    other = PostgresStore(dsn, lease=1.5)  # a process that stored keys and gave them back
    lock = sched._lock
    hits = 0
    for attempt in range(15):
        key = f"k{attempt}"
        other.put(StoredKey(key, '"old"', 1, "pending", round((time.time() + 3600) * 1e6), None, None))
        other.release({key: 1})
        deadline = time.monotonic() + 5
        done = False
        while time.monotonic() < deadline and not done:
            with lock:  # (the scheduler is busy: its lock is taken most of the time)
                t_end = time.monotonic() + 0.005
                while time.monotonic() < t_end:
                    owner = sql(dsn, "SELECT owner FROM timerwheel_keys WHERE key = %s", f'"{key}"')[0][0]
                    if owner == sa.owner_id:
                        if a.get(key) is not None:  # adopted already: the window was missed
                            done = "missed"
                            break
                        a.upsert(key, "new")  # the user's change, just after the keeper's claim
                        info = a.get(key)
                        assert info is not None and info.data == "new"
                        done = True
                        hits += 1
                        break
            time.sleep(0.001)
        if done is not True:  # (not reached, or the window was missed: nothing to check)
            continue
        time.sleep(0.05)  # (the keeper's adoption runs as soon as the lock is free)
        info = a.get(key)
        db = sql(dsn, "SELECT data, generation, owner FROM timerwheel_keys WHERE key = %s", f'"{key}"')[0]
        if info is not None and info.data != "new":
            print(
                f"attempt {attempt}: after upsert({key!r}, 'new') returned, get() says data={info.data!r} "
                f"generation={info.generation}; the database says {db[0]} generation {db[1]}, "
                f"owner is this process: {db[2] == sa.owner_id}"
            )
            a.close()
            fail("the keeper's adoption of a stale claimed row undid a local upsert")
    a.close()
    other.close()
    print(f"not reproduced ({hits} windows hit)")
finally:
    srv.stop()
