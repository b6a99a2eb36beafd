"""Retries (retry=Retry(attempts, backoff, cap)): a failed run's fire is tried again, an attempt more
each time (ctx.fence.attempt, the fire log's attempts), after a backoff that doubles up to the cap,
never at or past the key's next fire (it gives way); while it waits the fire stays unfinished in a
durable store, so that a process that dies meanwhile leaves it to `recover`. Time comes from a
ManualClock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    CatchUp,
    JobContext,
    KeyedScheduler,
    KeyState,
    MemoryStore,
    Overlap,
    Reschedule,
    Retry,
    SQLiteStore,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop

from . import test_keyed_pause as pause
from .test_durable import crash, down
from .test_keyed_pause import T0, every_10s

clock, store = pause.clock, pause.store  # (the fixtures: a ManualClock; a MemoryStore, a SQLiteStore)


class Life(pause.Life):
    """A life (see test_durable) whose keys fire every 10 s; a run records (key, fire, attempt, start),
    in seconds after T0, and fails while its attempt is at most data["fail"] (every time: -1)."""

    def __init__(self, store: Any, clock: ManualClock, **kwargs: Any) -> None:
        self.attempts: list[tuple[Any, float, int, float]] = []
        kwargs.setdefault("context", True)
        kwargs.setdefault("run", self._fails)
        super().__init__(store, clock, **kwargs)

    def _fails(self, ctx: JobContext, key: Any, data: Any) -> None:
        attempt = ctx.fence.attempt  # type: ignore[union-attr]
        self.attempts.append((key, ctx.scheduled_for - T0, attempt, self.clock.wall() - T0))
        fail = (data or {}).get("fail", 0)
        if fail == -1 or attempt <= fail:
            raise RuntimeError(f"attempt {attempt} fails")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


@pytest.mark.parametrize("reschedule", [Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN])
def test_a_failed_run_is_tried_again_after_a_backoff_that_doubles(
    store: Any, clock: ManualClock, reschedule: Reschedule
) -> None:
    life = Life(store, clock, reschedule=reschedule, retry=Retry(3, backoff=1.0))
    life.keyed.upsert("k", {"fail": 2})
    life.keyed.start()
    life.advance(10)
    assert life.attempts == [("k", 10.0, 1, 10.0)]
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PENDING and info.next_run_at == at(20)
    assert info.retry_at == at(11)  # (the schedule's next fire stays the key's plan: the retry gives way)
    assert info.last_error == "RuntimeError: attempt 1 fails" and info.retry == Retry(3, 1.0, 60.0)
    life.advance(5)
    # the same fire, attempts 2 (1 s after the first ended) and 3 (2 s after the second): it succeeds
    assert life.attempts == [("k", 10.0, 1, 10.0), ("k", 10.0, 2, 11.0), ("k", 10.0, 3, 13.0)]
    assert life.keyed.stats().retried == 2 and life.keyed.stats().failed == 2
    life.advance(10)
    assert life.attempts[3:] == [("k", 20.0, 1, 20.0), ("k", 20.0, 2, 21.0), ("k", 20.0, 3, 23.0)]
    life.keyed.close()


def test_a_fire_runs_attempts_times_at_most_then_ends_failed(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, retry=Retry(2, backoff=1.0))
    life.keyed.upsert("k", {"fail": -1})
    life.keyed.start()
    life.advance(15)
    assert [(fire, attempt) for _, fire, attempt, _ in life.attempts] == [(10.0, 1), (10.0, 2)]
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == at(20)
    assert info.last_error == "RuntimeError: attempt 2 fails"
    life.keyed.close()


def test_a_retry_gives_way_to_the_next_fire(store: Any, clock: ManualClock) -> None:
    """Every 10 s, backoff 4 s: the first retry comes at 14, the second would come at 14 + 8 = 22, past
    the next fire (20): there is none, the fire of 10 ends failed, and the fire of 20 runs on time."""
    life = Life(store, clock, retry=Retry(5, backoff=4.0))
    life.keyed.upsert("k", {"fail": -1})
    life.keyed.start()
    life.advance(25)
    assert [(fire, attempt, start) for _, fire, attempt, start in life.attempts] == [
        (10.0, 1, 10.0),
        (10.0, 2, 14.0),
        (20.0, 1, 20.0),
        (20.0, 2, 24.0),
    ]
    assert life.keyed.stats().retried == 2
    life.keyed.close()


def test_the_cap_bounds_the_backoff(clock: ManualClock) -> None:
    def hourly(now: datetime, key: Any, data: Any) -> datetime:
        return datetime.fromtimestamp(T0 + ((now.timestamp() - T0) // 3600 + 1) * 3600, UTC)

    life = Life(MemoryStore(), clock, next_run=hourly, retry=Retry(6, backoff=1.0, cap=5.0))
    life.keyed.upsert("k", {"fail": -1})
    life.keyed.start()
    life.advance(3600 + 100)
    starts = [start - 3600 for _, _, _, start in life.attempts]
    assert starts == [0.0, 1.0, 3.0, 7.0, 12.0, 17.0]  # (1, 2, 4, then 5, 5: the cap)
    life.keyed.close()


def test_a_keys_own_retry_wins_and_an_upsert_without_gives_it_the_default_again(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock, retry=Retry(2))
    life.keyed.upsert("k", {"fail": -1}, retry=Retry(1))  # (one attempt: no retry)
    life.keyed.start()
    life.advance(12)
    assert [attempt for *_, attempt, _ in life.attempts] == [1]
    life.keyed.upsert("k", {"fail": -1})
    assert life.keyed.get("k").retry == Retry(2)  # type: ignore[union-attr]
    life.keyed.close()


def test_a_run_that_raises_a_base_exception_is_not_retried(clock: ManualClock) -> None:
    def exits(ctx: JobContext, key: Any, data: Any) -> None:
        raise SystemExit(3)

    life = Life(MemoryStore(), clock, run=exits, retry=Retry(3))
    life.keyed.upsert("k")
    life.keyed.start()
    with pytest.raises(SystemExit):
        life.advance(10)
    assert life.keyed.stats().retried == 0
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == at(20)
    life.keyed.close()


def test_a_pause_holds_the_retry_and_a_resume_runs_it(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(10.5)
    life.keyed.pause("k")
    life.advance(5)
    assert [attempt for *_, attempt, _ in life.attempts] == [1]
    life.keyed.resume("k")
    life.advance(0)
    assert life.attempts[-1] == ("k", 10.0, 2, 15.5)  # (the retry, first in line)
    life.keyed.close()


def test_a_removed_or_upserted_key_drops_its_retry(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("a", {"fail": -1})
    life.keyed.upsert("b", {"fail": -1})
    life.keyed.start()
    life.advance(10.5)
    life.keyed.remove("a")
    life.keyed.upsert("b", {"fail": 0})
    life.advance(9)
    assert [(key, fire, attempt) for key, fire, attempt, _ in life.attempts] == [
        ("a", 10.0, 1),
        ("b", 10.0, 1),
    ]
    life.keyed.close()


def test_a_retry_waiting_in_a_file_survives_a_crash_and_counts_on(tmp_path: Path, clock: ManualClock) -> None:
    """The process dies during the backoff: the fire was left unfinished, so the next life reruns it
    (recover=RERUN), its attempt one more; the file's fire log counts every attempt."""
    path = tmp_path / "keys.db"
    first = Life(SQLiteStore(path), clock, retry=Retry(5, backoff=2.0))
    first.keyed.upsert("k", {"fail": 2})
    first.keyed.start()
    first.advance(12.5)  # attempts 1 (at 10) and 2 (at 12) failed; the third waits until 16
    assert [attempt for *_, attempt, _ in first.attempts] == [1, 2]
    crash(first)
    look = SQLiteStore(path)
    fires = look.load()[1]
    look.close()
    assert [(f.scheduled_for / 1e6 - T0, f.attempts) for f in fires] == [(10.0, 2)]  # (unfinished)
    down(clock, 1)
    second = Life(SQLiteStore(path), clock, retry=Retry(5, backoff=2.0))
    second.keyed.start()
    second.advance(0)
    assert second.attempts == [("k", 10.0, 3, 13.5)]
    assert second.keyed.stats().recovered == 1
    second.keyed.close()


def test_bad_retries_name_the_argument_and_change_nothing(store: Any, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        Retry(0)
    with pytest.raises(TypeError, match="attempts must be an int"):
        Retry(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backoff must be > 0"):
        Retry(2, backoff=0)
    with pytest.raises(ValueError, match="cap must be > 0 seconds and at most 1000000000"):
        Retry(2, cap=float("inf"))
    with pytest.raises(TypeError, match="backoff must be a number"):
        Retry(2, backoff="1")  # type: ignore[arg-type]
    life = Life(store, clock)
    life.keyed.upsert("k", retry=Retry(2))
    before = life.keyed.get("k")
    with pytest.raises(TypeError, match="retry must be a Retry"):
        life.keyed.upsert("k", {"v": 2}, retry=3)  # type: ignore[arg-type]
    assert life.keyed.get("k") == before
    with pytest.raises(TypeError, match="retry must be a Retry"):
        Life(store, clock, retry=(3, 1.0, 2.0))
    life.keyed.close()


class ALife:
    """An AsyncScheduler on virtual time (BEFORE_RUN, every 10 s). A run of (fire, attempt) lasts
    plan[(fire, attempt)][0] seconds (stopping early, failed, if told to by ctx.cancelled) and fails if
    plan[...][1]; `attempts` lists (key, fire, attempt, start), in seconds after T0."""

    def __init__(self, store: Any, plan: dict[tuple[float, int], tuple[float, bool]], **kwargs: Any) -> None:
        self.loop = VirtualTimeLoop(100.0, wall=T0)
        self.sched = AsyncScheduler(loop=self.loop)
        self.plan = plan
        self.attempts: list[tuple[Any, float, int, float]] = []
        kwargs.setdefault("reschedule", Reschedule.BEFORE_RUN)
        self.keyed = KeyedScheduler(self.sched, every_10s, self._run, context=True, store=store, **kwargs)

    def now(self) -> float:
        return self.loop.wall() - T0

    async def _run(self, ctx: JobContext, key: Any, data: Any) -> None:
        fire, attempt = ctx.scheduled_for - T0, ctx.fence.attempt  # type: ignore[union-attr]
        self.attempts.append((key, fire, attempt, self.now()))
        duration, fails = self.plan.get((fire, attempt), (0.0, False))
        end = self.now() + duration
        while self.now() < end:
            await asyncio.sleep(min(0.25, end - self.now()))
            if ctx.cancelled.is_set():
                raise RuntimeError("cancelled")
        if fails:
            raise RuntimeError(f"fire {fire} attempt {attempt} fails")

    def started(self) -> list[tuple[float, int, float]]:
        return [(fire, attempt, start) for _, fire, attempt, start in self.attempts]

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def close(self) -> None:
        self.loop.run_until_complete(self.keyed.aclose())
        self.loop.run_until_complete(self.sched.close())
        self.loop.close()


def _store(kind: str, tmp_path: Path) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "k.db")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_fire_that_fails_after_a_newer_fire_of_its_key_began_is_not_retried(
    kind: str, tmp_path: Path
) -> None:
    """Overlap.ALLOW: the fire of 10 runs until 22 and fails; the fire of 20 began beside it at 20. The
    older fire gives way to the newer one: no retry, neither while the fire of 20 runs nor after it."""
    for twenty in (3.0, 8.0):  # (the fire of 20 ends before the retry's time, or after)
        life = ALife(
            _store(kind, tmp_path / str(twenty)),
            {(10.0, 1): (12.0, True), (20.0, 1): (twenty, False)},
            overlap=Overlap.ALLOW,
            retry=Retry(3, backoff=3.0),
        )
        life.keyed.upsert("k")
        life.keyed.start()
        life.advance(29)
        try:
            assert life.started() == [(10.0, 1, 10.0), (20.0, 1, 20.0)]
            assert life.keyed.stats().retried == 0
        finally:
            life.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_run_replaced_by_a_newer_fire_is_not_retried(kind: str, tmp_path: Path) -> None:
    """Overlap.REPLACE: the fire of 20 tells the run of 10 to stop, and it stops by raising: the newer
    fire won, and the replaced one is not tried again after it."""
    life = ALife(
        _store(kind, tmp_path),
        {(10.0, 1): (30.0, False), (20.0, 1): (2.0, False)},
        overlap=Overlap.REPLACE,
        retry=Retry(3, backoff=1.0),
    )
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(29)
    try:
        assert life.started() == [(10.0, 1, 10.0), (20.0, 1, 20.0)]
    finally:
        life.close()


def _once(now: datetime, key: Any, data: Any) -> datetime | None:
    """One fire, at T0 + 10."""
    return datetime.fromtimestamp(T0 + 10, UTC) if now.timestamp() < T0 + 10 else None


def test_a_retry_decades_away_keeps_the_key_and_its_file_readable(tmp_path: Path, clock: ManualClock) -> None:
    """A one-off key (nothing to give way to) retried 1e9 s (the most a backoff may be) after it
    failed: get() shows when, and the file's row keeps the key's own plan (none), so the next life reads
    it, and reruns the fire left unfinished."""
    with pytest.raises(ValueError, match="backoff must be > 0 seconds and at most"):
        Retry(2, backoff=1e12)
    path = tmp_path / "k.db"
    life = Life(SQLiteStore(path), clock, next_run=_once, retry=Retry(2, backoff=1e9, cap=1e9))
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(11)
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at is None and info.retry_at == at(10 + 1e9)
    crash(life)
    again = Life(SQLiteStore(path), clock, next_run=_once, retry=Retry(2, backoff=1e9, cap=1e9))
    again.keyed.start()
    again.advance(0)
    assert again.attempts == [("k", 10.0, 2, 11.0)]  # (the fire left unfinished: rerun, an attempt more)
    again.keyed.close()


def test_a_retry_is_not_told_late_for_its_fires_time_but_for_its_own() -> None:
    """The fire of 10 began on time and failed; its retry is due at 13 (backoff 3 s) and begins then:
    nothing is late (the first attempt's check, at 12, finds nothing waiting). A retry that does not
    begin within the grace of its own time is told."""
    clock = ManualClock(0.0, wall=T0)
    late: list[tuple[float, float]] = []
    life = Life(
        MemoryStore(),
        clock,
        retry=Retry(3, backoff=3.0),
        late_grace=2.0,
        on_late=lambda key, when, by: late.append((when.timestamp() - T0, clock.wall() - T0)),
    )
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(18)
    assert [(f, a, s) for _, f, a, s in life.attempts] == [(10.0, 1, 10.0), (10.0, 2, 13.0)]
    assert late == [] and life.keyed.stats().late == 0
    life.keyed.close()


def test_a_trigger_during_a_retrys_backoff_runs_at_once_and_the_retry_gives_way(clock: ManualClock) -> None:
    def every_100s(now: datetime, key: Any, data: Any) -> datetime:
        return datetime.fromtimestamp(T0 + ((now.timestamp() - T0) // 100 + 1) * 100, UTC)

    life = Life(MemoryStore(), clock, next_run=every_100s, retry=Retry(3, backoff=30.0))
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(102)
    when = life.keyed.trigger("k")
    assert when is not None and when.timestamp() - T0 == 102.0
    life.advance(50)
    # (the trigger's run fails too: it is retried in its turn; the fire of 100's retry gave way to it)
    assert [(f, a, s) for _, f, a, s in life.attempts] == [
        (100.0, 1, 100.0),
        (102.0, 1, 102.0),
        (102.0, 2, 132.0),
    ]
    assert life.keyed.stats().retried == 1
    life.keyed.close()


def test_a_run_that_fails_while_its_key_is_paused_is_retried_after_the_resume(clock: ManualClock) -> None:
    def pauses_then_fails(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if ctx.fence.attempt == 1:  # type: ignore[union-attr]
            life.keyed.pause("k")  # (the operator pauses the key while its run goes)
            raise RuntimeError("fails")

    life = Life(MemoryStore(), clock, run=pauses_then_fails, retry=Retry(3, backoff=1.0))
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10.5)
    life.keyed.resume("k")
    life.advance(2)
    assert [(f, a) for _, f, a, _ in life.attempts] == [(10.0, 1), (10.0, 2)]
    life.keyed.close()


def test_a_sqlite_store_forgets_the_fires_it_took_once_they_end(tmp_path: Path, clock: ManualClock) -> None:
    """(It keeps those of this life not finished yet, to know a take asked again: not every fire ever.)"""
    store = SQLiteStore(tmp_path / "k.db")
    life = Life(store, clock)
    life.keyed.replace_all({i: None for i in range(10)})
    life.keyed.start()
    life.advance(1000)
    assert len(store._taken) == 0  # (100 fires of each key, every one finished)
    life.keyed.close()


@pytest.mark.parametrize("catch_up", [CatchUp.ALL, CatchUp.ONCE, CatchUp.SKIP])
def test_a_crash_during_a_retrys_backoff_reruns_the_fire_and_runs_no_other(
    tmp_path: Path, clock: ManualClock, catch_up: CatchUp
) -> None:
    """The key's row keeps its schedule's plan (20) while the retry waits (14), so the next life finds no
    fire of 14 (no point of the schedule) to run or to report missed: it reruns the fire of 10 only."""
    path = tmp_path / "k.db"
    first = Life(SQLiteStore(path), clock, retry=Retry(3, backoff=4.0), catch_up=catch_up)
    first.keyed.upsert("k", {"fail": 1})
    first.keyed.start()
    first.advance(11)
    crash(first)
    down(clock, 5)  # (back at 16)
    second = Life(SQLiteStore(path), clock, retry=Retry(3, backoff=4.0), catch_up=catch_up)
    second.keyed.start()
    second.advance(3)
    assert [(f, a) for _, f, a, _ in second.attempts] == [(10.0, 2)]
    assert second.missed == []
    assert second.keyed.get("k").runs == 1  # type: ignore[union-attr]
    second.keyed.close()


def test_a_wall_clock_jump_past_the_next_fire_runs_that_fire_and_the_retry_gives_way(
    clock: ManualClock,
) -> None:
    """The fire of 10 fails; its retry is due at 13; at 11 the wall clock jumps to 25: the fire of 20
    runs (late), and the retry of the older fire gives way to it."""
    life = Life(MemoryStore(), clock, retry=Retry(3, backoff=3.0))
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(11)
    clock.set_wall(clock.wall() + 14)
    life.advance(1)
    assert [(f, a) for _, f, a, _ in life.attempts] == [(10.0, 1), (20.0, 1)]
    life.keyed.close()


def test_close_during_a_retrys_backoff_leaves_the_fire_to_the_next_life(
    tmp_path: Path, clock: ManualClock
) -> None:
    """close() takes the waiting retry back and leaves its fire unfinished in the file: the next life
    reruns it (recover=RERUN), an attempt more; the closed one runs nothing after close()."""
    path = tmp_path / "keys.db"
    first = Life(SQLiteStore(path), clock, retry=Retry(3, backoff=4.0))
    first.keyed.upsert("k", {"fail": 1})
    first.keyed.start()
    first.advance(11)
    first.keyed.close()
    first.advance(10)
    assert [(f, a) for _, f, a, _ in first.attempts] == [(10.0, 1)]
    second = Life(SQLiteStore(path), clock, retry=Retry(3, backoff=4.0))
    second.keyed.start()
    second.advance(0)
    assert [(f, a) for _, f, a, _ in second.attempts] == [(10.0, 2)]
    second.keyed.close()


def test_a_retry_runs_on_a_worker_of_a_threaded_scheduler(clock: ManualClock) -> None:
    import threading

    from timerwheel import ThreadedScheduler

    done = threading.Event()
    attempts: list[int] = []

    def run(ctx: JobContext, key: Any, data: Any) -> None:
        attempts.append(ctx.fence.attempt)  # type: ignore[union-attr]
        if ctx.fence.attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails")
        done.set()

    sched = ThreadedScheduler(clock=clock, workers=2)
    keyed = KeyedScheduler(sched, every_10s, run, context=True, retry=Retry(2, backoff=1.0))
    keyed.upsert("k")
    keyed.start()
    try:
        clock.advance(10)
        for _ in range(1000):  # (each step waits for the worker to have ended the first run: at most 10 s)
            if keyed.stats().failed == 1:
                break
            done.wait(0.01)
        clock.advance(1)
        assert done.wait(10), attempts
        assert attempts == [1, 2] and keyed.stats().retried == 1
    finally:
        keyed.close()
        sched.close()


def test_a_retry_counts_its_backoff_from_the_fires_time_when_the_wall_clock_stepped_back_during_the_run(
    store: Any, clock: ManualClock
) -> None:
    """The fire of 10 runs, the wall clock steps back 8 s meanwhile, and the run fails at wall 2: its
    retry comes 1 s after the fire's time (11), not at 3, before the fire it tries again; and it is an
    attempt of its own (2), not taken as the first one again."""

    def steps_back(ctx: JobContext, key: Any, data: Any) -> None:
        life.attempts.append((key, ctx.scheduled_for - T0, ctx.fence.attempt, clock.wall() - T0))  # type: ignore[union-attr]
        if ctx.fence.attempt == 1:  # type: ignore[union-attr]
            clock.set_wall(clock.wall() - 8)
            raise RuntimeError("fails")

    life = Life(store, clock, run=steps_back, retry=Retry(3, backoff=1.0))
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(10)
    info = life.keyed.get("k")
    assert info is not None and info.retry_at == at(11)
    life.advance(9)  # (wall 11)
    assert [(f, a, s) for _, f, a, s in life.attempts] == [(10.0, 1, 10.0), (10.0, 2, 11.0)]
    life.keyed.close()
