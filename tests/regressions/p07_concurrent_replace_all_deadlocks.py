"""replace_all() from several processes at once (say each worker syncing the same configuration at start)
with the mappings in different orders: the replace transaction upserts rows in mapping order, so two of
them lock the same rows in different orders and PostgreSQL aborts one with DeadlockDetected, which
_do() does not retry (only a broken connection is retried): replace_all() raises
psycopg.errors.DeadlockDetected to the caller. (The keeper's lease renewal deadlocks the same way and,
blocked behind these transactions, sometimes declares its leases lost while the database is reachable.)
High hit rate (most runs: several of 30 calls fail)."""

import random
import threading
from datetime import timedelta

from _common import fail, fresh_db, server

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler

srv = server()
try:
    dsn = fresh_db(srv)
    nodes = []
    for _ in range(3):
        st = PostgresStore(dsn, lease=5.0)
        ks = KeyedScheduler(
            ThreadedScheduler(wall_clock=st.wall, workers=2),
            lambda n, k, d: n + timedelta(hours=1),
            lambda k, d: None,
            store=st,
        )
        ks.start()
        nodes.append(ks)
    errors = []

    def sync(ks, seed):
        r = random.Random(seed)
        for _ in range(10):
            keys = list(range(2000))
            r.shuffle(keys)
            try:
                ks.replace_all({k: "config" for k in keys})
            except Exception as exc:
                errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {str(exc).splitlines()[0]}")

    threads = [threading.Thread(target=sync, args=(n, i)) for i, n in enumerate(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in nodes:
        n.close()
    print(f"{len(errors)} of 30 replace_all() calls raised; e.g. {errors[:1]}")
    if errors:
        fail("concurrent replace_all() raises DeadlockDetected (not retried, keys not locked in one order)")
    print("OK")
finally:
    srv.stop()
