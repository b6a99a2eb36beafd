"""The driver contract: what every driver does the same way, on every timer store.

Each test runs over ThreadedScheduler with workers=0 and workers=2 and over AsyncScheduler, each on the
Cython wheel, the pure-Python wheel and the heap store. A Harness hides how a driver is driven: time comes
from a ManualClock (threads) or a VirtualTimeLoop (asyncio), and advance() moves it and returns once
everything due has run. Nothing sleeps. What only one driver does is in test_threaded.py and
test_asyncio.py.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from timerwheel import (
    AlreadyRunningError,
    AsyncScheduler,
    Backpressure,
    ClockError,
    ClosedError,
    HeapScheduler,
    JobContext,
    JobEvent,
    Missed,
    NotStartedError,
    RepeatMode,
    Scheduler,
    ThreadedScheduler,
)
from timerwheel._drivers import DriverBase
from timerwheel._engine.heap import HeapQueue
from timerwheel._types import DRIVER_MISSED, ENGINE_MISSED, Lifecycle
from timerwheel.testing import ManualClock, VirtualTimeLoop, wait_until_idle

from .conftest import BACKENDS

GENEROUS = 10.0  # seconds a blocked test thread may wait before the test fails instead of hanging
START = 50.0


class Held:
    """A job that runs until release() (a thread's Event, or an asyncio Event for coroutine jobs)."""

    def __init__(self, job: Callable[..., Any], release: Callable[[], None], started: Callable[[int], None]):
        self.job = job
        self.release = release
        self.started = started  # started(n): wait until n runs of it have begun


class Harness:
    """One driver under test, and the means to drive it deterministically."""

    name = ""
    concurrent = False  # runs of the same task may overlap (a pool or tasks), and jobs can be held open

    def __init__(self, store: str) -> None:
        self.store_kind = store
        self.made: list[Any] = []

    def store(self, start: float) -> Any:
        if self.store_kind == "heap":
            return HeapQueue(start)
        core = BACKENDS[self.store_kind]
        if core is None:
            pytest.skip("the Cython backend is disabled (TIMERWHEEL_NO_EXTENSIONS) or not built")
        return core.TimerWheel(0.001, start=start)

    def make(self, **kwargs: Any) -> Any:
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def advance(self, seconds: float, held: int = 0) -> None:
        """Move time and return once everything due by then has run, and every run has finished but the
        `held` ones (jobs that wait for a release)."""
        raise NotImplementedError

    def move(self, seconds: float) -> None:
        """Move time and let the driver take it in, waiting for nothing."""
        raise NotImplementedError

    def stall(self, seconds: float) -> None:
        """The process stalls (a GC pause, a suspended laptop): time jumps with nothing run meanwhile."""
        raise NotImplementedError

    def settle(self) -> None:
        self.advance(0.0)

    def hold(self) -> Held:
        """A job that runs until released."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Threads(Harness):
    def __init__(self, store: str, workers: int) -> None:
        super().__init__(store)
        self.workers = workers
        self.concurrent = workers > 1
        self.name = f"threaded-{workers}"
        self.clock = ManualClock(START)

    def make(self, **kwargs: Any) -> Any:
        kwargs.setdefault("workers", self.workers)
        if "max_concurrency" in kwargs:  # the contract's slot bound, in this driver's terms
            kwargs["workers"] = kwargs.pop("max_concurrency")
            kwargs.setdefault("queue_size", 1)
        sched = ThreadedScheduler(clock=self.clock, store=self.store(START), **kwargs)
        sched.start()
        self.made.append(sched)
        return sched

    def now(self) -> float:
        return self.clock()

    def advance(self, seconds: float, held: int = 0) -> None:
        self.clock.advance(seconds)
        for sched in self.made:
            if held:
                _dispatched(sched, held)
            else:
                wait_until_idle(sched)

    def move(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def stall(self, seconds: float) -> None:
        self.advance(seconds)  # the driver sleeps through it: it wakes once, after

    def hold(self) -> Held:
        release = threading.Event()
        begun = threading.Semaphore(0)

        def job(*args: Any) -> None:
            begun.release()
            assert release.wait(GENEROUS)

        def started(n: int) -> None:
            for _ in range(n):
                assert begun.acquire(timeout=GENEROUS), "a held job did not start"

        return Held(job, release.set, started)

    def close(self) -> None:
        for sched in self.made:
            sched.close()


class Loop(Harness):
    name = "asyncio"
    concurrent = True

    def __init__(self, store: str) -> None:
        super().__init__(store)
        self.loop = VirtualTimeLoop(START)

    def make(self, **kwargs: Any) -> Any:
        if kwargs.get("backpressure") is Backpressure.RUN_INLINE:
            pytest.skip("AsyncScheduler cannot run a coroutine job inline")
        kwargs.pop("queue_size", None)
        sched = AsyncScheduler(loop=self.loop, store=self.store(self.loop.time()), **kwargs)
        sched.start()
        self.made.append(sched)
        return sched

    def now(self) -> float:
        return self.loop.time()

    def advance(self, seconds: float, held: int = 0) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))
        for _ in range(3):  # let the tasks that just finished report
            self.loop.run_until_complete(asyncio.sleep(0))

    def move(self, seconds: float) -> None:
        self.advance(seconds, held=1)

    def stall(self, seconds: float) -> None:
        self.loop._virtual.now += seconds  # the loop's clock jumps; nothing ran meanwhile
        self.advance(0.0)

    def hold(self) -> Held:
        release = asyncio.Event()
        begun = [0]

        async def job(*args: Any) -> None:
            begun[0] += 1
            await release.wait()

        def started(n: int) -> None:
            for _ in range(3):
                self.loop.run_until_complete(asyncio.sleep(0))
            assert begun[0] >= n, "a held job did not start"

        return Held(job, release.set, started)

    def close(self) -> None:
        for sched in self.made:
            self.loop.run_until_complete(sched.close())
        self.loop.close()


def _dispatched(sched: ThreadedScheduler, held: int) -> None:
    """Wait until the driver sleeps again, with nothing due, while `held` runs may still be running."""
    with sched._lock:
        for _ in range(int(GENEROUS / 0.05)):
            due = sched._engine.next_due()
            asleep = sched._sleep_until != -math.inf and not sched._woken
            stats = sched._engine.stats()  # (the engine's queued: every run taken and not started)
            if asleep and (due is None or due > sched._clock()) and stats.running + stats.queued <= held:
                return
            sched._idle_changed.wait(0.05)
    raise AssertionError("the driver did not go back to sleep")


HARNESSES = [
    (lambda store: Threads(store, 0), "threaded-0"),
    (lambda store: Threads(store, 2), "threaded-2"),
    (Loop, "asyncio"),
]


@pytest.fixture(
    params=[(h, s) for h in HARNESSES for s in ("cython", "python", "heap")],
    ids=lambda p: f"{p[0][1]}-{p[1]}",
)
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    (factory, _), store = request.param
    harness = factory(store)
    yield harness
    harness.close()


def recorder(h: Harness, log: list[Any], name: str) -> Callable[..., None]:
    return lambda *args: log.append((name, h.now()))


# -- lifecycle ------------------------------------------------------------------------------------------


def test_lifecycle(h: Harness) -> None:
    sched = h.make()
    with pytest.raises(AlreadyRunningError):
        sched.start()
    tid = sched.schedule(1, print)
    assert sched.pending()[0].id == tid
    h.close()
    with pytest.raises(ClosedError):
        sched.schedule(1, print)
    with pytest.raises(ClosedError):
        sched.start()
    assert sched.stats().pending == 0 and sched.pending() == []
    h.made.clear()


def test_scheduling_before_start_is_refused(h: Harness) -> None:
    sched = h.make()
    h.close()
    h.made.clear()
    fresh = type(sched)(**({"clock": h.clock} if isinstance(h, Threads) else {"loop": h.loop}))  # type: ignore[attr-defined]
    with pytest.raises(NotStartedError):
        fresh.schedule(1, print)
    with pytest.raises(NotStartedError):
        fresh.cancel(1)
    assert fresh.stats().pending == 0


def test_the_hot_record_follows_the_state_and_the_clock_fault(h: Harness) -> None:
    """schedule(), cancel() and reschedule() read the driver's state from its hot record (C fields in the
    compiled build): it must say exactly what `_state` and `_fault` say, at every step, or a closed or
    faulted driver would accept work that never runs."""

    def check(sched: Any) -> None:
        running = sched._state is Lifecycle.RUNNING
        assert sched._hot.running is running
        assert sched._hot.accepting is (running and sched._fault is None)

    sched = h.make()
    check(sched)
    tid = sched.schedule(5, print)
    with sched._lock:  # (a driver thread would clear the fault at its next pass: its clock works)
        sched._clock_failed(OSError("no clock"), 0.5)  # what a driver's loop does when its clock fails
        check(sched)
        with pytest.raises(ClockError):
            sched.schedule(1, print)
        with pytest.raises(ClockError):
            sched.reschedule(tid, 1)
        sched._set_fault(None)  # what the loop does once it reads its clock again
        check(sched)
    assert sched.reschedule(tid, 2)
    h.close()
    check(sched)
    for call in (
        lambda: sched.schedule(1, print),
        lambda: sched.cancel(tid),
        lambda: sched.reschedule(tid, 1),
    ):
        with pytest.raises(ClosedError):
            call()
    h.made.clear()


# -- ordering -------------------------------------------------------------------------------------------


def test_earliest_first_ties_in_schedule_order(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    sched.schedule(3, recorder(h, log, "c"))
    sched.schedule(1, recorder(h, log, "a"))
    sched.schedule(3, recorder(h, log, "d"))
    sched.schedule_at(START + 1, recorder(h, log, "b"))
    h.advance(5)
    assert [name for name, _ in log] == ["a", "b", "c", "d"]


def test_never_early_and_exact_when_on_time(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    sched.schedule(2.5, recorder(h, log, "x"))
    h.advance(2.4999)
    assert log == []
    h.advance(0.0001)
    assert log == [("x", START + 2.5)] or (log[0][0] == "x" and log[0][1] >= START + 2.5)


def test_a_due_task_that_a_job_schedules_runs_in_the_same_pass(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    sched.schedule(1, lambda: sched.schedule(0, recorder(h, log, "spawned")))
    h.advance(1)
    assert [name for name, _ in log] == ["spawned"]


def test_a_stall_is_caught_up_once(h: Harness) -> None:
    events: list[JobEvent] = []
    sched = h.make(observer=events.append)  # Missed.SKIP, the drivers' default: the grid is kept
    log: list[Any] = []
    sched.schedule(1, recorder(h, log, "once"))
    tid = sched.schedule(1, recorder(h, log, "every"), 1.0)
    h.stall(10.5)
    assert sorted(name for name, _ in log) == ["every", "once"]  # late by nine periods: once, no burst
    assert sched.next_fire_time(tid) == START + 11.0
    assert sorted(e.lateness for e in events) == [9.5, 9.5]


# -- repeat modes ---------------------------------------------------------------------------------------


def test_fixed_rate_keeps_the_grid(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    sched.schedule(1, recorder(h, log, "r"), 2.0)
    for step in (1, 2, 2):
        h.advance(step)
    assert [t for _, t in log] == [START + 1, START + 3, START + 5]


def test_fixed_delay_waits_for_the_run(h: Harness) -> None:
    sched = h.make()
    if h.concurrent:
        held = h.hold()
        tid = sched.schedule(1, held.job, 2.0, mode=RepeatMode.FIXED_DELAY)
        h.advance(1, held=1)
        held.started(1)
        assert sched.next_fire_time(tid) is None  # not armed while it runs
        h.advance(5, held=1)
        assert sched.stats().running == 1
        held.release()
        h.settle()
        assert sched.next_fire_time(tid) == START + 8.0  # finished at 56, + 2
    else:
        tid = sched.schedule(1, lambda: h.clock.advance(0.25), 2.0, mode=RepeatMode.FIXED_DELAY)  # type: ignore[attr-defined]
        h.advance(1)
        assert sched.next_fire_time(tid) == START + 1.25 + 2.0


def test_skip_if_running_skips_and_counts(h: Harness) -> None:
    if not h.concurrent:
        pytest.skip("runs of one task cannot overlap on a single driver thread")
    events: list[JobEvent] = []
    sched = h.make(observer=events.append)
    held = h.hold()
    sched.schedule(1, held.job, 1.0, mode=RepeatMode.SKIP_IF_RUNNING)
    h.advance(1, held=1)
    held.started(1)
    h.advance(1, held=1)
    assert sched.stats().skipped == 1 and [e.skipped for e in events] == [True]
    held.release()
    h.settle()


def test_fixed_rate_runs_overlap_when_they_can(h: Harness) -> None:
    if not h.concurrent:
        pytest.skip("runs of one task cannot overlap on a single driver thread")
    sched = h.make()
    held = h.hold()
    sched.schedule(1, held.job, 1.0)
    h.advance(1, held=1)
    held.started(1)
    h.advance(1, held=2)
    held.started(1)
    assert sched.stats().running == 2
    held.release()
    h.settle()
    assert sched.stats().running == 0 and sched.stats().executed == 2


# -- cancel, reschedule, backpressure -----------------------------------------------------------------


def test_cancel_true_means_never_runs(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    tid = sched.schedule(1, recorder(h, log, "x"), 1.0)
    assert sched.cancel(tid) and not sched.cancel(tid)
    h.advance(5)
    assert log == [] and sched.stats().cancelled == 1


def test_reschedule_moves_the_next_run(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    tid = sched.schedule(1, recorder(h, log, "x"))
    assert sched.reschedule(tid, 5)
    h.advance(1)
    assert log == []
    h.advance(4)
    assert log == [("x", START + 5)]
    assert not sched.reschedule(tid, 1)


def test_drop_beyond_the_bound(h: Harness) -> None:
    if not h.concurrent:
        pytest.skip("workers=0 runs every job itself")
    events: list[JobEvent] = []
    sched = h.make(max_concurrency=1, backpressure=Backpressure.DROP, observer=events.append)
    held = h.hold()
    for _ in range(4):
        sched.schedule(1, held.job)
    h.advance(1, held=2)
    held.started(1)
    bound = 1 + (1 if isinstance(h, Threads) else 0)  # threads: one more waits in the queue (queue_size=1)
    assert sched.stats().dropped == 4 - bound and sum(e.dropped for e in events) == 4 - bound
    held.release()
    h.settle()
    assert sched.stats().executed == bound


def test_fixed_delay_never_overlaps_even_when_rescheduled(h: Harness) -> None:
    """A reschedule() while a FIXED_DELAY run goes on moves the next run to the new due, or, when that
    comes first, to the moment the run finishes: never beside it."""
    if not h.concurrent:
        pytest.skip("runs of one task cannot overlap on a single driver thread")
    sched = h.make()
    held = h.hold()
    starts: list[float] = []

    def job() -> Any:
        starts.append(h.now())
        return held.job()

    tid = sched.schedule(1, job, 2.0, mode=RepeatMode.FIXED_DELAY)
    h.advance(1, held=1)
    held.started(1)
    assert sched.reschedule(tid, 0.5)
    h.advance(1, held=1)  # the new due passes while the run goes on
    assert sched.stats().running == 1 and starts == [START + 1]
    held.release()
    h.settle()
    assert starts == [START + 1, START + 2]  # right after the first run finished, at START + 2
    assert sched.next_fire_time(tid) == START + 4 and sched.stats().running == 0
    assert sched.reschedule(tid, 10) and sched.next_fire_time(tid) == START + 12  # the override is spent


def test_reschedule_of_a_one_shot_waiting_for_a_slot_moves_it(h: Harness) -> None:
    if not h.concurrent:
        pytest.skip("workers=0 runs every job itself")
    sched = h.make(max_concurrency=1)
    held = h.hold()
    log: list[Any] = []
    record = recorder(h, log, "b")

    async def record_in_a_slot() -> None:  # (only coroutine jobs take AsyncScheduler's slots)
        record()

    sched.schedule(1, held.job)
    b = sched.schedule(1, record_in_a_slot if isinstance(h, Loop) else record)
    h.advance(1, held=2)
    held.started(1)
    assert sched.stats().queued == 1  # b waits for the slot
    assert sched.reschedule(b, 3)
    assert sched.stats().queued == 0 and sched.next_fire_time(b) == START + 4
    held.release()
    h.settle()
    assert log == []  # the waiting run was superseded
    h.advance(3)
    assert log == [("b", START + 4)] and sched.stats().pending == 0


def test_block_runs_everything_in_due_order(h: Harness) -> None:
    if not h.concurrent:
        pytest.skip("workers=0 runs every job itself")
    sched = h.make(max_concurrency=1, backpressure=Backpressure.BLOCK)
    held = h.hold()
    log: list[Any] = []
    sched.schedule(1, held.job)
    for name in "abc":
        sched.schedule(1, recorder(h, log, name))
    h.move(1)  # threads: the driver itself waits for room (BLOCK), so nothing is waited for here
    held.started(1)
    held.release()
    h.settle()
    assert [name for name, _ in log] == ["a", "b", "c"] and sched.stats().dropped == 0


# -- errors, contexts, timeouts -------------------------------------------------------------------------


def test_job_errors_never_stop_anything(h: Harness, caplog: Any) -> None:
    handled: list[tuple[int, str]] = []
    sched = h.make(error_handler=lambda tid, exc: handled.append((tid, type(exc).__name__)))
    log: list[Any] = []

    def boom() -> None:
        raise ValueError("boom")

    bad = sched.schedule(1, boom, 1.0)
    sched.schedule(1, recorder(h, log, "ok"))
    with caplog.at_level(logging.ERROR, logger="timerwheel"):
        h.advance(1)
    assert [name for name, _ in log] == ["ok"]
    assert handled == [(bad, "ValueError")] and f"task {bad}: boom" in sched.errors
    assert sched.next_fire_time(bad) == START + 2.0  # still re-armed
    assert "task 1 failed" in caplog.text


def test_an_observer_that_raises_is_logged(h: Harness, caplog: Any) -> None:
    def observer(event: JobEvent) -> None:
        raise RuntimeError("observer broke")

    sched = h.make(observer=observer)
    log: list[Any] = []
    sched.schedule(1, recorder(h, log, "a"))
    sched.schedule(1, recorder(h, log, "b"))
    with caplog.at_level(logging.ERROR, logger="timerwheel"):
        h.advance(1)
    assert [name for name, _ in log] == ["a", "b"] and "the observer raised" in caplog.text


def test_context_and_timeout(h: Harness, caplog: Any) -> None:
    events: list[JobEvent] = []
    sched = h.make(observer=events.append)
    seen: list[JobContext] = []
    if isinstance(h, Loop):

        async def job(ctx: JobContext) -> None:
            seen.append(ctx)
            await asyncio.sleep(10)  # cancelled at its deadline
    else:

        def job(ctx: JobContext) -> None:  # type: ignore[misc]
            seen.append(ctx)
            h.clock.advance(3)  # type: ignore[attr-defined]  # a run that takes 3 s
            if h.concurrent:  # a cooperative job: it returns once told it is past its deadline
                assert ctx.cancelled.wait(GENEROUS)

    tid = sched.schedule(1, job, context=True, timeout=2.0)
    with caplog.at_level(logging.WARNING, logger="timerwheel"):
        if isinstance(h, Loop):
            h.advance(1, held=1)
            h.advance(1.5, held=1)
            assert sched.stats().running == 1 and not seen[0].cancelled.is_set()  # 1.5 s in: not yet
        else:
            h.advance(1)
        h.advance(5)
    assert "past its timeout" in caplog.text
    (ctx,) = seen
    assert ctx.task_id == tid and ctx.scheduled_for == START + 1 and ctx.timeout == 2.0
    assert events[-1].timed_out
    if h.concurrent or isinstance(h, Loop):
        assert ctx.timed_out and ctx.cancelled.is_set()


def test_close_discards_pending_and_tells_running_jobs(h: Harness) -> None:
    sched = h.make()
    log: list[Any] = []
    sched.schedule(60, recorder(h, log, "never"), 1.0)
    if h.concurrent:
        held = h.hold()
        sched.schedule(1, held.job)
        h.advance(1, held=1)
        held.started(1)
        held.release()
    h.close()
    h.made.clear()
    assert sched.stats().pending == 0 and sched.pending() == [] and log == []


# -- validation -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s: s.schedule(-1, print), ValueError, "delay must be >= 0"),
        (lambda s: s.schedule(math.nan, print), ValueError, "delay must be finite"),
        (lambda s: s.schedule("1", print), TypeError, "delay must be a real number, not str"),
        (lambda s: s.schedule(True, print), TypeError, "delay must be a real number, not bool"),
        (lambda s: s.schedule(1, 3), TypeError, "fn must be callable"),
        (lambda s: s.schedule(1, print, 0), ValueError, "interval must be > 0"),
        (lambda s: s.schedule(1, print, mode="fixed_rate"), TypeError, "mode must be a RepeatMode"),
        (lambda s: s.schedule(1, print, missed="skip"), TypeError, "missed must be a Missed"),
        (lambda s: s.schedule(1, print, context=1), TypeError, "context must be a bool"),
        (lambda s: s.schedule(1, print, timeout=0), ValueError, "timeout must be > 0"),
        (lambda s: s.schedule(1, print, timeout="x"), TypeError, "timeout must be a real number"),
        (lambda s: s.schedule_at(math.inf, print), ValueError, "when must be finite"),
        (lambda s: s.cancel("1"), TypeError, "task_id must be an int, not str"),
        (lambda s: s.cancel(True), TypeError, "task_id must be an int, not bool"),
        (lambda s: s.reschedule(1, -1), ValueError, "delay must be >= 0"),
    ],
)
def test_bad_input_is_named_and_changes_nothing(
    h: Harness, call: Callable[[Any], Any], error: type[Exception], message: str
) -> None:
    sched = h.make()
    sched.schedule(5, print)
    before = (sched.pending(), sched.stats())
    with pytest.raises(error, match=message):
        call(sched)
    assert (sched.pending(), sched.stats()) == before
    assert sched.schedule(1, print) == 2  # no id was taken by the failed call


@pytest.mark.parametrize("missed", list(Missed))
def test_the_missed_policy_is_the_drivers_default_or_the_tasks(h: Harness, missed: Missed) -> None:
    sched = h.make(missed=missed)
    default = sched.schedule(1, print, 1.0)
    other = Missed.SKIP if missed is Missed.DELAY else Missed.DELAY
    own = sched.schedule(1, print, 1.0, missed=other)
    h.stall(10.5)
    after = {Missed.DELAY: START + 10.5 + 1.0, Missed.SKIP: START + 11.0}
    assert sched.next_fire_time(default) == after[missed] and sched.next_fire_time(own) == after[other]


# -- cancelling a one-shot while it runs ----------------------------------------------------------------


def test_a_one_shot_that_cancels_itself_while_it_runs_is_cancelled(h: Harness) -> None:
    """On every driver, a one-shot job cancelling its own task gets True, then False (it got False at
    once): a running one-shot is not finished. The cancel is counted; it never runs again."""
    sched = h.make()
    seen: list[bool] = []
    box: list[int] = []

    def job() -> None:
        seen.extend((sched.cancel(box[0]), sched.cancel(box[0])))

    box.append(sched.schedule(1, job))
    h.advance(1)
    h.advance(10)
    assert seen == [True, False]
    stats = sched.stats()
    assert (stats.cancelled, stats.executed, stats.running, stats.pending) == (1, 1, 0, 0)
    assert sched.cancel(box[0]) is False


def test_a_running_one_shot_can_be_cancelled_from_outside(h: Harness) -> None:
    """cancel() of a one-shot whose run is going on (held open) is True; the run is not interrupted, and
    the task does not run again. A recurring task cancelled while it runs: the same."""
    if not h.concurrent:
        pytest.skip("a run held open while the test calls needs a worker or a task")
    sched = h.make()
    held = h.hold()
    one = sched.schedule(1, held.job)
    every = sched.schedule(1, held.job, 5.0)
    try:
        h.advance(1, held=2)
        held.started(2)
        assert sched.cancel(one) is True and sched.cancel(one) is False
        assert sched.cancel(every) is True and sched.cancel(every) is False
        assert sched.stats().running == 2
    finally:
        held.release()
    h.advance(20)
    stats = sched.stats()
    assert (stats.cancelled, stats.executed, stats.running, stats.pending) == (2, 2, 0, 0)
    assert sched.errors == []


# -- stats(): a KeyedScheduler's keys, the deadlines of runs going on -----------------------------------


def test_stats_count_keyed_schedulers_armed_keys(h: Harness) -> None:
    """A driver's stats() counts a KeyedScheduler's keys (WallTimers of the engine; they were invisible in
    it): `keys` counts those armed for their next run, `timers` includes them."""
    from datetime import timedelta

    from timerwheel import KeyedScheduler

    sched = h.make()
    k = KeyedScheduler(sched, lambda now, key, data: now + timedelta(seconds=5), lambda key, data: None)
    k.start()
    for key in "abc":
        k.upsert(key)
    assert (sched.stats().keys, sched.stats().timers) == (3, 3)
    assert k.remove("a")
    assert sched.stats().keys == 2
    h.advance(5)  # b and c run, and are armed again
    h.settle()
    stats = sched.stats()
    assert (stats.keys, stats.timers, stats.executed) == (2, 2, 2)
    if isinstance(h, Loop):
        h.loop.run_until_complete(k.aclose())
    else:
        k.close()
    assert sched.stats().keys == 0


def test_stats_count_the_deadlines_of_the_runs_going_on(h: Harness) -> None:
    """A run given a `timeout` has a deadline while it runs: stats().deadlines."""
    sched = h.make()
    seen: list[tuple[int, int]] = []

    def job() -> None:
        stats = sched.stats()
        seen.append((stats.deadlines, stats.timers))

    sched.schedule(1, job, timeout=10)
    sched.schedule(1, job)
    h.advance(1)
    h.advance(1)
    assert seen == [(1, 1), (0, 0)] and sched.stats().deadlines == 0


# -- the schedule signatures of the engine and the drivers ----------------------------------------------


def _parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("method", ["schedule", "schedule_at", "schedule_cron"])
def test_the_schedule_signatures_agree_between_the_engine_and_every_driver(method: str) -> None:
    """The engine's schedule methods and the drivers' take the same arguments, in the same order, with
    the same defaults, in the build in use; they differ only where documented: the engine takes
    `options` and defaults `missed` to ENGINE_MISSED, a driver takes `context` and `timeout` and its
    `missed=None` means the driver's own default (DRIVER_MISSED unless its constructor says otherwise)."""
    engine = _parameters(getattr(Scheduler, method))
    assert _parameters(getattr(HeapScheduler, method)) == engine
    driver = _parameters(getattr(DriverBase, method))
    for cls in (ThreadedScheduler, AsyncScheduler):
        assert _parameters(getattr(cls, method)) == driver, cls
    keyword = inspect.Parameter.KEYWORD_ONLY
    assert engine[-1] == ("options", keyword, None)
    assert driver[-2:] == [("context", keyword, False), ("timeout", keyword, None)]
    if method == "schedule_cron":  # (a cron schedule has no `missed`: its points are its grid)
        assert engine[:-1] == driver[:-2]
    else:
        assert engine[-2] == ("missed", keyword, ENGINE_MISSED) and driver[-3] == ("missed", keyword, None)
        assert engine[:-2] == driver[:-3]
    for cls in (ThreadedScheduler, AsyncScheduler):
        assert inspect.signature(cls).parameters["missed"].default is DRIVER_MISSED
    assert (ENGINE_MISSED, DRIVER_MISSED) == (Missed.DELAY, Missed.SKIP)


# -- the drivers' own hooks, and drivers whose __init__ never ran ----------------------------------------


def test_an_overridden_check_of_the_caller_is_called_by_the_hot_paths() -> None:
    """A ThreadedScheduler subclass that overrides _check_caller() is asked by schedule(), cancel() and
    reschedule() as by pending() (the hot paths read a class flag it did not set, and skipped it)."""

    class Picky(ThreadedScheduler):
        def _check_caller(self) -> None:
            raise PermissionError("not you")

    sched = Picky(clock=ManualClock(START))
    sched.start()
    unchecked = []
    try:
        for name, call in [
            ("schedule", lambda: sched.schedule(1, print)),
            ("cancel", lambda: sched.cancel(1)),
            ("reschedule", lambda: sched.reschedule(1, 1.0)),
            ("pending", sched.pending),
        ]:
            try:
                call()
            except PermissionError:
                continue
            unchecked.append(name)
    finally:
        sched.close()
    assert not unchecked, "these did not call the overridden _check_caller"


UNINITIALISED = {
    "ThreadedScheduler.start()": """
from timerwheel import ThreadedScheduler
try:
    ThreadedScheduler.__new__(ThreadedScheduler).start()
except (AttributeError, TypeError):  # (its lock is missing, or None in the compiled build)
    pass
else:
    raise SystemExit("start() succeeded")
""",
    "AsyncScheduler.start()": """
from timerwheel import AsyncScheduler
try:
    AsyncScheduler.__new__(AsyncScheduler).start()
except (AttributeError, RuntimeError):
    pass
else:
    raise SystemExit("start() succeeded")
""",
    "schedule(), cancel(), reschedule()": """
from timerwheel import AsyncScheduler, ThreadedScheduler
for cls in (ThreadedScheduler, AsyncScheduler):
    for name in ("schedule", "cancel", "reschedule"):
        s = cls.__new__(cls)
        args = {"schedule": (1, print), "cancel": (1,), "reschedule": (1, 1.0)}[name]
        try:
            getattr(s, name)(*args)
        except AttributeError:
            continue
        except Exception as exc:
            raise SystemExit(f"{cls.__name__}.{name} raised {exc!r}, not AttributeError")
        raise SystemExit(f"{cls.__name__}.{name} succeeded")
""",
}


@pytest.mark.parametrize("case", UNINITIALISED)
def test_a_driver_whose_init_never_ran_raises(case: str) -> None:
    """A driver made with __new__ alone: start() raises (the compiled build started it, its state None
    taken for new), and schedule(), cancel() and reschedule() raise AttributeError as in the pure-Python
    build (the compiled one said "the scheduler is closed"). In a child process: the interpreter must not
    crash either."""
    done = subprocess.run(
        [sys.executable, "-c", UNINITIALISED[case]], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"


def test_the_wall_clock_of_an_async_scheduler_without_a_loop_is_not_started() -> None:
    """wall() of an AsyncScheduler made outside a loop raises NotStartedError (it raised AttributeError
    on None)."""
    with pytest.raises(NotStartedError):
        AsyncScheduler().wall()


def test_cancel_does_not_ask_the_length_of_the_store() -> None:
    """ThreadedScheduler.cancel() asked len(store) on every cancel, for a hook it does not have: a store
    whose __len__ fails then failed cancels that had happened. It asks no more."""

    class Store(HeapQueue):
        def __len__(self) -> int:
            raise RuntimeError("len() asked")

    sched = ThreadedScheduler(clock=ManualClock(START), store=Store(START))
    sched.start()
    try:
        ids = [sched.schedule(100, print) for _ in range(3)]
        assert [sched.cancel(i) for i in ids] == [True, True, True]
    finally:
        sched.close()


def test_a_store_that_closes_the_scheduler_during_schedule() -> None:
    """Something that schedule() runs closes the scheduler meanwhile (a store or a clock of the user's, a
    finalizer the collector runs): schedule() raises ClosedError and arms nothing, as close() promises
    stats().pending == 0 (it returned an id, and the task stayed armed on the closed scheduler)."""

    class ClosingStore(HeapQueue):
        armed = False

        def add_at(self, due: float, item: object) -> int:
            if self.armed:
                self.armed = False
                sched.close()
            return super().add_at(due, item)

    store = ClosingStore(START)
    sched = ThreadedScheduler(clock=ManualClock(START), store=store)
    sched.start()
    store.armed = True
    with pytest.raises(ClosedError):
        sched.schedule(100, print)
    assert sched.stats().pending == 0 and sched.pending() == []
