"""The library's small types: enums, the records it reports (JobEvent, Stats, TimerInfo), its exceptions."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "AlreadyRunningError",
    "Backpressure",
    "ClockError",
    "ClosedError",
    "JobEvent",
    "Missed",
    "NotStartedError",
    "RepeatMode",
    "RunOptions",
    "Stats",
    "TimerInfo",
    "TimerWheelError",
]


class RepeatMode(enum.Enum):
    """How a recurring task (one given an interval) is re-armed.

    FIXED_RATE: on the grid due, due + interval, ...: the next run is armed when a run starts, so runs may
    overlap when a driver runs jobs concurrently. FIXED_DELAY: the next run is `interval` after the previous
    run finished (read from the clock when the job returns): runs never overlap. SKIP_IF_RUNNING: the
    FIXED_RATE grid, but a fire is skipped, and counted, while the previous run of the task is still going.
    """

    FIXED_RATE = "fixed_rate"
    FIXED_DELAY = "fixed_delay"
    SKIP_IF_RUNNING = "skip_if_running"


class Missed(enum.Enum):
    """What a recurring task does when its next due is already past (the scheduler ran late).

    DELAY: re-arm at now + interval (the schedule slides). SKIP: re-arm at the first point of the task's
    original grid (first due + k * interval) after now (the grid is kept, missed runs are skipped).
    Either way missed runs are never replayed in a burst.
    """

    DELAY = "delay"
    SKIP = "skip"


# The two defaults of `missed`, each named once. They differ on purpose. The bare engine (Scheduler) runs
# when its caller calls run_pending(), at a cadence of the caller's own: a late call is the normal case,
# and DELAY keeps a full interval between runs. A driver wakes at each due itself, so a late fire there
# is a stall (a busy loop, a pause) and SKIP keeps the task on its grid, as cron and systemd timers do.
ENGINE_MISSED = Missed.DELAY
DRIVER_MISSED = Missed.SKIP


class Lifecycle(enum.Enum):
    """A driver's life: new, running, closed; never back."""

    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class Backpressure(enum.Enum):
    """What a driver does with a due job when its bounded queue of due jobs is full.

    BLOCK: wait for room. DROP: do not run it; count it and report a JobEvent with dropped=True.
    RUN_INLINE: run it on the driver's own thread.
    """

    BLOCK = "block"
    DROP = "drop"
    RUN_INLINE = "run_inline"


@dataclass(frozen=True, slots=True)
class JobEvent:
    """What happened to one fire of a task: a run, a drop or a skip; passed to the `observer`.

    For a drop or a skip, started_at and finished_at are the time of that decision and duration is 0.

    Attributes:
        task_id: the task.
        scheduled_for: the due this fire was for.
        started_at: when the job started (clock time).
        finished_at: when it returned or raised.
        lateness: started_at - scheduled_for, never negative.
        duration: finished_at - started_at.
        error: the exception the job raised, or None.
        dropped: the fire was dropped by backpressure; the job did not run.
        skipped: the fire was skipped (SKIP_IF_RUNNING, previous run still going); the job did not run.
        timed_out: the run overran the `timeout` it was given (drivers only).
    """

    task_id: int
    scheduled_for: float
    started_at: float
    finished_at: float
    lateness: float
    duration: float
    error: BaseException | None = None
    dropped: bool = False
    skipped: bool = False
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of a scheduler's counters.

    Attributes:
        pending: tasks armed to run (waiting for their due).
        executed: runs started: counted when the job is called, so a run still going counts.
        cancelled: successful cancel() calls.
        running: runs executing now: started (the job called) and not yet finished. A run waiting for a
            worker or a slot is not running: it is in `queued`.
        dropped: fires dropped by backpressure.
        skipped: fires skipped because the previous run was still going (SKIP_IF_RUNNING).
        failed: runs that raised an exception (counted in executed too).
        queued: runs taken when due and waiting to start: for a worker (ThreadedScheduler: in its queue,
            handed to a worker that has not picked it up yet, or, under Backpressure.BLOCK, the one the
            driver holds while it waits for room) or a slot (AsyncScheduler's max_concurrency).
            Scheduler.run_pending() runs jobs inline: never any. A run handed over is in `queued` until
            it starts, then in `running` until it finishes (or neither, once dropped or forgotten): with
            pending, running and queued all 0, no job is left to run.
        clock_errors: times a driver could not read its clock (it raised, or gave a value that is not a
            time, or one past the wheel's range); the driver logs each and retries.
        timers: plain timers and run deadlines armed: what is pending besides tasks, the sum of the five
            counts below and of any timer of a kind of its own (a driver's; see Timer.kind).
        keys: KeyedScheduler keys armed for their next run (a key running, disabled or done has none).
        handles: AsyncScheduler call_later() and call_at() handles pending (on the wheel: one with an
            infinite delay is not armed).
        timeouts: AsyncScheduler timeout() and timeout_at() deadlines armed (entered, not expired,
            exited or disabled).
        sleeps: AsyncScheduler sleep() calls waiting for their delay.
        deadlines: run deadlines armed: runs going on that were given a `timeout`.

    Every count is kept as it changes, so stats() is O(1) (see Scheduler.stats). Example, an
    AsyncScheduler serving: Stats(pending=3, ..., timers=1204, keys=0, handles=2, timeouts=1200,
    sleeps=2, deadlines=0): 1200 requests inside a timeout(), two sleeps, two call_later handles.
    """

    pending: int = 0
    executed: int = 0
    cancelled: int = 0
    running: int = 0
    dropped: int = 0
    skipped: int = 0
    failed: int = 0
    queued: int = 0
    clock_errors: int = 0
    timers: int = 0
    keys: int = 0
    handles: int = 0
    timeouts: int = 0
    sleeps: int = 0
    deadlines: int = 0


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How a task's runs are called: the per-task options that schedule() takes besides the timing.

    Attributes:
        context: call the job as fn(ctx, *args, **kwargs), with a JobContext.
        timeout: seconds a run may take (None: no limit); past it, the run is reported as timed out and
            its context's `cancelled` is set.
        coroutine: the job is a coroutine function (AsyncScheduler runs each run as a task); drivers set it.
        on_drop: called with the job's positional arguments when a run of it is dropped (backpressure, or
            the scheduler closing), after the drop is counted; what it raises is logged. (KeyedScheduler
            re-plans a key whose run was dropped with it.)
    """

    context: bool = False
    timeout: float | None = None
    coroutine: bool = False
    on_drop: Callable[..., object] | None = None

    def __post_init__(self) -> None:
        from ._validate import boolean, callable_or_none, seconds

        boolean(self.context, "context")
        boolean(self.coroutine, "coroutine")
        callable_or_none(self.on_drop, "on_drop")
        if self.timeout is not None:
            timeout = seconds(self.timeout, "timeout")
            if timeout <= 0:
                raise ValueError(f"timeout must be > 0, got {timeout!r}")
            object.__setattr__(self, "timeout", timeout)


@dataclass(frozen=True, slots=True)
class TimerInfo:
    """One armed task, as listed by pending(): its id, next fire time, interval (None: one-shot), mode."""

    id: int
    next_fire_at: float
    interval: float | None
    mode: RepeatMode


class TimerWheelError(RuntimeError):
    """Base of the errors of a scheduler's lifecycle."""


class AlreadyRunningError(TimerWheelError):
    """start() on a scheduler that is already running."""


class NotStartedError(TimerWheelError):
    """An operation that needs a running scheduler, called before start()."""


class ClosedError(TimerWheelError):
    """An operation on a scheduler that has been stopped or closed."""


class ClockError(TimerWheelError):
    """A driver cannot read its clock (it raises, or reads past the wheel's range): new work is refused
    until it can, since it would never run. The driver keeps retrying; the cause is chained."""
