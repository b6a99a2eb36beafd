"""A Hypothesis state machine: Scheduler (on each backend) and HeapScheduler against a small model.

The model implements the rules of the Scheduler docstring directly, with a list scan instead of a timer
store: random schedule, schedule_at, cancel, reschedule, run_pending and next_run_in, with jobs that
raise, cancel other tasks, schedule new ones, reschedule, or take time; clock steps from 0 to 10**6 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from timerwheel import HeapScheduler, Missed, RepeatMode, Scheduler
from timerwheel.testing import ManualClock

from .conftest import BACKENDS
from .test_scheduler import _wheel_scheduler

Behaviour = tuple[Any, ...]


@dataclass
class MTask:
    id: int
    due: float
    seq: int
    interval: float | None
    mode: RepeatMode
    missed: Missed
    first_due: float
    behaviour: Behaviour
    armed: bool = True
    running: bool = False


def first_after(origin: float, interval: float, now: float) -> float:
    """The least origin + k * interval (k >= 1) after now, by exponential then binary search on k."""
    hi = 1
    while not origin + hi * interval > now:
        hi *= 2
    lo = hi // 2  # origin + lo * interval <= now, or lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if origin + mid * interval > now:
            hi = mid
        else:
            lo = mid
    return origin + hi * interval


class Model:
    """The rules, written plainly: every task in a dict, due tasks found by sorting them all."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.tasks: dict[int, MTask] = {}
        self.last_id = 0
        self.seq = 0
        self.last_now = clock()
        self.errors: list[str] = []
        self.log: list[int] = []
        self.executed = self.failed = self.cancelled = 0

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def schedule_at(
        self, due: float, interval: float | None, mode: RepeatMode, missed: Missed, behaviour: Behaviour
    ) -> int:
        self.last_id += 1
        self.tasks[self.last_id] = MTask(
            self.last_id, due, self._next_seq(), interval, mode, missed, due, behaviour
        )
        return self.last_id

    def cancel(self, tid: int) -> bool:
        task = self.tasks.pop(tid, None)
        if task is None:
            return False
        task.armed = False
        self.cancelled += 1
        return True

    def reschedule(self, tid: int, delay: float) -> bool:
        task = self.tasks.get(tid)
        if task is None or (task.interval is None and task.running):
            return False  # a one-shot whose run started has no next run to move
        task.due = task.first_due = self.clock() + delay
        task.seq = self._next_seq()
        task.armed = True
        return True

    def _arm(self, task: MTask, due: float) -> None:
        task.due, task.seq, task.armed = due, self._next_seq(), True

    def run_pending(self, run_job: Any) -> int:
        now = self.last_now = max(self.clock(), self.last_now)
        ran = 0
        ran_ids: set[int] = set()
        deferred_ids: set[int] = set()
        deferred: list[MTask] = []  # recurring tasks due again in this call: they wait for the next call
        while True:
            batch = sorted(
                (t.due, t.seq, t.id)
                for t in self.tasks.values()
                if t.armed and t.due <= now and t.id not in deferred_ids
            )
            if not batch:
                for task in deferred:
                    task.seq = self._next_seq()
                return ran
            for due, seq, tid in batch:
                task = self.tasks.get(tid)
                if task is None or not task.armed or task.seq != seq:
                    continue
                if tid in ran_ids:
                    deferred.append(task)
                    deferred_ids.add(tid)
                    continue
                ran_ids.add(tid)
                task.armed = False
                self.log.append(tid)
                self.executed += 1  # counted when the run starts
                task.running = True  # (a one-shot stays in the table while it runs: it can be cancelled)
                try:
                    run_job(task.behaviour)
                except Exception as exc:
                    self.errors.append(f"task {tid}: {exc}")
                    self.failed += 1
                task.running = False
                if task.interval is None:
                    self.tasks.pop(tid, None)  # finished once its run is
                # re-armed after the job returned (inline), unless it cancelled or moved its own task
                if task.interval is not None and not task.armed and self.tasks.get(tid) is task:
                    if task.mode is RepeatMode.FIXED_DELAY:
                        nxt = self.clock() + task.interval
                    else:
                        nxt = due + task.interval
                        if not nxt > now:
                            if task.missed is Missed.DELAY:
                                nxt = now + task.interval
                            else:
                                nxt = first_after(task.first_due, task.interval, now)
                    self._arm(task, nxt)
                ran += 1


behaviours = st.one_of(
    st.just(("ok",)),
    st.just(("raise",)),
    st.tuples(st.just("cancel"), st.integers(1, 12)),
    st.tuples(st.just("spawn"), st.sampled_from([0.0, 0.0005, 0.5, 3.0])),
    st.tuples(st.just("sleep"), st.sampled_from([0.0, 0.001, 0.7, 5.0])),
    st.tuples(st.just("resched"), st.integers(1, 12), st.sampled_from([0.0, 0.25, 2.0])),
)
delays = st.one_of(st.just(0.0), st.floats(0, 2), st.floats(0, 1e5), st.sampled_from([0.001, 1.0, 4.096]))
intervals = st.one_of(st.none(), st.sampled_from([0.001, 0.1, 0.7, 1.0, 3.0, 1000.0]))
modes = st.sampled_from(list(RepeatMode))
misses = st.sampled_from(list(Missed))
steps = st.one_of(st.just(0.0), st.floats(0, 0.01), st.floats(0, 5), st.floats(0, 1e6))


class SchedulerMachine(RuleBasedStateMachine):
    factory: Any

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(1000.0)
        self.sched: Scheduler = self.factory(self.clock)
        self.model = Model(self.clock)
        self.log: list[int] = []

    def _job(self, tid_box: list[int], behaviour: Behaviour) -> Any:
        def job() -> None:
            self.log.append(tid_box[0])
            self._act(behaviour, real=True)

        return job

    def _act(self, behaviour: Behaviour, *, real: bool) -> None:
        """Carry out a job's behaviour on the real scheduler or on the model."""
        kind = behaviour[0]
        if kind == "raise":
            raise ValueError("boom")
        if kind == "cancel":
            _ = self.sched.cancel(behaviour[1]) if real else self.model.cancel(behaviour[1])
        elif kind == "spawn":
            if real:
                box: list[int] = [0]
                box[0] = self.sched.schedule(behaviour[1], self._job(box, ("ok",)))
            else:
                self.model.schedule_at(
                    self.clock() + behaviour[1], None, RepeatMode.FIXED_RATE, Missed.DELAY, ("ok",)
                )
        elif kind == "sleep" and real:
            self.clock.advance(behaviour[1])
        elif kind == "resched":
            _ = (
                self.sched.reschedule(behaviour[1], behaviour[2])
                if real
                else self.model.reschedule(behaviour[1], behaviour[2])
            )

    def _schedule(
        self,
        due: float,
        delay: float | None,
        interval: float | None,
        mode: RepeatMode,
        missed: Missed,
        behaviour: Behaviour,
    ) -> None:
        box = [0]
        job = self._job(box, behaviour)
        if delay is None:
            box[0] = self.sched.schedule_at(due, job, interval, mode=mode, missed=missed)
        else:
            box[0] = self.sched.schedule(delay, job, interval, mode=mode, missed=missed)
        assert box[0] == self.model.schedule_at(due, interval, mode, missed, behaviour)

    @precondition(lambda self: len(self.model.tasks) < 40)
    @rule(delay=delays, interval=intervals, mode=modes, missed=misses, behaviour=behaviours)
    def schedule(
        self, delay: float, interval: float | None, mode: RepeatMode, missed: Missed, behaviour: Behaviour
    ) -> None:
        self._schedule(self.clock() + delay, delay, interval, mode, missed, behaviour)

    @precondition(lambda self: len(self.model.tasks) < 40)
    @rule(offset=st.floats(-100, 100), interval=intervals, behaviour=behaviours)
    def schedule_at(self, offset: float, interval: float | None, behaviour: Behaviour) -> None:
        self._schedule(self.clock() + offset, None, interval, RepeatMode.FIXED_RATE, Missed.SKIP, behaviour)

    @rule(tid=st.integers(0, 15))
    def cancel(self, tid: int) -> None:
        assert self.sched.cancel(tid) == self.model.cancel(tid)

    @rule(tid=st.integers(1, 15), delay=delays)
    def reschedule(self, tid: int, delay: float) -> None:
        assert self.sched.reschedule(tid, delay) == self.model.reschedule(tid, delay)

    @rule(step=steps)
    def run_pending(self, step: float) -> None:
        self.clock.advance(step)
        start = self.clock()
        ran = self.sched.run_pending()
        real_log, self.log = self.log, []
        end = self.clock()
        self.clock_reset(start)
        expected = self.model.run_pending(
            lambda b: self._act(b, real=False) if b[0] != "sleep" else self.clock.advance(b[1])
        )
        assert self.clock() == end
        assert real_log == self.model.log
        self.model.log = []
        assert ran == expected

    def clock_reset(self, t: float) -> None:
        """Rewind the manual clock for the model's replay of the same call (test-only)."""
        self.clock._now = t

    @invariant()
    def agree(self) -> None:
        s, m = self.sched, self.model
        assert s.errors == m.errors
        pending = [(info.id, info.next_fire_at) for info in s.pending()]
        expected = sorted((t.due, t.id) for t in m.tasks.values() if t.armed)
        assert pending == [(tid, due) for due, tid in expected]
        stats = s.stats()
        assert (stats.pending, stats.executed, stats.failed, stats.cancelled, stats.running) == (
            len(expected),
            m.executed,
            m.failed,
            m.cancelled,
            0,
        )
        nxt = s.next_run_in()
        assert nxt == (None if not expected else max(0.0, expected[0][0] - self.clock()))


def _factories() -> list[Any]:
    params = [pytest.param(HeapScheduler, id="heap")]
    for name, core in BACKENDS.items():
        marks = [pytest.mark.skip(reason="Cython backend not in use")] if core is None else []
        params.append(pytest.param(None if core is None else _wheel_scheduler(core), id=name, marks=marks))
    return params


@pytest.mark.parametrize("factory", _factories())
def test_scheduler_matches_model(factory: Any) -> None:
    import logging

    machine = type("Machine", (SchedulerMachine,), {"factory": staticmethod(factory)})
    machine.TestCase.settings = settings(stateful_step_count=40)
    logging.disable(logging.ERROR)  # the jobs that raise are logged by design
    try:
        machine.TestCase().runTest()
    finally:
        logging.disable(logging.NOTSET)
