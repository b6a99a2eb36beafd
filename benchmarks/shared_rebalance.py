"""Rebalancing: how many keys move when a process joins or leaves a PostgresStore cluster, against what
fairness needs, on a PostgreSQL server this script starts itself (tests/_pg.py: initdb and pg_ctl in a
temporary directory, 127.0.0.1 only).

    python benchmarks/shared_rebalance.py [--keys 10000] [--period 5] [--phase 10]

N keys, each firing every P seconds on a grid of its own (tests/_shared_child.py, lease 2 s), shared by
processes that come and go: two start; a third joins; one stops (SIGTERM: it gives its keys back as it
closes); one is killed (SIGKILL: its keys wait for its lease to lapse); each phase lasts --phase seconds.
The owner of every key is read from the database every 0.2 s. Printed per step: the keys that changed
owner (a key given back and claimed again counts once), what fairness needs (a join: the newcomer's
share, N / processes; a leave: the keys the process held), how long until every key was held again and
no process held more than its share (ceil(N / processes)), and, over the whole run, the fires run twice
and lost (tests/_shared_child.py's Journal).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from tests import _pg
from tests._shared_child import Journal, seed, spawn, wait_started


class Owners:
    """The owner of every key, read from the database, and the keys that changed owner since a mark."""

    def __init__(self, dsn: str, trace: bool) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.trace = trace
        self.last: dict[str, str] = {}  # each key's latest owner (a key given back keeps its last one)
        self.moved: set[str] = set()

    def read(self) -> Counter[str | None]:
        counts: Counter[str | None] = Counter()
        for key, owner in self.conn.execute("SELECT key, owner FROM timerwheel_keys"):
            counts[owner] += 1
            if owner is not None:
                if key in self.last and self.last[key] != owner:
                    self.moved.add(key)
                self.last[key] = owner
        return counts

    def step(self, seconds: float, keys: int, live: int) -> tuple[int, float | None]:
        """Read every 0.2 s for `seconds`: the keys moved, and when the keys were first balanced."""
        self.moved = set()
        began = time.monotonic()
        balanced = None
        while time.monotonic() - began < seconds:
            counts = self.read()
            holders = {o: n for o, n in counts.items() if o is not None}
            if (
                balanced is None
                and counts[None] == 0
                and len(holders) == live
                and max(holders.values()) <= -(-keys // live)
            ):
                balanced = time.monotonic() - began
            if self.trace:
                held = " ".join(f"{o[-4:] if o else '-'}:{c}" for o, c in sorted(counts.items(), key=str))
                print(f"  {time.monotonic() - began:5.1f} s  {held}", file=sys.stderr, flush=True)
            time.sleep(0.2)
        return len(self.moved), balanced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--phase", type=float, default=10.0)
    parser.add_argument("--trace", action="store_true", help="print the keys each process holds, 5 times a s")
    args = parser.parse_args()
    n = args.keys
    server = _pg.Server()
    children = {}
    try:
        dsn = server.database("b")
        seed(dsn, n, args.period)
        journal = Path(tempfile.mkdtemp()) / "journal"
        journal.touch()
        owners = Owners(dsn, args.trace)

        def start(name: str) -> None:
            children[name] = spawn(dsn, journal, name, 2.0, args.period)
            wait_started(journal, [name])

        print(f"{n:,} keys, every {args.period:g} s; lease 2 s\n")
        print("| step | processes after | keys moved | fairness needs | balanced after |")
        print("|---|--:|--:|--:|--:|")

        def report(step: str, live: int) -> None:
            before = owners.read()
            moved, balanced = owners.step(args.phase, n, live)
            after = owners.read()
            joined = [o for o in after if o is not None and o not in before]
            left = [o for o in before if o is not None and o not in after]
            # (a join: the newcomer's share; a leave: the keys the process that left held)
            needs = sum(after[o] for o in joined) + sum(before[o] for o in left)
            when = "not within the phase" if balanced is None else f"{balanced:.1f} s"
            print(f"| {step} | {live} | {moved:,} | {needs:,} | {when} |", flush=True)

        start("p0")
        start("p1")
        owners.step(args.phase, n, 2)  # (two processes take the keys up; not a rebalancing)
        children["p2"] = spawn(dsn, journal, "p2", 2.0, args.period)
        report("a third process joins", 3)
        children["p2"].send_signal(signal.SIGTERM)
        report("one stops (SIGTERM)", 2)
        start("p3")
        owners.step(args.phase, n, 3)
        children["p3"].send_signal(signal.SIGKILL)
        report("one is killed (SIGKILL)", 2)
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children.values():
            child.wait(timeout=60)
        owners.conn.close()
        check = Journal(journal).check(killed={"p3"}, period=args.period)
        print(
            f"\nover the whole run: {check['fires']:,} fires, run twice {len(check['twice'])}, lost "
            f"{len(check['lost'])} (reruns of the killed process's interrupted fires: {check['reruns']})"
        )
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
        server.stop()


if __name__ == "__main__":
    main()
