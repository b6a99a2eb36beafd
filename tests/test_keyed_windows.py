"""Windows and counts of a key (upsert's start=, end=, max_runs=): no fire of a point of its schedule
before start or after end; at most max_runs runs, counted across upserts and lives (KeyInfo.runs), a
rerun of an interrupted fire being the run it was. Time comes from a ManualClock."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from timerwheel import CatchUp, KeyState, MemoryStore, Reschedule, SQLiteStore, StoreError
from timerwheel.testing import ManualClock

from . import test_keyed_pause as pause
from .test_durable import crash, down
from .test_keyed_pause import T0

clock, store = pause.clock, pause.store  # (the fixtures: a ManualClock; a MemoryStore, a SQLiteStore)


class Life(pause.Life):
    """A life (see test_durable) whose runs record (key, start) in seconds after T0, its keys every 10 s
    by default."""


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def starts(life: Life, key: Any = "k") -> list[float]:
    return [t for k, t in life.ran if k == key]


# -- windows ----------------------------------------------------------------------------------------------


def test_a_key_runs_only_the_points_of_its_window(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", start=at(30), end=at(60))
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == at(30)  # the point at start itself
    assert (info.start, info.end, info.max_runs) == (at(30), at(60), None)
    life.keyed.start()
    life.advance(100)
    assert starts(life) == [30.0, 40.0, 50.0, 60.0]  # end included
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED and info.next_run_at is None
    life.keyed.close()


def test_a_window_that_opens_between_points_starts_at_the_first_point_after_it(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", start=at(25))
    life.keyed.start()
    life.advance(45)
    assert starts(life) == [30.0, 40.0]
    life.keyed.close()


def test_a_schedule_counted_from_now_counts_from_the_start_of_its_window(
    store: Any, clock: ManualClock
) -> None:
    def in_a_minute(now: datetime, key: Any, data: Any) -> datetime:
        return now + timedelta(minutes=1)

    life = Life(store, clock, next_run=in_a_minute)
    life.keyed.upsert("k", start=at(600))
    assert life.keyed.get("k").next_run_at == at(660)  # type: ignore[union-attr]
    life.keyed.close()


def test_an_overdue_one_off_before_its_window_runs_when_the_window_opens(clock: ManualClock) -> None:
    def yesterday(now: datetime, key: Any, data: Any) -> datetime | None:
        return at(-86_400)  # (a one-off whose date has passed: run it now, once)

    life = Life(MemoryStore(), clock, next_run=yesterday, reschedule=Reschedule.NONE)
    life.keyed.upsert("k", start=at(50))
    life.keyed.start()
    life.advance(100)
    assert starts(life) == [50.0]
    life.keyed.close()


def test_a_window_that_has_closed_disables_the_key_at_once(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.advance(100)
    life.keyed.upsert("k", end=at(50))
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED
    life.keyed.start()
    life.advance(100)
    assert starts(life) == []
    life.keyed.close()


def test_jittered_fires_keep_to_the_points_of_the_window(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", start=at(20), end=at(50), jitter=5.0)
    life.keyed.start()
    life.advance(100)
    ran = starts(life)
    assert [int(t // 10) * 10 for t in ran] == [20, 30, 40, 50]
    assert all(0 <= t - p < 5 for t, p in zip(ran, (20, 30, 40, 50), strict=True))
    life.keyed.close()


def test_an_upsert_without_a_window_takes_it_away(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", start=at(1000))
    life.keyed.start()
    life.advance(25)
    assert starts(life) == []
    life.keyed.upsert("k")
    life.advance(10)
    assert starts(life) == [30.0]
    info = life.keyed.get("k")
    assert info is not None and info.start is None
    life.keyed.close()


def test_a_window_and_a_count_survive_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k", start=at(10), end=at(1000), max_runs=3)
    life.keyed.start()
    life.advance(25)
    assert starts(life) == [10.0, 20.0]
    life.keyed.close()
    again = Life(SQLiteStore(path), clock)
    info = again.keyed.get("k")
    assert info is not None and (info.start, info.end, info.max_runs, info.runs) == (at(10), at(1000), 3, 2)
    again.keyed.start()
    again.advance(100)
    assert starts(again) == [30.0]
    info = again.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED and info.runs == 3
    again.keyed.close()


# -- counts -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reschedule", [Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN])
def test_a_key_runs_max_runs_times_then_is_disabled(
    store: Any, clock: ManualClock, reschedule: Reschedule
) -> None:
    life = Life(store, clock, reschedule=reschedule)
    life.keyed.upsert("k", max_runs=3)
    life.keyed.start()
    life.advance(100)
    assert starts(life) == [10.0, 20.0, 30.0]
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED and info.next_run_at is None
    assert (info.max_runs, info.runs) == (3, 3)
    life.keyed.close()


def test_the_count_of_runs_is_kept_across_upserts_and_forgotten_by_remove(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", max_runs=3)
    life.keyed.start()
    life.advance(25)
    assert starts(life) == [10.0, 20.0]
    life.keyed.upsert("k", {"v": 2}, max_runs=3)  # (a program that upserts its keys again at each start)
    life.advance(100)
    assert starts(life) == [10.0, 20.0, 30.0]  # three in all, not three more
    life.keyed.upsert("k", max_runs=5)  # two more
    life.advance(100)
    assert starts(life) == [10.0, 20.0, 30.0, 130.0, 140.0]
    assert life.keyed.get("k").runs == 5  # type: ignore[union-attr]
    life.keyed.remove("k")
    life.keyed.upsert("k", max_runs=1)
    assert life.keyed.get("k").runs == 0  # type: ignore[union-attr]
    life.advance(10)
    assert starts(life)[-1] == 230.0
    life.keyed.close()


def test_runs_are_counted_without_a_limit_too(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(30)
    assert life.keyed.get("k").runs == 3  # type: ignore[union-attr]
    life.keyed.close()


def test_a_trigger_runs_a_key_that_ran_its_max_runs_and_is_counted(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", max_runs=1)
    life.keyed.start()
    life.advance(50)
    assert starts(life) == [10.0]
    assert life.keyed.trigger("k") is not None
    life.advance(0)
    assert starts(life) == [10.0, 50.0]
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED and info.runs == 2
    life.keyed.close()


def test_a_trigger_counts_toward_max_runs(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", max_runs=2)
    life.keyed.start()
    life.advance(5)
    life.keyed.trigger("k")
    life.advance(100)
    assert starts(life) == [5.0, 10.0]
    life.keyed.close()


def test_a_catch_up_runs_no_more_fires_than_the_runs_left(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL)
    life.keyed.upsert("k", max_runs=4)
    life.keyed.start()
    life.advance(10)
    life.keyed.close()
    down(clock, 60)  # the fires of 20 to 70 missed
    again = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL)
    again.keyed.start()
    again.advance(100)
    assert [round(t) for t in starts(again)] == [70, 70, 70]  # the three runs left, at once
    assert again.missed == [("k", 3, 50.0, 70.0)]
    info = again.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED and info.runs == 4
    again.keyed.close()


def test_a_rerun_of_an_interrupted_fire_is_the_run_it_was_not_one_more(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "keys.db"
    first = Life(SQLiteStore(path), clock)

    def dies_mid_run(key: Any, data: Any) -> None:
        crash(first)
        raise RuntimeError("the process is killed during this run")

    first.keyed._runs._run = dies_mid_run  # type: ignore[method-assign]
    first.keyed.upsert("k", max_runs=2)
    first.keyed.start()
    first.advance(10)
    down(clock, 1)
    second = Life(SQLiteStore(path), clock)
    assert second.keyed.get("k").runs == 1  # type: ignore[union-attr]
    second.keyed.start()
    second.advance(100)
    assert starts(second) == [11.0, 20.0]  # the rerun of 10, then one more: two runs in all
    assert second.keyed.get("k").runs == 2  # type: ignore[union-attr]
    second.keyed.close()


def test_a_stored_plan_beyond_max_runs_does_not_run(tmp_path: Path, clock: ManualClock) -> None:
    """A file whose row plans a fire of a key that has run its max_runs (written by another program, or
    by a version that did not count): the fire does not run, and the key is DISABLED."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k", max_runs=2)
    life.keyed.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE timerwheel_keys SET runs = 2")
    db.commit()
    db.close()
    again = Life(SQLiteStore(path), clock)
    again.keyed.start()
    again.advance(100)
    assert starts(again) == []
    info = again.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED
    again.keyed.close()
    row = next(iter(SQLiteStore(path).load()[0]))
    assert (row.state, row.next_run_at, row.runs) == ("disabled", None, 2)


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"start": datetime(2025, 1, 1)}, ValueError, "start must be an aware"),
        ({"end": "2025-01-01"}, TypeError, "end must be an aware datetime"),
        ({"start": at(100), "end": at(50)}, ValueError, "end .* must not be before start"),
        ({"max_runs": 0}, ValueError, "max_runs must be >= 1"),
        ({"max_runs": True}, TypeError, "max_runs must be an int"),
        ({"max_runs": 2.0}, TypeError, "max_runs must be an int"),
        ({"end": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))}, ValueError, "end"),
    ],
)
def test_a_bad_window_or_count_names_the_argument_and_changes_nothing(
    store: Any, clock: ManualClock, kwargs: dict[str, Any], error: type, match: str
) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", {"v": 1}, max_runs=7)
    before = life.keyed.get("k")
    with pytest.raises(error, match=match):
        life.keyed.upsert("k", {"v": 2}, **kwargs)
    assert life.keyed.get("k") == before
    life.keyed.close()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ('{"max_runs":0}', "its max_runs is 0"),
        ('{"max_runs":"3"}', "its max_runs is '3'"),
        ('{"start":20,"end":10}', "its end .* is before its start"),
        ('{"start":1.5}', "its start is 1.5"),
    ],
)
def test_a_stored_window_or_count_that_cannot_be_read_is_a_store_error_naming_the_row(
    tmp_path: Path, clock: ManualClock, options: str, match: str
) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k")
    life.keyed.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE timerwheel_keys SET options = ?", (options,))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=f"(?s)keys.db.*key '\"k\"'.*{match}"):
        Life(SQLiteStore(path), clock)


def test_a_stored_count_that_is_not_a_count_is_a_store_error(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k")
    life.keyed.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE timerwheel_keys SET runs = -1")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="its runs is -1"):
        Life(SQLiteStore(path), clock)


def test_an_overdue_one_off_does_not_fire_after_its_window_closed(store: Any, clock: ManualClock) -> None:
    """Now is T0+100; the window is [T0+50, T0+60] (closed); the one-off's date (T0+20) is before the
    window: nothing runs, the key is DISABLED (it showed next_run_at T0+20 and ran at T0+100)."""

    def one_off(now: datetime, key: Any, data: Any) -> datetime:
        return at(20)

    life = Life(store, clock, next_run=one_off, reschedule=Reschedule.NONE)
    life.advance(100)
    life.keyed.upsert("k", start=at(50), end=at(60))
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED, info
    life.keyed.start()
    life.advance(100)
    assert starts(life) == []
    life.keyed.close()


def test_a_trigger_that_takes_the_last_run_disables_the_key(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", max_runs=2)
    life.keyed.start()
    life.advance(12)  # ran at 10 (runs=1)
    life.keyed.trigger("k")  # restart=False: runs at 12 (runs=2 = max_runs)
    life.advance(0)
    info = life.keyed.get("k")
    assert info is not None and info.runs == 2
    # it plans no more fires: DISABLED (it kept the plan the trigger found, a fire that never ran)
    assert info.state is KeyState.DISABLED and info.next_run_at is None, info
    life.keyed.close()


def test_a_key_that_ran_its_max_runs_is_not_reported_missed_after_a_restart(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k", max_runs=2)
    life.keyed.start()
    life.advance(12)
    life.keyed.trigger("k")
    life.advance(0)  # runs == max_runs: the key would never run again
    life.keyed.close()
    down(clock, 100)
    again = Life(SQLiteStore(path), clock)
    again.keyed.start()
    again.advance(100)
    assert starts(again) == []
    assert again.missed == []  # (it was told of the fire of 20, which could never run)


def test_a_key_that_ran_its_max_runs_is_not_reported_missed_after_a_resume(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", max_runs=2)
    life.keyed.start()
    life.advance(12)
    life.keyed.trigger("k")
    life.advance(0)
    life.keyed.pause("k")
    life.advance(30)
    life.keyed.resume("k")
    life.advance(100)
    assert starts(life) == [10.0, 12.0]
    assert life.missed == []


def test_the_windows_of_removed_keys_are_not_kept_for_ever(clock: ManualClock) -> None:
    """A key's own options are interned (one object per distinct set) only without a window or a count:
    those are a key's own, and a service that upserts and removes keys with windows of their own grew
    without bound (every distinct set was kept for the life of the process)."""
    from timerwheel._keyed import keys

    life = Life(MemoryStore(), clock)
    before = len(keys._INTERNED)
    for i in range(2000):
        life.keyed.upsert(i, start=at(1000 + i))
        life.keyed.remove(i)
    assert life.keyed.snapshot() == {}
    assert len(keys._INTERNED) - before < 100, len(keys._INTERNED) - before
    life.keyed.close()


def test_a_pause_and_a_resume_keep_the_count_of_runs_in_the_file(tmp_path: Path, clock: ManualClock) -> None:
    """The row a pause (or a resume) writes carries the key's count of runs: it was written as 0, and a
    key paused, then loaded by the next life, ran its max_runs again (found by the simulation, sqlite seed
    930093)."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k", max_runs=3)
    life.keyed.start()
    life.advance(25)
    life.keyed.pause("k")
    life.keyed.close()
    again = Life(SQLiteStore(path), clock)
    assert again.keyed.get("k").runs == 2  # type: ignore[union-attr]
    again.keyed.start()
    again.keyed.resume("k")
    again.keyed.close()
    third = Life(SQLiteStore(path), clock)
    third.keyed.start()
    third.advance(100)
    assert len(starts(third)) == 1  # (the one run left: the resume's catch-up)
    assert third.keyed.get("k").runs == 3  # type: ignore[union-attr]
    third.keyed.close()
