"""PostgresStore: one schedule shared by many processes, each fire run once across all of them.

Against a real PostgreSQL server that this module starts itself (tests/_pg.py: initdb and pg_ctl in a
temporary directory, 127.0.0.1 only); every test gets a database of its own. The tests skip, saying so,
only where no server binary exists.

Sharing is about leases on the database's clock and processes that die, so most tests here read real
time: each is marked `realtime`, with its tolerance justified beside it. The multi-process tests run for
20 s under CI (as the issue asks) and 6 s otherwise.
"""

from __future__ import annotations

import collections
import math
import os
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from timerwheel import (
    KeyedScheduler,
    PostgresStore,
    Scheduler,
    StoreError,
    ThreadedScheduler,
)
from timerwheel.testing import ManualClock

from . import _pg
from ._shared_child import Journal, seed, spawn

pytestmark = pytest.mark.skipif(
    _pg.bindir() is None, reason="no PostgreSQL server binaries (initdb, pg_ctl) on this machine"
)

CHILD = Path(__file__).parent / "_shared_child.py"
DURATION = 20.0 if os.environ.get("CI") else 6.0


@pytest.fixture
def dsn(pg_dsn: str) -> str:
    """A fresh database of the session's server (conftest.py)."""
    return pg_dsn


def sql(dsn: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, args or None)
        return cur.fetchall() if cur.description else []


def never(now: datetime, key: Any, data: Any) -> None:
    return None


def every(period: float) -> Any:
    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        return now + timedelta(seconds=period)

    return next_run


def wait_for(predicate: Any, timeout: float, what: str) -> float:
    """Poll until predicate() is true; the seconds it took. (Polling a state that other threads and the
    database change: the timeout is a bound, the figure is what a test reports.)"""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)
    return time.monotonic() - started


# -- construction and the schema ----------------------------------------------------------------------


def test_bad_arguments_are_refused_naming_them(dsn: str) -> None:
    with pytest.raises(TypeError, match="dsn"):
        PostgresStore(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lease"):
        PostgresStore(dsn, lease=True)
    for lease in (math.nan, math.inf, 0.1, -1.0):
        with pytest.raises(ValueError, match="lease"):
            PostgresStore(dsn, lease=lease)
    with pytest.raises(StoreError, match="PostgreSQL store"):
        PostgresStore("host=127.0.0.1 port=1 user=postgres dbname=x connect_timeout=2")
    store = PostgresStore(dsn, lease=1.0)
    with pytest.raises(TypeError, match="store: a shared store"):
        KeyedScheduler(Scheduler(), never, print, store=store)
    store.close()


def test_the_password_never_shows(dsn: str) -> None:
    store = PostgresStore(dsn + " password=hunter2", lease=1.0)  # (trust auth: the password is unused)
    assert "hunter2" not in repr(store) and "hunter2" not in store.name
    store.close()


def test_the_schema_is_created_once_when_many_processes_start_together(dsn: str) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def make() -> None:
        barrier.wait()
        try:
            stores.append(PostgresStore(dsn, lease=1.0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 8
    assert sql(dsn, "SELECT value FROM timerwheel_meta WHERE name = 'schema'") == [("1",)]
    for store in stores:
        store.close()
    sql(dsn, "UPDATE timerwheel_meta SET value = '99' WHERE name = 'schema'")
    with pytest.raises(StoreError, match="schema version 99"):
        PostgresStore(dsn, lease=1.0)


# -- the fences, on the store itself ------------------------------------------------------------------


def test_a_fire_is_taken_only_by_the_holder_of_its_key_and_generation(dsn: str) -> None:
    from timerwheel._store import StoredKey

    a, b = PostgresStore(dsn, lease=1.0), PostgresStore(dsn, lease=1.0)
    row = StoredKey("k", "null", 1, "pending", 1_000, None, None)
    assert a.put(row) == 1  # a holds k at generation 1
    assert b.put(row._replace(key="j")) == 1
    running = row._replace(state="running")
    assert not b.start_fire(running, 1_000, 1, False)  # b does not hold k
    assert not a.start_fire(running._replace(generation=2), 1_000, 1, False)  # nor a at another generation
    assert a.start_fire(running, 1_000, 1, False)
    assert a.start_fire(running, 1_000, 1, False)  # its own unfinished fire: a retry after a lost reply
    a.finish_fire(row, "k", 1, 1_000, 2, None)
    assert not a.start_fire(running, 1_000, 3, False)  # finished: taken once
    assert a.start_fire(running, 2_000, 3, False)  # the next fire, left unfinished (a "dies")
    sql(dsn, "UPDATE timerwheel_keys SET owner = %s WHERE key = %s", b.owner_id, '"k"')  # b took k over
    assert not b.start_fire(running, 2_000, 4, False)  # an unfinished fire of another is not a new fire
    assert b.start_fire(running, 2_000, 4, True)  # ... but it may be run again (recover=RERUN)
    assert sql(dsn, "SELECT attempts, owner FROM timerwheel_fires WHERE scheduled_for = 2000") == [
        (2, b.owner_id)
    ]
    a.finish_fire(row._replace(state="disabled"), "k", 1, 2_000, 5, None)  # a's late completion: fenced
    assert sql(dsn, "SELECT state FROM timerwheel_keys WHERE key = %s", '"k"') == [("running",)]
    assert a.put(row._replace(data='{"v":2}')) == 2  # a user's change: a new generation, held by a
    assert sql(dsn, "SELECT generation, owner FROM timerwheel_keys WHERE key = %s", '"k"') == [
        (2, a.owner_id)
    ]
    assert a.delete("k") and not a.delete("k")
    a.close()
    b.close()


# -- several KeyedSchedulers of one process on one database (each as a process would be) --------------


class Node:
    """A KeyedScheduler on a PostgresStore, with a ThreadedScheduler on the database's clock."""

    def __init__(self, dsn: str, runs: collections.Counter[Any], **kwargs: Any) -> None:
        self.store = PostgresStore(dsn, lease=kwargs.pop("lease", 1.0))
        self.runs = runs
        clock = kwargs.pop("clock", None)
        sched = (
            ThreadedScheduler(clock=clock, workers=2)
            if clock is not None
            else ThreadedScheduler(wall_clock=self.store.wall, workers=2)
        )
        self.keyed = KeyedScheduler(
            sched, kwargs.pop("next_run", every(0.2)), self.run, context=True, store=self.store, **kwargs
        )
        self.keyed.start()

    def run(self, ctx: Any, key: Any, data: Any) -> None:
        self.runs[(key, round(ctx.scheduled_for, 6))] += 1

    def close(self) -> None:
        self.keyed.close()


@pytest.mark.realtime
def test_keys_spread_over_the_processes_and_each_fire_runs_once(dsn: str) -> None:
    runs: collections.Counter[Any] = collections.Counter()
    first = Node(dsn, runs)
    first.keyed.replace_all({i: None for i in range(300)})
    nodes = [first, Node(dsn, runs), Node(dsn, runs)]
    # Rebalancing takes a few keeper rounds (lease/3 = 0.33 s each): 5 s is ample on a loaded machine.
    wait_for(lambda: all(90 <= n.store.held() <= 110 for n in nodes), 5.0, "each holds about 1/3")
    time.sleep(1.0)
    for n in nodes:
        n.close()
    assert runs and max(runs.values()) == 1  # no fire ran twice
    assert {key for key, _ in runs} == set(range(300))  # and every key ran


@pytest.mark.realtime
def test_upsert_and_remove_reach_every_process_promptly(dsn: str) -> None:
    runs: collections.Counter[Any] = collections.Counter()
    a = Node(dsn, runs, next_run=every(3600))
    b = Node(dsn, runs, next_run=every(3600))
    a.keyed.upsert("k", {"v": 1})
    a.keyed.upsert("j", {"v": 1})
    assert a.keyed.get("k") is not None and b.keyed.get("k") is None  # a holds what it upserted
    assert b.keyed.remove("k")  # held by a: removed from the database, and a hears of it
    removed = wait_for(lambda: a.keyed.get("k") is None, 2.0, "a drops the removed key")
    b.keyed.upsert("j", {"v": 2})  # a new generation, held by b from now on
    moved = wait_for(lambda: a.keyed.get("j") is None, 2.0, "a drops the key b replaced")
    assert b.keyed.get("j").data == {"v": 2}  # type: ignore[union-attr]
    # The bound is 100 ms on loopback; the assertion allows 2 s for a loaded CI machine (the
    # figure is measured by benchmarks/shared.py); the fences make a late one harmless.
    print(f"remove seen in {removed * 1000:.1f} ms, replace in {moved * 1000:.1f} ms")
    assert not b.keyed.remove("nothing")
    a.close()
    b.close()


@pytest.mark.realtime
def test_a_keyed_scheduler_on_an_asyncio_loop_shares_too(dsn: str) -> None:
    import asyncio

    from timerwheel import AsyncScheduler

    runs: collections.Counter[Any] = collections.Counter()

    async def main() -> None:
        store = PostgresStore(dsn, lease=1.0)

        async def run(ctx: Any, key: Any, data: Any) -> None:
            runs[(key, round(ctx.scheduled_for, 6))] += 1

        keyed = KeyedScheduler(
            AsyncScheduler(wall_clock=store.wall), every(0.2), run, context=True, store=store
        )
        keyed.start()
        other = Node(dsn, runs)
        other.keyed.replace_all({i: None for i in range(40)})
        started = time.monotonic()
        while len(keyed) < 15:  # the keeper's rounds (0.33 s) hand it its share on the loop's thread
            assert time.monotonic() - started < 5.0, "the loop's KeyedScheduler gets no share"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)
        mine = next(iter(keyed))
        other.keyed.remove(mine)  # heard by the listener, applied on the loop
        started = time.monotonic()
        while mine in keyed:
            assert time.monotonic() - started < 2.0, "the remove is not seen on the loop"
            await asyncio.sleep(0.005)
        await keyed.aclose()
        other.close()

    asyncio.run(main())
    assert runs and max(runs.values()) == 1
    assert {key for key, _ in runs} == set(range(40))


@pytest.mark.realtime
def test_close_gives_the_keys_back_at_once(dsn: str) -> None:
    runs: collections.Counter[Any] = collections.Counter()
    a = Node(dsn, runs, next_run=every(3600), lease=30.0)
    a.keyed.replace_all({i: None for i in range(50)})
    b = Node(dsn, runs, next_run=every(3600), lease=30.0)
    a.close()
    # Without the give-back b would wait the 30 s lease; with it, b's next keeper round (10 s at most).
    took = wait_for(lambda: b.store.held() == 50, 15.0, "b takes the keys a gave back")
    assert took < 12.0
    b.close()


@pytest.mark.realtime
def test_after_the_whole_cluster_was_down_each_key_catches_up_once(dsn: str) -> None:
    # Due times on a ManualClock (the wall clock moved while every process was down); leases on the
    # database's own clock, in real time.
    clock = ManualClock(0.0, wall=datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp())
    runs: collections.Counter[Any] = collections.Counter()
    missed: list[int] = []
    a = Node(dsn, runs, next_run=every(60), clock=clock)
    a.keyed.replace_all({i: None for i in range(40)})
    a.close()
    clock.set_wall(clock.wall() + 600)  # 10 fires of every key fell due meanwhile
    nodes = [
        Node(
            dsn,
            runs,
            next_run=every(60),
            clock=clock,
            on_missed=lambda k, d, n, first, last: missed.append(n),
        )
        for _ in range(2)
    ]
    wait_for(lambda: sum(n.store.held() for n in nodes) == 40, 5.0, "the keys are claimed")
    for _ in range(200):  # catch-up runs are due at once, one per pass, 1 ms apart
        clock.advance(0.001)
    wait_for(lambda: sum(runs.values()) >= 40, 5.0, "the catch-up runs")
    time.sleep(0.3)  # (a second catch-up, if there were one, would run by now)
    for n in nodes:
        n.close()
    assert sum(runs.values()) == 40 and max(runs.values()) == 1  # ONCE, once per key across both
    assert sum(missed) == 40 * 9  # and the other 9 of each reported, once


@pytest.mark.realtime
def test_a_database_that_goes_away_stops_the_firing_and_then_it_resumes(caplog: Any) -> None:
    server = _pg.Server()  # (its own: it is stopped and started again)
    try:
        runs: collections.Counter[Any] = collections.Counter()
        node = Node(server.dsn, runs, lease=1.0)
        node.keyed.replace_all({i: None for i in range(20)})
        wait_for(lambda: len(runs) >= 40, 5.0, "the keys fire")
        server.pause()
        # The keeper renews every 0.33 s; after a whole lease (1 s) without renewal it says so.
        wait_for(lambda: "lost its leases" in caplog.text, 5.0, "the lapse is reported")
        during = sum(runs.values())
        time.sleep(0.5)
        assert sum(runs.values()) == during  # nothing fires without the database
        assert len(node.keyed) == 20  # (kept: nobody else took them)
        server.resume()
        wait_for(lambda: sum(runs.values()) >= during + 40, 10.0, "they fire again")
        assert node.store.held() == 20
        node.close()
        assert max(runs.values()) == 1
    finally:
        server.stop()


# -- real processes ---------------------------------------------------------------------------------


@pytest.mark.realtime
def test_four_processes_run_every_fire_once(dsn: str, tmp_path: Path) -> None:
    seed(dsn, 1000)
    journal = tmp_path / "journal"
    journal.touch()
    children = [spawn(dsn, journal, f"p{i}", 2.0) for i in range(4)]
    time.sleep(DURATION)
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        assert child.wait(timeout=60) == 0
    result = Journal(journal).check(killed=set())
    print(result | {"twice": len(result["twice"]), "lost": len(result["lost"])})
    assert result["twice"] == {} and result["reruns"] == 0  # no fire ran twice
    assert result["lost"] == []  # none was lost
    assert result["fires"] >= 1000 * (DURATION - 2) / 0.5 * 0.9  # (and they ran: 1,000 keys every 500 ms)
    by = collections.Counter(v[0] for v in Journal(journal).starts.values())
    assert len(by) == 4 and min(by.values()) > 0.1 * sum(by.values())  # the load spread


@pytest.mark.realtime
def test_a_process_killed_again_and_again_loses_no_fire_and_doubles_none(dsn: str, tmp_path: Path) -> None:
    seed(dsn, 1000)
    journal = tmp_path / "journal"
    journal.touch()
    lease = 1.5
    children = {i: spawn(dsn, journal, f"p{i}-0", lease) for i in range(4)}
    killed: set[str] = set()
    names = {i: f"p{i}-0" for i in range(4)}
    started = time.monotonic()
    life = 0
    while time.monotonic() - started < DURATION - 3:
        time.sleep(3.0)
        victim = life % 4
        children[victim].send_signal(signal.SIGKILL)
        children[victim].wait()
        killed.add(names[victim])
        life += 1
        names[victim] = f"p{victim}-{life}"
        children[victim] = spawn(dsn, journal, names[victim], lease)
    time.sleep(lease + 1.0)  # the last victim's keys are taken over, and run
    for child in children.values():
        child.send_signal(signal.SIGTERM)
    for child in children.values():
        assert child.wait(timeout=60) == 0
    result = Journal(journal).check(killed=killed)
    print(result | {"twice": len(result["twice"]), "lost": len(result["lost"])}, "killed", len(killed))
    assert result["twice"] == {}  # twice only as a RERUN of a fire that had started in a killed process
    assert result["lost"] == []  # and no fire lost: the others took the dead one's keys over
    assert killed


@pytest.mark.realtime
def test_a_process_whose_connections_are_cut_recovers(dsn: str, tmp_path: Path) -> None:
    seed(dsn, 200)
    journal = tmp_path / "journal"
    journal.touch()
    children = [spawn(dsn, journal, f"p{i}", 1.5) for i in range(2)]
    time.sleep(2.0)
    # Cut every connection of the first child (its main, keeper and listener connections).
    for _ in range(3):
        cut = sql(
            dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            f"timerwheel {children[0].pid} %",
        )
        assert cut
        time.sleep(1.0)
    time.sleep(2.0)
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        assert child.wait(timeout=60) == 0
    j = Journal(journal)
    result = j.check(killed=set())
    assert result["twice"] == {}  # never a fire it no longer held
    assert result["lost"] == []
    late = [at for (key, at), who in j.starts.items() if who == ["p0"]]
    assert max(late) > round((time.time() - 1.5) * 1e6)  # and the cut one fires again
