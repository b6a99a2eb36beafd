"""PostgresStore(dsn, lease=1e300) is accepted (finite, >= 0.3), but every statement that sets a lease
(clock_timestamp() + make_interval(secs => lease)) fails with a raw psycopg DataError ("interval out of
range"): upsert() raises it, the keeper logs "cannot renew its leases" for ever. The constructor should
refuse it with a ValueError naming lease. Deterministic."""

from datetime import timedelta

from _common import fail, fresh_db, server

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler

srv = server()
try:
    dsn = fresh_db(srv)
    try:
        store = PostgresStore(dsn, lease=1e300)
    except ValueError as exc:
        print("refused:", exc)
        print("OK")
        raise SystemExit(0)
    keyed = KeyedScheduler(
        ThreadedScheduler(wall_clock=store.wall),
        lambda n, k, d: n + timedelta(hours=1),
        lambda k, d: None,
        store=store,
    )
    keyed.start()
    try:
        keyed.upsert("k", 1)
        err = None
    except Exception as exc:
        err = exc
    keyed.close()
    print("lease=1e300 accepted by the constructor; upsert() then raised:", repr(err))
    if err is not None and "lease" not in str(err):
        fail("an out-of-range lease is accepted, and fails later with an error that does not name lease")
    print("OK")
finally:
    srv.stop()
