"""Retries (retry=Retry(attempts, backoff, cap)) under faults: a retry whose start fails, one dropped
by backpressure, a pause between its hand-over and its start, a newer fire (a trigger) before it and a
close or a crash after, a trigger's retry. Time comes from a ManualClock (the ThreadedScheduler test
waits on conditions the scheduler's threads make true, never for time to pass)."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    Backpressure,
    JobContext,
    KeyedScheduler,
    MemoryStore,
    Reschedule,
    Retry,
    Scheduler,
    SQLiteStore,
    StoreError,
    ThreadedScheduler,
)
from timerwheel.testing import ManualClock, wait_until_idle

from .test_durable import crash, down
from .test_keyed_pause import T0
from .test_keyed_retry import Life

GENEROUS = 20.0  # real seconds a test waits for a scheduler's thread before it fails instead of hanging


def _from(offset: float, period: float) -> Any:
    """next_run: the points T0 + offset + n * period."""

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        n = (now.timestamp() - T0 - offset) // period + 1
        return datetime.fromtimestamp(T0 + offset + n * period, UTC)

    return next_run


def _by_key(now: datetime, key: Any, data: Any) -> datetime:
    """next_run of a key whose data says its points: {"off": o, "p": period}."""
    return _from(data["off"], data["p"])(now, key, data)


def _started(life: Life) -> list[tuple[float, int, float]]:
    return [(fire, attempt, start) for _, fire, attempt, start in life.attempts]


def _fires(path: Path) -> list[tuple[float, int, bool]]:
    """The file's fire log: (scheduled_for after T0, attempts, finished)."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT scheduled_for, attempts, finished_at FROM timerwheel_fires ORDER BY scheduled_for"
        ).fetchall()
    finally:
        db.close()
    return [(sf / 1e6 - T0, attempts, finished is not None) for sf, attempts, finished in rows]


def _fail_the_wall_clock_once_at_a_start(keyed: KeyedScheduler) -> None:
    """The KeyedScheduler's next reading of the wall clock as a fire is to start (Runs._prepare) fails."""
    table = keyed._table
    read = table.wall_now

    def wall_now() -> float:
        if sys._getframe(1).f_code.co_name == "_prepare":
            del table.wall_now  # (once)
            raise OSError("the wall clock failed")
        return read()

    table.wall_now = wall_now  # type: ignore[method-assign]


class _FlakyStore(SQLiteStore):
    """A SQLiteStore whose start_fire fails once when armed: before its commit, or after it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail: str | None = None

    def start_fire(self, *args: Any, **kwargs: Any) -> int:
        mode, self.fail = self.fail, None
        if mode == "before":
            raise StoreError("the disk is full (before the commit)")
        taken = super().start_fire(*args, **kwargs)
        if mode == "after":
            raise StoreError("the connection dropped (after the commit)")
        return taken


@pytest.mark.parametrize("fault", ["clock", "store-before-commit", "store-after-commit"])
def test_a_retry_whose_start_fails_once_is_tried_again_soon_and_the_next_fire_still_runs(
    tmp_path: Path, fault: str
) -> None:
    """Every 10 s, Retry(3, backoff=2): the fire of 10 fails; its retry is due at 12. As it is to start,
    the wall clock fails once (or the store's take fails once). A fire whose start fails this way "is
    tried again after a back-off (1 ms ... 1 s)" / "tried again in 1 s" (Runs._clock_failed, Runs._retry),
    and retry_due's own comment says "a clock that fails once does not lose the retry"; the key's next
    fire (20) must run: a retry "gives way to every other fire of its key", and nothing is lost.

    The bug this pins: the retry is put at the head of the key's queue, but the key is not armed again
    (Runs._clock_failed and Runs._retry arm it only if `rec.id is None`, and while a retry waits the key
    is armed at its next fire, 20). So the retry does not run until 20, when the key's timer hands over
    the queue's head, the retry of the fire of 10, *instead of* the fire of 20: the fire of 20 never
    runs (and is not reported missed)."""
    clock = ManualClock(0.0, wall=T0)
    store: Any = MemoryStore() if fault == "clock" else _FlakyStore(tmp_path / "k.db")
    life = Life(store, clock, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(11.9)
    assert _started(life) == [(10.0, 1, 10.0)]
    if fault == "clock":
        _fail_the_wall_clock_once_at_a_start(life.keyed)
    else:
        store.fail = fault.split("-")[1]
    life.advance(0.2)
    life.advance(10)
    started = _started(life)
    try:
        if fault == "clock":
            assert life.keyed.stats().clock_errors == 1  # (the fault happened)
        else:
            assert store.fail is None  # (the fault happened)
        # (the fire of 20 fails at its first attempt too, and is retried at 22)
        assert [(fire, attempt) for fire, attempt, _ in started] == [
            (10.0, 1),
            (10.0, 2),
            (20.0, 1),
            (20.0, 2),
        ]
        assert started[1][2] < 20.0  # (the retry, tried again soon: before the next fire)
        assert started[2][2] == 20.0  # the fire of 20, on time
    finally:
        life.keyed.close()


def test_a_retry_dropped_by_backpressure_is_not_left_unfinished_to_be_rerun_after_newer_fires(
    tmp_path: Path,
) -> None:
    """One worker and a queue of one (Backpressure.DROP). The fire of 10 of key "k" fails; its retry is
    due at 12; by then the worker is busy ("blocker") and the queue full ("q"): the retry is dropped.
    A dropped fire is "not lost" (Runs.dropped): for a retry, either it is tried again, or it gives way
    and "the fire then ends failed" (a durable store records it finished). Then the fire of 20 runs.
    Whatever the next life does, it must not rerun the fire of 10 after the fire of 20 ran: "no older
    fire runs after a newer one"; and stats().retried counts "the retries made".

    The bug this pins: Runs.dropped returns early because the key is armed (at its next fire: `rec.id is not
    None`), without giving the retry up: the fire of 10 stays unfinished in the file forever, the
    retry is counted as made though it never ran, and after a close the next life reruns the fire of 10
    (attempt 2) after the fire of 20."""
    path = tmp_path / "k.db"
    clock = ManualClock(0.0, wall=T0)
    gate = threading.Event()
    blocking = threading.Event()
    log: list[tuple[Any, float, int]] = []

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        log.append((key, ctx.scheduled_for - T0, ctx.fence.attempt))  # type: ignore[union-attr]
        if key == "blocker":
            blocking.set()
            assert gate.wait(GENEROUS)
        if key == "k" and ctx.scheduled_for - T0 == 10.0:
            raise RuntimeError("fails")

    def until(condition: Any, what: str) -> None:
        deadline = time.monotonic() + GENEROUS
        while not condition():  # (a condition the scheduler's threads make true)
            assert time.monotonic() < deadline, what
            time.sleep(0.001)

    sched = ThreadedScheduler(clock=clock, workers=1, queue_size=1, backpressure=Backpressure.DROP)
    keyed = KeyedScheduler(
        sched, _by_key, run, context=True, store=SQLiteStore(path), retry=Retry(3, backoff=2.0)
    )
    try:
        keyed.upsert("k", {"off": 0, "p": 10})
        keyed.upsert("blocker", {"off": 11, "p": 1000})
        keyed.upsert("q", {"off": 11.5, "p": 1000})
        keyed.start()
        clock.advance(10)
        wait_until_idle(sched)
        assert log == [("k", 10.0, 1)]
        clock.advance(1)  # the blocker holds the worker
        assert blocking.wait(GENEROUS)
        clock.advance(0.5)  # q waits in the queue
        until(lambda: sched.stats().queued == 1, "q was not queued")
        clock.advance(0.5)  # the retry's time: dropped
        until(lambda: sched.stats().dropped == 1, "the retry was not dropped")
        gate.set()
        wait_until_idle(sched)
        clock.advance(10)
        wait_until_idle(sched)
        assert ("k", 20.0, 1) in log
        retried = keyed.stats().retried
    finally:
        gate.set()
        keyed.close()
        sched.close()
    ran_again = ("k", 10.0, 2) in log
    fires = _fires(path)
    down(clock, 1)
    log.clear()
    nxt = Scheduler(clock)
    again = KeyedScheduler(
        nxt, _by_key, run, context=True, store=SQLiteStore(path), retry=Retry(3, backoff=2.0)
    )
    again.start()
    nxt.run_pending()
    again.close()
    assert (10.0, 1, False) not in fires, f"the fire of 10 was left unfinished: {fires}"
    assert log == [], f"the next life reran the fire of 10 after the fire of 20 ran: {log}"
    assert retried == (1 if ran_again else 0)


def test_a_pause_and_resume_between_a_retrys_hand_over_and_its_start_do_not_lose_it() -> None:
    """The retry of the fire of 10 comes at 12 and is handed over; before its job begins, the key is
    paused and resumed (here by the run of another key, due just before, in the same pass; a busy worker
    pool gives the same window). Documented: "a pause holds the retry and resume tries it" - nothing of
    the key ran meanwhile, so the retry must still run (attempt 2) before the fire of 20.

    The bug this pins: the pause voids the hand-over (Key.voided) and the resume, which only re-arms a retry
    marked `held`, knows nothing of it; when the voided job comes, Runs._prepare_start finds the key no
    longer paused and gives the retry up (_give_up): the fire ends failed with attempts left, and
    stats().retried counted a retry that never ran."""
    clock = ManualClock(0.0, wall=T0)
    life: Life

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if key == "operator":
            life.keyed.pause("k")
            life.keyed.resume("k")
        elif ctx.fence.attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails")

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        return _from(11.5, 1000)(now, key, data) if key == "operator" else _from(0, 10)(now, key, data)

    life = Life(MemoryStore(), clock, next_run=next_run, run=run, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("k")
    life.keyed.upsert("operator")
    life.keyed.start()
    life.advance(11)
    clock.advance(1.5)  # (one pass: the operator's run at 11.5, then the retry of 12's job)
    life.sched.run_pending()
    life.advance(5)
    k = [(fire, attempt) for key, fire, attempt, _ in life.attempts if key == "k"]
    life.keyed.close()
    assert k == [(10.0, 1), (10.0, 2)]


def test_stats_retried_counts_a_retry_held_by_a_pause_once() -> None:
    """stats().retried "counts the retries made". The retry of the fire of 10 is handed over at 12, the
    key is paused before it begins (the retry is held), and resumed: the retry runs once (attempt 2).

    The bug this pins: retried is 2. Runs.retry_due counts at the hand-over; the held retry is handed over
    again by the resume and counted again."""
    clock = ManualClock(0.0, wall=T0)
    life: Life

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if key == "operator":
            life.keyed.pause("k")
        elif ctx.fence.attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails")

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        return _from(11.5, 1000)(now, key, data) if key == "operator" else _from(0, 10)(now, key, data)

    life = Life(MemoryStore(), clock, next_run=next_run, run=run, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("k")
    life.keyed.upsert("operator")
    life.keyed.start()
    life.advance(11)
    clock.advance(1.5)
    life.sched.run_pending()
    life.keyed.resume("k")
    life.advance(1)
    k = [(fire, attempt) for key, fire, attempt, _ in life.attempts if key == "k"]
    retried = life.keyed.stats().retried
    life.keyed.close()
    assert k == [(10.0, 1), (10.0, 2)]  # (one retry ran)
    assert retried == 1


@pytest.mark.parametrize("ending", ["close", "crash"])
def test_a_retry_that_gave_way_to_a_trigger_is_not_rerun_by_the_next_life(
    tmp_path: Path, ending: str
) -> None:
    """Every 100 s, Retry(3, backoff=30): the fire of 100 fails, its retry waits (130). At 101 the key is
    triggered, and the trigger's run succeeds. Documented: the retry "gives way to every other fire of
    its key ... another fire of the key has begun since the failed one (its next fire, a trigger, ...)
    ... The fire then ends failed", "no older fire runs after a newer one", and after a close or a
    crash the next life "runs no phantom fire".

    The bug this pins: the give-way is decided only when the retry's time comes (Runs.retry_due); the
    trigger's start does not end the older fire, so a close (Table.unwatch) or a crash before 130
    leaves the fire of 100 unfinished in the file, and the next life reruns it (Recover.RERUN, attempt 2)
    after the newer fire of 101 ran."""
    path = tmp_path / "k.db"
    clock = ManualClock(0.0, wall=T0)
    life: Life

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if ctx.scheduled_for - T0 == 100.0 and ctx.fence.attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails")

    every_100s = _from(0, 100)
    life = Life(SQLiteStore(path), clock, next_run=every_100s, run=run, retry=Retry(3, backoff=30.0))
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(101)
    when = life.keyed.trigger("k")
    assert when is not None and when.timestamp() - T0 == 101.0
    life.advance(1)
    assert _started(life) == [(100.0, 1, 100.0), (101.0, 1, 101.0)]
    if ending == "close":
        life.keyed.close()
    else:
        crash(life)
    down(clock, 5)
    life = Life(SQLiteStore(path), clock, next_run=every_100s, run=run, retry=Retry(3, backoff=30.0))
    life.keyed.start()
    life.advance(1)
    started = _started(life)
    life.keyed.close()
    assert started == [], "the fire of 100 ran again after the trigger's newer fire of 101"


@pytest.mark.parametrize("reschedule", [Reschedule.BEFORE_RUN, Reschedule.AFTER_FINISH])
def test_the_retry_of_a_triggers_run_keeps_the_keys_plan(reschedule: Reschedule) -> None:
    """A key every 100 s from its last fire (now + 100): it ran at 100, its next fire is 200. A trigger
    at 150 fails and is retried at 151 (succeeding). trigger(): "The key's plan does not move: after the
    run it goes on with the next run it had"; and a retry is "an attempt of the same fire" - the
    trigger's. The key's next fire must stay 200.

    The bug this pins: next_run_at becomes 251. The retry is handed over as a rerun, and Runs._trigger_of
    never matches a rerun, so the retry is planned as a scheduled fire (BEFORE_RUN: next_run asked at
    its start; AFTER_FINISH: at its end), moving the key's schedule."""
    clock = ManualClock(0.0, wall=T0)
    life: Life

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if ctx.scheduled_for - T0 == 150.0 and ctx.fence.attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails")

    def every_100s_after(now: datetime, key: Any, data: Any) -> datetime:
        return now + timedelta(seconds=100)

    life = Life(
        MemoryStore(),
        clock,
        next_run=every_100s_after,
        run=run,
        retry=Retry(3, backoff=1.0),
        reschedule=reschedule,
    )
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(150)
    assert life.keyed.get("k").next_run_at.timestamp() - T0 == 200.0  # type: ignore[union-attr]
    life.keyed.trigger("k")
    life.advance(5)
    assert _started(life) == [(100.0, 1, 100.0), (150.0, 1, 150.0), (150.0, 2, 151.0)]
    info = life.keyed.get("k")
    life.keyed.close()
    assert info is not None and info.next_run_at.timestamp() - T0 == 200.0  # type: ignore[union-attr]


@pytest.mark.parametrize("change", ["upsert", "trigger"])
def test_retry_at_does_not_show_a_retry_that_gives_way(change: str) -> None:
    """KeyInfo.retry_at: "when its failed fire is tried again ... or None". The fire of 10 fails, its
    retry waits for 14; at 11 the key is upserted (a new generation: "the retry of the old one's fire
    gives way") or triggered (the trigger's fire runs at once and succeeds: the retry gives way to it).
    No retry will come: retry_at must be None.

    The bug this pins: retry_at still says 14 until that time comes (Key.info shows the Retrying timer while
    it is armed; neither the upsert nor the newer fire's start takes it back)."""
    clock = ManualClock(0.0, wall=T0)
    life: Life

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if ctx.scheduled_for - T0 == 10.0 and ctx.fence.attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails")

    life = Life(MemoryStore(), clock, run=run, retry=Retry(3, backoff=4.0))
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(11)
    assert life.keyed.get("k").retry_at == datetime.fromtimestamp(T0 + 14, UTC)  # type: ignore[union-attr]
    if change == "upsert":
        life.keyed.upsert("k", {"v": 2})
    else:
        life.keyed.trigger("k")
        life.advance(0)
    info = life.keyed.get("k")
    life.advance(5)
    k = _started(life)
    life.keyed.close()
    assert (10.0, 2) not in [(f, a) for f, a, _ in k]  # (indeed it gave way)
    assert info is not None and info.retry_at is None
