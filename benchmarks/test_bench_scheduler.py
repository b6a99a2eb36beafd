"""The job engine on the wheel (Scheduler) and on a heap (HeapScheduler), with 10**3..10**6 tasks pending.

Both schedulers of a size hold the same one-shot no-op tasks, due uniformly over 1..100 s (seeded), built once
per module and size, one size at a time (10**6: a few seconds and ~1 GB for the two). The clock is a
ManualClock that starts at 0; only schedule+run moves it, 1 ms per round (ROUNDS + 1 ms in all, far below the
first pending due at 1 s), so every benchmark sees the same pending tasks. Each round does OPS operations and
report.py divides by OPS:

    schedule+cancel  cancel(schedule(50.5, noop))
    schedule+run     schedule OPS tasks due in 0.5 ms, advance the clock 1 ms, one run_pending() runs them
    reschedule       reschedule(id, 50.5 + offset) of pending tasks: the keep-alive reset

HeapScheduler leaves the entry of a cancelled or rescheduled task in its heap and rebuilds the heap, O(n),
once that garbage outnumbers the live tasks: every ~n cancels or reschedules. The rounds that rebuild are
slower than the rest (at 10**5 one round in ten; at 10**6 none of these rounds), so the medians leave the
rebuilds out: see the means for their amortized cost. They also leave out the resizes of the dicts keyed
by id (the engine's tasks; the heap's live timers too), which every new id fills a little: at 10**6 one slow
round.
"""

from __future__ import annotations

import gc
import random

import pytest

from _workloads import DELAY, SEED, delays, noop
from timerwheel import HeapScheduler, Scheduler
from timerwheel.testing import ManualClock

SIZES = {"1e3": 10**3, "1e4": 10**4, "1e5": 10**5, "1e6": 10**6}
OPS = 10_000
ROUNDS = 30
SOON = 0.0005  # schedule+run: the delay of the tasks it runs, within the 1 ms tick
TICK = 0.001  # schedule+run: how far each round moves the clock


def scheduler_with(cls: type[Scheduler], pending: list[float]) -> Scheduler:
    """A `cls` on a ManualClock at 0 with a one-shot no-op task per delay, ids 1..len(pending) (rule 1)."""
    enabled = gc.isenabled()
    gc.disable()  # millions of objects: the collector would only slow the build down
    try:
        sched = cls(ManualClock())
        schedule = sched.schedule
        for d in pending:
            schedule(d, noop)
    finally:
        if enabled:
            gc.enable()
    assert sched.stats().pending == len(pending)
    return sched


# -- the loops: `ops` operations each, bound methods in locals -------------------------------------------


def schedule_cancel(sched: Scheduler, ops: int) -> None:
    """`ops` x cancel(schedule(DELAY, noop))."""
    schedule, cancel = sched.schedule, sched.cancel
    for _ in range(ops):
        cancel(schedule(DELAY, noop))


def schedule_run(sched: Scheduler, ops: int) -> int:
    """Schedule `ops` tasks due in SOON, move the clock TICK past now, run them all; returns how many ran."""
    schedule = sched.schedule
    for _ in range(ops):
        schedule(SOON, noop)
    sched.clock.advance(TICK)  # a ManualClock
    return sched.run_pending()


def reschedule(job: tuple[Scheduler, list[tuple[int, float]]], ops: int) -> None:
    """reschedule(task_id, delay) for each of the `ops` pairs of the job."""
    sched, moves = job
    assert len(moves) == ops
    move = sched.reschedule
    for task_id, delay in moves:
        move(task_id, delay)


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=SIZES)
def size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def pending(size: str) -> list[float]:
    return delays(SIZES[size])


@pytest.fixture(scope="module")
def wheel_sched(pending: list[float]) -> Scheduler:
    return scheduler_with(Scheduler, pending)


@pytest.fixture(scope="module")
def heap_sched(pending: list[float]) -> Scheduler:
    return scheduler_with(HeapScheduler, pending)


@pytest.fixture(scope="module")
def moves(size: str) -> list[tuple[int, float]]:
    """OPS (task id, delay): pending tasks drawn at random (seeded), delays 50.5 s + 0..999 ms."""
    ids = random.Random(SEED).choices(range(1, SIZES[size] + 1), k=OPS)
    return [(task_id, DELAY + (k % 1000) * 0.001) for k, task_id in enumerate(ids)]


def check_unchanged(sched: Scheduler, size: str) -> None:
    """The pending tasks are still exactly the population, none due yet."""
    assert sched.stats().pending == SIZES[size]
    assert sched.clock() < 1.0  # the earliest pending due is 1 s or later


# -- schedule + cancel ------------------------------------------------------------------------------------


def test_schedule_cancel_scheduler(benchmark, per_op, size, wheel_sched):
    benchmark.group = f"Scheduler schedule+cancel: {size}"
    per_op(schedule_cancel, wheel_sched, OPS, ROUNDS)
    check_unchanged(wheel_sched, size)


def test_schedule_cancel_heap_scheduler(benchmark, per_op, size, heap_sched):
    benchmark.group = f"Scheduler schedule+cancel: {size}"
    per_op(schedule_cancel, heap_sched, OPS, ROUNDS)
    check_unchanged(heap_sched, size)


# -- schedule + run ---------------------------------------------------------------------------------------


def test_schedule_run_scheduler(benchmark, per_op, size, wheel_sched):
    benchmark.group = f"Scheduler schedule+run: {size}"
    assert per_op(schedule_run, wheel_sched, OPS, ROUNDS) == OPS
    check_unchanged(wheel_sched, size)


def test_schedule_run_heap_scheduler(benchmark, per_op, size, heap_sched):
    benchmark.group = f"Scheduler schedule+run: {size}"
    assert per_op(schedule_run, heap_sched, OPS, ROUNDS) == OPS
    check_unchanged(heap_sched, size)


# -- reschedule -------------------------------------------------------------------------------------------


def test_reschedule_scheduler(benchmark, per_op, size, wheel_sched, moves):
    benchmark.group = f"Scheduler reschedule: {size}"
    per_op(reschedule, (wheel_sched, moves), OPS, ROUNDS)
    check_unchanged(wheel_sched, size)


def test_reschedule_heap_scheduler(benchmark, per_op, size, heap_sched, moves):
    benchmark.group = f"Scheduler reschedule: {size}"
    per_op(reschedule, (heap_sched, moves), OPS, ROUNDS)
    check_unchanged(heap_sched, size)
