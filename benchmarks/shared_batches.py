"""What a batch of takes and ends costs a PostgresStore, on the store alone (no scheduler, no threads), on a
PostgreSQL server this script starts itself (tests/_pg.py: initdb and pg_ctl in a temporary directory,
127.0.0.1 only).

    python benchmarks/shared_batches.py [--keys 2000] [--batches 1,10,100,500] [--rounds 3]

N keys held by one store; every fire of every key taken (start_fires) and ended (finish_fires) in batches
of B, in key order. Printed per batch size: the time per fire of a take and of an end (median of the
rounds), and the CPU the server's sessions spent per fire (both statements; from /proc, so Linux only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from benchmarks.shared import cpu_seconds
from tests import _pg

from timerwheel import PostgresStore
from timerwheel._stores import FinishedFire, StoredKey, encode_key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--batches", default="1,10,100,500")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = _pg.Server()
    try:
        dsn = server.database("b")
        store = PostgresStore(dsn, lease=30.0)
        keys = [f"k{i:07d}" for i in range(args.keys)]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.cursor().executemany(
                "INSERT INTO timerwheel_keys (key, data, generation, state, owner) "
                "VALUES (%s, 'null', 1, 'pending', %s)",
                [(encode_key(k), store.owner_id) for k in keys],
            )
            conn.execute("VACUUM ANALYZE timerwheel_keys")
        at = 1_000
        print("| batch | take, per fire | end, per fire | server CPU per fire |")
        print("|--:|--:|--:|--:|")
        for size in (int(b) for b in args.batches.split(",")):
            takes, ends, cpus = [], [], []
            for _ in range(args.rounds):
                at += 1_000
                took = ended = 0.0
                cpu0 = cpu_seconds()
                for i in range(0, len(keys), size):
                    chunk = keys[i : i + size]
                    rows = [StoredKey(k, "null", 1, "running", None, None, None) for k in chunk]
                    began = time.perf_counter()
                    got = store.start_fires([(row, at, at + 1, False) for row in rows])
                    took += time.perf_counter() - began
                    assert got == [1] * len(chunk), got
                    began = time.perf_counter()
                    store.finish_fires([(None, FinishedFire(k, 1, at, at + 2, None)) for k in chunk])
                    ended += time.perf_counter() - began
                cpus.append((cpu_seconds() - cpu0) / len(keys))
                takes.append(took / len(keys))
                ends.append(ended / len(keys))
            take, end, cpu = (statistics.median(v) * 1e6 for v in (takes, ends, cpus))
            print(
                f"| {size} | {take:.0f} us | {end:.0f} us | {cpu:.0f} us |",
                flush=True,
            )
        store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
