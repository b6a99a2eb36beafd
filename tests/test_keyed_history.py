"""A key's history (KeyedScheduler.history, last_run, KeyInfo.last_run): what became of its fires and
why, newest first, kept by its store to the newest `history` entries (a SQLite file across restarts).
Time comes from a ManualClock."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    CatchUp,
    HistoryEntry,
    JobContext,
    KeyedScheduler,
    MemoryStore,
    Overlap,
    Retry,
    Scheduler,
    SQLiteStore,
    StoreError,
)
from timerwheel._stores import abandon
from timerwheel.testing import ManualClock

from . import test_keyed_pause as pause
from .test_durable import down
from .test_keyed_pause import T0, every_10s
from .test_keyed_retry import ALife

clock, store = pause.clock, pause.store  # (the fixtures: a ManualClock; a MemoryStore, a SQLiteStore)


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


class Life(pause.Life):
    """A life whose keys fire every 10 s; a run lasts data["d"] seconds of the clock (a ManualClock run
    moves it) and raises if data["x"]."""

    def __init__(self, store: Any, clock: ManualClock, **kwargs: Any) -> None:
        kwargs.setdefault("run", self._work)
        super().__init__(store, clock, **kwargs)

    def _work(self, key: Any, data: Any) -> None:
        data = data or {}
        if data.get("d"):  # (the run takes that long: the wall clock says so)
            self.clock.set_wall(self.clock.wall() + data["d"])
        if data.get("x"):
            raise RuntimeError("it fails")


def outcomes(entries: list[HistoryEntry]) -> list[tuple[float | None, str, int]]:
    return [
        (None if e.scheduled_for is None else e.scheduled_for.timestamp() - T0, e.outcome, e.attempt)
        for e in entries
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_runs_are_kept_newest_first_with_their_attempt_duration_and_error(kind: str, tmp_path: Path) -> None:
    """The run of 10 takes 2 s and returns; the run of 20 takes 1 s and raises."""
    made = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "keys.db")
    life = ALife(made, {(10.0, 1): (2.0, False), (20.0, 1): (1.0, True)})
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(25)
    try:
        entries = life.keyed.history("k")
        assert outcomes(entries) == [(20.0, "failed", 1), (10.0, "ran", 1)]
        failed, ran = entries
        assert failed.at == at(21) and failed.duration == 1.0
        assert failed.error == "RuntimeError: fire 20.0 attempt 1 fails"
        assert ran.at == at(12) and ran.duration == 2.0 and ran.error is None
        assert life.keyed.last_run("k") == failed
        info = life.keyed.get("k")
        assert info is not None and info.last_run == failed
        assert life.keyed.history("never") == [] and life.keyed.last_run("never") is None
    finally:
        life.close()


def test_a_store_keeps_the_newest_history_entries_of_each_key(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, history=3)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()
    life.advance(50)
    for key in ("a", "b"):
        assert [s for s, _, _ in outcomes(life.keyed.history(key))] == [50.0, 40.0, 30.0]
    life.keyed.close()


def test_history_zero_keeps_none_but_keyinfo_still_shows_the_last_run(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, history=0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    assert life.keyed.history("k") == []
    last = life.keyed.last_run("k")
    assert last is not None and last.outcome == "ran" and last.scheduled_for == at(10)
    life.keyed.close()


def test_remove_forgets_a_keys_history(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    life.keyed.remove("k")
    life.keyed.upsert("k")
    assert life.keyed.history("k") == []
    life.keyed.close()


def test_a_skipped_fire_is_in_the_history(tmp_path: Path) -> None:
    """Overlap.SKIP: the run of 10 goes until 25, the fire of 20 is skipped."""
    life = ALife(SQLiteStore(tmp_path / "keys.db"), {(10.0, 1): (15.0, False)}, overlap=Overlap.SKIP)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(31)
    try:
        # (newest first, by when each was decided: the run of 10 ended at 25, after the skip at 20)
        assert outcomes(life.keyed.history("k")) == [(30.0, "ran", 1), (10.0, "ran", 1), (20.0, "skipped", 0)]
        skipped = life.keyed.history("k")[2]
        assert skipped.at == at(20) and skipped.error == "a run of the key was going"
    finally:
        life.close()


def test_a_pause_and_the_fires_it_missed_are_in_the_history(store: Any, clock: ManualClock) -> None:
    """Paused at 31 (it holds back the fire of 40), resumed at 61: the fires of 40 and 50 fell due and
    are missed (catch_up=ONCE runs the latest, 60)."""
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(31)
    life.keyed.pause("k")
    life.advance(30)
    life.keyed.resume("k")
    life.advance(0)
    found = outcomes(life.keyed.history("k"))
    assert found[:4] == [(60.0, "ran", 1), (50.0, "missed", 0), (40.0, "missed", 0), (40.0, "paused", 0)]
    assert life.keyed.history("k")[1].error == "missed while paused"
    life.keyed.close()


def test_a_retry_and_a_late_fire_are_in_the_history(clock: ManualClock) -> None:
    life = Life(
        MemoryStore(),
        clock,
        run=lambda ctx, key, data: _fails_once(ctx),
        context=True,
        retry=Retry(3, backoff=2.0),
        overlap=Overlap.QUEUE_ONE,
        late_grace=1.0,
    )
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(15)
    found = outcomes(life.keyed.history("k"))
    assert found == [(10.0, "ran", 2), (10.0, "retried", 2), (10.0, "failed", 1)]
    retried = life.keyed.history("k")[1]
    assert retried.at == at(12) and retried.error == "RuntimeError: the first attempt fails"
    life.keyed.close()


def _fails_once(ctx: JobContext) -> None:
    if ctx.fence.attempt == 1:  # type: ignore[union-attr]
        raise RuntimeError("the first attempt fails")


def test_a_fire_upserted_before_it_began_is_superseded(clock: ManualClock) -> None:
    """Both keys' fires of 10 are handed over in one drain; the run of a's upserts b before b's begins."""
    life = Life(MemoryStore(), clock)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()

    def run(key: Any, data: Any) -> None:
        if key == "a" and not data:
            life.keyed.upsert("b", {"v": 1})  # (b's fire of 10 is handed over already: superseded)

    life.keyed._runs._run = run
    life.advance(10)
    found = outcomes(life.keyed.history("b"))
    assert found == [(10.0, "superseded", 0)]  # (its generation's fire; the new one's first is at 20)
    assert life.keyed.history("b")[0].error == "upserted before it began"
    life.keyed.close()


def test_a_files_history_survives_a_restart_and_a_runs_end_is_written_with_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The entry of a run's end is written in the transaction that records the end: a copy of the file
    taken right after the end (as a kill would leave it) has both."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    abandon(life.keyed._table.store)  # (killed: nothing more is written)
    look = sqlite3.connect(path)
    try:
        rows = look.execute("SELECT outcome, scheduled_for FROM timerwheel_history").fetchall()
        finished = look.execute("SELECT finished_at FROM timerwheel_fires").fetchall()
    finally:
        look.close()
    assert rows == [("ran", round((T0 + 10) * 1e6))] and finished[0][0] is not None
    down(clock, 5)
    again = Life(SQLiteStore(path), clock)
    again.keyed.start()
    assert outcomes(again.keyed.history("k")) == [(10.0, "ran", 1)]
    again.keyed.close()


def test_a_history_entry_a_file_cannot_read_is_a_store_error_naming_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    life.keyed.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE timerwheel_history SET outcome = 'exploded'")
    db.commit()
    db.close()
    again = Life(SQLiteStore(path), clock)
    with pytest.raises(
        StoreError, match=r"keys\.db.*key 'k' in timerwheel_history: its outcome is 'exploded'"
    ):
        again.keyed.history("k")
    again.keyed.close()


def test_a_bad_history_names_the_argument() -> None:
    sched = Scheduler(ManualClock(0.0, wall=T0))
    with pytest.raises(TypeError, match="history must be an int"):
        KeyedScheduler(sched, every_10s, lambda k, d: None, history=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="history must be >= 0"):
        KeyedScheduler(sched, every_10s, lambda k, d: None, history=-1)


def test_missed_fires_of_a_long_downtime_keep_only_the_newest_entries(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.SKIP, history=5)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    life.keyed.close()
    down(clock, 1000)
    again = Life(SQLiteStore(path), clock, catch_up=CatchUp.SKIP, history=5)
    again.keyed.start()
    found = outcomes(again.keyed.history("k"))
    assert [o for _, o, _ in found] == ["missed"] * 5
    assert [s for s, _, _ in found] == [1010.0, 1000.0, 990.0, 980.0, 970.0]
    again.keyed.close()
