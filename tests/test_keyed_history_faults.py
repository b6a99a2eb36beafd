"""Keys' histories under faults: a run that ends after its key was removed, entries waiting in a SQLite
file's buffer across a remove, a kill right after a pause, a resume or a retry's start, KeyInfo.last_run
against last_run(), a run's duration when the wall clock steps, a busy PostgreSQL writer and a remove.
Each docstring gives the rule (docs/scheduling.md, "History and last run") and the bug it pins. Time
comes from a ManualClock or a VirtualTimeLoop; the PostgreSQL test runs on a real server."""

from __future__ import annotations

import collections
import gc
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from timerwheel import CatchUp, MemoryStore, Retry, SQLiteStore
from timerwheel._stores import abandon
from timerwheel.testing import ManualClock
from timerwheel.testing.postgres import postgres_bindir

from .test_keyed_history import Life, outcomes
from .test_keyed_pause import T0
from .test_keyed_retry import ALife


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0, wall=T0)


def _store(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "keys.db")


def _killed(life: Any) -> None:
    """The process dies here: nothing more is written (as test_keyed_history does it)."""
    abandon(life.keyed._table.store)
    life.keyed = None
    gc.collect()


def _file_history(path: Path) -> list[tuple[str, int]]:
    look = sqlite3.connect(path)
    try:
        return look.execute("SELECT outcome, attempt FROM timerwheel_history ORDER BY id").fetchall()
    finally:
        look.close()


# -- remove() forgets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_run_that_ends_after_its_key_was_removed_does_not_bring_its_history_back(
    kind: str, tmp_path: Path
) -> None:
    """Rule: "`remove()` forgets the key's history". The key's run of 10 goes on until 25; the key is
    removed at 12 and upserted again at 32: the new key has no history, and a MemoryStore keeps nothing
    of the removed key.

    The bug this pins: Runs.end() calls _ran() (and table.noted) whether or not the key is still the one that
    ran (`current`), so the run's end writes a "ran" entry for the removed key after remove() forgot its
    history: the re-added key shows the removed one's run (memory and SQLite), and a MemoryStore keeps a
    deque for every key removed while it ran (a second remove() of the unknown key cannot clear it: it
    returns at `key not in self._keys` without touching a non-durable store)."""
    store = _store(kind, tmp_path)
    life = ALife(store, {(10.0, 1): (15.0, False)})
    try:
        life.keyed.upsert("k")
        life.keyed.start()
        life.advance(12)
        assert life.keyed.remove("k")
        life.advance(20)  # (the run of 10 ends at 25)
        if kind == "memory":
            assert "k" not in store._history, "a removed key's history is kept in memory"
        life.keyed.upsert("k")
        assert outcomes(life.keyed.history("k")) == []
    finally:
        life.close()


def test_an_entry_buffered_by_a_sqlite_file_is_not_written_after_the_remove_that_forgot_its_key(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Rule: "`remove()` forgets the key's history". A key paused, then removed, then upserted again has
    no history.

    The bug this pins: the "paused" entry is buffered by SQLiteStore.add_history (the pause's own write came
    first); the remove's transaction runs its work (DELETE FROM timerwheel_history WHERE key = ...) and
    then, in SQLiteStore._transaction, writes the buffered entries after it: the removed key's "paused"
    entry is inserted right after its history was deleted, and the re-added key shows it. (A MemoryStore
    forgets it: SQLite only.)"""
    life = Life(SQLiteStore(tmp_path / "keys.db"), clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(15)
    life.keyed.pause("k")
    assert life.keyed.remove("k")
    life.keyed.upsert("k")
    try:
        assert outcomes(life.keyed.history("k")) == []
    finally:
        life.keyed.close()


# -- a kill never leaves a decision without its entry ---------------------------------------------------


def test_a_pause_and_the_fires_a_resume_missed_are_committed_with_their_entries(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Rule: in a SQLite file "each entry [is] written with the file's next transaction (a run's end and
    its entry are one commit: a kill never leaves one without the other; an entry with no write of its
    own, a late fire, waits for the next one ...)". A pause and a resume are writes of their own: a kill
    right after either leaves the decision and its entries in the file together.

    The bug this pins: recovery.set_paused() commits the pause's row (store.save) before table.pause() notes
    "paused", and resume() commits the resumed plan before report_missed() notes "missed": the entries
    only sit in the store's buffer. A kill right after pause() leaves the key PAUSED in the file with no
    "paused" entry; a kill right after resume() leaves the key planned past the fires of 20..40 (never to
    be reported again) with no "missed" entry for any of them."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(15)
    life.keyed.pause("k")
    _killed(life)
    assert [o for o, _ in _file_history(path)] == ["ran", "paused"], "a committed pause, no entry"

    path = tmp_path / "resumed.db"
    clock = ManualClock(0.0, wall=T0)  # (a life of its own, from the start)
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.SKIP)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(15)
    life.keyed.pause("k")
    life.keyed.history("k")  # (the pause's entry written)
    life.advance(30)
    life.keyed.resume("k")  # (20, 30, 40 fell due: missed; the key is planned at 50)
    _killed(life)
    assert [o for o, _ in _file_history(path)] == ["ran", "paused", "missed", "missed", "missed"]


def test_a_retry_that_began_is_in_the_history_after_a_kill_during_its_run(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Rules: "`retried`: a failed fire's retry began"; a SQLite file writes each entry "with the file's
    next transaction ... a kill never leaves one without the other" (docs/scheduling.md, History). The
    retry's take is its own write (the fire's attempts 2, committed before the job runs): the entry
    saying the retry began belongs to it.

    The bug this pins: Runs._taken() notes "retried" after the take's commit, so the entry waits in the
    buffer for the run's end. A kill during the retry's run leaves the file with attempts = 2 and the
    history [failed 1]; the next life reruns the fire as attempt 3, and the history reads
    [ran 3, failed 1]: attempt 2, which began, is nowhere."""
    path = tmp_path / "keys.db"
    in_file: list[tuple[list[tuple[str, int]], int]] = []

    def run(ctx: Any, key: Any, data: Any) -> None:
        if ctx.fence.attempt == 1:
            raise RuntimeError("the first attempt fails")
        if ctx.fence.attempt == 2:  # (the process is killed during the retry's run)
            abandon(life.keyed._table.store)
            look = sqlite3.connect(path)
            attempts = look.execute("SELECT attempts FROM timerwheel_fires").fetchone()[0]
            look.close()
            in_file.append((_file_history(path), attempts))

    life = Life(SQLiteStore(path), clock, run=run, context=True, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(13)
    life.keyed = None
    gc.collect()
    history, attempts = in_file[0]
    assert attempts == 2  # (the retry's take is committed)
    assert history == [("failed", 1), ("retried", 2)]


# -- KeyInfo.last_run and last_run() --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_keyinfo_last_run_is_the_entry_last_run_returns(kind: str, tmp_path: Path) -> None:
    """Rule: "`last_run(key)` is the newest `ran` or `failed` entry; `KeyInfo.last_run` the latest run
    this KeyedScheduler ended" -- the same run, and the documented example asserts
    `keyed.get(key).last_run == keyed.last_run(key)`.

    The bug this pins: with a wall clock that is not on whole microseconds (any real clock), they differ:
    Runs._ran() keeps KeyInfo.last_run's duration as the raw float (0.33333325...) while the stored
    entry (Journal.note) is in microseconds (0.333333). The documented equality fails for every run
    whose duration is not a whole number of microseconds."""
    clock = ManualClock(0.0, wall=T0 + 0.1234567)

    def work(key: Any, data: Any) -> None:
        clock.set_wall(clock.wall() + 0.3333333)  # (the run takes a third of a second)

    life = Life(_store(kind, tmp_path), clock, run=work)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    try:
        info = life.keyed.get("k")
        assert info is not None and info.last_run is not None
        assert info.last_run == life.keyed.last_run("k")
    finally:
        life.keyed.close()


def test_a_runs_duration_is_the_time_it_took_when_the_wall_clock_steps_during_it() -> None:
    """Rule: a HistoryEntry's `duration` is "the run's, in seconds" (docs/scheduling.md, History;
    HistoryEntry: "duration: the run's, in seconds"). A run that takes 5 s (the monotonic clock moves
    5 s) while NTP steps the wall clock back an hour has a duration of 5 s.

    The bug this pins: Runs._ran() computes it from two wall-clock readings (the end's wall_now minus the
    take's started_at), clamped at 0: the entry says the 5-second run took 0.0 s (and a step forward of an
    hour would make it 3605 s). The `at` of the entry is rightly the wall clock's; the duration is not a
    time of day and should come from the monotonic clock the engine already reads."""
    clock = ManualClock(0.0, wall=T0)

    def work(key: Any, data: Any) -> None:
        clock.advance(5.0)  # (5 s pass)
        clock.set_wall(clock.wall() - 3600.0)  # (an NTP step back during the run)

    life = Life(MemoryStore(), clock, run=work)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(20)
    try:
        ran = life.keyed.history("k")[-1]
        assert ran.outcome == "ran" and ran.duration == pytest.approx(5.0)
    finally:
        life.keyed.close()


# -- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.mark.realtime
@pytest.mark.skipif(postgres_bindir() is None, reason="no PostgreSQL server binaries (initdb, pg_ctl)")
def test_a_shared_keys_entries_queued_on_a_busy_writer_are_not_written_after_its_remove(dsn: str) -> None:
    """Rule: "`remove()` forgets the key's history" (PostgreSQL: "by the process's writer, every
    process's entries in one history"). A key paused and then removed has no history in the database
    once remove() returned and the writer caught up, whatever the writer was busy with.

    The bug this pins: the "paused" entry is queued to the store's writer thread (Journal.note,
    submit_batched), but the remove is committed by the other thread, the changer (SharedKeys.delete:
    journal.changer().submit(store.delete)), which does not wait for the writer's queue. With a writer
    busy (a batch of takes, a slow database: here a half-second job), the delete commits first and the
    writer inserts the removed key's "paused" entry afterwards: the key's history is back in the
    database, and a process that upserts the key again shows it."""
    from .test_shared import Node, sql, wait_for

    node = Node(dsn, collections.Counter(), next_run=lambda now, key, data: None)
    try:
        node.keyed.upsert("k")
        wait_for(lambda: node.keyed.get("k") is not None, 5.0, "the key")
        node.keyed._journal.writer().submit(time.sleep, 0.5)  # (the writer is busy)
        assert node.keyed.pause("k")
        assert node.keyed.remove("k")
        time.sleep(1.0)  # (the writer caught up)
        assert sql(dsn, "SELECT outcome FROM timerwheel_history WHERE key = '\"k\"'") == []
    finally:
        node.close()


@pytest.fixture
def dsn(pg_dsn: str) -> str:
    return pg_dsn
