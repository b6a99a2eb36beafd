"""Running a key now (KeyedScheduler.trigger): a fire of the key at the wall clock's now, run at once,
without moving the key's plan (or, restart=True, planning from it), under the key's overlap policy or
the one given for it; stored, so that a restart runs a trigger that did not run, and runs one that ran
never again. The shared store's triggers are in test_shared.

Time comes from a ManualClock (runs inline) or a VirtualTimeLoop (runs that go on while fires come)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import CatchUp, JobContext, KeyState, Overlap, Reschedule, SQLiteStore, StoreError
from timerwheel.testing import ManualClock

from . import test_keyed_pause as pause
from .test_keyed_overlap import Life as Runs
from .test_keyed_pause import T0

clock, store = pause.clock, pause.store  # (the fixtures: a ManualClock; a MemoryStore, a SQLiteStore)


class Life(pause.Life):
    """A life (see test_durable) whose runs record (key, scheduled_for, start) in seconds after T0."""

    def __init__(self, store: Any, clock: ManualClock, **kwargs: Any) -> None:
        super().__init__(store, clock, run=self._run_ctx, context=True, **kwargs)

    def _run_ctx(self, ctx: JobContext, key: Any, data: Any) -> None:
        self.ran.append((key, ctx.scheduled_for - T0, self.clock.wall() - T0))  # type: ignore[arg-type]

    def next_run(self, key: Any) -> float | None:
        info = self.keyed.get(key)
        assert info is not None
        return None if info.next_run_at is None else info.next_run_at.timestamp() - T0


def ten_after(now: datetime, key: Any, data: Any) -> datetime:
    """next_run: 10 s after now (a cadence counted from each run)."""
    return now + timedelta(seconds=10)


@pytest.mark.parametrize("reschedule", [Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN, Reschedule.NONE])
def test_trigger_runs_the_key_now_and_keeps_its_plan(
    store: Any, clock: ManualClock, reschedule: Reschedule
) -> None:
    life = Life(store, clock, next_run=ten_after, reschedule=reschedule)
    life.keyed.upsert("k")  # (first run at 10)
    life.keyed.start()
    life.advance(13)
    at = life.keyed.trigger("k")
    assert at == datetime.fromtimestamp(T0 + 13, UTC)
    life.advance(0)
    assert life.ran[-1] == ("k", 13.0, 13.0)  # its run's ctx.scheduled_for is what trigger() returned
    expected = None if reschedule is Reschedule.NONE else 20.0
    assert life.next_run("k") == expected  # the plan it had, not 13 + 10
    life.advance(10)
    assert [at for _, at, _ in life.ran] == [10.0, 13.0] + ([] if expected is None else [20.0])
    life.keyed.close()


@pytest.mark.parametrize("reschedule", [Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN])
def test_trigger_with_restart_plans_from_the_triggered_run(
    store: Any, clock: ManualClock, reschedule: Reschedule
) -> None:
    life = Life(store, clock, next_run=ten_after, reschedule=reschedule)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(13)
    life.keyed.trigger("k", restart=True)
    life.advance(0)
    assert life.next_run("k") == 23.0  # the cadence counted from the triggered run
    life.advance(10)
    assert [at for _, at, _ in life.ran] == [10.0, 13.0, 23.0]
    life.keyed.close()


def test_a_second_trigger_before_the_first_ran_is_the_same_one(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    clock.advance(3)
    first = life.keyed.trigger("k")
    clock.advance(1)
    assert life.keyed.trigger("k") == first  # (not run yet: that one)
    life.advance(0)
    assert life.ran == [("k", 3.0, 4.0)]
    assert life.keyed.trigger("k") == datetime.fromtimestamp(T0 + 4, UTC)  # (ran: a new one)
    life.advance(0)
    assert [at for _, at, _ in life.ran] == [3.0, 4.0]
    life.keyed.close()


def test_a_disabled_or_invalid_key_runs_once_and_stays_as_it_was(store: Any, clock: ManualClock) -> None:
    def plan(now: datetime, key: Any, data: Any) -> datetime | None:
        if key == "bad":
            raise ValueError("no plan")
        return None

    life = Life(store, clock, next_run=plan)
    life.keyed.upsert("off")
    life.keyed.upsert("bad")
    life.keyed.start()
    life.advance(5)
    for key in ("off", "bad"):
        life.keyed.trigger(key)
    life.advance(1)
    assert sorted(k for k, _, _ in life.ran) == ["bad", "off"]
    assert life.keyed.get("off").state is KeyState.DISABLED  # type: ignore[union-attr]
    bad = life.keyed.get("bad")
    assert bad is not None and bad.state is KeyState.INVALID and "no plan" in (bad.last_error or "")
    life.keyed.close()


def test_unknown_or_paused_keys_are_not_triggered_and_bad_calls_are_refused(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    with pytest.raises(RuntimeError, match="start"):
        life.keyed.trigger("k")
    life.keyed.start()
    assert life.keyed.trigger("nothing") is None
    life.keyed.pause("k")
    assert life.keyed.trigger("k") is None
    life.keyed.resume("k")
    with pytest.raises(TypeError, match="restart must be a bool"):
        life.keyed.trigger("k", restart=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="overlap must be an Overlap"):
        life.keyed.trigger("k", overlap="skip")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hashable"):
        life.keyed.trigger(["k"])  # type: ignore[arg-type]
    life.advance(5)
    assert life.ran == []  # (nothing was triggered)
    life.keyed.close()
    with pytest.raises(RuntimeError, match="closed"):
        life.keyed.trigger("k")


def test_an_upsert_or_a_pause_drops_a_trigger_not_run_yet(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()
    clock.advance(3)
    life.keyed.trigger("a")
    life.keyed.trigger("b")
    life.keyed.upsert("a", "new data")
    life.keyed.pause("b")
    life.advance(0)
    assert life.ran == []
    life.keyed.resume("b")
    life.advance(0)
    assert life.ran == []  # (its trigger was dropped: nothing missed either)
    life.advance(7)
    assert sorted(k for k, _, _ in life.ran) == ["a", "b"]  # (on schedule, at 10)
    life.keyed.close()


def test_a_trigger_the_file_cannot_write_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    store = SQLiteStore(tmp_path / "keys.db")
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    save = store.save

    def fails(*args: Any) -> None:
        raise StoreError("the disk is full")

    store.save = fails  # type: ignore[method-assign]
    clock.advance(3)
    with pytest.raises(StoreError, match="disk is full"):
        life.keyed.trigger("k")
    store.save = save  # type: ignore[method-assign]
    life.advance(0)
    assert life.ran == [] and life.next_run("k") == 10.0
    life.keyed.close()


def test_a_stored_trigger_runs_after_a_restart_and_once(tmp_path: Path, clock: ManualClock) -> None:
    """A trigger committed and not run (the process stopped first) runs when the file is opened again;
    one that ran does not run again."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, next_run=lambda now, key, data: now + timedelta(hours=1))
    life.keyed.upsert("k")
    life.keyed.start()
    clock.advance(3)
    life.keyed.trigger("k")
    life.keyed.close()  # (before it ran)
    assert life.ran == []
    again = Life(SQLiteStore(path), clock, next_run=lambda now, key, data: now + timedelta(hours=1))
    again.keyed.start()
    again.advance(1)
    assert again.ran == [("k", 3.0, 3.0)]
    again.keyed.close()
    third = Life(SQLiteStore(path), clock, next_run=lambda now, key, data: now + timedelta(hours=1))
    third.keyed.start()
    third.advance(1)
    assert third.ran == []
    third.keyed.close()


def test_a_trigger_during_a_run_follows_the_keys_overlap_or_the_one_given() -> None:
    life = Runs(overlap=Overlap.SKIP)  # (BEFORE_RUN; runs go until let go)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)  # the run of 10 goes on
    life.keyed.trigger("k")
    life.advance(1)
    assert life.running() == [("k", 10.0)] and life.keyed.stats().skipped == 1
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == datetime.fromtimestamp(T0 + 20, UTC)  # (kept)
    at = life.keyed.trigger("k", overlap=Overlap.ALLOW)
    assert at is not None
    life.advance(1)
    assert life.running() == [("k", 10.0), ("k", at.timestamp() - T0)]
    life.close()


def test_a_trigger_waits_for_the_run_under_queue_one_and_the_plan_goes_on() -> None:
    life = Runs(overlap=Overlap.QUEUE_ONE, reschedule=Reschedule.AFTER_FINISH)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)
    at = life.keyed.trigger("k")
    assert at == datetime.fromtimestamp(T0 + 12, UTC)
    life.advance(3)
    assert life.running() == [("k", 10.0)]
    life.finish("k", 10.0)
    life.advance(1)
    assert life.running() == [("k", 12.0)]  # (at the end of the run it waited for)
    life.finish("k", 12.0)
    life.advance(10)
    assert [at for _, at, _ in life.started] == [10.0, 12.0, 20.0]
    life.close()


# -- a trigger among the key's other fires -------------------------------------------------------------------


@pytest.mark.parametrize("reschedule", [Reschedule.BEFORE_RUN, Reschedule.AFTER_FINISH])
def test_a_trigger_while_the_keys_fire_is_handed_over_is_that_fire(
    store: Any, clock: ManualClock, reschedule: Reschedule
) -> None:
    """A trigger that came as the key's due fire waited to start (handed over: a run of another key
    went first) kept that fire as the plan to go back to: it ran again after the trigger."""
    keyed: list[Any] = []

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        life.ran.append((key, ctx.scheduled_for - T0, clock.wall() - T0))  # type: ignore[arg-type]
        if len(life.ran) == 1:
            clock.advance(0.5)  # (the other key's fire of 10 is handed over, not started)
            keyed[0].trigger("b" if key == "a" else "a")

    life = Life(store, clock, reschedule=reschedule)
    life.keyed._runs._run = run  # type: ignore[attr-defined]
    keyed.append(life.keyed)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()
    life.advance(15)
    fires = [(k, at) for k, at, _ in life.ran]
    assert sorted(fires) == [("a", 10.0), ("b", 10.0)]  # (the trigger was the fire handed over: once)
    life.keyed.close()


def test_a_trigger_while_the_keys_fire_is_due_is_that_fire(store: Any, clock: ManualClock) -> None:
    """The key's fire of 10 was due (not drained yet) when trigger() came at 10.5: the trigger ran
    first, then the fire of 10 was refused by the file (a later fire in its log) and lost, not run nor
    reported; in memory it ran after the trigger, its time going back."""
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    clock.advance(10.5)  # (due; nothing drained it yet)
    assert life.keyed.trigger("k") == datetime.fromtimestamp(T0 + 10, UTC)
    life.advance(10)
    assert [at for _, at, _ in life.ran] == [10.0, 20.0]
    life.keyed.close()


@pytest.mark.parametrize("catch_up", [CatchUp.ALL, CatchUp.ONCE, CatchUp.SKIP])
def test_a_stored_trigger_runs_in_its_place_among_the_catch_up_after_a_restart(
    tmp_path: Path, clock: ManualClock, catch_up: CatchUp
) -> None:
    """A trigger stored at 3 s, the process down to 35 s (the fires of 10, 20, 30 missed): the next life
    runs it, in the order of time, before the catch-up's fires (it was queued after them: their take
    made the file refuse it, and the row kept it, with a next run in the past)."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, catch_up=catch_up)
    life.keyed.upsert("k")
    life.keyed.start()
    clock.advance(3)
    life.keyed.trigger("k")
    life.keyed.close()
    clock.set_wall(T0 + 35)
    again = Life(SQLiteStore(path), clock, catch_up=catch_up)
    again.keyed.start()
    again.advance(1)
    expected = {CatchUp.ALL: [3.0, 10.0, 20.0, 30.0], CatchUp.ONCE: [3.0, 30.0], CatchUp.SKIP: [3.0]}
    assert [at for _, at, _ in again.ran] == expected[catch_up]
    again.keyed.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT triggered FROM timerwheel_keys").fetchall() == [(None,)]
    db.close()


def test_a_trigger_after_the_wall_clock_stepped_back_runs_now(store: Any, clock: ManualClock) -> None:
    """The key ran its fire of 10; the wall clock steps back to 7: a trigger is a new fire (just after the
    latest one that started), and runs at once; it did not run (a fire at or after it had run)."""
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)
    clock.set_wall(T0 + 7)
    at = life.keyed.trigger("k")
    assert at is not None and at.timestamp() > T0 + 10
    life.advance(0.5)
    assert len(life.ran) == 2 and life.ran[1][1] == at.timestamp() - T0
    life.keyed.close()


def test_a_skipped_trigger_leaves_the_key_as_it_found_it() -> None:
    """Nothing ran: under AFTER_FINISH a key whose run goes keeps no next run (its end plans it: the
    skipped trigger planned one, and every fire during the run came, to be skipped); with restart=True,
    the plan does not move."""
    life = Runs(overlap=Overlap.SKIP, reschedule=Reschedule.AFTER_FINISH)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)  # the run of 10 goes on
    life.keyed.trigger("k")
    life.advance(40)
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at is None and life.keyed.stats().skipped == 1
    life.close()
    life = Runs(overlap=Overlap.SKIP, next_run=ten_after)  # (BEFORE_RUN)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)
    life.keyed.trigger("k", restart=True)
    life.advance(0.5)
    assert life.keyed.stats().skipped == 1
    assert life.keyed.get("k").next_run_at == datetime.fromtimestamp(T0 + 20, UTC)  # type: ignore[union-attr]
    life.close()


def test_a_trigger_that_comes_as_the_keys_fire_is_due_is_kept_until_that_fire_is_taken(
    tmp_path: Path, clock: ManualClock
) -> None:
    """At 10 the key's fire is due and not taken yet: a trigger then runs for it (it returns 10). The
    process dies before the take. The next life, with catch_up=SKIP, reports the fires it missed and
    runs none of them; but the trigger returned, so the fire of 10 runs, for it (the trigger used to
    be kept nowhere: lost with the process)."""
    from .test_durable import crash, down

    path = tmp_path / "keys.db"
    first = Life(SQLiteStore(path), clock, catch_up=CatchUp.SKIP)
    first.keyed.upsert("k")
    first.keyed.start()
    clock.advance(10)  # (due; nothing ran it yet)
    when = first.keyed.trigger("k")
    assert when is not None and when.timestamp() - T0 == 10.0
    crash(first)
    down(clock, 5)
    again = Life(SQLiteStore(path), clock, catch_up=CatchUp.SKIP)
    again.keyed.start()
    again.advance(0)
    assert [(key, fire) for key, fire, _ in again.ran] == [("k", 10.0)]
    assert again.missed == []  # (the fire of 10 runs for the trigger: it is not missed)
    again.keyed.close()
