"""A str key of ~8000+ characters: replace_all() stores it (its NOTIFY payload is {"all": true}), but
upsert() and remove() of that key put the key itself into pg_notify's payload (limit 8000 bytes), so they
fail with psycopg's InvalidParameterValue "payload string too long" (not an exception naming the key):
the key can never be removed or changed, except by another replace_all(). (Keys > ~2700 bytes of
incompressible text fail earlier with ProgramLimitExceeded from the primary key's btree; SQLiteStore
takes both.) Now: a key longer than 1,000 characters (as JSON) is refused up front, by every call, with a
ValueError naming key, and nothing is stored. Deterministic."""

from datetime import timedelta

from _common import fail, fresh_db, server, sql

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler

srv = server()
try:
    dsn = fresh_db(srv)
    store = PostgresStore(dsn, lease=1.0)
    keyed = KeyedScheduler(
        ThreadedScheduler(wall_clock=store.wall),
        lambda n, k, d: n + timedelta(hours=1),
        lambda k, d: None,
        store=store,
    )
    keyed.start()
    big = "y" * 9000
    errors = []
    for op, args in (("replace_all", ()), ("upsert", (3,)), ("remove", ())):
        try:
            if op == "replace_all":
                keyed.replace_all({big: 1, "small": 2})
            else:
                getattr(keyed, op)(big, *args)
        except ValueError as exc:
            if "key" not in str(exc):
                errors.append(f"{op}: {exc} (does not name key)")
        except Exception as exc:
            errors.append(f"{op}(big key) -> {type(exc).__module__}.{type(exc).__name__}: {str(exc).strip()}")
        else:
            errors.append(f"{op}(big key) was accepted")
    rows = sql(dsn, "SELECT count(*) FROM timerwheel_keys")[0][0]
    keyed.upsert("k" * 990, 1)  # (a long key within the limit works: upsert, then remove)
    removed = keyed.remove("k" * 990)
    keyed.close()
    for e in errors:
        print(e)
    if errors:
        fail("a key too long for the store is not refused clearly")
    if rows != 0 or not removed:
        fail(f"something was stored ({rows} rows), or a key within the limit did not work")
    print("OK")
finally:
    srv.stop()
