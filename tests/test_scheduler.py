"""The Scheduler's contract, rule by rule, on both wheel backends and on the heap (HeapScheduler)."""

from __future__ import annotations

import enum
import functools
import gc
import logging
import math
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from timerwheel import (
    HeapScheduler,
    JobEvent,
    Missed,
    RepeatMode,
    RunOptions,
    Scheduler,
    Stats,
    TimerInfo,
)
from timerwheel._engine.heap import HeapQueue
from timerwheel.drivers import TIMER_KINDS, Run, Timer, WallTimer
from timerwheel.testing import ManualClock

from .conftest import BACKENDS

MakeSched = Callable[..., Scheduler]


def _wheel_scheduler(core: Any) -> MakeSched:
    """Scheduler(clock, store=<that backend's TimerWheel>): the engine on one core backend."""

    def make(clock: Any, **kwargs: Any) -> Scheduler:
        geometry = {k: kwargs.pop(k) for k in ("resolution", "slots", "levels") if k in kwargs}
        wheel = core.TimerWheel(
            geometry.get("resolution", 0.001),
            slots=geometry.get("slots", 64),
            levels=geometry.get("levels", 4),
            start=clock(),
        )
        return Scheduler(clock, store=wheel, **kwargs)

    return make


@pytest.fixture(params=["cython", "python", "heap"])
def make(request: pytest.FixtureRequest) -> MakeSched:
    """A factory of schedulers: the engine on each wheel backend, and on the heap."""
    if request.param == "heap":
        return HeapScheduler
    core = BACKENDS[request.param]
    if core is None:
        pytest.skip("the Cython backend is disabled (TIMERWHEEL_NO_EXTENSIONS) or not built")
    return _wheel_scheduler(core)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


class Log:
    """A job that records its calls (name, clock time) in a shared list."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float]] = []

    def job(self, name: str) -> Callable[[], None]:
        return lambda: self.calls.append((name, self.clock()))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


# -- rule 1: ids -------------------------------------------------------------------------------------


def test_rule1_ids_in_order_and_failed_calls_take_none(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    assert s.schedule(1, print) == 1
    assert s.schedule_at(5, print) == 2
    with pytest.raises(ValueError):
        s.schedule(-1, print)
    with pytest.raises(TypeError):
        s.schedule(1, "not callable")  # type: ignore[arg-type]
    assert s.schedule(1, print, 2.0) == 3


# -- rule 2: exact dues, one clock read, order ---------------------------------------------------------


def test_rule2_due_is_exactly_clock_plus_delay(make: MakeSched, clock: ManualClock) -> None:
    clock.set(100.25)
    s = make(clock)
    tid = s.schedule(0.1, print)
    assert s.next_fire_time(tid) == 100.25 + 0.1
    log = Log(clock)
    s2 = make(clock)
    s2.schedule(0.1, log.job("x"))
    clock.set(100.25 + 0.1 - 1e-9)
    assert s2.run_pending() == 0
    clock.set(100.25 + 0.1)
    assert s2.run_pending() == 1


def test_rule2_clock_read_once(make: MakeSched, clock: ManualClock) -> None:
    """A slow job (here: one that moves the clock) cannot make the call chase a moving clock."""
    s = make(clock)
    log = Log(clock)
    s.schedule(1, lambda: clock.advance(10))
    s.schedule(2, log.job("later"))
    clock.advance(1)
    assert s.run_pending() == 1
    assert log.calls == []
    assert s.run_pending() == 1
    assert log.names == ["later"]


def test_rule2_earliest_first_ties_in_schedule_order(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    log = Log(clock)
    s.schedule(3, log.job("c"))
    s.schedule(1, log.job("a"))
    s.schedule(3, log.job("d"))
    s.schedule_at(101, log.job("b"))
    clock.advance(5)
    assert s.run_pending() == 4
    assert log.names == ["a", "b", "c", "d"]


def test_rule2_rearm_counts_as_scheduled_at_that_moment(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    log = Log(clock)
    s.schedule(1, log.job("r"), 1.0)  # due 101, re-armed at 101 for 102
    s.schedule(2, log.job("early"))  # scheduled at 100 for 102: before the re-arm
    clock.advance(1)
    s.run_pending()
    s.schedule(1, log.job("late"))  # scheduled at 101 for 102: after the re-arm
    clock.advance(1)
    s.run_pending()
    assert log.names == ["r", "early", "r", "late"]


def test_rule2_rearm_after_the_job_returned(make: MakeSched) -> None:
    """A probe every 3 s schedules a follow-up in 3 s; the follow-up, scheduled during the job, is due with
    the probe's next run and runs first (the re-arm comes after the job)."""
    clock = ManualClock(0.0)
    s = make(clock)
    log: list[tuple[str, float]] = []

    def probe() -> None:
        log.append(("probe", clock()))
        s.schedule(3, lambda: log.append(("follow-up", clock())))

    s.schedule(3, probe, 3)
    for _ in range(3):
        clock.advance(3)
        s.run_pending()
    assert log == [
        ("probe", 3.0),
        ("follow-up", 6.0),
        ("probe", 6.0),
        ("follow-up", 9.0),
        ("probe", 9.0),
    ]


def test_rule2_a_driver_rearms_when_it_takes_the_run(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    seen: list[float | None] = []

    class HandsOver(HoldingExecutor):  # a driver handing the run over: the re-arm comes after this
        def execute(self, run: Run) -> None:
            seen.append(s.next_fire_time(run.task_id))
            run.start()

    tid = s.schedule(1, print, 1.0)
    clock.advance(1)
    assert s.drain(clock(), HandsOver(s, clock)) == 1
    assert seen == [None] and s.next_fire_time(tid) == 102.0
    assert s.stats().running == 1 and s.stats().executed == 1


# -- rule 3: one-shots, recurring, missed runs -------------------------------------------------------


def test_rule3_one_shot_removed_after_run(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    tid = s.schedule(1, print)
    clock.advance(1)
    s.run_pending()
    assert s.next_fire_time(tid) is None
    assert s.cancel(tid) is False
    assert s.pending() == [] and s.stats().pending == 0


def test_rule3_recurring_on_grid(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    log = Log(clock)
    tid = s.schedule(1, log.job("r"), 0.5)
    for _ in range(4):
        clock.advance(0.5)
        s.run_pending()
    assert [t for _, t in log.calls] == [101.0, 101.5, 102.0]
    assert s.next_fire_time(tid) == 102.5


@pytest.mark.parametrize(("missed", "expected_next"), [(Missed.DELAY, 104.7 + 1.0), (Missed.SKIP, 105.0)])
def test_rule3_missed_runs(make: MakeSched, clock: ManualClock, missed: Missed, expected_next: float) -> None:
    s = make(clock)
    log = Log(clock)
    tid = s.schedule(1, log.job("r"), 1.0, missed=missed)  # grid 101, 102, 103, ...
    clock.set(104.7)  # three and a bit periods late
    assert s.run_pending() == 1  # once, not a burst of four
    assert s.run_pending() == 0
    assert log.calls == [("r", 104.7)]
    assert s.next_fire_time(tid) == pytest.approx(expected_next, abs=1e-12)


def test_rule3_skip_grid_exactly_on_a_grid_point(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    tid = s.schedule(1, print, 1.0, missed=Missed.SKIP)
    clock.set(103.0)  # exactly on the grid: the next point after now is 104
    s.run_pending()
    assert s.next_fire_time(tid) == 104.0


def test_rule3_recurring_runs_once_per_call_even_if_interval_tiny(
    make: MakeSched, clock: ManualClock
) -> None:
    s = make(clock)
    log = Log(clock)
    s.schedule(0, log.job("r"), 1e-6)
    clock.advance(1.0)
    assert s.run_pending() == 1
    assert s.run_pending() == 0
    clock.advance(1e-6)
    assert s.run_pending() == 1


# -- rule 4: errors ----------------------------------------------------------------------------------


def test_rule4_errors_recorded_and_others_run(
    make: MakeSched, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    s = make(clock)
    log = Log(clock)

    def boom() -> None:
        raise ValueError("boom")

    bad = s.schedule(1, boom, 1.0)
    s.schedule(1, log.job("ok"))
    clock.advance(1)
    with caplog.at_level(logging.ERROR, logger="timerwheel"):
        assert s.run_pending() == 2
    assert s.errors == [f"task {bad}: boom"]
    assert log.names == ["ok"]
    assert s.next_fire_time(bad) == 102.0  # a failed recurring job is still re-armed
    assert s.stats().failed == 1 and s.stats().executed == 2
    assert "task 1 failed" in caplog.text


def test_rule4_base_exception_propagates_and_leaves_scheduler_consistent(
    make: MakeSched, clock: ManualClock
) -> None:
    s = make(clock)
    log = Log(clock)

    def interrupt() -> None:
        raise KeyboardInterrupt

    s.schedule(1, log.job("first"))
    s.schedule(2, interrupt, 5.0)
    s.schedule(3, log.job("after"))
    s.schedule(3, log.job("after2"))
    clock.advance(3)
    with pytest.raises(KeyboardInterrupt):
        s.run_pending()
    assert log.names == ["first"]
    assert s.stats().running == 0
    assert s.run_pending() == 2  # the tasks not yet run are still due, in their order
    assert log.names == ["first", "after", "after2"]
    assert s.next_fire_time(2) == 107.0


def test_errors_keep_the_most_recent(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)

    def boom(i: int) -> None:
        raise RuntimeError(str(i))

    for i in range(1005):
        s.schedule(0, boom, args=(i,))
    logging.disable(logging.ERROR)
    try:
        s.run_pending()
    finally:
        logging.disable(logging.NOTSET)
    assert len(s.errors) == 1000
    assert s.errors[-1] == "task 1005: 1004" and s.errors[0] == "task 6: 5"


# -- rule 5: cancelling from jobs --------------------------------------------------------------------


def test_rule5_cancel_other_in_same_call(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    log = Log(clock)
    victim = 2
    s.schedule(1, lambda: log.calls.append(("canceller", s.cancel(victim))))  # type: ignore[arg-type]
    assert s.schedule(1, log.job("victim")) == victim
    clock.advance(1)
    assert s.run_pending() == 1
    assert log.calls == [("canceller", True)]
    assert s.stats().cancelled == 1


def test_rule5_recurring_self_cancel_not_rearmed(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    runs = []
    tid = s.schedule(1, lambda: runs.append(s.cancel(tid)), 1.0)
    clock.advance(1)
    s.run_pending()
    assert runs == [True]
    assert s.next_fire_time(tid) is None and s.pending() == []
    clock.advance(5)
    assert s.run_pending() == 0


def test_reschedule_other_taken_task_from_a_job(make: MakeSched, clock: ManualClock) -> None:
    """A task already taken in this call but not yet run, moved by an earlier job, runs at its new due."""
    s = make(clock)
    log = Log(clock)
    s.schedule(1, lambda: s.reschedule(2, 3.0))
    s.schedule(1, log.job("moved"))
    clock.advance(1)
    assert s.run_pending() == 1
    assert s.next_fire_time(2) == 104.0
    clock.set(104.0)
    assert s.run_pending() == 1
    assert log.calls == [("moved", 104.0)]


# -- rule 6: scheduling from jobs --------------------------------------------------------------------


def test_rule6_due_tasks_scheduled_by_jobs_run_in_the_same_call(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    log = Log(clock)

    def spawner() -> None:
        log.calls.append(("spawner", clock()))
        s.schedule(0, log.job("child-now"))
        s.schedule_at(100.5, log.job("child-past"))
        s.schedule(0.001, log.job("child-future"))

    s.schedule(1, spawner)
    s.schedule(1, log.job("sibling"))
    clock.advance(1)
    assert s.run_pending() == 4
    assert log.names == ["spawner", "sibling", "child-past", "child-now"]
    clock.advance(0.001)
    assert s.run_pending() == 1


# -- rule 7: O(1) cancel and reschedule --------------------------------------------------------------


def _calls_during(action: Callable[[], object]) -> int:
    count = 0

    def profiler(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    gc.disable()  # a collection would run gc.callbacks (Hypothesis installs some) inside the count
    sys.setprofile(profiler)
    try:
        action()
    finally:
        sys.setprofile(None)
        gc.enable()
    return count


@pytest.mark.parametrize("backend", ["cython", "python"])
def test_rule7_cancel_and_reschedule_do_not_scan(backend: str) -> None:
    """The work of one cancel or reschedule (counted in function calls) does not grow with the tasks.

    Counted by a profiler, so a scan in Python code (the engine, the pure-Python wheel) would show as
    thousands of calls; the Cython wheel mirrors the Python one line for line. A slot that empties costs
    one call more (its bitmap bit), hence the slack of a few calls.
    """
    core = BACKENDS[backend]
    if core is None:
        pytest.skip("Cython backend not in use")
    counts = []
    for n in (10, 20_000):
        s = _wheel_scheduler(core)(ManualClock())
        ids = [s.schedule(1 + i * 0.01, print) for i in range(n)]
        target = ids[n // 2]
        moved = _calls_during(functools.partial(s.reschedule, target, 7.5))
        counts.append((moved, _calls_during(functools.partial(s.cancel, target))))
    small, large = counts
    assert large[0] <= small[0] + 3 and large[1] <= small[1] + 3, counts
    assert max(large) < 40, counts


# -- rule 8: validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda s: s.schedule(-0.1, print), ValueError, "delay must be >= 0"),
        (lambda s: s.schedule(math.nan, print), ValueError, "delay must be finite"),
        (lambda s: s.schedule(math.inf, print), ValueError, "delay must be finite"),
        (lambda s: s.schedule_at(math.nan, print), ValueError, "when must be finite"),
        (lambda s: s.schedule(1, print, 0), ValueError, "interval must be > 0"),
        (lambda s: s.schedule(1, print, -1.0), ValueError, "interval must be > 0"),
        (lambda s: s.schedule(1, print, math.inf), ValueError, "interval must be finite"),
        (lambda s: s.schedule(1, None), TypeError, "fn must be callable"),
        (lambda s: s.schedule("1", print), TypeError, "delay must be a real number"),
        (lambda s: s.schedule(1, print, mode="fixed_rate"), TypeError, "mode must be a RepeatMode"),
        (lambda s: s.schedule(1, print, missed=None), TypeError, "missed must be a Missed"),
        (lambda s: s.schedule(1, print, args="ab"), TypeError, "args must be an iterable"),
        (lambda s: s.reschedule(1, -1), ValueError, "delay must be >= 0"),
        (lambda s: s.reschedule("1", 1), TypeError, "task_id must be an int"),
        (lambda s: s.cancel(1.0), TypeError, "task_id must be an int"),
    ],
)
def test_rule8_bad_input_schedules_nothing(
    make: MakeSched,
    clock: ManualClock,
    call: Callable[[Scheduler], object],
    exc: type[Exception],
    message: str,
) -> None:
    s = make(clock)
    s.schedule(1, print)
    before = (s.pending(), s.stats())
    with pytest.raises(exc, match=message):
        call(s)
    assert (s.pending(), s.stats()) == before
    assert s.schedule(2, print) == 2


# -- repeat modes, through the driver protocol (runs held open, as a concurrent driver would) ---------


class HoldingExecutor:
    """A driver that starts runs but finishes them only when told: runs overlap, as under a driver."""

    def __init__(self, sched: Scheduler, clock: ManualClock) -> None:
        self.sched, self.clock = sched, clock
        self.open: list[Run] = []

    def execute(self, run: Run) -> None:
        run.start()
        self.open.append(run)

    def wake(self, due: float) -> None:
        pass

    def timed_out(self, run: Run) -> None:
        pass

    def run_due(self) -> int:
        return self.sched.drain(self.clock(), self)

    def finish_all(self, error: BaseException | None = None) -> None:
        while self.open:
            self.open.pop(0).finish(error)


class Dropping(HoldingExecutor):
    """A driver that drops every run (backpressure)."""

    def execute(self, run: Run) -> None:
        run.drop()


def test_fixed_rate_runs_may_overlap(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    ex = HoldingExecutor(s, clock)
    s.schedule(1, print, 1.0)
    for _ in range(3):
        clock.advance(1)
        ex.run_due()
    assert len(ex.open) == 3 and s.stats().running == 3
    ex.finish_all()
    assert s.stats().running == 0 and s.stats().executed == 3


def test_fixed_delay_arms_after_the_run_finishes(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    ex = HoldingExecutor(s, clock)
    tid = s.schedule(1, print, 2.0, mode=RepeatMode.FIXED_DELAY)
    clock.advance(1)
    assert ex.run_due() == 1
    assert s.next_fire_time(tid) is None  # not armed while it runs
    clock.advance(5)
    assert ex.run_due() == 0
    ex.finish_all()  # finished at 106
    assert s.next_fire_time(tid) == 108.0


def test_fixed_delay_inline_uses_finish_time(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    tid = s.schedule(1, lambda: clock.advance(0.25), 1.0, mode=RepeatMode.FIXED_DELAY)
    clock.advance(1)
    s.run_pending()
    assert s.next_fire_time(tid) == 102.25


def test_skip_if_running_skips_and_counts(make: MakeSched, clock: ManualClock) -> None:
    events: list[JobEvent] = []
    s = make(clock, observer=events.append)
    ex = HoldingExecutor(s, clock)
    tid = s.schedule(1, print, 1.0, mode=RepeatMode.SKIP_IF_RUNNING)
    clock.advance(1)
    assert ex.run_due() == 1
    clock.advance(1)
    assert ex.run_due() == 0  # previous run still going: skipped
    assert s.stats().skipped == 1
    assert s.next_fire_time(tid) == 103.0  # the grid is kept
    assert events[-1].skipped and events[-1].scheduled_for == 102.0 and events[-1].task_id == tid
    ex.finish_all()
    clock.advance(1)
    assert ex.run_due() == 1


def test_drop_keeps_repeating_task_armed(make: MakeSched, clock: ManualClock) -> None:
    events: list[JobEvent] = []
    s = make(clock, observer=events.append)
    rate = s.schedule(1, print, 1.0)
    delay = s.schedule(1, print, 1.0, mode=RepeatMode.FIXED_DELAY)
    one = s.schedule(1, print)
    clock.advance(1)
    assert s.drain(clock(), Dropping(s, clock)) == 3
    assert s.stats() == Stats(pending=2, dropped=3)
    assert s.next_fire_time(rate) == 102.0 and s.next_fire_time(delay) == 102.0
    assert s.next_fire_time(one) is None
    assert [e.dropped for e in events] == [True, True, True]


# -- observability -----------------------------------------------------------------------------------


def test_observer_gets_an_event_per_run(make: MakeSched, clock: ManualClock) -> None:
    events: list[JobEvent] = []
    s = make(clock, observer=events.append)

    def slow() -> None:
        clock.advance(0.5)

    def bad() -> None:
        raise KeyError("k")

    a = s.schedule(1, slow)
    b = s.schedule(1, bad)
    clock.advance(1.25)
    s.run_pending()
    ev_a, ev_b = events
    assert ev_a == JobEvent(a, 101.0, 101.25, 101.75, 0.25, 0.5)
    assert ev_b.task_id == b and isinstance(ev_b.error, KeyError) and ev_b.lateness == 0.75
    assert not ev_b.dropped and not ev_b.skipped


def test_lateness_never_negative(make: MakeSched, clock: ManualClock) -> None:
    events: list[JobEvent] = []
    s = make(clock, observer=events.append)
    s.schedule(1, print)
    clock.advance(1)
    s.run_pending()
    assert events[0].lateness == 0.0


def test_observer_errors_are_logged_not_raised(
    make: MakeSched, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    def observer(event: JobEvent) -> None:
        raise RuntimeError("observer broke")

    s = make(clock, observer=observer)
    log = Log(clock)
    s.schedule(1, log.job("a"))
    s.schedule(1, log.job("b"))
    clock.advance(1)
    with caplog.at_level(logging.ERROR, logger="timerwheel"):
        assert s.run_pending() == 2
    assert log.names == ["a", "b"]
    assert "observer raised" in caplog.text
    assert s.errors == []


def test_stats_pending_and_introspection(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    a = s.schedule(3, print)
    b = s.schedule(1, print, 2.0, mode=RepeatMode.FIXED_DELAY)
    c = s.schedule(3, print, 1.0)
    assert s.pending() == [
        TimerInfo(b, 101.0, 2.0, RepeatMode.FIXED_DELAY),
        TimerInfo(a, 103.0, None, RepeatMode.FIXED_RATE),
        TimerInfo(c, 103.0, 1.0, RepeatMode.FIXED_RATE),
    ]
    assert s.next_run_in() == 1.0
    clock.advance(2)
    assert s.next_run_in() == 0.0  # overdue: never negative
    assert s.cancel(a) and not s.cancel(a)
    assert s.stats() == Stats(pending=2, cancelled=1)
    s.run_pending()
    assert s.stats() == Stats(pending=2, executed=1, cancelled=1)
    assert s.cancel(b) and s.cancel(c)
    assert s.next_run_in() is None and s.pending() == []


def test_reschedule(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    log = Log(clock)
    tid = s.schedule(1, log.job("r"), 1.0, missed=Missed.SKIP)
    assert s.reschedule(tid, 10.25)
    assert s.next_fire_time(tid) == 110.25
    clock.set(110.25)
    s.run_pending()
    assert s.next_fire_time(tid) == 111.25
    clock.set(115.5)
    s.run_pending()  # late: the grid now starts at 110.25
    assert s.next_fire_time(tid) == 116.25
    assert s.reschedule(999, 1.0) is False


def test_fixed_delay_rescheduled_from_its_own_run(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    tid = s.schedule(1, lambda: s.reschedule(tid, 30.0), 1.0, mode=RepeatMode.FIXED_DELAY)
    clock.advance(1)
    s.run_pending()
    assert s.next_fire_time(tid) == 131.0  # the reschedule wins over the re-arm after the run


def test_args_and_kwargs(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    got = []
    s.schedule(0, lambda *a, **k: got.append((a, k)), args=[1, 2], kwargs={"x": 3})
    s.run_pending()
    assert got == [((1, 2), {"x": 3})]


def test_clock_that_steps_back_never_runs_a_task_early(make: MakeSched) -> None:
    """After the clock steps back, a new task waits its full delay on the clock (it ran at once: its due
    was already past)."""
    now = [10.0]
    s = make(lambda: now[0])
    log: list[str] = []
    s.schedule(1, lambda: log.append("x"))  # due 11
    s.schedule(1.5, lambda: log.append("y"))  # due 11.5
    now[0] = 12.0
    assert s.run_pending() == 2
    now[0] = 11.0  # stepped back: the scheduler's time stands still at 12.0 until the clock passes it
    s.schedule(0.75, lambda: log.append("z"))  # due 12.75, never before 0.75 s have passed on the clock
    for t in (11.0, 11.5, 11.75, 12.5):
        now[0] = t
        assert s.run_pending() == 0
    now[0] = 12.75
    assert s.run_pending() == 1
    assert log == ["x", "y", "z"]


def test_clock_stepped_back_52_seconds(make: MakeSched) -> None:
    now = [1000.0]
    s = make(lambda: now[0])
    s.run_pending()
    now[0] -= 52
    ran: list[float] = []
    s.schedule(5, lambda: ran.append(now[0]))
    assert s.run_pending() == 0
    now[0] += 5  # five seconds on the clock: still inside the step
    assert s.run_pending() == 0 and s.next_fire_time(1) == 1005.0
    now[0] = 1005.0
    assert s.run_pending() == 1 and ran == [1005.0]


def test_a_clock_past_the_stores_range_is_a_failed_reading(make: MakeSched) -> None:
    now = [10.0]
    s = make(lambda: now[0])
    s.schedule(1, print)
    if math.isinf(s.store.horizon):
        return  # the heap holds any finite time
    now[0] = 1e300  # once: past 2**62 ticks of the wheel
    with pytest.raises(
        OverflowError, match=r"the scheduler's clock reads 1e\+300, past what its timer store"
    ):
        s.run_pending()
    now[0] = 11.0  # the glitch did not stop time at 1e300: the task runs at its due
    assert s.run_pending() == 1


@pytest.mark.parametrize("reading", [math.nan, math.inf, "12", None])
def test_a_bad_clock_reading_is_named(make: MakeSched, reading: Any) -> None:
    now: list[Any] = [10.0]
    s = make(lambda: now[0])
    now[0] = reading
    with pytest.raises((TypeError, ValueError), match="the scheduler's clock returned"):
        s.schedule(1, print)
    with pytest.raises((TypeError, ValueError), match="the scheduler's clock returned"):
        s.run_pending()
    now[0] = 11.0
    assert s.schedule(1, print) == 1  # nothing was taken by the failed calls


def test_constructor_validation(clock: ManualClock) -> None:
    with pytest.raises(TypeError, match="clock must be a Clock or a callable returning seconds, not float"):
        Scheduler(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="observer must be callable"):
        Scheduler(clock, observer=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slots must be a power of two"):
        Scheduler(clock, slots=3)
    assert repr(Scheduler(clock)) == "<Scheduler pending=0 running=0>"


def test_recurring_task_moved_to_now_by_a_job_waits_for_the_next_call(
    make: MakeSched, clock: ManualClock
) -> None:
    """At most one run per call for a recurring task, even when a job moves it to a due already past."""
    s = make(clock)
    log = Log(clock)
    rec = s.schedule(1, log.job("rec"), 10.0)
    s.schedule(1.5, lambda: s.reschedule(rec, 0))  # runs after rec, moves it back to now
    own = s.schedule(1, lambda: s.reschedule(own, 0), 5.0)  # reschedules itself to now, every run
    clock.advance(2)
    assert s.run_pending() == 3
    assert log.names == ["rec"]
    assert s.next_fire_time(rec) == 102.0 and s.next_fire_time(own) == 102.0
    assert s.run_pending() == 2  # the next call: both run once more
    assert log.names == ["rec", "rec"]


# -- a task deferred to the next call, then cancelled or moved again ---------------------------------


def test_deferred_task_cancelled_later_in_the_call_stays_cancelled(
    make: MakeSched, clock: ManualClock
) -> None:
    s = make(clock)
    ran: list[float] = []
    rec = s.schedule(1.0, lambda: ran.append(clock()), 10.0)

    def mover() -> None:
        s.reschedule(rec, 0.0)  # rec already ran in this call: it waits for the next call...
        s.schedule(0.0, lambda: s.cancel(rec))  # ...and is cancelled before that

    s.schedule(1.0, mover)
    clock.advance(1)
    s.run_pending()
    for _ in range(3):
        clock.advance(10)
        s.run_pending()
    assert ran == [101.0]
    assert s.stats().pending == 0 and s.pending() == []


def test_deferred_task_rescheduled_later_in_the_call_is_armed_once(
    make: MakeSched, clock: ManualClock
) -> None:
    s = make(clock)
    rec = s.schedule(1.0, print, 10.0)

    def mover() -> None:
        s.reschedule(rec, 0.0)
        s.schedule(0.0, lambda: s.reschedule(rec, 5.0))

    s.schedule(1.0, mover)
    clock.advance(1)
    s.run_pending()
    assert s.next_fire_time(rec) == 106.0
    assert s.stats().pending == 1 and len(s.pending()) == 1


# -- intervals below the clock's resolution, run late ------------------------------------------------


def test_skip_grid_with_interval_below_clock_resolution_terminates(make: MakeSched) -> None:
    s = make(ManualClock(1e9))
    tid = s.schedule(0, print, 1e-300, missed=Missed.SKIP)
    assert s.run_pending() == 1
    assert s.next_fire_time(tid) == math.nextafter(1e9, math.inf)


@pytest.mark.parametrize("missed", list(Missed))
@pytest.mark.parametrize(("interval", "jump"), [(5e-324, 1.0), (1e-300, 1e9), (1e-9, 1e12), (3.0, 1e9)])
def test_tiny_interval_when_late_runs_once_and_rearms_after_now(
    make: MakeSched, missed: Missed, interval: float, jump: float
) -> None:
    """A recurring task with a tiny interval, late by many periods, runs once and is re-armed after now,
    at a finite due (it raised OverflowError from run_pending, then was a zombie task: armed nowhere,
    never run)."""
    clock = ManualClock(0.0)
    s = make(clock)
    ran: list[float] = []
    tid = s.schedule(0, lambda: ran.append(clock()), interval, missed=missed)
    assert s.run_pending() == 1
    clock.advance(jump)
    assert s.run_pending() == 1  # once, however many periods were missed
    due = s.next_fire_time(tid)
    assert due is not None and due > clock() and math.isfinite(due)
    assert [info.id for info in s.pending()] == [tid] and s.stats().pending == 1
    assert s.run_pending() == 0  # re-armed after now: not due again at the same now
    clock.set(due)
    assert s.run_pending() == 1
    assert s.cancel(tid) and s.stats().pending == 0


# -- executed and dropped runs; an observer's KeyboardInterrupt; run_pending() from a job ------------


def test_executed_counts_runs_started(make: MakeSched, clock: ManualClock) -> None:
    """A run counts as executed once its job has started (as lib-x/timewheel's Executed)."""
    s = make(clock)
    during: list[Stats] = []
    s.schedule(1, lambda: during.append(s.stats()))
    clock.advance(1)
    s.run_pending()
    assert during[0].executed == 1 and during[0].running == 1
    assert s.stats().executed == 1 and s.stats().running == 0


def test_a_dropped_run_is_not_executed(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    s.schedule(1, print)
    clock.advance(1)
    s.drain(clock(), Dropping(s, clock))
    assert s.stats().executed == 0 and s.stats().dropped == 1


def test_observer_keyboard_interrupt_propagates_on_the_callers_thread(
    make: MakeSched, clock: ManualClock
) -> None:
    raised: list[int] = []

    def observer(event: JobEvent) -> None:
        if not raised:
            raised.append(event.task_id)
            raise KeyboardInterrupt

    s = make(clock, observer=observer)
    rec = s.schedule(1, print, 1.0)
    s.schedule(1, print)
    clock.advance(1)
    with pytest.raises(KeyboardInterrupt):
        s.run_pending()
    assert raised == [rec] and s.next_fire_time(rec) == 102.0  # accounted for and re-armed first
    assert s.run_pending() == 1  # the other task, still due
    assert s.stats().executed == 2 and s.stats().pending == 1


def test_run_pending_from_a_job_is_refused(make: MakeSched, clock: ManualClock) -> None:
    s = make(clock)
    s.schedule(0, s.run_pending)
    logging.disable(logging.ERROR)
    try:
        assert s.run_pending() == 1
    finally:
        logging.disable(logging.NOTSET)
    assert s.errors == ["task 1: run_pending() must not be called from a job it runs"]
    s.schedule(0, print)
    assert s.run_pending() == 1  # the refusal left the scheduler usable


# -- drain(): finalizers that cancel as a run is made, timers it holds, what an interrupt leaves -----


class _Recorded(Timer):
    """A plain timer that records its fire."""

    def __init__(self, log: list[Any], name: str) -> None:
        super().__init__()
        self.log, self.name = log, name

    def fire(self) -> None:
        self.log.append(self.name)


def test_a_finalizer_that_cancels_as_the_run_is_made_wins(
    make: MakeSched, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finalizer that the garbage collector runs while drain() allocates a task's Run (here: the run's
    JobContext) cancels that task with True: it never runs, and counts as cancelled only."""
    import threading
    import types

    from timerwheel import _engine

    s = make(clock)
    log: list[Any] = []
    b = s.schedule(1, log.append, args=("B ran",), options=RunOptions(context=False, timeout=5.0))

    def event_whose_allocation_runs_a_finalizer() -> threading.Event:  # JobContext makes one
        log.append(("cancel(B)", s.cancel(b)))
        return threading.Event()

    # The engine module's `threading` (a global looked up at run time in both builds of the engine).
    shim = types.SimpleNamespace(Event=event_whose_allocation_runs_a_finalizer)
    monkeypatch.setattr(_engine._build, "threading", shim)
    clock.advance(1)
    assert s.run_pending() == 0
    assert log == [("cancel(B)", True)]
    stats = s.stats()
    assert (stats.executed, stats.cancelled, stats.running, stats.queued, stats.pending) == (0, 1, 0, 0, 0)
    assert s.timers == 0  # no deadline was armed for it


def test_a_gc_finalizer_never_lets_a_cancelled_task_run(make: MakeSched, clock: ManualClock) -> None:
    """The same with the real collector: a cycle dies in A's observer, and collections are tuned to
    come at every allocation count near the making of B's run."""

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    threshold = 500
    keep: list[Any] = []
    for shift in range(-6, 6):
        log: list[Any] = []
        target: list[Any] = []  # (the scheduler, B's id)

        def observer(event: JobEvent, log: list[Any] = log, shift: int = shift, target: Any = target) -> None:
            if event.task_id == 1:
                gc.disable()
                cycle = Cycle()
                weakref.finalize(cycle, lambda: log.append(("cancel(B)", target[0].cancel(target[1]))))
                del cycle
                while gc.get_count()[0] < threshold - shift:
                    keep.append([])
                gc.enable()

        s = make(clock, observer=observer)
        s.schedule(1, lambda: None)
        target[:] = [s, s.schedule(1, log.append, args=("B ran",))]
        gc.collect()
        old = gc.get_threshold()
        gc.set_threshold(threshold)
        try:
            clock.advance(1)
            s.run_pending()
        finally:
            gc.set_threshold(*old)
            keep.clear()
        if ("cancel(B)", True) in log:
            assert "B ran" not in log[log.index(("cancel(B)", True)) :], (shift, log)
            assert s.stats().executed == 1


def test_stats_pending_from_a_job_while_drain_holds_timers(make: MakeSched, clock: ManualClock) -> None:
    """stats().pending counts armed tasks as pending() lists them, also while drain() holds a batch."""
    s = make(clock)
    seen: list[tuple[int, int]] = []
    log: list[Any] = []
    s.schedule(1, lambda: seen.append((s.stats().pending, len(s.pending()))))
    s.add_timer(_Recorded(log, "t1"), 101.0)  # due with the job, after it: held while it runs
    s.add_timer(_Recorded(log, "t2"), 101.0)
    s.schedule(1, print)  # a task held too: armed until drain() deals with it, so pending() lists it
    s.schedule(5, print)
    clock.advance(1)
    assert s.run_pending() == 2
    assert seen == [(2, 2)]
    assert log == ["t1", "t2"] and s.stats().pending == 1 and s.timers == 0


def test_what_a_keyboard_interrupt_leaves_due_keeps_its_order(make: MakeSched, clock: ManualClock) -> None:
    """Items that a KeyboardInterrupt left due run next in (due, add order): task B before timer T."""
    log: list[Any] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    s = make(clock)
    s.schedule(1, interrupt)
    s.schedule(1, log.append, args=("task B",))
    s.add_timer(_Recorded(log, "timer T"), 101.0)
    s.schedule(1, log.append, args=("task C",))
    clock.advance(1)
    with pytest.raises(KeyboardInterrupt):
        s.run_pending()
    assert log == []
    s.run_pending()
    assert log == ["task B", "timer T", "task C"]


# -- forget() of a live task's run, a store ahead of the clock, sleep_time() of any reading ----------


class _Holding:
    """A driver that takes runs and starts them later (they wait in `runs`)."""

    def __init__(self) -> None:
        self.runs: list[Run] = []

    def execute(self, run: Run) -> None:
        self.runs.append(run)

    def wake(self, due: float) -> None:
        pass

    def timed_out(self, run: Run) -> None:
        pass


def test_forget_refuses_a_run_whose_task_is_live(make: MakeSched, clock: ManualClock) -> None:
    """forget() is for a run whose task was cancelled; a driver that will not execute a live task's run
    drop()s it (counted): forget() would leave a one-shot neither armed nor finished."""
    s = make(clock)
    holding = _Holding()
    runs = holding.runs

    tid = s.schedule(1, print)
    clock.advance(1)
    s.drain(s.now(), holding)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="its task was not cancelled"):
        runs[0].forget()
    assert s.stats().queued == 1
    assert s.cancel(tid) and runs[0].cancelled
    runs[0].forget()  # a no-op now
    assert s.stats().queued == 0 and s.stats().running == 0


def test_a_store_ahead_of_the_clock_is_refused(clock: ManualClock) -> None:
    """Its dues would be behind the clock's: a job due in 5 s would run at once."""
    from timerwheel._engine.heap import HeapQueue

    with pytest.raises(ValueError, match="store is ahead of the clock"):
        Scheduler(clock, store=HeapQueue(clock() + 100))
    s = Scheduler(clock, store=HeapQueue(clock() - 100))  # behind is fine: it catches up
    s.schedule(5, print)
    assert s.run_pending() == 0


def test_the_default_sleep_time_takes_any_real_reading() -> None:
    from decimal import Decimal

    from timerwheel._clock import FunctionClock

    assert FunctionClock(lambda: Decimal("1.5")).sleep_time(2.0) == 0.5
    assert FunctionClock(lambda: Decimal("3")).sleep_time(2.0) == 0.0


# -- cancelling a one-shot while it runs -------------------------------------------------------------


def test_a_one_shot_that_cancels_itself_while_it_runs_is_cancelled(
    make: MakeSched, clock: ManualClock
) -> None:
    """A one-shot job cancelling its own task gets True (it got False: a one-shot that had started counted
    as finished). It is running, not finished: True once, then False; it is counted, and it never runs
    again; once its run has finished, cancel() says False."""
    s = make(clock)
    seen: list[bool] = []

    def job() -> None:
        seen.extend((s.cancel(tid), s.cancel(tid), s.reschedule(tid, 0.0)))

    tid = s.schedule(1, job)
    later = s.schedule(2, print)
    clock.advance(1)
    assert s.run_pending() == 1
    assert seen == [True, False, False]
    stats = s.stats()
    assert (stats.cancelled, stats.executed, stats.running, stats.pending) == (1, 1, 0, 1)
    clock.advance(10)
    assert s.run_pending() == 1 and len(seen) == 3  # `later` ran; the cancelled one-shot did not
    assert s.cancel(later) is False  # its run has finished
    assert s.cancel(tid) is False and s.stats().cancelled == 1


def test_a_running_one_shot_cancelled_by_the_driver_is_cancelled(make: MakeSched, clock: ManualClock) -> None:
    """Under a driver: cancel() of a one-shot whose run has started and not finished is True; the run
    finishes as usual; the task does not come back (not pending, not rescheduled)."""
    s = make(clock)
    ex = HoldingExecutor(s, clock)
    tid = s.schedule(1, print)
    clock.advance(1)
    assert ex.run_due() == 1 and s.stats().running == 1
    assert s.reschedule(tid, 1.0) is False  # started: no next run to move
    assert s.cancel(tid) is True and s.cancel(tid) is False
    ex.finish_all()
    clock.advance(5)
    assert ex.run_due() == 0 and s.pending() == [] and s.next_fire_time(tid) is None
    stats = s.stats()
    assert (stats.cancelled, stats.executed, stats.running) == (1, 1, 0)
    done = s.schedule(1, print)
    clock.advance(1)
    ex.run_due()
    ex.finish_all()
    assert s.cancel(done) is False  # finished


# -- warnings of slow tasks, and logging when the application configured none ------------------------


def test_a_slow_recurring_task_is_warned_of_once_then_only_when_twice_as_slow(
    make: MakeSched, clock: ManualClock, caplog: Any
) -> None:
    """The warning "task N ran X s, more than half its interval" is logged once per task, then again only
    for a run at least twice as long as the last one logged; each task on its own (it was logged at every
    run of a task that is always slow)."""
    s = make(clock)
    slow = {1: iter([0.6, 0.6, 0.7, 0.6, 1.3, 1.3, 2.0, 2.6]), 2: iter([0.6] * 8)}

    def job(key: int) -> None:
        clock.advance(next(slow[key]))

    first = s.schedule(1, job, 1.0, args=(1,), mode=RepeatMode.FIXED_DELAY)
    second = s.schedule(1, job, 1.0, args=(2,), mode=RepeatMode.FIXED_DELAY)
    with caplog.at_level(logging.WARNING, logger="timerwheel"):
        for _ in range(8):
            clock.advance(1)
            assert s.run_pending() == 2
    said = [r.getMessage() for r in caplog.records if "more than half its interval" in r.getMessage()]
    assert [m.split(" s,")[0] for m in said] == [
        f"timerwheel: task {first} ran 0.600",
        f"timerwheel: task {second} ran 0.600",
        f"timerwheel: task {first} ran 1.300",
        f"timerwheel: task {first} ran 2.600",
    ]
    assert all(r.name == "timerwheel" and r.levelno == logging.WARNING for r in caplog.records)


def test_nothing_reaches_logging_s_last_resort_handler_when_the_app_configured_none() -> None:
    """With no logging configured, the scheduler's warnings and errors reach no handler (they went to
    logging.lastResort, stderr, at every run). The library's logger has a NullHandler, added once at
    import, as a library's should."""
    import subprocess

    nulls = [h for h in logging.getLogger("timerwheel").handlers if type(h) is logging.NullHandler]
    assert len(nulls) == 1
    child = (
        "import logging\n"
        "from timerwheel import Scheduler\n"
        "from timerwheel.testing import ManualClock\n"
        "clock = ManualClock()\n"
        "s = Scheduler(clock)\n"
        "s.schedule(1, lambda: clock.advance(0.6), 1.0)\n"
        "s.schedule(1, lambda: 1 / 0)\n"
        "for _ in range(3):\n"
        "    clock.advance(1)\n"
        "    s.run_pending()\n"
        "assert not logging.getLogger().handlers and s.errors\n"
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


# -- stats(): running and queued runs, timers by kind, the deadlines of runs -------------------------


def test_stats_running_counts_started_runs_and_queued_the_taken_ones(
    make: MakeSched, clock: ManualClock
) -> None:
    """A run handed to a driver and not started yet is queued (it was counted as running), and running
    once the driver starts it."""
    s = make(clock)
    runs: list[Run] = []

    class Holding(HoldingExecutor):  # takes runs, starts them only when told
        def execute(self, run: Run) -> None:
            runs.append(run)

    for _ in range(3):
        s.schedule(1, print)
    clock.advance(1)
    s.drain(clock(), Holding(s, clock))
    stats = s.stats()
    assert (stats.running, stats.queued) == (0, 3)
    runs[0].start()
    runs[1].drop()
    stats = s.stats()
    assert (stats.running, stats.queued, stats.dropped) == (1, 1, 1)
    runs[0].finish()
    runs[2].start()
    assert (s.stats().running, s.stats().queued) == (1, 0)
    runs[2].finish()
    assert (s.stats().running, s.stats().queued, s.stats().executed) == (0, 0, 2)


class _Key(_Recorded):
    kind = "keys"


class _Handle(_Recorded):
    kind = "handles"


def test_stats_count_the_armed_timers_by_kind(make: MakeSched, clock: ManualClock) -> None:
    """stats() counts plain timers (KeyedScheduler keys, AsyncScheduler handles, timeouts, sleeps) and run
    deadlines (they were invisible in it). They are counted by their class's `kind`, as they are armed,
    fired, cancelled and released; a timer of no kind of its own counts in `timers` only."""
    s = make(clock)
    log: list[Any] = []
    keys = [_Key(log, f"k{i}") for i in range(3)]
    handle, plain = _Handle(log, "h"), _Recorded(log, "t")
    for i, key in enumerate(keys):
        s.add_timer(key, clock() + 1 + i)
    s.add_timer(handle, clock() + 1)
    s.add_timer(plain, clock() + 5)
    s.schedule(1, print)
    stats = s.stats()
    assert (stats.pending, stats.timers, stats.keys, stats.handles, stats.timeouts, stats.sleeps) == (
        1,
        5,
        3,
        1,
        0,
        0,
    )
    assert s.timers == 5 and stats.deadlines == 0
    assert s.move_timer(keys[0], clock() + 10) and s.stats().keys == 3  # a move changes no count
    assert s.cancel_timer(keys[1]) and not s.cancel_timer(keys[1])
    assert s.stats().keys == 2
    clock.advance(3)
    s.run_pending()  # the handle and keys[2] fire
    stats = s.stats()
    assert (stats.timers, stats.keys, stats.handles, log) == (2, 1, 0, ["h", "k2"])
    released = s.release_timers()
    assert released == [plain, keys[0]] and s.stats() == Stats(executed=1)


def test_a_timer_subclassed_from_the_extension_api_is_the_engines_in_either_build(
    make: MakeSched, clock: ManualClock
) -> None:
    """timerwheel.drivers gives the engine's own Timer and WallTimer, of the build in use: a subclass of
    them is armed, counted by its kind and fired by a Scheduler, compiled or pure Python. (The pure twin's
    module, timerwheel._scheduler, is not the compiled engine's: a subclass of its Timer failed there.)"""
    s = make(clock)
    assert Timer.__module__ == WallTimer.__module__ == Scheduler.__module__
    assert issubclass(WallTimer, Timer) and "handles" in TIMER_KINDS
    fired: list[str] = []

    class Handle(Timer):
        kind = "handles"

        def fire(self) -> None:
            fired.append("handle")

    handle = Handle()
    s.add_timer(handle, clock() + 1)
    assert (s.stats().handles, handle.due, handle.id is not None) == (1, clock() + 1, True)
    clock.advance(1)
    s.run_pending()
    assert (fired, s.stats().handles, handle.id) == (["handle"], 0, None)


def test_stats_count_the_deadlines_of_runs_going_on(make: MakeSched, clock: ManualClock) -> None:
    """A started run given a `timeout` has a deadline in the store: counted in `deadlines` (and `timers`)
    until it finishes or times out; a run without one has none."""
    s = make(clock)
    ex = HoldingExecutor(s, clock)
    s.schedule(1, print, options=RunOptions(timeout=5.0))
    s.schedule(1, print, options=RunOptions(timeout=2.0))
    s.schedule(1, print)
    clock.advance(1)
    assert ex.run_due() == 3
    assert (s.stats().deadlines, s.stats().timers) == (2, 2)
    clock.advance(3)
    ex.run_due()  # the 2 s deadline passes: the run is told, and its deadline is gone
    assert (s.stats().deadlines, s.stats().timers, ex.open[1].timed_out) == (1, 1, True)
    ex.finish_all()
    assert (s.stats().deadlines, s.stats().timers) == (0, 0)


@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [
        ("timer", ValueError, r"Bad\.kind must be one of \('timers', 'keys', 'handles'"),
        ("deadlines", ValueError, r"Bad\.kind must be one of"),
        (2, TypeError, r"Bad\.kind must be a str .*, not 2"),
    ],
)
def test_a_timer_class_of_an_unknown_kind_is_refused_when_made(
    kind: Any, error: type[Exception], message: str
) -> None:
    """A Timer subclass names its kind in a class attribute, checked once, when the class is made (the
    engine reads it at every arm and disarm, unchecked)."""
    with pytest.raises(error, match=message):
        type("Bad", (Timer,), {"__slots__": (), "kind": kind})


@pytest.mark.parametrize("slots", [("due",), ("id", "extra"), "id"])
def test_a_timer_class_that_names_due_or_id_in_its_slots_is_refused_when_made(slots: Any) -> None:
    """The engine writes a timer's `due` and `id` where Timer keeps them (C fields in the compiled build):
    a subclass's own slot of the same name would hide what the engine writes."""
    with pytest.raises(TypeError, match=r"Bad\.__slots__ must not name '(due|id)'"):
        type("Bad", (Timer,), {"__slots__": slots})


def test_a_timer_cannot_be_pickled_or_copied(make: MakeSched, clock: ManualClock) -> None:
    """A copy would claim the original's entry in the store (its id): refused, as the wheel itself is."""
    import copy
    import pickle

    class Named(Timer):
        __slots__ = ("name",)

    timer = Named()
    timer.name = "job"
    make(clock).add_timer(timer, 5.0)
    for action in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match=r"Named \(a Timer\) cannot be pickled or copied"):
            action(timer)


# -- task ids, the timer store's ids, and a one-shot's plan ------------------------------------------------


def test_a_task_id_given_as_an_int_subclass_is_found(make: MakeSched, clock: ManualClock) -> None:
    """A task id given as an int subclass (an IntEnum member) is the same id: it was not found, cancel()
    said False and the task ran anyway."""
    s = make(clock)
    ran: list[int] = []
    tid = s.schedule(5.0, ran.append, args=(1,))
    job = enum.IntEnum("Job", {"FIRST": tid})
    assert s.next_fire_time(job.FIRST) == clock() + 5.0
    assert s.cancel(job.FIRST) is True
    clock.advance(10.0)
    s.run_pending()
    assert ran == [] and s.stats().pending == 0, "the task cancelled through an IntEnum id ran"


class OwnIds(HeapQueue):
    """A store that numbers its timers its own way: the heap's ids shifted by OFFSET."""

    OFFSET = 0

    def add_at(self, due: float, item: object) -> int:
        return super().add_at(due, item) + self.OFFSET

    def cancel(self, timer_id: int) -> bool:
        return super().cancel(timer_id - self.OFFSET)

    def reschedule_at(self, timer_id: int, due: float) -> bool:
        return super().reschedule_at(timer_id - self.OFFSET, due)

    def advance(self, now: float) -> list[tuple[int, object]]:
        return [(i + self.OFFSET, x) for i, x in super().advance(now)]


@pytest.mark.parametrize("offset", [-2, -1, 2**63 - 1])
def test_a_store_id_out_of_range_is_refused_naming_the_store(offset: int) -> None:
    """A timer store whose add_at() returns something that is not an id from 1 to 2**63 - 1 (-1, 0,
    2**63) raised SystemError or OverflowError ("delay is too far ahead") in the compiled engine and left
    the timer in the store: schedule() raises a TypeError naming the store's add_at, with nothing left
    armed."""
    store = type("Shifted", (OwnIds,), {"OFFSET": offset})()
    s = Scheduler(ManualClock(), store=store)
    with pytest.raises(TypeError) as raised:
        s.schedule(1.0, print)
    assert "store" in str(raised.value) and "add_at" in str(raised.value)
    assert len(store) == 0 and s.stats().pending == 0 and s.pending() == [], "left armed"


def test_a_store_s_own_ids_in_range_are_taken_as_they_are() -> None:
    """The other side of the range check: a store whose ids are its own, but from 1 to 2**63 - 1, works
    (reschedule and cancel reach its timer)."""
    s = Scheduler(ManualClock(), store=type("Shifted", (OwnIds,), {"OFFSET": 7})())
    tid = s.schedule(1.0, print)
    assert s.reschedule(tid, 2.0) and s.cancel(tid) and len(s.store) == 0


def test_a_refused_reschedule_keeps_the_waiting_run_of_a_one_shot(clock: ManualClock) -> None:
    """reschedule() of a one-shot whose run waits in a driver, to a due the store cannot hold: the waiting
    run was forgotten before the store refused, so the task never ran again. The OverflowError leaves the
    run waiting and counted."""
    s = Scheduler(clock)
    holding = _Holding()
    runs = holding.runs

    tid = s.schedule(1.0, print)
    clock.advance(2.0)
    s.drain(s.now(), holding)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        s.reschedule(tid, 1e300)
    assert not runs[0].cancelled and s.stats().queued == 1, "the failed reschedule forgot the waiting run"


def _reschedule_wall_with_a_collection_at(pad: int) -> tuple[bool, int, int]:
    """reschedule_wall() of a one-shot, the collector set to run at about its pad-th allocation, with
    garbage whose finalizer cancels the task; then the task's due passes."""
    clock = ManualClock(0.0, wall=1_000_000.0)
    s = Scheduler(clock)
    task_id = s.schedule(100.0, lambda: None)

    class Canceller:
        def __del__(self) -> None:
            s.cancel(task_id)

    call = s.reschedule_wall  # (bound first: no allocation at the call)
    gc.collect()
    c = Canceller()
    c.me = c  # type: ignore[attr-defined]  # cyclic garbage with a finalizer: only the collector frees it
    del c
    old = gc.get_threshold()
    gc.set_threshold(gc.get_count()[0] + pad)
    try:
        moved = call(task_id, 1_000_050.0)
    finally:
        gc.set_threshold(*old)
    clock.advance(200.0)
    s.run_pending()
    return moved, s.calendar, s.stats().pending


def _reschedule_wall_with_garbage_made_at_the_clock_read() -> tuple[bool, int, int]:
    """The same finalizer, made garbage at the clock read of reschedule() (the collector then runs at the
    next allocation, wherever that falls)."""
    now = [0.0]
    reads = [0]
    target = [-1]

    def clock() -> float:
        reads[0] += 1
        if reads[0] == target[0]:
            c = Canceller()
            c.me = c  # type: ignore[attr-defined]
            del c
            gc.set_threshold(1)
        return now[0]

    s = Scheduler(clock, wall_clock=lambda: 1_000_000.0 + now[0])
    task_id = s.schedule(100.0, print)

    class Canceller:
        def __del__(self) -> None:
            s.cancel(task_id)

    old = gc.get_threshold()
    target[0] = reads[0] + 2  # now() in reschedule_wall(), then reschedule()'s own reading
    try:
        moved = s.reschedule_wall(task_id, 1_000_050.0)
    finally:
        gc.set_threshold(*old)
    return moved, s.calendar, s.stats().pending


def test_a_finalizer_that_cancels_a_one_shot_as_reschedule_wall_moves_it() -> None:
    """reschedule_wall() of a plain one-shot gave it its own plan after the move, and that allocation may
    run the collector: a finalizer that cancelled the task there left it in the calendar set (calendar
    stayed 1 with nothing pending, the task and its job kept alive, a driver waking to watch the wall
    clock for it). The plan is made before the move, and the task joins the calendar only if it is still
    live. Each allocation of the call is tried in turn."""
    moved, calendar, pending = _reschedule_wall_with_garbage_made_at_the_clock_read()
    assert not (calendar and not pending), f"at the clock read: moved {moved}, calendar {calendar}"
    for pad in range(8):
        moved, calendar, pending = _reschedule_wall_with_a_collection_at(pad)
        assert not (calendar and not pending), f"pad {pad}: moved {moved}, calendar {calendar}"
