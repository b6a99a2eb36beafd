"""Late fires (on_late=, late_grace=): a fire of a key that has not begun late_grace seconds after it was
due is told to on_late(key, due, late_by), once, and counted (KeyedStats.late): a worker slot that stays
busy, a run of the key that goes on, a loop that was stuck. A fire that begins in time, or does not run
by the user's own rules (skipped, paused, superseded), is not late.

Runs are coroutines on an AsyncScheduler on a VirtualTimeLoop (see test_keyed_overlap), or inline on a
Scheduler on a ManualClock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    CatchUp,
    KeyedScheduler,
    MemoryStore,
    Overlap,
    Reschedule,
    Scheduler,
    SQLiteStore,
    ThreadedScheduler,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop

from . import test_keyed_overlap as overlap
from . import test_keyed_pause as pause
from .test_durable import Life as DurableLife
from .test_durable import crash, down
from .test_keyed_pause import T0, every_10s


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


class Life(overlap.Life):
    """test_keyed_overlap's Life (runs go until let go), with late checks recorded in `late` as (key,
    due, late_by, now), in seconds after T0; `max_concurrency` bounds the runs going at once."""

    def __init__(self, store: Any = None, max_concurrency: int | None = None, **kwargs: Any) -> None:
        self.loop = VirtualTimeLoop(100.0, wall=T0)
        self.sched = AsyncScheduler(loop=self.loop, max_concurrency=max_concurrency)
        self.started: list[tuple[Any, float, float]] = []
        self.ended: list[tuple[Any, float, float, bool]] = []
        self.going: dict[tuple[Any, float], asyncio.Event] = {}
        self.late: list[tuple[Any, float, float, float]] = []
        kwargs.setdefault("reschedule", Reschedule.BEFORE_RUN)
        kwargs.setdefault("on_late", self._late)
        self.keyed = KeyedScheduler(
            self.sched, kwargs.pop("next_run", every_10s), self._run, context=True, store=store, **kwargs
        )

    def _late(self, key: Any, due: datetime, late_by: float) -> None:
        self.late.append((key, due.timestamp() - T0, round(late_by, 6), round(self.now(), 6)))


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "keys.db")


def test_a_fire_that_waits_for_its_keys_run_past_the_grace_is_late_once(store: Any) -> None:
    life = Life(store, overlap=Overlap.QUEUE_ONE, late_grace=5.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(24)
    assert life.late == []  # (the fire of 20 waits for the run of 10: not late yet)
    life.advance(20)
    assert life.late == [("k", 20.0, 5.0, 25.0)]  # told once, at 20 + 5
    assert life.keyed.stats().late == 1
    life.finish("k", 10.0)
    life.advance(1)
    assert [at for _, at, _ in life.started] == [10.0, 20.0]
    assert life.late == [("k", 20.0, 5.0, 25.0)] and life.keyed.stats().late == 1  # (it began: no more)
    life.close()


def test_a_fire_that_waits_for_a_busy_slot_is_late(store: Any) -> None:
    life = Life(store, max_concurrency=1, late_grace=3.0)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()
    life.advance(12)
    assert len(life.running()) == 1  # (one slot: the other key's fire of 10 waits for it)
    (waiting,) = {"a", "b"} - {k for k, _ in life.running()}
    life.advance(2)
    assert life.late == [(waiting, 10.0, 3.0, 13.0)]
    life.close()


def test_a_fire_that_begins_within_the_grace_is_not_late(store: Any) -> None:
    life = Life(store, overlap=Overlap.QUEUE_ONE, late_grace=5.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(22)
    life.finish("k", 10.0)  # (the fire of 20 begins at 22.25: 2.25 s late, within the grace)
    life.advance(10)
    assert [at for _, at, _ in life.started] == [10.0, 20.0]
    assert life.late == [] and life.keyed.stats().late == 0
    life.close()


def test_skipped_paused_and_superseded_fires_are_not_late(store: Any) -> None:
    life = Life(store, overlap=Overlap.SKIP, late_grace=2.0)
    life.keyed.upsert("skipped")
    life.keyed.start()
    life.advance(35)  # (the fires of 20 and 30 are skipped while the run of 10 goes)
    assert life.keyed.stats().skipped == 2 and life.late == []
    life.close()

    life = Life(store if isinstance(store, MemoryStore) else None, overlap=Overlap.QUEUE_ONE, late_grace=2.0)
    life.keyed.upsert("paused")
    life.keyed.upsert("upserted")
    life.keyed.start()
    life.advance(21)  # (the fires of 20 wait for the runs of 10)
    life.keyed.pause("paused")
    life.keyed.upsert("upserted", {"v": 2})  # (a new generation: the old one's fire is superseded)
    life.advance(10)
    assert life.late == []
    life.close()


def test_a_fire_that_comes_past_the_grace_is_told_at_once() -> None:
    """A loop that was stuck (here: nobody ran the scheduler) hands the fire over 50 s after it was due:
    it is told late as it comes (its run then begins)."""
    clock = ManualClock(0.0, wall=T0)
    sched = Scheduler(clock)
    late: list[tuple[Any, float, float]] = []
    keyed = KeyedScheduler(
        sched,
        every_10s,
        lambda key, data: None,
        on_late=lambda key, due, late_by: late.append((key, due.timestamp() - T0, late_by)),
        late_grace=5.0,
    )
    keyed.upsert("k")
    keyed.start()
    clock.advance(60)
    sched.run_pending()
    assert late == [("k", 10.0, 50.0)]
    assert keyed.stats().started == 1 and keyed.stats().late == 1
    keyed.close()


def test_a_catch_up_run_is_late_only_past_the_grace_after_the_start(tmp_path: Path) -> None:
    """Fires missed while the process was down are late by design (on_missed tells of them): their
    lateness counts from the start that decided to run them."""
    path = tmp_path / "keys.db"
    clock = ManualClock(0.0, wall=T0)
    first = pause.Life(SQLiteStore(path), clock)
    first.keyed.upsert("k")
    first.keyed.start()
    first.advance(10)
    first.keyed.close()
    down(clock, 100)
    late: list[Any] = []
    again = pause.Life(
        SQLiteStore(path),
        clock,
        catch_up=CatchUp.ALL,
        late_grace=5.0,
        on_late=lambda *args: late.append(args),
    )
    again.keyed.start()
    again.advance(1)
    assert len(again.ran) == 10  # (the fires of 20 to 110, caught up one after the other)
    assert late == [] and again.keyed.stats().late == 0
    again.keyed.close()


def test_late_grace_alone_counts_late_fires(store: Any) -> None:
    life = Life(store, overlap=Overlap.QUEUE_ONE, late_grace=1.0, on_late=None)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(30)
    assert life.keyed.stats().late == 1 and life.late == []
    life.close()


def test_on_late_alone_has_a_grace_of_a_minute(store: Any) -> None:
    life = Life(store, overlap=Overlap.QUEUE_ONE)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(79)
    assert life.late == []
    life.advance(2)
    assert life.late == [("k", 20.0, 60.0, 80.0)]
    life.close()


def test_an_on_late_that_raises_is_logged_and_the_key_goes_on(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def fails(key: Any, due: datetime, late_by: float) -> None:
        raise RuntimeError("the alert system is down")

    life = Life(store, overlap=Overlap.QUEUE_ONE, late_grace=1.0, on_late=fails)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(25)
    assert "the alert system is down" in caplog.text
    life.finish("k", 10.0)
    life.advance(1)
    assert [at for _, at, _ in life.started] == [10.0, 20.0]
    life.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"late_grace": 0}, ValueError, "late_grace must be > 0"),
        ({"late_grace": -1.0}, ValueError, "late_grace must be > 0"),
        ({"late_grace": float("inf")}, ValueError, "late_grace"),
        ({"late_grace": "5"}, TypeError, "late_grace"),
        ({"on_late": 5}, TypeError, "on_late"),
    ],
)
def test_bad_late_arguments_name_the_argument(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        KeyedScheduler(Scheduler(ManualClock(0.0, wall=T0)), every_10s, print, **kwargs)


def test_a_fire_that_waits_for_the_only_worker_is_late_under_a_threaded_scheduler() -> None:
    """A ThreadedScheduler with one worker, held by a run (of 5 s) that does not return until let go: the
    other key's fire of 10 s waits for the worker, and is told late at 12 s, on the scheduler's thread.
    (Threads: polled with a bound of 10 s, for a loaded machine; the clock is a ManualClock.)"""
    import threading
    import time

    from timerwheel import ThreadedScheduler
    from timerwheel.testing import wait_until_idle

    def until(predicate: Any) -> None:
        deadline = time.monotonic() + 10
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert predicate()

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        """Every 10 s, at data["off"] s past each tenth second after T0."""
        t = now.timestamp() - T0 - data["off"]
        return datetime.fromtimestamp(T0 + data["off"] + (t // 10 + 1) * 10, UTC)

    clock = ManualClock(0.0, wall=T0)
    gate = threading.Event()
    late: list[tuple[Any, float, float]] = []
    sched = ThreadedScheduler(clock=clock, workers=1)
    keyed = KeyedScheduler(
        sched,
        next_run,
        lambda key, data: gate.wait(10) if key == "blocker" else None,
        on_late=lambda key, due, late_by: late.append((key, due.timestamp() - T0, late_by)),
        late_grace=2.0,
    )
    keyed.upsert("blocker", {"off": 5})
    keyed.upsert("b", {"off": 0})
    keyed.start()
    try:
        clock.advance(5)
        until(lambda: keyed.stats().started == 1)  # (the blocker holds the only worker)
        clock.advance(5)
        until(lambda: keyed._keys["b"].handed is not None)  # (b's fire of 10 waits for the worker)
        clock.advance(2)
        until(lambda: len(late) == 1)
        assert late == [("b", 10.0, 2.0)] and keyed.stats().late == 1
        gate.set()
        wait_until_idle(sched)
        assert keyed.stats().started == 2
    finally:
        gate.set()
        keyed.close()


def _until(predicate: Any, bound: float = 10.0) -> bool:
    deadline = time.monotonic() + bound
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.001)
    return bool(predicate())


def test_a_fire_whose_late_check_came_while_paused_is_told_once_it_waits_after_the_resume() -> None:
    """QUEUE_ONE: the fire of 20 waits behind the run of 10. Paused at 21 (its check of 23 comes
    while paused: not told), resumed at 24, it waits on: it is watched again from the resume, and told
    at 24 + 3. (It was never told: the check had fired, and the same fire was not watched again.)"""
    life = Life(None, overlap=Overlap.QUEUE_ONE, late_grace=3.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(21)
    life.keyed.pause("k")
    life.advance(3)  # 24
    life.keyed.resume("k")
    life.advance(30)  # 54: the fire of 20 still waits behind the run of 10
    assert life.running() == [("k", 10.0)]
    try:
        assert life.late != [], "the fire of 20 waited 30 s after the resume and was never told"
        assert life.late[0][3] == 27.0  # grace from the resume that decided it (24 + 3)
    finally:
        life.close()


def test_a_fire_that_waits_for_a_slot_after_a_resume_is_told() -> None:
    """max_concurrency=1: one key's fire of 10 waits for the slot the other key's run holds. Paused at
    10.5 (its check of 13 comes while paused), resumed at 13.5, it waits on for the slot: told."""
    life = Life(None, max_concurrency=1, late_grace=3.0)
    life.keyed.upsert("a")
    life.keyed.upsert("b")
    life.keyed.start()
    life.advance(10.5)
    (waiting,) = {"a", "b"} - {k for k, _ in life.running()}
    life.keyed.pause(waiting)
    life.advance(3)
    life.keyed.resume(waiting)
    life.advance(30)
    assert waiting not in {k for k, _ in life.running()}  # (it still waits for the slot)
    try:
        assert [entry for entry in life.late if entry[0] == waiting] != []
    finally:
        life.close()


def test_a_fire_a_resume_decided_counts_its_grace_from_the_resume() -> None:
    """A fire a resume decided to run counts its grace from the resume (it was told at 20 + 3: the
    check armed before the pause was not moved), not from its time."""
    life = Life(None, overlap=Overlap.QUEUE_ONE, late_grace=3.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(21)
    life.keyed.pause("k")
    life.advance(1)  # 22
    life.keyed.resume("k")
    life.advance(30)
    try:
        assert life.late and life.late[0][3] == 25.0, life.late  # actual: [('k', 20.0, 3.0, 23.0)]
    finally:
        life.close()


def test_a_stored_trigger_run_at_a_restart_is_not_told_late_at_once(tmp_path: Path) -> None:
    """A trigger stored (not run yet) when the process died: the next life runs it at its start, 100 s
    after its time; it was missed while the process was down, and counts its grace from the start (it
    was told late at once)."""
    path = tmp_path / "keys.db"
    clock = ManualClock(0.0, wall=T0)
    late: list[Any] = []
    first = DurableLife(path, clock, late_grace=5.0, on_late=lambda *a: late.append(a))
    first.keyed.start()
    first.keyed.upsert("job", {"every": 1000})
    first.advance(1)
    first.keyed.trigger("job")
    crash(first)
    down(clock, 100)
    again = DurableLife(path, clock, late_grace=5.0, on_late=lambda *a: late.append(a))
    again.keyed.start()
    again.advance(0)
    assert again.ran == [("job", 101.0)]  # (it ran at once, as the start decided)
    again.keyed.close()
    assert late == [] and again.keyed.stats().late == 0  # actual: told, late_by 100.0


def test_a_keyboard_interrupt_from_on_late_in_a_late_check_comes_out_of_the_loop_not_a_later_upsert() -> None:
    """AsyncScheduler: a KeyboardInterrupt from on_late in a late check comes out of the loop, as
    on_finish's does (it was held, and came out of the next, unrelated, upsert())."""

    def on_late(key: Any, due: datetime, late_by: float) -> None:
        raise KeyboardInterrupt("from on_late")

    life = Life(None, overlap=Overlap.QUEUE_ONE, late_grace=2.0, on_late=on_late)
    life.keyed.upsert("k")
    life.keyed.start()
    raised = None
    try:
        life.advance(23)  # the fire of 20 is told late at 22
    except KeyboardInterrupt as exc:
        raised = exc
    later = None
    try:
        life.keyed.upsert("unrelated")
    except KeyboardInterrupt as exc:
        later = exc
    with contextlib.suppress(BaseException):
        life.close()
    assert later is None, "the interrupt came out of a later, unrelated upsert()"
    assert raised is not None, "the interrupt did not come out of the loop"


def test_a_keyboard_interrupt_from_on_late_on_a_threaded_driver_is_not_swallowed_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ThreadedScheduler: a KeyboardInterrupt from on_late, on the driver thread, is logged as a
    job's is (it was held for ever: neither raised nor logged)."""
    caplog.set_level(logging.DEBUG)
    clock = ManualClock(0.0, wall=T0)
    gate = threading.Event()
    calls: list[Any] = []

    def on_late(key: Any, due: datetime, late_by: float) -> None:
        calls.append(key)
        raise KeyboardInterrupt("from on_late")

    sched = ThreadedScheduler(clock=clock, workers=2)
    keyed = KeyedScheduler(
        sched,
        every_10s,
        lambda key, data: gate.wait(10),
        overlap=Overlap.QUEUE_ONE,
        reschedule=Reschedule.BEFORE_RUN,
        on_late=on_late,
        late_grace=2.0,
    )
    keyed.upsert("k")
    keyed.start()
    try:
        clock.advance(10)
        assert _until(lambda: keyed.stats().started == 1)
        clock.advance(10)
        assert _until(lambda: keyed._keys["k"].catch_up is not None)  # (the fire of 20 waits)
        clock.advance(3)
        assert _until(lambda: calls == ["k"])
        _until(
            lambda: any(
                "from on_late" in r.getMessage() or (r.exc_info and "from on_late" in str(r.exc_info[1]))
                for r in caplog.records
            ),
            1.0,
        )
    finally:
        gate.set()
        keyed.close()
    assert logged(caplog), "on_late's KeyboardInterrupt vanished: not raised, not logged"


def logged(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether on_late's KeyboardInterrupt was logged (a record's message, or its exception)."""
    return any(
        "from on_late" in r.getMessage() or (r.exc_info is not None and "from on_late" in str(r.exc_info[1]))
        for r in caplog.records
    )


def test_close_and_remove_take_back_the_late_checks() -> None:
    """remove() and close() take back the keys' late checks (each held its key's record, and the
    whole KeyedScheduler, until its time: a day here)."""
    clock = ManualClock(0.0, wall=T0)
    sched = Scheduler(clock)
    keyed = KeyedScheduler(sched, every_10s, lambda k, d: None, late_grace=86400.0)
    for i in range(100):
        keyed.upsert(f"k{i}", {"i": i})
    keyed.start()
    base = sched.stats().timers  # (the keys' own timers)
    clock.advance(10)
    sched.run_pending()  # (every fire began at once: nothing is late)
    assert keyed.stats().started == 100 and keyed.stats().late == 0
    for i in range(50):
        keyed.remove(f"k{i}")
    removed = sched.stats().timers
    keyed.close()
    closed = sched.stats().timers
    # (after the removal: the 50 keys left, each with its own timer and its Late of this fire; after
    # close(): none)
    assert (base, removed, closed) == (100, 100, 0), (base, removed, closed)  # actual: (100, 150, 100)


def test_a_late_grace_past_the_wheels_range_is_refused_not_every_fire_lost() -> None:
    """A late_grace above 1e9 s (as jitter's) is refused, naming it (1e20 was accepted, and every
    key's first fire then raised as its check was armed: the key never ran)."""
    clock = ManualClock(0.0, wall=T0)
    sched = Scheduler(clock)
    ran: list[Any] = []
    try:
        keyed = KeyedScheduler(sched, every_10s, lambda k, d: ran.append(k), late_grace=1e20)
    except (ValueError, OverflowError) as exc:
        assert "late_grace" in str(exc)
        return
    keyed.upsert("k")
    keyed.start()
    for _ in range(5):
        clock.advance(10)
        sched.run_pending()
    keyed.close()
    assert ran == ["k"] * 5, ran  # actual: [] (the key is stuck for good)
