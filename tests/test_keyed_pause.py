"""Pausing and resuming keys (KeyedScheduler.pause, resume, pause_all, resume_all): a paused key runs
nothing and keeps its data, generation and plan; resuming it treats the pause as downtime, with the same
catch-up rules as a restart. The pause is stored: a SQLite file keeps it across restarts, and with a
PostgreSQL store every process sees it (the database refuses a paused key's fires).

Time comes from a ManualClock; the shared tests run two KeyedSchedulers on a real PostgreSQL."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    CatchUp,
    KeyedScheduler,
    KeyState,
    MemoryStore,
    Reschedule,
    SQLiteStore,
    StoreError,
    ThreadedScheduler,
)
from timerwheel._stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA
from timerwheel.testing import ManualClock, wait_until_idle

from . import test_durable as durable

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()


def every_10s(now: datetime, key: Any, data: Any) -> datetime:
    """next_run: the next multiple of 10 s (after T0) after now."""
    seconds = now.timestamp() - T0
    return datetime.fromtimestamp(T0 + (seconds // 10 + 1) * 10, UTC)


class Life(durable.Life):
    """A life (see test_durable) on `store`, its keys every 10 s by default."""

    def __init__(self, store: Any, clock: ManualClock, **kwargs: Any) -> None:
        kwargs.setdefault("next_run", every_10s)
        super().__init__(store, clock, **kwargs)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0, wall=T0)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "keys.db")


def test_a_paused_key_runs_nothing_and_shows_paused(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", {"v": 1})
    life.keyed.start()
    life.advance(10)
    assert life.ran == [("k", 10.0)]
    generation = life.keyed.get("k").generation  # type: ignore[union-attr]
    assert life.keyed.pause("k") is True
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PAUSED and info.next_run_at is None
    assert info.data == {"v": 1} and info.generation == generation
    assert life.states[-1] == ("k", KeyState.PENDING, KeyState.PAUSED)
    life.advance(100)
    assert life.ran == [("k", 10.0)]  # nothing while paused
    assert life.keyed.pause("k") is True and life.states[-1][2] is KeyState.PAUSED  # (again: nothing)
    assert life.keyed.pause("unknown") is False and life.keyed.resume("unknown") is False
    life.keyed.close()


def test_resume_treats_the_pause_as_downtime_catch_up_once(store: Any, clock: ManualClock) -> None:
    """Paused from 10 to 45 s: the fire at 20 it held back and those at 30 and 40 fell due. With
    catch_up=ONCE (the default) the latest runs at resume and the others are reported missed."""
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    life.keyed.pause("k")
    life.advance(35)
    assert life.keyed.resume("k") is True
    assert life.states[-1] == ("k", KeyState.PAUSED, KeyState.PENDING)
    life.advance(0)
    assert life.ran == [("k", 10.0), ("k", 45.0)]  # the fire of 40, run at once
    assert life.missed == [("k", 2, 20.0, 30.0)]
    assert life.keyed.stats().missed == 2 and life.keyed.stats().caught_up == 1
    life.advance(5)
    assert life.ran[-1] == ("k", 50.0)  # then on schedule
    life.keyed.close()


def test_resume_with_catch_up_skip_runs_nothing_missed(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, catch_up=CatchUp.SKIP)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.pause("k")
    life.advance(35)
    life.keyed.resume("k")
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == datetime.fromtimestamp(T0 + 40, UTC)
    life.advance(5)
    assert life.ran == [("k", 40.0)] and life.missed == [("k", 3, 10.0, 30.0)]
    life.keyed.close()


def test_a_resume_within_the_same_period_runs_the_held_fire_on_time(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.pause("k")
    life.advance(5)
    life.keyed.resume("k")
    life.advance(5)
    assert life.ran == [("k", 10.0)] and life.missed == []
    life.keyed.close()


def test_an_upsert_of_a_paused_key_changes_its_data_and_leaves_it_paused(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", {"v": 1})
    life.keyed.start()
    life.keyed.pause("k")
    life.keyed.upsert("k", {"v": 2})
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PAUSED and info.data == {"v": 2}
    life.advance(30)
    assert life.ran == []
    life.keyed.resume("k")
    life.advance(0)
    assert life.ran == [("k", 30.0)]
    life.keyed.close()


def test_pause_all_and_resume_all_count_the_keys_they_change(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    for key in "abc":
        life.keyed.upsert(key)
    life.keyed.start()
    life.keyed.pause("a")
    assert life.keyed.pause_all() == 2  # (a was paused already)
    assert {k: i.state for k, i in life.keyed.snapshot().items()} == dict.fromkeys("abc", KeyState.PAUSED)
    life.advance(10)
    assert life.ran == []
    life.keyed.upsert("d")  # (added later: not paused)
    assert life.keyed.resume_all() == 3
    life.advance(0)
    assert sorted(life.ran) == [("a", 10.0), ("b", 10.0), ("c", 10.0)]  # (held back since 10)
    life.advance(10)
    assert sorted(life.ran[3:]) == [("a", 20.0), ("b", 20.0), ("c", 20.0), ("d", 20.0)]
    assert life.keyed.resume_all() == 0
    life.keyed.close()


def test_a_run_going_on_when_its_key_is_paused_ends_and_the_key_is_not_armed(clock: ManualClock) -> None:
    """The pause does not cancel a run; the key is planned at its end, and not armed."""
    box: dict[str, Any] = {}

    def run(key: Any, data: Any) -> None:
        box["keyed"].pause(key)  # (from inside its own run)
        box["state"] = box["keyed"].get(key).state

    life = Life(MemoryStore(), clock, run=run)
    box["keyed"] = life.keyed
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    assert box["state"] is KeyState.PAUSED
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PAUSED and not info.running
    life.advance(30)
    life.keyed.resume("k")  # the fire of 20 held back; 30 and 40 fell due
    life.advance(0)
    assert life.keyed.stats().started == 2 and life.missed == [("k", 2, 20.0, 30.0)]
    life.keyed.close()


@pytest.mark.parametrize("reschedule", [Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN])
def test_a_key_paused_and_resumed_during_its_run_goes_on_on_schedule(
    clock: ManualClock, reschedule: Reschedule
) -> None:
    """AFTER_FINISH: the key is planned when the run ends, as always; BEFORE_RUN: its next fire, planned
    as the run began, is armed again at the resume."""
    box: dict[str, Any] = {}

    def run(key: Any, data: Any) -> None:
        box["keyed"].pause(key)
        box["keyed"].resume(key)
        box["state"] = box["keyed"].get(key).state

    life = Life(MemoryStore(), clock, run=run, reschedule=reschedule)
    box["keyed"] = life.keyed
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    assert box["state"] is KeyState.RUNNING
    assert life.keyed.get("k").next_run_at == datetime.fromtimestamp(T0 + 20, UTC)  # type: ignore[union-attr]
    life.advance(20)
    assert life.keyed.stats().started == 3  # 10, 20 and 30
    life.keyed.close()


# -- a file keeps the pause --------------------------------------------------------------------------------


def test_a_pause_is_kept_by_the_file_across_a_restart_and_resumed_as_downtime(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.pause("k")
    life.keyed.close()
    clock.set_wall(clock.wall() + 100)  # down for 100 s
    life = Life(SQLiteStore(path), clock)
    assert life.keyed.get("k").state is KeyState.PAUSED  # type: ignore[union-attr]
    life.keyed.start()
    life.advance(10)
    assert life.ran == [] and life.missed == []  # a paused key: nothing decided at start
    life.keyed.resume("k")
    life.advance(0)
    assert life.ran == [("k", 110.0)] and life.missed == [("k", 10, 10.0, 100.0)]
    life.keyed.close()
    life = Life(SQLiteStore(path), clock)  # and the resume is kept too
    assert life.keyed.get("k").state is KeyState.PENDING  # type: ignore[union-attr]
    life.keyed.close()


def test_a_paused_keys_interrupted_fire_is_decided_at_resume(tmp_path: Path, clock: ManualClock) -> None:
    """The process died during a run of a key that was paused meanwhile: the next life keeps the fire
    unfinished while the key is paused, and reruns it (recover=RERUN) when it is resumed."""
    path = tmp_path / "keys.db"
    store = SQLiteStore(path)
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.pause("k")
    row = next(iter(store.load()[0]))
    # (as a life that died during the run of 10 leaves the file: the fire started, not finished)
    assert store.start_fire(
        row._replace(state="running", next_run_at=None), 10_000_000 + round(T0 * 1e6), 1, False
    )
    life.keyed.close()
    life = Life(SQLiteStore(path), clock)
    clock.set_wall(T0 + 15)
    life.keyed.start()
    life.advance(0)
    assert life.ran == []
    life.keyed.resume("k")
    life.advance(0)
    assert life.ran == [("k", 15.0)] and life.keyed.stats().recovered == 1
    life.keyed.close()


def test_a_file_of_version_1_is_migrated_and_its_keys_are_not_paused(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE timerwheel_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE timerwheel_keys (key TEXT PRIMARY KEY, data TEXT NOT NULL, generation INTEGER NOT NULL,
            state TEXT NOT NULL, next_run_at INTEGER, last_scheduled_for INTEGER, last_error TEXT)
            WITHOUT ROWID;
        CREATE TABLE timerwheel_fires (key TEXT NOT NULL, generation INTEGER NOT NULL,
            scheduled_for INTEGER NOT NULL, started_at INTEGER NOT NULL, finished_at INTEGER, error TEXT,
            attempts INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (key, generation, scheduled_for)) WITHOUT ROWID;
        INSERT INTO timerwheel_meta VALUES ('schema', '1');
        """
    )
    db.execute(
        "INSERT INTO timerwheel_keys VALUES ('\"k\"', 'null', 3, 'pending', ?, NULL, NULL)",
        (round((T0 + 10) * 1e6),),
    )
    db.commit()
    db.close()
    life = Life(SQLiteStore(path), clock)
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PENDING and info.generation == 3
    life.keyed.pause("k")
    life.keyed.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM timerwheel_meta WHERE name = 'schema'").fetchone() == (
        str(SQLITE_SCHEMA),
    )
    assert db.execute("SELECT paused, options, runs FROM timerwheel_keys").fetchone() == (1, None, 0)
    db.close()


def test_a_pause_the_file_cannot_write_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    store = SQLiteStore(tmp_path / "keys.db")
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()

    def fails(*args: Any) -> None:
        raise StoreError("the disk is full")

    store.save = fails  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="disk is full"):
        life.keyed.pause("k")
    assert life.keyed.get("k").state is KeyState.PENDING  # type: ignore[union-attr]
    life.advance(10)
    assert life.ran == [("k", 10.0)]
    life.keyed.close()


def test_fires_held_by_a_pause_whose_resume_raised_after_its_commit_are_decided_by_the_next_life(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A resume whose write was made but answered an error (an I/O error after the commit): the key stays
    paused in this life, resumed in the file. The fires the pause held back used to be decided by that
    write (the file's plan moved past them, unreported), so the next life neither ran them nor reported
    them missed. The file keeps the key as the pause left it, unpaused: the next life decides them."""
    path = tmp_path / "keys.db"
    store = SQLiteStore(path)
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.pause("k")
    life.advance(35)  # the fires at 10, 20 and 30 are held back
    real = store.save

    def answer_lost(*args: Any) -> None:
        real(*args)
        raise StoreError(f"the {store.name} could not write keys: disk I/O error after commit")

    store.save = answer_lost  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="after commit"):
        life.keyed.resume("k")
    assert life.keyed.get("k").state is KeyState.PAUSED  # type: ignore[union-attr]
    life.keyed.close()
    life = Life(SQLiteStore(path), clock)
    assert life.keyed.get("k").state is KeyState.PENDING  # type: ignore[union-attr]  (the file's resume)
    life.keyed.start()
    life.advance(0)
    assert life.ran == [("k", 35.0)] and life.missed == [("k", 2, 10.0, 20.0)]  # (ONCE: 30 runs now)
    life.keyed.close()


def test_a_catch_up_queue_held_by_a_pause_runs_at_the_resume_after_its_window_ended(
    store: Any, clock: ManualClock
) -> None:
    """A resume queued the fires its pause held (catch_up=ALL), and a pause held that queue at once. The
    next resume owes those fires, and the key's window had ended: nothing was planned after them, so the
    resume planned the key afresh (none: DISABLED) and dropped the queue, unrun and unreported."""
    life = Life(store, clock, catch_up=CatchUp.ALL, max_catch_up=2)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(5)
    life.keyed.pause("k")
    life.keyed.upsert("k", end=datetime.fromtimestamp(T0 + 25, UTC))  # (paused: its fires at 10 and 20)
    life.advance(40)
    life.keyed.resume("k")  # the fires at 10 and 20 queued, to run at once
    life.keyed.pause("k")  # held
    life.keyed.resume("k")
    life.advance(1)
    assert len(life.ran) == 2 and life.missed == []
    ran = [e for e in life.keyed.history("k") if e.outcome == "ran"]
    assert [e.scheduled_for.timestamp() - T0 for e in ran[:2]] == [20.0, 10.0]
    assert life.keyed.get("k").state is KeyState.DISABLED  # type: ignore[union-attr]  (its window ended)
    life.keyed.close()


def test_pause_after_close_is_refused(clock: ManualClock) -> None:
    life = Life(MemoryStore(), clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.close()
    with pytest.raises(RuntimeError, match="closed"):
        life.keyed.pause("k")
    with pytest.raises(TypeError, match="hashable"):
        Life(MemoryStore(), clock).keyed.pause([])


def test_a_key_paused_before_start_is_not_armed_by_start(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.pause("k")
    life.keyed.start()
    life.advance(20)
    assert life.ran == []
    life.keyed.resume("k")
    life.advance(0)
    assert life.ran == [("k", 20.0)]
    life.keyed.close()


def test_a_key_paused_with_a_catch_up_queue_decides_the_fires_after_it_at_resume(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A key paused before the catch-up that start() decided ran (CatchUp.ALL: the fires of 10, 20 and
    30 s queued): at resume the queue runs as it was decided, and the fires that fell due after it
    during the pause are decided too (here: run, ALL). A resume used to arm the queue alone: its last
    run planned the key from now, and the fires between were lost without a report."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL)
    life.keyed.upsert("k")
    life.keyed.close()
    clock.set_wall(T0 + 35)  # down from 0 to 35 s: the fires of 10, 20 and 30 missed
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL)
    life.keyed.start()
    life.keyed.pause("k")  # (before the queue ran)
    life.advance(30)
    life.keyed.resume("k")
    life.advance(1)  # (one catch-up fire per pass of the scheduler: a millisecond apart)
    assert len(life.ran) == 6  # the queue (10, 20, 30), then 40, 50 and 60
    assert life.keyed.stats().caught_up == 6 and life.missed == []
    life.advance(4)
    assert [t for _, t in life.ran][6:] == [70.0]
    life.keyed.close()


@pytest.mark.parametrize("catch_up", [CatchUp.ONCE, CatchUp.SKIP])
def test_a_fire_handed_over_before_the_pause_does_not_start_after_the_resume(
    clock: ManualClock, catch_up: CatchUp
) -> None:
    """Keys a and b fire at 10 s in one pass; a's run pauses b (whose job is handed over, not begun),
    takes 25 s, and resumes b. The resume decides b's fires of 10, 20 and 30 s: the job handed over
    before the pause must not run the fire of 10 too (it used to: ONCE ran 10 and 30 with 10 reported
    missed; SKIP ran 10)."""
    box: dict[str, Any] = {}

    def run(ctx: Any, key: Any, data: Any) -> None:
        box["life"].ran.append((key, ctx.scheduled_for - T0))
        if key == "a" and len(box["life"].ran) == 1:
            box["life"].keyed.pause("b")
            clock.advance(25)
            box["life"].keyed.resume("b")

    life = box["life"] = Life(MemoryStore(), clock, run=run, catch_up=catch_up, context=True)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()
    clock.advance(10)
    for _ in range(5):
        life.sched.run_pending()
    b = [t for key, t in life.ran if key == "b"]
    if catch_up is CatchUp.ONCE:
        assert b == [30.0] and life.missed == [("b", 2, 10.0, 20.0)]
    else:
        assert b == [] and life.missed == [("b", 3, 10.0, 30.0)]
    life.keyed.close()


def test_a_paused_key_removed_during_its_run_and_added_again_is_not_paused(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The record of a key removed while its run goes is kept until the run ends, and an upsert
    meanwhile takes it back: it used to come back paused (and a file kept it paused)."""
    path = tmp_path / "keys.db"
    box: dict[str, Any] = {}

    def run(key: Any, data: Any) -> None:
        box["life"].ran.append(key)
        if len(box["life"].ran) == 1:
            box["life"].keyed.pause(key)
            box["life"].keyed.remove(key)
            box["life"].keyed.upsert(key, {"new": 1})

    life = box["life"] = Life(SQLiteStore(path), clock, run=run)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    assert life.keyed.get("k").state is KeyState.PENDING  # type: ignore[union-attr]
    life.advance(10)
    assert life.ran == ["k", "k"]
    life.keyed.close()
    life = Life(SQLiteStore(path), clock)
    assert life.keyed.get("k").state is KeyState.PENDING  # type: ignore[union-attr]
    life.keyed.close()


@pytest.mark.parametrize("catch_up", [CatchUp.ONCE, CatchUp.SKIP])
def test_a_fire_waiting_to_be_taken_again_is_decided_by_the_catch_up_at_resume(
    tmp_path: Path, clock: ManualClock, catch_up: CatchUp
) -> None:
    """A fire whose take failed waits at the head of its key's queue to be taken again; the key is
    paused before that, for 100 s. At resume it is one of the fires missed: SKIP runs none of them, ONCE
    the latest. (It used to run as it was, 100 s late, under both.)"""
    store = SQLiteStore(tmp_path / "keys.db")
    real = store.start_fire
    fails = [1]

    def start_fire(*args: Any) -> int:
        if fails:
            fails.pop()
            raise StoreError("disk I/O error")
        return real(*args)

    store.start_fire = start_fire  # type: ignore[method-assign]
    life = Life(store, clock, catch_up=catch_up)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)  # (the take of the fire of 10 fails: tried again in 1 s)
    life.keyed.pause("k")
    life.advance(100)
    life.keyed.resume("k")
    life.advance(0.5)
    if catch_up is CatchUp.ONCE:
        assert life.ran == [("k", 110.0)] and life.missed == [("k", 10, 10.0, 100.0)]
    else:
        assert life.ran == [] and life.missed == [("k", 11, 10.0, 110.0)]
    life.keyed.close()


def test_catch_up_all_at_resume_runs_at_most_max_catch_up(tmp_path: Path, clock: ManualClock) -> None:
    """A catch-up queue of 3 fires, paused before it ran, and 3 more fires missed during the pause: with
    max_catch_up=3, ALL runs 3 at resume and reports the rest (it used to run 6)."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL, max_catch_up=3)
    life.keyed.upsert("k")
    life.keyed.close()
    clock.set_wall(T0 + 35)
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL, max_catch_up=3)
    life.keyed.start()
    life.keyed.pause("k")
    life.advance(30)
    life.keyed.resume("k")
    life.advance(1)
    assert len(life.ran) == 3  # 10, 20 and 30
    # (more missed than max_catch_up + 1 steps count: the report is "at least 1", from 40 s on)
    assert life.missed == [("k", 1, 40.0, 40.0)] and life.keyed.stats().missed == 1
    life.keyed.close()


def test_close_tells_a_paused_key_changes_from_paused_to_disabled(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k")
    life.keyed.start()
    life.keyed.pause("k")
    life.keyed.close()
    assert life.states[-1] == ("k", KeyState.PAUSED, KeyState.DISABLED)


def test_pause_and_resume_from_another_thread_under_a_threaded_scheduler(clock: ManualClock) -> None:
    """The runs go on worker threads; pause() and resume() come from the caller's thread."""
    ran: list[float] = []
    sched = ThreadedScheduler(clock=clock, workers=2)
    keyed = KeyedScheduler(sched, every_10s, lambda key, data: ran.append(clock.wall() - T0))
    keyed.upsert("k")
    keyed.start()
    try:
        clock.advance(10)
        wait_until_idle(sched)
        assert ran == [10.0]
        keyed.pause("k")
        clock.advance(30)
        wait_until_idle(sched)
        assert ran == [10.0] and keyed.get("k").state is KeyState.PAUSED  # type: ignore[union-attr]
        keyed.resume("k")  # (the fires of 20, 30 and 40: the latest runs, on a worker)
        wait_until_idle(sched)
        assert ran == [10.0, 40.0] and keyed.stats().missed == 2
    finally:
        keyed.close()


def test_quick_pauses_and_resumes_of_a_key_whose_fire_waits_for_a_worker_run_it_once(
    clock: ManualClock,
) -> None:
    """A fire handed over waits for the one worker (busy); the key is paused and resumed twice, quickly,
    its fire handed over again each time. Every job handed over before a pause is void: the fire runs
    once. (One void fire per key used to be kept, and a stale job cleared the newer hand-over: it ran
    twice.)"""
    import threading
    import time

    gate = threading.Event()
    runs: list[tuple[Any, float]] = []

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        seconds = now.timestamp() - T0 - data["off"]
        return datetime.fromtimestamp(T0 + data["off"] + (seconds // 10 + 1) * 10, UTC)

    def run(ctx: Any, key: Any, data: Any) -> None:
        runs.append((key, ctx.scheduled_for - T0))
        if key == "blocker":
            gate.wait(10)

    def until(predicate: Any) -> None:  # (another thread changes it; the bound only stops a hang)
        deadline = time.monotonic() + 10
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert predicate()

    sched = ThreadedScheduler(clock=clock, workers=1)
    keyed = KeyedScheduler(sched, next_run, run, context=True)
    keyed.upsert("blocker", {"off": 5})
    keyed.upsert("b", {"off": 0})
    keyed.start()
    try:
        clock.advance(5)
        until(lambda: runs == [("blocker", 5.0)])  # (it holds the only worker)
        clock.advance(5)
        b = keyed._keys["b"]
        until(lambda: b.handed is not None)  # (b's fire of 10 s waits for the worker)
        for _ in range(2):
            keyed.pause("b")
            keyed.resume("b")
            until(lambda: b.handed is not None)
        gate.set()
        wait_until_idle(sched)
        assert [t for key, t in runs if key == "b"] == [10.0]
    finally:
        gate.set()
        keyed.close()


def test_a_fire_the_start_reported_missed_does_not_run_at_the_resume(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A start decides a catch-up (ALL, max_catch_up=3: the fires of 10, 20 and 30 s queued, 40 s and on
    reported missed); the key is paused before the queue ran, and resumed. The queue still owes its
    fires, and the pause adds those after the start; a fire the start reported missed stays missed (the
    resume used to walk the fires again from the queue's head, and ran the fire of 40 s)."""
    path = tmp_path / "keys.db"
    fires: list[float] = []
    life = Life(SQLiteStore(path), clock, catch_up=CatchUp.ALL, max_catch_up=3)
    life.keyed.upsert("k")
    life.keyed.close()
    clock.set_wall(T0 + 75)
    life = Life(
        SQLiteStore(path),
        clock,
        catch_up=CatchUp.ALL,
        max_catch_up=3,
        context=True,
        run=lambda ctx, key, data: fires.append(ctx.scheduled_for - T0),
    )
    life.keyed.start()
    assert life.missed == [("k", 1, 40.0, 40.0)]  # (at least 1: more than max_catch_up + 1 steps)
    life.keyed.pause("k")
    life.advance(30)
    life.keyed.resume("k")
    life.advance(1)
    assert fires == [10.0, 20.0, 30.0] and 40.0 not in fires
    assert life.missed[1:] == [("k", 1, 80.0, 80.0)]
    life.keyed.close()


def test_a_key_resumed_while_an_older_generations_run_goes_shows_its_plan() -> None:
    """AFTER_FINISH: upserted during a run (its first fire waiting for the run), paused and resumed
    while that run went on: the key showed RUNNING, with no run of it going once the old one ended, until
    its next fire (the old generation's end plans nothing of the new one)."""
    from .test_keyed_overlap import Life as Runs

    life = Runs(reschedule=Reschedule.AFTER_FINISH, catch_up=CatchUp.SKIP)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)  # the run of 10 goes on
    life.keyed.upsert("k", "new")  # its first fire, at 20, waits for the run
    life.advance(10)
    life.keyed.pause("k")
    life.advance(2)
    life.keyed.resume("k")  # (the fire of 20: missed, CatchUp.SKIP; the next at 30)
    life.finish("k", 10.0)
    life.advance(1)
    info = life.keyed.get("k")
    assert info is not None and not info.running
    assert info.state is KeyState.PENDING and info.next_run_at == datetime.fromtimestamp(T0 + 30, UTC)
    life.close()
