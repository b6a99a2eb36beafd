"""The store contract: what a store must guarantee to the KeyedScheduler, written once against the store
protocol and run on every store: MemoryStore, SQLiteStore, PostgresStore (a real server, started by the
tests) and the simulated shared store of timerwheel.testing.simulate (so that the simulation is held to
the same rules as the real one).

A new store is correct when it passes this suite. The guarantees:

- put(), replace() and delete() are committed when they return: a store opened after a crash has them
  (durable stores);
- a key's generation never goes back, across delete() and replace() too;
- a fire (key, generation, scheduled_for) is taken at most once: a second take is refused, except the
  take again of an unfinished fire by its own taker (an answer that was lost) at the same attempt, and
  the rerun of an unfinished fire, which counts one more attempt;
- the fires started and not finished are given back to the next holder (load(), or a claim);
- shared stores: a take, a completion and a save are fenced by the holder and the generation; a holder
  whose lease lapsed loses its keys to a claim, with their unfinished fires; a paused key's fires are
  refused to its holder (whoever paused it), and the pause is kept by every other write;
- a key's options are what its latest put() or replace() wrote, and every other write keeps them; a
  trigger not run yet is kept by a local store as its writes give it, and by a shared store as
  trigger() set it, until a take of a fire at or after it, an upsert or a pause;
- a key's count of runs: a local store keeps what every write gives; a shared store counts the take of
  each new fire (not a rerun, nor the same take again), keeps it across put() and replace(), and answers
  it (Put); delete() forgets it;
- bad input is refused with an error naming it, and leaves the store as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from timerwheel import MemoryStore, SQLiteStore, StoreError
from timerwheel._stores import TAKE_PAUSED, FinishedFire, StoredEntry, StoredFire, StoredKey

US = 1_000_000
T = 1_800_000_000 * US  # a time in the fires' unit (microseconds since the epoch)


def row(
    key: Any, generation: int = 1, data: str = '{"n":1}', state: str = "pending", at: int | None = T
) -> StoredKey:
    return StoredKey(key, data, generation, state, at, None, None)


class Holder:
    """What a shared store calls back (KeyedScheduler's side of the protocol): it records the keys it
    was given, and what it was told."""

    def __init__(self) -> None:
        self.adopted: list[StoredKey] = []
        self.fires: list[StoredFire] = []
        self.reconciled: list[dict[Any, int]] = []
        self.shed_counts: list[int] = []
        self.flags: dict[Any, bool] = {}  # what it was told of its keys' pauses
        self.triggers: dict[Any, str] = {}  # what it was told of its keys' triggers

    def stamp(self) -> int:
        return 0

    def adopt(self, rows: list[StoredKey], fires: list[StoredFire], stamp: int) -> None:
        self.adopted += rows
        self.fires += fires

    def reconcile(self, held: dict[Any, int], stamp: int) -> None:
        self.reconciled.append(held)

    def shedding(self) -> bool:
        return False

    def shed(self, count: int, stamp: int) -> None:
        self.shed_counts.append(count)

    def flush(self) -> None:
        pass

    def changed(self, changes: Any, stamp: int, removed: Any) -> None:
        pass

    def paused(self, flags: dict[Any, bool], stamp: int) -> None:
        self.flags.update(flags)

    def triggered(self, triggers: dict[Any, str], stamp: int) -> None:
        self.triggers.update(triggers)

    def lost(self) -> None:
        pass


class Backend:
    """One store under the contract: how to open one (a process), crash it and open the next."""

    name = ""
    durable = True
    shared = False

    def open(self) -> Any:
        raise NotImplementedError

    def crash_and_reopen(self, store: Any) -> Any:
        """The process dies (nothing more of it is written) and a new one opens the store."""
        raise NotImplementedError

    def keys(self, store: Any) -> dict[Any, StoredKey]:
        """Every key as the store has it (what the next holder would find)."""
        raise NotImplementedError

    def unfinished(self, store: Any) -> list[StoredFire]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Memory(Backend):
    name = "memory"
    durable = False

    def open(self) -> Any:
        return MemoryStore()


class SQLite(Backend):
    name = "sqlite"

    def __init__(self, tmp: Path) -> None:
        self.path = str(tmp / "keys.db")
        self.lives = 0

    def open(self) -> Any:
        return SQLiteStore(self.path)

    def crash_and_reopen(self, store: Any) -> Any:
        self.lives += 1
        copy = f"{self.path}.life{self.lives}"
        for suffix in ("", "-wal"):  # (the files as a SIGKILL leaves them)
            if os.path.exists(self.path + suffix):
                shutil.copyfile(self.path + suffix, copy + suffix)
        store.close()
        self.path = copy
        return SQLiteStore(copy)

    def keys(self, store: Any) -> dict[Any, StoredKey]:
        return {r.key: r for r in store.load()[0]}

    def unfinished(self, store: Any) -> list[StoredFire]:
        return list(store.load()[1])


class Shared(Backend):
    """A shared store: each open() is another process; crash = its leases lapse at once."""

    shared = True

    def keys(self, store: Any) -> dict[Any, StoredKey]:
        return {r.key: r for r in self.claim_all(self.open())[0]}

    def unfinished(self, store: Any) -> list[StoredFire]:
        return self.claim_all(self.open())[1]

    def claim_all(self, store: Any) -> tuple[list[StoredKey], list[StoredFire]]:
        for other in self.stores:
            if other is not store:
                self.lapse(other)
        holder = Holder()
        self.claim(store, holder)
        return holder.adopted, holder.fires

    def crash_and_reopen(self, store: Any) -> Any:
        self.lapse(store)
        return self.open()


class Postgres(Shared):
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stores: list[Any] = []

    def open(self) -> Any:
        from timerwheel import PostgresStore

        store = PostgresStore(self.dsn, lease=30.0)
        self.stores.append(store)
        return store

    def lapse(self, store: Any) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE timerwheel_leases SET lease_until = now() - interval '1 second' WHERE id = %s",
                (store.owner_id,),
            )

    def claim(self, store: Any, holder: Holder) -> None:
        import time

        store._keeper.holder = holder
        conn = store._db.connect()  # (the keeper's connection of its own)
        try:
            store._keeper.one_round(conn, time.monotonic())
        finally:
            conn.close()

    def close(self) -> None:
        for store in self.stores:
            store.close()


class Simulated(Shared):
    name = "simulated"

    def __init__(self) -> None:
        from timerwheel.testing import VirtualTimeLoop
        from timerwheel.testing._simstore import SimDatabase

        self.now = 0.0
        self.db = SimDatabase(lambda: 1_800_000_000.0 + self.now)
        self.loop = VirtualTimeLoop()
        self.stores: list[Any] = []

    def open(self) -> Any:
        from timerwheel.testing._simstore import SimStore

        store = SimStore(self.db, _Calm(self.loop), f"p{len(self.stores)}", lease=30.0)
        self.stores.append(store)
        return store

    def lapse(self, store: Any) -> None:
        if store.owner_id in self.db.owners:
            self.db.owners[store.owner_id] = self.db.now() - 1.0

    def claim(self, store: Any, holder: Holder) -> None:
        import asyncio

        store._holder = holder
        store._keep()  # (one keeper round, its statements round trips on the loop's virtual time)
        self.loop.run_until_complete(asyncio.sleep(0.5))
        store._holder = None  # (no round after it)

    def close(self) -> None:
        self.loop.close()


class _Calm:
    """A simulated process without faults (for the simulated store outside a cluster)."""

    alive = True

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.wall_offset = 0.0

    def check_store(self, name: str, what: str) -> None:
        pass

    def fail_next_write(self) -> bool:
        return False

    def clock_error(self) -> float:
        return 0.0

    def latency(self) -> float:
        return 0.001


@pytest.fixture(params=["memory", "sqlite", "postgres", "simulated"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made: Backend
    if request.param == "memory":
        made = Memory()
    elif request.param == "sqlite":
        made = SQLite(tmp_path)
    elif request.param == "postgres":
        pytest.importorskip("psycopg")
        made = Postgres(request.getfixturevalue("pg_dsn"))
    else:
        made = Simulated()
    yield made
    made.close()


def durable(backend: Backend) -> None:
    if not backend.durable:
        pytest.skip(f"the {backend.name} store keeps nothing: the KeyedScheduler's memory is all there is")


def shared(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip(f"the {backend.name} store has one process: nothing to fence between holders")


# -- what is committed stays ----------------------------------------------------------------------------


def test_a_change_that_returned_is_there_after_a_crash(backend: Backend) -> None:
    durable(backend)
    store = backend.open()
    g1 = store.put(row("a", data='{"v":1}'))
    store.put(row("b"))
    (g2,) = store.replace([row("a", g1, data='{"v":2}')], ["b"])  # (b removed)
    assert store.delete("gone") is False
    store = backend.crash_and_reopen(store)
    keys = backend.keys(store)
    assert set(keys) == {"a"} and keys["a"].data == '{"v":2}' and keys["a"].generation == g2 >= g1


def test_a_pause_that_returned_is_there_after_a_crash(backend: Backend) -> None:
    """A local store keeps a row's pause as its writes give it; a shared one as set_paused sets it."""
    durable(backend)
    store = backend.open()
    g = store.put(row("k"))
    if backend.shared:
        store.set_paused(["k"], True)
    else:
        store.save([row("k", g)._replace(paused=True)])
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["k"].paused is True


def test_a_keys_options_are_what_its_latest_change_wrote_and_survive_every_other_write(
    backend: Backend,
) -> None:
    """A key's own options (upsert's overlap=) are written by put() and replace(), as given (None: the
    KeyedScheduler's); a shared store's holder writes (take, end, save) leave what the change wrote, a
    local store's carry what the key has; the next holder finds them."""
    durable(backend)
    store = backend.open()
    skip, allow = '{"overlap":"skip"}', '{"overlap":"allow"}'
    g = store.put(row("a")._replace(options=skip))
    ga, gb = store.replace([row("a", g)._replace(options=allow), row("b")._replace(options=skip)], [])
    carried = allow if not backend.shared else None  # (a shared store leaves the column as it is)
    taken = row("a", ga, state="running", at=None)._replace(options=carried)
    assert store.start_fire(taken, T, T, False) == 1
    store.finish_fire(row("a", ga)._replace(options=carried), "a", ga, T, T + 1, None)
    store.save([row("b", gb)._replace(options=None if backend.shared else skip)])
    store = backend.crash_and_reopen(store)
    keys = backend.keys(store)
    assert (keys["a"].options, keys["b"].options) == (allow, skip)
    g = store.put(row("b", gb))  # (an upsert without options: the KeyedScheduler's again)
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["b"].options is None


def test_a_keys_count_of_runs_is_counted_by_takes_kept_by_changes_and_forgotten_by_delete(
    backend: Backend,
) -> None:
    """A local store keeps the count every write gives (the KeyedScheduler counts); a shared store counts
    the take of each new fire itself (a rerun and the same take again are the run they were), leaves the
    count to put() and replace(), which answer it, and delete() forgets it."""
    durable(backend)
    store = backend.open()
    g = store.put(row("a"))
    taken = row("a", g, state="running", at=None)._replace(runs=1)
    assert store.start_fire(taken, T, T, False) == 1
    assert store.start_fire(taken, T, T, False) == 1  # (the same take again: no more runs)
    assert store.start_fire(taken._replace(runs=2), T + US, T + US, False) == 1
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["a"].runs == 2
    if backend.shared:  # (the next holder claims the key first)
        backend.claim_all(store)  # type: ignore[attr-defined]
    assert store.start_fire(taken._replace(runs=2), T + US, T + 5 * US, True) == 2  # (a rerun)
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["a"].runs == 2
    g2 = store.put(row("a", g + 1)._replace(runs=0 if backend.shared else 2))
    assert getattr(g2, "runs", 2) == 2  # (a shared store answers its count)
    (g3,) = store.replace([row("a", g2 + 1)._replace(runs=0 if backend.shared else 2)], [])
    assert getattr(g3, "runs", 2) == 2
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["a"].runs == 2
    assert store.delete("a")
    g4 = store.put(row("a"))
    assert getattr(g4, "runs", 0) == 0
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["a"].runs == 0


def test_a_keys_history_keeps_its_newest_entries_and_goes_with_the_key(backend: Backend) -> None:
    """add_history keeps each key's `keep` newest entries; history() gives them newest first (what was
    added before it, written); a durable store keeps them across a crash; delete() and a replace that
    removes the key forget them."""
    store = backend.open()
    for key in ("a", "b", "c"):
        store.put(row(key))
    store.add_history([StoredEntry("a", T + i * US, T, "ran", 1, 5 * US, None) for i in range(5)], 3)
    others = [StoredEntry("b", T, None, "paused", 0), StoredEntry("c", T, T, "failed", 2, 0, "E: x")]
    store.add_history(others, 3)
    assert [e.at for e in store.history("a")] == [T + 4 * US, T + 3 * US, T + 2 * US]
    assert store.history("a")[0] == StoredEntry("a", T + 4 * US, T, "ran", 1, 5 * US, None)
    assert store.history("c") == [StoredEntry("c", T, T, "failed", 2, 0, "E: x")]
    if backend.durable:
        store = backend.crash_and_reopen(store)
        assert [e.at for e in store.history("a")] == [T + 4 * US, T + 3 * US, T + 2 * US]
    store.delete("a")
    assert store.history("a") == [] and store.history("never") == []
    if backend.durable:
        store.replace([row("b", 5)], ["c"])
        assert store.history("c") == [] and [e.outcome for e in store.history("b")] == ["paused"]


def test_a_generation_never_goes_back(backend: Backend) -> None:
    durable(backend)
    store = backend.open()
    g1 = store.put(row("a", 1))
    g2 = store.put(row("a", g1 + 1))
    assert g2 > g1
    assert store.delete("a") is True
    g3 = store.put(row("a", 1))  # (stored anew after a delete: above the one deleted)
    assert g3 > g2
    (g4,) = store.replace([row("b", 1)], ["a"])
    (g5,) = store.replace([row("a", 1)], ["b"])  # (a was removed by the replace before: above g3)
    assert g5 > g3 and g4 >= 1
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["a"].generation == g5
    if backend.shared:  # (a process that does not know the latest generation: the store goes above it)
        assert store.put(row("a", 1)) > g5
    else:  # (the one owner knows it, and asks for the next one, as the KeyedScheduler does)
        assert store.put(row("a", g5 + 1)) == g5 + 1


# -- a fire is taken once -----------------------------------------------------------------------------


def test_a_fire_is_taken_at_most_once(backend: Backend) -> None:
    store = backend.open()
    g = store.put(row("a"))
    running = row("a", g, state="running", at=None)
    assert store.start_fire(running, T, T, False) == 1
    if backend.durable:
        # (its own unfinished fire taken again: the same take, whose answer was lost; same attempt)
        assert store.start_fire(running, T, T + 1, False) == 1
    store.finish_fire(row("a", g, at=T + US), "a", g, T, T + 2, None)
    if backend.durable:
        assert store.start_fire(running, T, T + 3, False) == 0  # finished: never again
        assert store.start_fire(running, T, T + 3, True) == 0  # (nor as a rerun)
    assert store.start_fire(running, T + US, T + US, False) == 1  # the next fire


def test_a_new_fire_before_a_later_one_of_its_generation_is_refused(backend: Backend) -> None:
    """A process that held a key, lost it and holds it again may ask for a fire its old plan had: a later
    fire of that generation started meanwhile, so that one ran (or was decided about) already."""
    durable(backend)
    store = backend.open()
    g = store.put(row("a"))
    running = row("a", g, state="running", at=None)
    assert store.start_fire(running, T + 5 * US, T + 5 * US, False) == 1
    store.finish_fire(row("a", g, at=T + 6 * US), "a", g, T + 5 * US, T + 5 * US, None)
    assert store.start_fire(running, T + 2 * US, T + 7 * US, False) == 0  # (stale: before 5)
    g2 = store.put(row("a", g + 1))  # a newer generation starts its own fires afresh
    assert store.start_fire(row("a", g2, state="running", at=None), T + 2 * US, T + 8 * US, False) == 1


def test_a_rerun_of_an_unfinished_fire_counts_one_more_attempt(backend: Backend) -> None:
    durable(backend)
    store = backend.open()
    g = store.put(row("a"))
    assert store.start_fire(row("a", g, state="running", at=None), T, T, False) == 1
    store = backend.crash_and_reopen(store)
    assert backend.unfinished(store) == [StoredFire("a", g, T, 1)]
    if backend.shared:  # (the next holder claims the key first)
        backend.claim_all(store)  # type: ignore[attr-defined]
    assert store.start_fire(row("a", g, state="running", at=None), T, T + 5, True) == 2
    store.finish_fire(row("a", g, at=T + US), "a", g, T, T + 6, None)
    store = backend.crash_and_reopen(store)
    assert backend.unfinished(store) == []


def test_a_rerun_taken_again_after_a_lost_answer_keeps_its_attempt(backend: Backend) -> None:
    """A take whose answer was lost (the store raised after its commit) is tried again by its taker with
    the same started_at: the same take, at the same attempt. (A shared store's taker is its process, and
    a process that lost the key and holds it again reruns its own fire one attempt more; a file's taker
    is the life, which reruns the fires it found unfinished, once each.)"""
    durable(backend)
    store = backend.open()
    g = store.put(row("a"))
    running = row("a", g, state="running", at=None)
    assert store.start_fire(running, T, T, False) == 1
    store = backend.crash_and_reopen(store)
    if backend.shared:
        backend.claim_all(store)  # type: ignore[attr-defined]
    assert store.start_fire(running, T, T + 5, True) == 2
    assert store.start_fire(running, T, T + 5, True) == 2  # (its answer lost: the same take again)
    if backend.shared:
        assert store.start_fire(running, T, T + 9, True) == 3  # (a rerun of its own, again: one more)
    store = backend.crash_and_reopen(store)
    if backend.shared:  # (another taker's rerun at the same started_at is another take: one more)
        backend.claim_all(store)  # type: ignore[attr-defined]
        assert store.start_fire(running, T, T + 9, True) == 4
        store = backend.crash_and_reopen(store)
    else:  # (the next life's rerun is one more, whatever its started_at)
        assert store.start_fire(running, T, T + 5, True) == 3
        store = backend.crash_and_reopen(store)
    assert backend.unfinished(store) == [StoredFire("a", g, T, 4 if backend.shared else 3)]


def test_a_rerun_of_an_older_fire_keeps_the_keys_latest_started_fire(backend: Backend) -> None:
    """A fire left unfinished before a later one started (a life whose wall clock ran ahead): its rerun
    does not move the key's latest started fire back, or the later fires would run again after it."""
    durable(backend)
    store = backend.open()
    g = store.put(row("a"))
    running = row("a", g, state="running", at=None)
    assert store.start_fire(running, T, T, False) == 1
    later = StoredKey("a", '{"n":1}', g, "running", None, T + 5 * US, None)
    assert store.start_fire(later, T + 5 * US, T + 5 * US, False) == 1
    store = backend.crash_and_reopen(store)
    if backend.shared:
        backend.claim_all(store)  # type: ignore[attr-defined]
    assert store.start_fire(later, T, T + 6 * US, True) == 2  # (its row: the latest started, T + 5 s)
    assert backend.keys(store)["a"].last_scheduled_for == T + 5 * US


def test_save_marks_fires_finished_and_writes_rows(backend: Backend) -> None:
    durable(backend)
    store = backend.open()
    g = store.put(row("a"))
    store.start_fire(row("a", g, state="running", at=None), T, T, False)
    store.save([row("a", g, state="pending", at=T + 7 * US)], [FinishedFire("a", g, T, T + 1, "abandoned")])
    store = backend.crash_and_reopen(store)
    assert backend.unfinished(store) == []
    assert backend.keys(store)["a"].next_run_at == T + 7 * US


# -- shared stores: fenced by holder and generation -------------------------------------------------------


def test_a_process_that_does_not_hold_a_key_cannot_take_its_fires(backend: Backend) -> None:
    shared(backend)
    a, b = backend.open(), backend.open()
    g = a.put(row("k"))
    running = row("k", g, state="running", at=None)
    assert b.start_fire(running, T, T, False) == 0  # held by a
    assert b.start_fire(running, T, T, True) == 0
    b.put(row("k", g))  # b's upsert: a newer generation, held by b
    assert a.start_fire(running, T, T, False) == 0  # a's generation is stale


def test_a_lapsed_holders_keys_go_to_a_claim_with_their_unfinished_fires(backend: Backend) -> None:
    shared(backend)
    a = backend.open()
    g = a.put(row("k"))
    assert a.start_fire(row("k", g, state="running", at=None), T, T, False) == 1
    backend.lapse(a)  # type: ignore[attr-defined]  # (a paused past its lease)
    b = backend.open()
    holder = Holder()
    backend.claim(b, holder)  # type: ignore[attr-defined]
    assert [r.key for r in holder.adopted] == ["k"] and holder.fires == [StoredFire("k", g, T, 1)]
    # the old holder, back: its take, its end and its save are refused; its release changes nothing
    assert a.start_fire(row("k", g, state="running", at=None), T + US, T + US, False) == 0
    a.finish_fire(row("k", g, state="pending", at=T + 99 * US), "k", g, T + US, T + 2 * US, None)
    a.save([row("k", g, state="disabled", at=None)])
    a.release({"k": g})
    assert b.start_fire(row("k", g, state="running", at=None), T, T + 3 * US, True) == 2
    fresh = backend.keys(b)["k"]
    assert fresh.state == "running" and fresh.next_run_at is None


def test_a_key_stored_as_a_keeper_round_begins_is_not_given_back_by_it(backend: Backend) -> None:
    """A key the holder stores while the keeper's round runs: the round's count of keys must include it,
    or the round finds the holder over its share and gives the new key straight to another process (its
    first fire, taken meanwhile, was refused, and ran only after the lease, elsewhere)."""
    shared(backend)
    a = backend.open()

    class Storing(Holder):
        def stamp(self) -> int:  # (the holder's stamp, read as the round begins: an upsert lands)
            if not self.adopted and not self.reconciled:
                a.put(row("k"))
            return 0

    holder = Storing()
    backend.claim(a, holder)  # type: ignore[attr-defined]
    assert holder.reconciled and "k" in holder.reconciled[-1]
    assert holder.shed_counts == []


def test_a_release_at_a_stale_generation_keeps_the_newer_one_held(backend: Backend) -> None:
    shared(backend)
    a = backend.open()
    g1 = a.put(row("k"))
    g2 = a.put(row("k", g1 + 1))
    a.release({"k": g1})
    assert a.start_fire(row("k", g2, state="running", at=None), T, T, False) == 1  # still held by a


# -- shared stores: a pause, seen by every process -----------------------------------------------------------


def test_a_paused_keys_fires_are_refused_until_it_is_resumed(backend: Backend) -> None:
    """Any process pauses any key (held by another): from the commit on, its holder's take of a fire
    answers TAKE_PAUSED and writes nothing; resumed, the same take is taken."""
    shared(backend)
    a, b = backend.open(), backend.open()
    g = a.put(row("k"))
    running = row("k", g, state="running", at=None)
    assert b.set_paused(["k", "nothing"], True) == ["k"]  # (held by a; "nothing" is not stored)
    assert a.start_fire(running, T, T, False) == TAKE_PAUSED
    assert b.set_paused(["k"], True) == ["k"]  # (paused again: the key is there, nothing changes)
    assert b.set_paused(["k"], False) == ["k"]
    assert a.start_fire(running, T, T, False) == 1


def test_pausing_every_key_returns_those_it_changed(backend: Backend) -> None:
    shared(backend)
    a = backend.open()
    for key in "abc":
        a.put(row(key))
    a.set_paused(["a"], True)
    assert sorted(a.set_paused(None, True)) == ["b", "c"]
    assert a.set_paused(None, True) == []
    assert sorted(a.set_paused(None, False)) == ["a", "b", "c"]


def test_a_pause_is_kept_by_an_upsert_and_comes_with_a_claim(backend: Backend) -> None:
    """Only set_paused changes the flag: an upsert (a new generation) and the holder's writes leave it,
    and the process that claims the key next reads it; the holder is told of it at its full read."""
    shared(backend)
    a = backend.open()
    g = a.put(row("k"))
    a.set_paused(["k"], True)
    g = a.put(row("k", g))
    a.save([row("k", g, state="pending", at=T + US)])
    told = Holder()
    backend.claim(a, told)  # type: ignore[attr-defined]  # (its first round reads what it holds in full)
    assert told.flags == {"k": True}
    backend.lapse(a)  # type: ignore[attr-defined]
    b = backend.open()
    holder = Holder()
    backend.claim(b, holder)  # type: ignore[attr-defined]
    assert [(r.key, r.paused) for r in holder.adopted] == [("k", True)]
    assert b.start_fire(row("k", g, state="running", at=None), T, T, False) == TAKE_PAUSED


# -- triggers ------------------------------------------------------------------------------------------------


def test_a_local_store_keeps_a_keys_trigger_as_its_writes_give_it(backend: Backend) -> None:
    durable(backend)
    if backend.shared:
        pytest.skip("a shared store keeps a trigger as trigger() sets it (see the next tests)")
    store = backend.open()
    g = store.put(row("k"))
    trigger = '{"at":1800000000000000,"restart":false,"overlap":"skip"}'
    store.save([row("k", g)._replace(triggered=trigger)])
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["k"].triggered == trigger
    store.start_fire(row("k", g, state="running", at=None), T, T, False)  # (its take: written without)
    store = backend.crash_and_reopen(store)
    assert backend.keys(store)["k"].triggered is None


def test_a_shared_stores_trigger_is_kept_once_told_to_its_holder_and_cleared_by_a_take_at_or_after_it(
    backend: Backend,
) -> None:
    """trigger() stores one trigger at the store's clock (a second is that one), whichever process asks;
    the holder is told at its full reads and a claimer reads it in the row; the take of a fire before it
    leaves it, the take of a fire at or after it clears it; nothing for a key not there."""
    shared(backend)
    a = backend.open()
    g = a.put(row("k"))
    assert a.trigger("nothing", False, None) is None
    b = backend.open()
    text, mine = b.trigger("k", True, "allow")
    assert not mine and b.trigger("k", False, None) == (text, False)  # (one not run yet: that one)
    at = json.loads(text)["at"]
    assert json.loads(text) == {"at": at, "restart": True, "overlap": "allow"}
    assert a.trigger("k", False, None) == (text, True)  # (a holds the key)
    told = Holder()
    backend.claim(a, told)  # type: ignore[attr-defined]  # (its first round reads what it holds in full)
    assert told.triggers == {"k": text}
    assert a.start_fire(row("k", g, state="running", at=None), at - US, at - US, False) == 1
    backend.lapse(a)  # type: ignore[attr-defined]
    holder = Holder()
    backend.claim(b, holder)  # type: ignore[attr-defined]
    assert [(r.key, r.triggered) for r in holder.adopted] == [("k", text)]  # (a fire before it: kept)
    assert b.start_fire(row("k", g, state="running", at=None), at, at, False) == 1
    assert backend.keys(b)["k"].triggered is None  # (the fire at it: cleared)


def test_a_shared_stores_trigger_is_dropped_by_an_upsert_and_a_pause_and_refused_while_paused(
    backend: Backend,
) -> None:
    shared(backend)
    a = backend.open()
    g = a.put(row("k"))
    a.trigger("k", False, None)
    g = a.put(row("k", g))
    assert backend.keys(a)["k"].triggered is None
    a = backend.open()
    a.trigger("k", False, None)
    a.set_paused(["k"], True)
    assert a.trigger("k", False, None) is None
    a.set_paused(["k"], False)
    assert backend.keys(a)["k"].triggered is None


# -- bad input changes nothing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [1.5, ("a", 1), None, 10**5000, "y" * 9000],
    ids=["float", "tuple", "None", "long-int", "long-str"],
)
def test_a_key_the_store_cannot_keep_is_refused_and_nothing_is_written(backend: Backend, key: Any) -> None:
    """Every call refuses it with an error naming key, before anything is written. (PostgresStore keeps
    keys of up to 1,000 characters as JSON: a key travels in NOTIFY payloads, of 8,000 bytes at most. A
    longer one used to be stored by replace_all(), whose payload does not name the keys, and then could
    never be changed or removed: upsert() and remove() failed with psycopg's "payload string too long".)"""
    durable(backend)
    if backend.name == "simulated":
        pytest.skip("the simulated store keeps any key the KeyedScheduler gives it (its own keys are ints)")
    if isinstance(key, str) and backend.name != "postgres":
        pytest.skip(f"the {backend.name} store keeps a str key of any length")
    store = backend.open()
    store.put(row("a"))
    if isinstance(key, str):  # (the longest it keeps: 1,000 characters as JSON, its quotes included)
        store.put(row("k" * 998))
        assert store.delete("k" * 998)
    with pytest.raises((TypeError, ValueError), match="key"):
        store.put(row(key))
    with pytest.raises((TypeError, ValueError), match="key"):
        store.replace([row("b"), row(key)], ["a"])
    with pytest.raises((TypeError, ValueError), match="key"):
        store.delete(key)
    store = backend.crash_and_reopen(store)
    assert set(backend.keys(store)) == {"a"}


def test_a_store_that_is_closed_refuses_work(backend: Backend) -> None:
    durable(backend)
    store = backend.open()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.put(row("a"))


def test_the_stores_say_what_they_are(backend: Backend) -> None:
    store = backend.open()
    assert isinstance(store.name, str) and store.name
    assert store.durable is backend.durable and store.shared is backend.shared
