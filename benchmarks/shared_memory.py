"""What a key costs a PostgresStore cluster: memory in the process that holds it, and rows and bytes in the
database, on a PostgreSQL server this script starts itself (tests/_pg.py: initdb and pg_ctl in a
temporary directory, 127.0.0.1 only).

    python benchmarks/shared_memory.py [--keys 100000]

One process's KeyedScheduler (a ThreadedScheduler) stores N keys due in a day, once each, and holds them;
then the fires of every key are taken and ended (so that the fire log holds what it keeps: each key's
latest finished fire). Printed: bytes per key held in the process (tracemalloc: what storing and holding
them allocated, over N), and in the database rows per key and bytes per key of timerwheel_keys and
timerwheel_fires with their indexes (pg_total_relation_size).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from tests import _pg

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler
from timerwheel._stores import FinishedFire, StoredKey, decode_key


def later(now: Any, key: Any, data: Any) -> Any:
    return now + timedelta(days=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    n = args.keys
    server = _pg.Server()
    try:
        dsn = server.database("b")
        store = PostgresStore(dsn, lease=30.0)
        sched = ThreadedScheduler(wall_clock=store.wall, workers=2)
        keyed = KeyedScheduler(sched, later, lambda key, data: None, store=store)
        keyed.start()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        keyed.replace_all({f"key-{i}": None for i in range(n)})
        deadline = time.monotonic() + 120
        while len(keyed) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = [
                (decode_key(k), g) for k, g in conn.execute("SELECT key, generation FROM timerwheel_keys")
            ]
        print(f"{n:,} keys: held here {len(keyed):,}; bytes per key in the process: {held / n:.0f}")
        keyed.close()
        sched.close()
        # The fire log as it is kept: each key's latest finished fire (a fire taken, then ended, by a
        # store that holds every key).
        other = PostgresStore(dsn, lease=30.0)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE timerwheel_keys SET owner = %s", (other.owner_id,))
        for i in range(0, len(rows), 1000):
            chunk = rows[i : i + 1000]
            other.start_fires(
                [(StoredKey(k, "null", g, "running", None, None, None), 1_000, 1, False) for k, g in chunk]
            )
            other.finish_fires([(None, FinishedFire(k, g, 1_000, 2, None)) for k, g in chunk])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE timerwheel_keys")
            conn.execute("VACUUM ANALYZE timerwheel_fires")
            sizes = conn.execute(
                "SELECT (SELECT count(*) FROM timerwheel_keys), (SELECT count(*) FROM timerwheel_fires), "
                "pg_total_relation_size('timerwheel_keys'), pg_total_relation_size('timerwheel_fires')"
            ).fetchone()
        other.close()
        keys, fires, key_bytes, fire_bytes = sizes
        print(
            f"database: {keys:,} key rows, {fires:,} fire rows ({fires / keys:.2f} per key); "
            f"bytes per key: keys {key_bytes / keys:.0f}, fires {fire_bytes / keys:.0f} (with their indexes)"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
