"""What holding keys costs a PostgresStore process: its keeper's round (renewing its lease, counting, and
every tenth round reading the keys it holds) with N keys held, on a PostgreSQL server this script starts
itself (tests/_pg.py: initdb and pg_ctl in a temporary directory, 127.0.0.1 only).

    python benchmarks/lease_renewal.py [--keys 10000,100000] [--rounds 20]

For each N: the median and the longest time of a keeper round (the longest is one that reads the
held keys in full), and the rows of timerwheel_keys that a round updates (PostgreSQL's own count of
the table's updated rows, over all the rounds, divided by the rounds). Run it with PYTHONPATH=<an older
checkout>/src to measure an older store the same way (a version that renewed a lease per key writes N
rows a round).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from tests import _pg
from tests.test_store_contract import Holder

from timerwheel import PostgresStore
from timerwheel._stores import StoredKey


def measure(server: _pg.Server, keys: int, rounds: int) -> dict[str, float]:
    dsn = server.database("b")
    store = PostgresStore(dsn, lease=30.0)
    store.replace([StoredKey(i, "null", 1, "pending", 1_000_000 + i, None, None) for i in range(keys)], None)
    keeper = store._keeper
    keeper.holder = Holder()
    conn = store._db.connect()
    updated = "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'timerwheel_keys'"

    def count() -> int:
        conn.execute("SELECT pg_stat_force_next_flush()")  # (this session's counts, flushed when idle)
        conn.execute("SELECT 1")
        with psycopg.connect(dsn, autocommit=True) as watch:
            watch.execute("SELECT pg_stat_clear_snapshot()")
            return int(watch.execute(updated).fetchone()[0])

    try:
        keeper.one_round(conn, time.monotonic())  # (warm: the first round reads everything)
        before = count()
        took = []
        for _ in range(rounds):
            started = time.perf_counter()
            keeper.one_round(conn, time.monotonic())
            took.append(time.perf_counter() - started)
        written = count() - before
    finally:
        conn.close()
        store.close()
    took.sort()
    return {
        "keys": keys,
        "median_ms": statistics.median(took) * 1e3,
        "max_ms": took[-1] * 1e3,
        "rows_written_per_round": written / rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    server = _pg.Server()
    try:
        for n in (int(float(k)) for k in args.keys.split(",")):
            r = measure(server, n, args.rounds)
            print(
                f"{n:>9,} keys held: keeper round median {r['median_ms']:8.1f} ms (max {r['max_ms']:.1f}), "
                f"rows of timerwheel_keys updated per round {r['rows_written_per_round']:,.0f}",
                flush=True,
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
