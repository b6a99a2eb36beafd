"""The job engine: every rule about when and in what order anything runs lives here, once.

The engine owns every timer of a scheduler, in one timer store: jobs (tasks, with repeat modes and
missed-run policies), plain timers (a callback at a time, no job semantics: what asyncio's timeouts,
sleeps and call_later handles are) and run deadlines (a job's `timeout=`). One function, drain(), takes
everything that is due in one (due, add order) order, applies the rules, and hands each job's run to a
driver; one next_due() covers all of it.

A driver decides only where a run executes and how its waiting loop is woken. It binds itself to the
engine (bind()) with three methods (see Driver): execute(run), wake(due), timed_out(run); and reports
back through the Run it was handed: run.start() just before the job is called, run.finish(error) after,
run.drop() for a run it will not execute, run.forget() for one whose task was cancelled while it waited.
Scheduler itself, driven by run_pending(), is its own driver: it runs jobs inline.

Not thread-safe: a driver serialises calls into it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

try:  # only for the compiled build: @cython.freelist (below) keeps freed records for reuse
    import cython
except ImportError:  # no Cython here: the decorators mean nothing to the pure-Python engine
    from types import SimpleNamespace

    cython = SimpleNamespace(cclass=lambda cls: cls, freelist=lambda n: lambda cls: cls)

from .._clock import Clock, as_clock, utc_not_after
from .._core import TaskTable, TimerWheel
from .._types import ENGINE_MISSED, JobEvent, Missed, RepeatMode, RunOptions, Stats, TimerInfo
from .._validate import (
    arguments,
    callable_or_none,
    exception_types,
    function,
    identifier,
    keywords,
    member,
    seconds,
    timer_store,
)

__all__ = ["Driver", "JobContext", "Run", "Scheduler", "Timer", "TimerStore", "WallTimer"]

logger = logging.getLogger("timerwheel")

#: errors keeps the messages of the most recent failed runs, at most this many.
MAX_ERRORS = 1000
_NO_OPTIONS = RunOptions()
# Constants the hot paths compare against (the compiled build keeps them as C values, see _scheduler_c.pxd).
_COMPILED = __name__.endswith("_c")  # this file, built by Cython as timerwheel._engine._scheduler_c
_INF = math.inf
_NAN = math.nan  # compares false with everything: a clock reading that is not a float takes now()
_FIXED_DELAY = RepeatMode.FIXED_DELAY
_SKIP_IF_RUNNING = RepeatMode.SKIP_IF_RUNNING
_FIXED_RATE = RepeatMode.FIXED_RATE
#: A change of the wall clock against the monotonic one larger than this is a step: calendar tasks move.
#: (Slower drift, an NTP slew, is absorbed where it matters: a calendar task never fires before its wall
#: time, whatever the offset said when it was armed.)
_WALL_STEP = 0.001
# seconds after the latest time read: a timer deferred to the next pass of drain() (defer_timer) is due there,
# never in the pass that is going on (one that would fire again at once runs once per pass)
_NEXT_PASS = 0.001
_MAX_ID = 1 << 63  # timer ids are below this (see TimerStore)
#: The kinds of plain timer that stats() counts apart (its fields of these names): a Timer subclass names
#: its own in its class attribute `kind`; "timers" (Timer's) is no kind of its own, counted only in the
#: total, Stats.timers. The engine keeps one count per kind, and one for run deadlines, after them.
TIMER_KINDS = ("timers", "keys", "handles", "timeouts", "sleeps")
_KEYS, _HANDLES, _TIMEOUTS, _SLEEPS = 1, 2, 3, 4  # (their indexes in TIMER_KINDS)
_DEADLINES = len(TIMER_KINDS)  # (the index of the run deadlines' count)
_KINDS = _DEADLINES + 1
if _COMPILED and _KINDS != 6:  # (the size of _Engine._timers in _scheduler_c.pxd)
    raise ImportError(f"_scheduler_c.pxd keeps 6 counts of timers, and the engine has {_KINDS} kinds")


class TimerStore(Protocol):
    """What the engine needs from its timer store: TimerWheel, or the heap of HeapScheduler.

    Its timer ids are ints from 1 to 2**63 - 1 (the compiled engine keeps a task's as a C integer, and 0 as
    "not armed"), each issued once.
    """

    @property
    def now(self) -> float: ...
    @property
    def horizon(self) -> float: ...
    def add_at(self, due: float, item: Any) -> int: ...
    def cancel(self, timer_id: int) -> bool: ...
    def reschedule_at(self, timer_id: int, due: float) -> bool: ...
    def advance(self, now: float) -> list[tuple[int, Any]]: ...
    def next_due(self) -> float | None: ...
    def __len__(self) -> int: ...


class Driver(Protocol):
    """What a driver gives the engine (Scheduler.bind): where runs execute and how its loop is woken.

    The engine calls wake(due) for a due armed outside drain() only when it comes before the engine's
    `wake_below` (a float attribute of the Scheduler, infinity once a driver is bound): a driver may keep
    `wake_below` at the time it will look at the store anyway (never later), which saves it those calls.
    """

    def execute(self, run: Run) -> None:
        """Run a due job, now or later, here or elsewhere; report through `run` (start, finish, drop,
        forget). Called from drain(), in (due, add order) order."""

    def wake(self, due: float) -> None:
        """Something was armed at `due` outside drain(): wake the waiting loop if it sleeps past it."""

    def timed_out(self, run: Run) -> None:
        """A started run passed its deadline (its context's `cancelled` is set already)."""


class JobContext:
    """What a job scheduled with `context=True` receives as its first argument.

    Attributes:
        task_id: the task.
        scheduled_for: the due of this run.
        timeout: the run's timeout in seconds, or None.
        cancelled: a threading.Event set when the scheduler stops or closes, and when the run's timeout
            elapses; a long job should check it (or wait on it) and return early.
        timed_out: whether the run's timeout elapsed.
        fence: a KeyedScheduler run's fencing token (a Fence: the key's generation, the fire, the
            attempt), which the job's own writes can check; None for other runs.
    """

    __slots__ = ("cancelled", "fence", "scheduled_for", "task_id", "timed_out", "timeout")

    def __init__(self, task_id: int, scheduled_for: float, timeout: float | None) -> None:
        self.task_id = task_id
        self.scheduled_for = scheduled_for
        self.timeout = timeout
        self.cancelled = threading.Event()
        self.timed_out = False
        self.fence: Any = None

    def __repr__(self) -> str:
        return f"JobContext(task_id={self.task_id}, scheduled_for={self.scheduled_for!r})"


@cython.freelist(64)
@cython.cclass
class _Task:
    """One scheduled task (made by _new_task). `timer_id` is its entry in the store while armed, 0
    otherwise (the compiled build keeps it as a C integer: no int object per task). What only recurring
    and calendar tasks need is in its `plan` (see _Plan)."""

    __slots__ = (
        "args",
        "due",
        "fn",
        "id",
        "kwargs",
        "last_call",
        "live",
        "options",
        "plan",
        "repeat",
        "running",
        "timer_id",
        "waiting",
    )
    # (the fields, for type checkers: _new_task() sets them; the compiled build declares them in C)
    id: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    due: float
    options: RunOptions
    plan: _Plan
    timer_id: int
    running: int
    waiting: Run | None
    last_call: int
    live: bool
    repeat: bool

    def _put_back(self, engine: _Engine, timer_id: int) -> None:
        if self.timer_id == timer_id and self.live:  # taken, not run: due again at the next drain(),
            self.timer_id = 0  # in its place among the other items put back
            engine._arm(self, self.due)


@cython.cclass
class _Plan:
    """How a task repeats, and where it is on the wall clock: a record of its own for recurring and
    calendar tasks (and one-shots given a mode). Plain one-shots, most tasks, share ONE_SHOT, which is
    never written to: a task that would change it gets its own first (_own_plan). That keeps a one-shot's
    record small (docs/performance.md). A one-shot's `missed` is not kept: it never repeats."""

    __slots__ = ("cron", "first_due", "interval", "missed", "mode", "overdue", "wall", "warned")
    interval: float | None
    mode: RepeatMode
    missed: Missed
    first_due: float
    cron: Any
    wall: float | None
    overdue: bool
    warned: float

    def __init__(self, interval: float | None, mode: RepeatMode, missed: Missed, first_due: float) -> None:
        self.interval = interval
        self.mode = mode
        self.missed = missed
        self.first_due = first_due  # the origin of the Missed.SKIP grid: first_due + k * interval
        self.cron = None  # a calendar task's Cron (its points are wall-clock times), or None
        self.wall = None  # a calendar task's due on the wall clock (POSIX seconds), or None
        self.overdue = False  # FIXED_DELAY: came due (moved by reschedule) while a run went on
        self.warned = 0.0  # the duration of the last run warned of as longer than half the interval


_ONE_SHOT = _Plan(None, RepeatMode.FIXED_RATE, Missed.DELAY, 0.0)  # shared, never written to


def _own_plan(task: _Task) -> _Plan:
    """The task's plan, made its own first if it is the shared ONE_SHOT (before any change to it)."""
    plan = task.plan
    if plan is _ONE_SHOT:
        plan = _Plan(None, plan.mode, plan.missed, task.due)
        task.plan = plan
    return plan


def _new_task(
    task_id: int,
    fn: Callable[..., Any],
    interval: float | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    mode: RepeatMode,
    missed: Missed,
    due: float,
    options: RunOptions,
) -> _Task:
    """A new task. (A function rather than __init__: the compiled build makes the record without parsing
    arguments, and fills it in C.)"""
    task = _Task.__new__(_Task)
    task.id = task_id
    task.fn = fn
    task.args = args
    task.kwargs = kwargs
    if interval is None and mode is _FIXED_RATE:  # (`missed` means nothing to a task that does not repeat)
        task.plan = _ONE_SHOT
    else:
        task.plan = _Plan(interval, mode, missed, due)
    task.due = due  # the due of the armed fire (kept after it is taken, as the run's scheduled_for)
    task.options = options
    task.timer_id = 0
    task.running = 0  # runs taken and not finished (a waiting one included)
    task.waiting = None  # its run taken but not started (waiting for a worker or a slot)
    task.last_call = 0  # the drain() call that last took it: at most one run per call
    task.live = True  # False once cancelled or finished (a one-shot: its run finished); see Scheduler._arm
    task.repeat = interval is not None  # recurring: an interval, or a Cron
    return task


_TAKEN, _STARTED, _DONE, _CANCELLED = 0, 1, 2, 3
_NOTHING: list[Any] = []  # (never appended to)


@cython.freelist(64)
@cython.cclass
class Run:
    """One fire of a task (made by _new_run), handed to a driver's execute(): call it, and report how it went.

    The driver calls start() just before the job (it counts the run as executed and arms its deadline),
    then call(), then finish(error). A run it will not execute is drop()ped (backpressure); one whose task
    was cancelled while it waited (see `cancelled`) is forget()ten. Under the driver's serialisation,
    except call(), which runs the job and may run anywhere.
    """

    __slots__ = (
        "_engine",
        "_state",
        "context",
        "deadline",
        "scheduled_for",
        "started_at",
        "task",
        "timed_out",
    )
    # (the fields, for type checkers: _new_run() sets them)
    _engine: _Engine
    _state: int
    context: JobContext | None
    deadline: _Deadline | None
    scheduled_for: float
    started_at: float
    task: _Task
    timed_out: bool

    def __repr__(self) -> str:
        return f"<Run of task {self.task.id} scheduled_for={self.scheduled_for!r}>"

    @property
    def task_id(self) -> int:
        """The id of the task this run belongs to."""
        return self.task.id

    @property
    def options(self) -> RunOptions:
        """The task's run options (context, timeout, coroutine)."""
        return self.task.options

    @property
    def fn(self) -> Callable[..., Any]:
        """The job."""
        return self.task.fn

    @property
    def cancelled(self) -> bool:
        """Its task was cancelled after this run was taken and before it started: do not start it (it is
        accounted for already; forget() is a no-op)."""
        return self._state == _CANCELLED

    def start(self) -> float:
        """The job is about to be called: count it (Stats.executed counts runs started), arm its deadline.
        Returns the start time."""
        engine = self._engine
        if self._state != _TAKEN:
            raise RuntimeError(f"{self!r} was started, finished or dropped already")
        task = self.task
        if task.waiting is self:
            task.waiting = None
        engine._waiting -= 1
        self._state = _STARTED
        engine._executed += 1
        engine._running += 1
        # A one-shot stays in the table while it runs (it can still be cancelled: rule 5), finished in
        # finish(); once started it has no next run, so it leaves the calendar now.
        if not task.repeat and task.plan.wall is not None:
            engine._cal.tasks.discard(task)
        try:
            now = engine._read()
        except Exception:  # a clock that fails just now: the latest good reading (a driver will notice)
            now = engine._latest
        else:
            if type(now) is float and engine._latest <= now < engine._horizon:  # now(), inline
                engine._latest = now
            else:
                now = engine._reading(engine._latest)
        self.started_at = now
        timeout = None if task.options is _NO_OPTIONS else task.options.timeout  # (most tasks: no options)
        if timeout is not None:
            deadline = _Deadline(self, self.started_at + timeout)
            try:
                deadline.id = engine._add_at(deadline.due, deadline)
            except OverflowError:  # a deadline beyond the store's range: it never elapses
                pass
            else:
                self.deadline = deadline
                engine._timers[_DEADLINES] += 1
                if deadline.due < engine.wake_below and not engine._draining:
                    engine._wake(deadline.due)
        return self.started_at

    def call(self) -> Any:
        """Call the job with its arguments (and its context first, for context=True); no error handling."""
        task = self.task
        if task.options is not _NO_OPTIONS and task.options.context:
            return task.fn(self.context, *task.args, **(task.kwargs or {}))
        if task.kwargs is None:
            return task.fn(*task.args)
        return task.fn(*task.args, **task.kwargs)

    def finish(self, error: BaseException | None = None) -> None:
        """The job returned (error None) or raised: account for it, report it, re-arm FIXED_DELAY."""
        if self._state != _STARTED:
            raise RuntimeError(f"{self!r} was not started, or finished already")
        self._state = _DONE
        engine = self._engine
        task = self.task
        timeout = None if task.options is _NO_OPTIONS else task.options.timeout
        if not task.repeat and timeout is None and engine._reports.observer is None:
            finished = self.started_at  # nothing below reads the finish time: the clock is not read
        else:
            try:
                finished = engine._read()
            except Exception:  # the run is still accounted for (a driver will report the clock)
                finished = max(self.started_at, engine._latest)
            else:
                if type(finished) is float and engine._latest <= finished < engine._horizon:  # now()
                    engine._latest = finished
                else:
                    finished = engine._reading(self.started_at)
        task.running -= 1
        engine._running -= 1
        if not task.repeat and task.live:  # a one-shot is finished once its run is (a live task is in
            task.live = False  # the table; one cancelled while it ran is out of it already)
            engine._tasks.pop(task.id, None)
        deadline = self.deadline
        if deadline is not None and deadline.id is not None:
            engine._cancel_at(deadline.id)  # False while drain() holds it: it is skipped there
            deadline.id = None
            engine._timers[_DEADLINES] -= 1
        timed_out = self.timed_out or (timeout is not None and finished - self.started_at > timeout)
        if error is not None:
            engine._failed += 1
        if task.repeat and task.plan.mode is _FIXED_DELAY:
            engine._rearm_after(task, finished)
        reports = engine._reports
        if reports.observer is not None:
            reports.event(
                task.id, self.scheduled_for, self.started_at, finished, error=error, timed_out=timed_out
            )
        if error is not None:
            reports.error(task.id, error)
        if timed_out or task.plan.interval is not None:
            reports.warn(task, finished - self.started_at, timed_out)

    def drop(self) -> None:
        """The run will not be executed (backpressure, or the scheduler closing): counted and reported.
        A no-op for a run forgotten already (its task was cancelled)."""
        if self._state == _CANCELLED:
            return
        engine = self._engine
        task = self._leave_waiting()
        self._state = _DONE
        task.running -= 1
        engine._dropped += 1
        if not task.repeat and engine._tasks.get(task.id) is task:  # a dropped one-shot is over
            task.live = False
            del engine._tasks[task.id]
            if task.plan.wall is not None:
                engine._cal.tasks.discard(task)
        now = engine._reading(engine._latest)
        if task.plan.mode is _FIXED_DELAY:
            engine._rearm_after(task, now)
        engine._reports.event(task.id, self.scheduled_for, now, now, dropped=True)
        on_drop = task.options.on_drop
        if on_drop is not None:
            engine._reports._call(on_drop, task.args, "a dropped run's on_drop raised (%r)", on_drop)

    def forget(self) -> None:
        """Its task was cancelled while it waited: it will not start, and counts nowhere. Idempotent.

        Raises:
            RuntimeError: the run started or ended, or its task is live (a run that a driver will not
                execute is drop()ped, and counted).
        """
        if self._state == _CANCELLED:
            return
        task = self.task
        if task.live and self._engine._tasks.get(task.id) is task:
            raise RuntimeError(f"{self!r}: its task was not cancelled; drop() a run that will not execute")
        self._forget()

    def _forget(self) -> None:
        task = self._leave_waiting()
        self._state = _CANCELLED
        task.running -= 1

    def _leave_waiting(self) -> _Task:
        """A taken run starts, or will not: it waits no more."""
        if self._state != _TAKEN:
            raise RuntimeError(f"{self!r} was started, finished or dropped already")
        task = self.task
        if task.waiting is self:
            task.waiting = None
        self._engine._waiting -= 1
        return task

    def _time_out(self, driver: Driver) -> None:
        """Its deadline passed (drain() found it): say so, tell the job, tell the driver."""
        if self._state != _STARTED:
            return
        self.timed_out = True
        if self.context is not None:
            self.context.timed_out = True
            self.context.cancelled.set()
        driver.timed_out(self)


def _new_run(engine: _Engine, task: _Task, scheduled_for: float) -> Run:
    """A run of `task`, just taken. (A function rather than __init__, as _new_task.)"""
    run = Run.__new__(Run)
    run._engine = engine
    run.task = task
    run.scheduled_for = scheduled_for
    run._state = _TAKEN
    run.started_at = 0.0
    run.timed_out = False
    run.deadline = None
    options = task.options
    run.context = (
        JobContext(task.id, scheduled_for, options.timeout)
        if options is not _NO_OPTIONS and (options.context or options.timeout is not None)
        else None
    )
    return run


class _Deadline:
    """A started run's `timeout`, in the store beside everything else."""

    __slots__ = ("due", "id", "run")

    def __init__(self, run: Run, due: float) -> None:
        self.run = run
        self.due = due
        self.id: int | None = None

    def _due(self, engine: _Engine, timer_id: int, now: float, driver: Driver) -> int:
        if self.id == timer_id:
            self.id = None
            _count(engine, _DEADLINES, -1)
            self.run._time_out(driver)
        return 0

    def _put_back(self, engine: _Engine, timer_id: int) -> None:
        if self.id == timer_id:
            self.id = engine._add_at(self.due, self)


def _timer_subclass(cls: type[Timer], /, **kwargs: Any) -> None:
    """Timer.__init_subclass__: check the new class's `kind` and set its `_kind`, the index of the counts."""
    super(Timer, cls).__init_subclass__(**kwargs)
    slots = cls.__dict__.get("__slots__", ())
    for name in ("due", "id"):
        if name in ((slots,) if isinstance(slots, str) else slots):
            raise TypeError(f"{cls.__name__}.__slots__ must not name {name!r}: Timer has it already")
    kind = cls.kind
    if type(kind) is not str:
        raise TypeError(f"{cls.__name__}.kind must be a str (one of {TIMER_KINDS}), not {kind!r}")
    if kind not in TIMER_KINDS:
        raise ValueError(f"{cls.__name__}.kind must be one of {TIMER_KINDS}, not {kind!r}")
    cls._kind = TIMER_KINDS.index(kind)


class Timer:
    """A plain timer of the engine: a callback at a time, no job semantics, O(1) to add, move and cancel.

    Drivers subclass it (AsyncScheduler's TimerHandle) and arm it with Scheduler.add_timer(); when it is
    due, drain() calls its fire(). `id` is its entry in the store while armed, None otherwise; `due` the
    time it is armed at. A fire() that raises is logged; KeyboardInterrupt and SystemExit propagate (what
    the scheduler's `propagate` says), and the timers not yet run in that drain stay due.

    A Timer cannot be pickled or copied (a copy would claim its entry in the store), and a subclass's
    `__slots__` must not name `due` or `id` again.

    `kind`, a class attribute, is what stats() counts its armed timers as: one of TIMER_KINDS ("keys",
    "handles", "timeouts", "sleeps"), or "timers" (the default: counted only in Stats.timers). It is read
    when the subclass is made (a kind that is not one of them is refused then, naming the class).
    """

    __slots__ = ("due", "id")
    kind = "timers"
    _kind = 0  # `kind` as an index of the engine's counts, set when a subclass is made: read per operation
    # (a class attribute, not a def: the compiled build's Timer is an extension type, which may not define
    # __init_subclass__; Python calls it all the same when a subclass is made)
    __init_subclass__ = classmethod(_timer_subclass)

    def __init__(self) -> None:
        self.due = 0.0
        self.id: int | None = None

    def fire(self) -> None:
        """Its due came (it is out of the store): do its work."""

    def __reduce__(self) -> Any:
        name = type(self).__name__
        raise TypeError(f"{name} (a Timer) cannot be pickled or copied: it is an entry of one scheduler")

    def _due(self, engine: _Engine, timer_id: int, now: float, driver: Driver) -> int:
        if self.id == timer_id:  # not cancelled or moved by an earlier item of this batch
            self.id = None
            _count(engine, _kind_of(engine, self), -1)
            try:
                self.fire()
            except BaseException as exc:
                if isinstance(exc, engine._reports.propagate):
                    raise
                engine._log(logging.ERROR, "timerwheel: a timer's callback raised (%r)", exc, exc_info=exc)
        return 0

    def _put_back(self, engine: _Engine, timer_id: int) -> None:
        if self.id == timer_id:
            self.id = engine._add_at(self.due, self)


class WallTimer(Timer):
    """A plain timer whose due is a wall-clock time, `wall` (POSIX seconds).

    Armed with add_wall_timer() and move_wall_timer(): its due on the monotonic clock is `wall` less the
    engine's wall offset. A group of them that the engine knows of (add_calendar()) is moved when the wall
    clock steps, and none fires before its wall time: one whose wall time has not come when its monotonic
    due does (the wall clock lagged) waits the rest. KeyedScheduler's keys are WallTimers.
    """

    __slots__ = ("wall",)

    def __init__(self) -> None:
        super().__init__()
        self.wall = 0.0

    def _due(self, engine: _Engine, timer_id: int, now: float, driver: Driver) -> int:
        if self.id == timer_id:
            try:
                wall_now = _clock_value(engine._cal.clock())  # (read afresh: it may be in no group)
            except Exception:
                wall_now = engine._cal.now
            if wall_now < self.wall:  # never before its wall time: wait the rest
                self.id = None
                _count(engine, _kind_of(engine, self), -1)  # (add_timer() counts it again)
                engine.add_timer(self, now + (self.wall - wall_now))
                return 0
        return Timer._due(self, engine, timer_id, now, driver)


def _first_grid_point_after(origin: float, interval: float, now: float) -> float:
    """The least origin + k * interval (k >= 1) that is after now, as computed in floats; always > now.

    The division rounds, so k is stepped a few times either way. Where the grid is finer than the floats
    around now (a tiny interval, or now very far from the origin), the point is found from the remainder
    of the period instead, and if even that is not after now, the next float after now is taken.
    """
    span = now - origin
    q = span / interval
    if q < 2.0**52:  # k is exact in a float: False for inf and NaN as well
        k = max(1, math.floor(q) + 1)
        for _ in range(4):
            if k > 1 and origin + (k - 1) * interval > now:
                k -= 1
        for _ in range(4):
            due = origin + k * interval
            if due > now:
                return due
            k += 1
    due = now + (interval - math.fmod(span, interval))
    return due if due > now and math.isfinite(due) else math.nextafter(now, math.inf)


def _after(now: float, interval: float) -> float:
    """now + interval, or the next float after now where the interval is below the floats' resolution."""
    due = now + interval
    return due if due > now else math.nextafter(now, math.inf)


def _posix(when: Any, name: str) -> float:
    """A wall-clock time as POSIX seconds: a number, or an aware datetime (a naive one is refused)."""
    if isinstance(when, datetime):
        try:
            offset = when.utcoffset()
            if offset is not None:
                return when.timestamp()
        except Exception as exc:  # a tzinfo that fails
            raise ValueError(f"{name}: its tzinfo gives no UTC offset ({exc!r})") from None
        raise ValueError(f"{name} must be an aware datetime, got the naive {when!r}")
    return seconds(when, name)


def _clock_value(value: Any) -> float:
    """A clock's reading as a finite float, or a ValueError / TypeError that says the clock gave it."""
    # A finite float (inf - inf and NaN - NaN are NaN) is what seconds() would give back: the common case,
    # without its call (the wall clock is read at every drain and every upsert of a key).
    if type(value) is float and value - value == 0.0:
        return value
    try:
        return seconds(value, "the clock's reading")
    except (TypeError, ValueError, OverflowError) as exc:
        raise type(exc)(f"{exc} (the scheduler's clock returned {value!r})") from None


def _count(engine: _Engine, kind: int, change: int) -> None:
    """Add `change` to the engine's count of armed plain timers of `kind` (an index of TIMER_KINDS, or
    _DEADLINES: one from _kind_of(), which checks it): for the Timers' own methods, whose `engine` the
    compiled build does not know the C type of. (The engine's methods write engine._timers directly.)"""
    engine._timers[kind] += change


def _kind_of(engine: _Engine, timer: Timer) -> int:
    """The kind of a timer (its class's `_kind`, an index of the engine's counts), through the engine's
    cache of one entry: `_kind_class`, the class last asked, and `_kind_index`, its kind.

    A class attribute read through an instance is a generic attribute lookup in both builds (CPython
    3.11 does not specialise it): in the compiled one about 130 instructions per arm, and again per
    disarm, 2.5% of a call_later + cancel. A program arms timers of one class mostly (handles, or keys),
    and the cache (two C fields there) makes that a compare of the type. The engine's hot methods
    (add_timer, cancel_timer, add_wall_timer) test it inline and call this only on a miss. A miss costs
    the read, a check and two stores, with no call or allocation in between (nothing can re-enter and
    see half of it): an index out of range (a class's `_kind` changed by hand) counts as "timers", so
    that the compiled build's counts, a C array, are never written out of it.
    """
    cls = type(timer)
    if cls is engine._kind_class:
        return engine._kind_index
    kind = timer._kind
    if not 0 <= kind < _DEADLINES:
        kind = 0
    engine._kind_class = cls
    engine._kind_index = kind
    return kind


def _no_wake(due: float) -> None:
    """The wake of an engine bound to no driver: nobody to wake (and wake_below keeps it uncalled)."""


def log_safely(
    log: logging.Logger,
    propagate: tuple[type[BaseException], ...],
    level: int,
    msg: str,
    *args: Any,
    exc_info: Any = None,
) -> None:
    """log.log(level, msg, *args), where a logger that raises (a handler, a filter) cannot stop a
    scheduler: what it raised is written to stderr instead, unless it is one of `propagate`."""
    try:
        log.log(level, msg, *args, exc_info=exc_info)
    except BaseException as exc:
        if isinstance(exc, propagate):
            raise
        with contextlib.suppress(BaseException):  # a closed or broken stderr: nothing is left to tell
            sys.stderr.write(f"timerwheel: the logger raised {exc!r} while logging: {msg % args}\n")


class _Calendar:
    """The wall clock of an engine, and its calendar tasks: the tasks whose dues are wall-clock times.

    A calendar due is converted to the monotonic clock through the offset (wall - monotonic) seen when it
    is armed. follow() reads the wall clock at every drain; when the offset has changed by more than
    _WALL_STEP (an NTP step, a machine that slept), every armed calendar task moves to its wall time on the
    new offset. Slower drift needs no move: a calendar task never fires before its wall time anyway (the
    engine checks it at the fire).
    """

    __slots__ = ("clock", "groups", "now", "offset", "tasks")

    def __init__(self, clock: Callable[[], float], start: float) -> None:
        self.clock = clock
        self.now = _clock_value(clock())  # the wall clock at the last follow()
        self.offset = self.now - start  # wall - monotonic, as seen last
        self.tasks: set[_Task] = set()  # live calendar tasks
        self.groups: list[Collection[WallTimer]] = []  # collections of WallTimers (add_calendar())

    def follow(self, now: float, store: TimerStore) -> float:
        """Read the wall clock (monotonic time `now`); move the calendar tasks if it stepped. Returns it."""
        wall_now = _clock_value(self.clock())
        offset = wall_now - now
        if abs(offset - self.offset) > _WALL_STEP:
            self.offset = offset
            for task in list(self.tasks):
                if task.timer_id and task.plan.wall is not None:
                    due = task.plan.wall - offset
                    if store.reschedule_at(task.timer_id, due):
                        task.due = due
            for group in list(self.groups):
                for timer in list(group):
                    if timer.id is not None:
                        due = timer.wall - offset
                        if store.reschedule_at(timer.id, due):
                            timer.due = due
        self.now = wall_now
        return wall_now


class _Reports:
    """Where outcomes go: the observer (JobEvent), errors, the error handler, the logger and its warnings.

    Whatever these user callbacks raise is logged, or written to stderr when the logger itself fails, and
    goes no further unless it is one of `propagate` (KeyboardInterrupt and SystemExit on the caller's
    thread; nothing on a driver's threads, which must never die).
    """

    __slots__ = ("error_handler", "errors", "logger", "observer", "propagate")

    def __init__(
        self,
        observer: Callable[[JobEvent], object] | None,
        error_handler: Callable[[int, BaseException], object] | None,
        log: logging.Logger,
        propagate: tuple[type[BaseException], ...],
    ) -> None:
        self.observer = observer
        self.error_handler = error_handler
        self.logger = log
        self.propagate = propagate
        self.errors: list[str] = []

    def log(self, level: int, msg: str, *args: Any, exc_info: Any = None) -> None:
        log_safely(self.logger, self.propagate, level, msg, *args, exc_info=exc_info)

    def error(self, task_id: int, error: BaseException) -> None:
        """A failed run: keep its message, log it, tell the error handler."""
        self.errors.append(f"task {task_id}: {error}")
        if len(self.errors) > MAX_ERRORS:
            del self.errors[0]
        self.log(logging.ERROR, "timerwheel: task %d failed: %r", task_id, error, exc_info=error)
        if self.error_handler is not None:
            self._call(self.error_handler, (task_id, error), "the error_handler raised for task %d", task_id)

    def warn(self, task: _Task, duration: float, timed_out: bool) -> None:
        """A run past its timeout (each one), or longer than half its task's interval.

        The second is about the task, not the run: it is logged for the first such run of a task, then
        again only for a run at least twice as long as the last one logged (a job that keeps getting
        slower is still seen; one that is always slow is told once, not at every run: at most about
        log2(duration / interval) + 2 lines per task, however long it lives).
        """
        if timed_out:
            self.log(logging.WARNING, "timerwheel: task %d ran %.3f s, past its timeout", task.id, duration)
        plan = task.plan
        interval = plan.interval
        if interval is not None and duration > interval / 2 and duration >= 2 * plan.warned:
            plan.warned = duration  # (the task's own plan: a recurring one's)
            self.log(
                logging.WARNING,
                "timerwheel: task %d ran %.3f s, more than half its interval of %.3f s: the interval is "
                "probably the wrong knob (said again only for a run at least twice as long)",
                task.id,
                duration,
                interval,
            )

    def event(self, task_id: int, scheduled_for: float, started: float, finished: float, **kind: Any) -> None:
        if self.observer is None:
            return
        event = JobEvent(
            task_id=task_id,
            scheduled_for=scheduled_for,
            started_at=started,
            finished_at=finished,
            lateness=max(0.0, started - scheduled_for),
            duration=finished - started,
            **kind,
        )
        self._call(self.observer, (event,), "the observer raised on %r", event)

    def _call(self, fn: Callable[..., object], args: tuple[Any, ...], what: str, *about: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:
            if isinstance(exc, self.propagate):
                raise
            self.log(logging.ERROR, f"timerwheel: {what}; ignored", *about, exc_info=exc)


class _Engine:
    """The engine's machinery, under Scheduler's API: the store and the clock, drain(), the arming of
    tasks and plain timers, and introspection. Drivers reach it through the documented methods (now(),
    drain(), next_due(), bind(), add_timer(), move_timer(), cancel_timer(), release_timers(), discard());
    the rules are written in Scheduler's docstring.
    """

    _timers: list[int]  # (for type checkers: set in __init__; the compiled build declares it in C)

    def __init__(
        self,
        clock: Clock | Callable[[], float] | None = None,
        *,
        store: TimerStore | None = None,
        resolution: float | None = None,
        slots: int | None = None,
        levels: int | None = None,
        observer: Callable[[JobEvent], object] | None = None,
        error_handler: Callable[[int, BaseException], object] | None = None,
        logger: logging.Logger | None = None,
        propagate: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit),
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        self._clock = as_clock(clock)
        callable_or_none(wall_clock, "wall_clock")
        callable_or_none(observer, "observer")
        callable_or_none(error_handler, "error_handler")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger or None, not {type(logger).__name__}")
        timer_store(store, resolution, slots, levels)
        exception_types(propagate, "propagate")
        self._read = self._clock.reader
        start = _clock_value(self._read())
        if store is None:
            store = TimerWheel(
                0.001 if resolution is None else resolution,
                slots=64 if slots is None else slots,
                levels=4 if levels is None else levels,
                start=start,
            )
        elif store.now > start:  # its dues would be behind the clock's: everything would run early
            raise ValueError(
                f"store is ahead of the clock: its time is {store.now!r}, the clock reads {start!r}"
            )
        self._store: TimerStore = store
        # The store's three O(1) operations, called through _add_at(), _cancel_at() and _move_at(). In
        # Python the store's bound methods take their place on the instance (no call in between); the
        # compiled build keeps the methods, which call the Cython wheel, `_wheel`, as C functions.
        self._wheel = store if _COMPILED and type(store) is TimerWheel else None
        if not _COMPILED and type(store) is TimerWheel:  # (setattr: the compiled build may not write these)
            setattr(self, "_add_at", store.add_at)  # noqa: B010
            setattr(self, "_cancel_at", store.cancel)  # noqa: B010
            setattr(self, "_move_at", store.reschedule_at)  # noqa: B010
        self._horizon = store.horizon  # a clock reading from here on is a failure, not a time
        self._latest = start  # the latest clock read: time never goes backwards in here
        self._reports = _Reports(
            observer, error_handler, logger or logging.getLogger("timerwheel"), propagate
        )
        self._tasks: dict[int, _Task] = TaskTable()  # id -> _Task (compiled: mostly a list; see TaskTable)
        self._last_id = 0
        self._executed = self._cancelled = self._dropped = self._skipped = self._failed = 0
        self._running = 0  # runs started and not finished (executing now); Run.start() counts them
        self._waiting = 0  # runs taken and not started (queued)
        # Entries in the store that are not tasks, by kind (see _count): plain timers and run deadlines.
        # The compiled build's is a C array, zeroed when the engine is made.
        if not _COMPILED:  # (setattr: the compiled build may not write it)
            setattr(self, "_timers", [0] * _KINDS)  # noqa: B010
        # _kind_of()'s cache. (The Python engine keeps 29 attributes: one more made each attribute read
        # of it slower on CPython 3.11, 2% of a call_later + cancel, so `propagate` is read from
        # _reports, and drain()'s deferred tasks are a local.)
        self._kind_class: type | None = None
        self._kind_index = 0
        self._calls = 0  # drain() calls so far
        self._batch: list[tuple[int, Any]] = _NOTHING  # what drain() took out of the store and holds
        self._draining = False  # a job calling run_pending() again would break the once-per-call rule
        self._driver: Driver = self
        self._wake: Callable[[float], None] = _no_wake  # the bound driver's wake (none for run_pending)
        # wake(due) is called only for a due below this: the time the driver looks at the store anyway.
        # A driver may keep it there (ThreadedScheduler: when it sleeps until; AsyncScheduler: where its
        # loop handle is armed) and save a call per schedule; never above, or a wake-up would be missed.
        # -inf: nobody to wake; inf, the default when bound: every due.
        self.wake_below = -math.inf
        self._cal = _Calendar(self._clock.wall if wall_clock is None else wall_clock, start)

    @property
    def clock(self) -> Clock:
        """The clock this scheduler reads."""
        return self._clock

    @property
    def store(self) -> TimerStore:
        """The timer store that holds every timer of this scheduler (jobs, plain timers, deadlines)."""
        return self._store

    @property
    def errors(self) -> list[str]:
        """Messages "task <id>: <message>" of failed runs, oldest first (the most recent 1000)."""
        return self._reports.errors

    @property
    def waiting(self) -> int:
        """How many runs were taken and not started (waiting for a worker or a slot). O(1)."""
        return self._waiting

    @property
    def timers(self) -> int:
        """How many plain timers and run deadlines are armed (tasks are stats().pending). O(1)."""
        return self._armed_timers()

    def _armed_timers(self) -> int:
        """The sum of the counts by kind."""
        total = 0
        for kind in range(_KINDS):
            total += self._timers[kind]
        return total

    def __repr__(self) -> str:
        return f"<{type(self).__name__} pending={len(self._store)} running={self._running}>"

    def now(self) -> float:
        """The clock, never earlier than its latest read (a clock that steps back stands still).

        A reading that is not a finite number, or that the store cannot hold (past the wheel's 2**62
        ticks), raises and leaves the latest read as it was: a clock that glitches once comes back.
        """
        now = self._read()
        if type(now) is float and self._latest <= now < self._horizon:  # the common case: two compares
            self._latest = now
            return now
        now = _clock_value(now)
        if not now < self._horizon:
            raise OverflowError(
                f"the scheduler's clock reads {now!r}, past what its timer store can hold ({self._horizon!r})"
            )
        if now > self._latest:
            self._latest = now
        return self._latest

    def _reading(self, fallback: float) -> float:
        """now(), or `fallback` if the clock fails just now (the caller's work still gets accounted for; a
        driver notices the clock at its next pass)."""
        try:
            return self.now()
        except Exception:
            return max(fallback, self._latest)

    # -- the store's operations (see __init__) -----------------------------------------------------------

    # (compiled only: `_wheel` is None in Python, whose TimerWheel has no _add_id, _cancel_id, _move_id)

    def _add_at(self, due: float, item: Any) -> int:
        wheel = self._wheel
        if wheel is not None:
            return wheel._add_id(due, item)  # type: ignore[attr-defined, no-any-return]
        timer_id = self._store.add_at(due, item)
        if type(timer_id) is not int or not 0 < timer_id < _MAX_ID:  # (see TimerStore)
            with contextlib.suppress(Exception):
                self._store.cancel(timer_id)
            raise TypeError(
                f"store: add_at() returned {timer_id!r}, not a timer id (an int from 1 to 2**63 - 1)"
            )
        return timer_id

    def _cancel_at(self, timer_id: int) -> bool:
        wheel = self._wheel
        if wheel is not None:
            return wheel._cancel_id(timer_id)  # type: ignore[attr-defined, no-any-return]
        return self._store.cancel(timer_id)

    def _move_at(self, timer_id: int, due: float) -> bool:
        wheel = self._wheel
        if wheel is not None:
            return wheel._move_id(timer_id, due)  # type: ignore[attr-defined, no-any-return]
        return self._store.reschedule_at(timer_id, due)

    # -- plain timers ------------------------------------------------------------------------------------

    def add_timer(self, timer: Timer, due: float) -> None:
        """Arm a plain timer (not armed) at `due`, a finite time. O(1). OverflowError beyond the store."""
        # (first: a timer that is not a Timer raises here, with nothing changed; _kind_of()'s cache, inline)
        kind = self._kind_index if type(timer) is self._kind_class else _kind_of(self, timer)
        timer.id = self._add_at(due, timer)
        timer.due = due
        self._timers[kind] += 1
        if due < self.wake_below and not self._draining:
            self._wake(due)

    def defer_timer(self, timer: Timer) -> None:
        """Arm a plain timer (not armed) for the next pass of drain(), never the one going on: due _NEXT_PASS
        after the latest time read. For a timer that fired in this pass and would fire again at once (see
        drain_calls). O(1)."""
        self.add_timer(timer, self._latest + _NEXT_PASS)

    @property
    def drain_calls(self) -> int:
        """How many drain() calls have begun: a timer that notes it as it fires tells whether it fired in
        the pass going on already (then defer_timer() arms it for the next)."""
        return int(self._calls)

    @property
    def wall_clock(self) -> Callable[[], float]:
        """The wall clock this scheduler reads (the callable itself; wall() calls it)."""
        return self._cal.clock

    @property
    def last_wall(self) -> float:
        """The wall time read last (the calendar's): what a caller falls back on when the clock fails."""
        return float(self._cal.now)

    def move_timer(self, timer: Timer, due: float) -> bool:
        """Move an armed plain timer to `due`. O(1). False (nothing changed) if it is not armed."""
        timer_id = timer.id  # (read once: in the compiled build each read is a generic attribute lookup)
        if timer_id is None or not self._move_at(timer_id, due):
            return False
        timer.due = due
        if due < self.wake_below and not self._draining:
            self._wake(due)
        return True

    def cancel_timer(self, timer: Timer) -> bool:
        """Take an armed plain timer out: it will not fire. O(1). False if it was not armed.

        Also right after drain() took it out of the store and before it fired (an earlier item of the same
        batch cancels it): drain() then skips it, since its id is gone.
        """
        kind = self._kind_index if type(timer) is self._kind_class else _kind_of(self, timer)  # (inline)
        timer_id, timer.id = timer.id, None
        if timer_id is None:
            return False
        self._cancel_at(timer_id)  # False when drain() holds it: it is skipped there
        self._timers[kind] -= 1
        return True

    def release_timers(self) -> list[Timer]:
        """Take every plain timer out of the store and return them, earliest first (a driver closing hands
        them to another clock); deadlines go too. Tasks stay (see discard())."""
        store = self._store
        released: list[Timer] = []
        kept: list[_Task] = []
        while (due := store.next_due()) is not None:
            for _, item in store.advance(max(due, store.now)):
                if isinstance(item, Timer):
                    item.id = None
                    released.append(item)
                elif isinstance(item, _Deadline):
                    item.id = None
                else:
                    item.timer_id = 0
                    kept.append(item)
        for kind in range(_KINDS):
            self._timers[kind] = 0
        for task in kept:  # the store moved on to the last due: tasks go back where they were
            if task.live:
                self._arm(task, task.due)
        return released

    # -- the drain, and the arming of tasks --------------------------------------------------------------

    def next_due(self) -> float | None:
        """The earliest due of everything armed (tasks, plain timers, deadlines), or None. For drivers."""
        return self._store.next_due()

    def bind(self, driver: Driver) -> None:
        """Make `driver` the one that drain() hands runs to and that is told when something is armed.

        The engine calls driver.wake(due) for every due armed outside drain() that comes before its
        `wake_below`: infinity once bound, so every one. A driver that keeps `wake_below` at the time it
        will look at the store anyway (never later) saves those calls.
        """
        self._driver = driver
        self._wake = _no_wake if driver is self else driver.wake
        self.wake_below = -math.inf if driver is self else math.inf

    def drain(self, now: float, driver: Driver | None = None) -> int:
        """Take everything due at `now` in (due, add order) order and apply the rules: hand each job's run
        to the driver (the bound one by default), fire each plain timer, time out each run past its
        deadline. Returns the number of runs handed over. Items that come due meanwhile (a job scheduled
        one at or before now) are taken too. If an item raises through (KeyboardInterrupt), the items not
        yet dealt with stay due."""
        if self._draining:
            raise RuntimeError("run_pending() must not be called from a job it runs")
        if driver is None:
            driver = self._driver
        store = self._store
        if now < store.now:  # a clock that stepped back: time does not go backwards in here
            now = store.now
        self._calls += 1
        started = 0
        batch: list[tuple[int, Any]] = []
        taken = 0  # entries of `batch` dealt with
        deferred: list[_Task] | None = None  # recurring tasks due again in this call: the next one's
        if self._cal.tasks or self._cal.groups:  # a wall clock that stepped moves the calendar first
            self._cal.follow(now, store)
        self._draining = True
        try:
            while True:
                batch = self._batch = store.advance(now)  # again after each batch: jobs may schedule
                taken = 0  # due tasks (rule 6)
                if not batch:
                    return started
                calls = self._calls
                for timer_id, item in batch:
                    taken += 1
                    if type(item) is not _Task:  # a plain timer, or a deadline
                        item._due(self, timer_id, now, driver)
                        continue
                    task = item
                    if task.timer_id == timer_id and task.live:  # not cancelled or moved meanwhile
                        task.timer_id = 0
                        if task.last_call == calls:  # a recurring task runs at most once per drain()
                            if deferred is None:
                                deferred = []
                            deferred.append(task)
                        else:
                            started += self._fire(task, now, driver)
        finally:
            # Normally only the deferred tasks; after a BaseException also the rest of the batch.
            for timer_id, item in batch[taken:]:
                item._put_back(self, timer_id)
            self._batch = _NOTHING
            if deferred is not None:
                for task in deferred:  # unless a later job cancelled it, or rescheduled it (which armed it)
                    if not task.timer_id and task.live:
                        self._arm(task, task.due)
            self._draining = False

    def execute(self, run: Run) -> None:
        """The driver protocol, for run_pending(): run the job inline, now."""
        if run.cancelled:  # a finalizer cancelled its task as the run was handed over
            return
        run.start()
        try:
            run.call()
        except Exception as exc:
            run.finish(exc)
        except BaseException as exc:
            run.finish(exc)
            raise
        else:
            run.finish(None)

    def wake(self, due: float) -> None:
        """The driver protocol, for run_pending(): nothing to wake."""

    def timed_out(self, run: Run) -> None:
        """The driver protocol, for run_pending(): nothing to interrupt (runs are inline)."""

    def _fire(self, task: _Task, now: float, driver: Driver) -> int:
        plan = task.plan
        if plan.wall is not None:
            wall_now = self._cal.now
            if wall_now < plan.wall:  # never before its wall time: wait the rest (the wall clock lagged)
                self._arm(task, now + (plan.wall - wall_now))
                return 0
        scheduled_for = task.due
        task.last_call = self._calls
        if task.running and plan.mode is _FIXED_DELAY:  # moved by reschedule() meanwhile:
            plan.overdue = True  # it runs when the run in progress finishes, never beside it (own plan:
            return 0  # the shared one's mode is FIXED_RATE)
        if task.running and plan.mode is _SKIP_IF_RUNNING:
            self._skipped += 1
            self._rearm_on_grid(task, scheduled_for, now)
            self._reports.event(task.id, scheduled_for, now, now, skipped=True)
            return 0
        if task.waiting is not None:  # rule 3: one run waiting at most; never a burst of them
            self._dropped += 1
            self._rearm_on_grid(task, scheduled_for, now)
            self._reports.event(task.id, scheduled_for, now, now, dropped=True)
            return 0
        run = _new_run(self, task, scheduled_for)
        if not task.live:  # a finalizer that the allocation ran cancelled it: it does not run
            return 0
        task.running += 1
        task.waiting = run
        self._waiting += 1
        try:
            if driver is self:  # run_pending(): inline (the compiled build calls it without a lookup)
                self.execute(run)
            else:
                driver.execute(run)
        finally:
            # Rule 2: re-armed once the executor has taken the run (inline: the job returned), unless the
            # job cancelled it or moved it (which armed it); FIXED_DELAY re-arms when the run finishes.
            if task.repeat and plan.mode is not _FIXED_DELAY and not task.timer_id and task.live:
                self._rearm_on_grid(task, scheduled_for, now)
        return 1

    def _rearm_on_grid(self, task: _Task, scheduled_for: float, now: float) -> None:
        plan = task.plan
        if plan.cron is not None:  # the next point after the one just due, or after now when late
            self._arm_cron(task, max(plan.wall or 0.0, self._cal.now))
            return
        interval = plan.interval
        if interval is None:
            return
        if plan.wall is not None:  # an interval task moved to a wall time once: back on the monotonic grid
            plan.wall = None
            self._cal.tasks.discard(task)
        due = scheduled_for + interval
        if not due > now:  # late: never replay the missed runs
            if plan.missed is Missed.DELAY:
                due = _after(now, interval)
            else:
                due = _first_grid_point_after(plan.first_due, interval, now)
        self._arm(task, due)

    def _arm(self, task: _Task, due: float) -> None:
        """Put a live task's next run in the store (its timer_id must be 0).

        A finalizer may cancel the task while the store works: `live` is read again afterwards, without a
        call in between, and the new timer is taken back. A due that the store cannot hold (an interval
        that runs off the end of the clock's range) ends the task, with an error recorded.
        """
        try:
            timer_id = self._add_at(due, task)
        except (OverflowError, ValueError) as exc:
            if task.live:
                task.live = False
                self._tasks.pop(task.id, None)
                self._cal.tasks.discard(task)
                self._reports.error(task.id, exc)
            return
        if not task.live:
            self._cancel_at(timer_id)
            return
        task.timer_id = timer_id
        task.due = due
        if due < self.wake_below and not self._draining:
            self._wake(due)

    def _rearm_after(self, task: _Task, finished_at: float) -> None:
        # Only a live task that nothing armed meanwhile (a reschedule from inside the job arms it itself).
        plan = task.plan  # (its own: a FIXED_DELAY task's)
        overdue, plan.overdue = plan.overdue, False
        if task.timer_id or not task.live:
            return
        if overdue:  # its rescheduled due passed while the run went on: the next run follows at once
            self._arm(task, finished_at)
        elif plan.cron is not None:
            self._arm_cron(task, finished_at + self._cal.offset)
        elif plan.interval is not None:
            if plan.wall is not None:  # (as in _rearm_on_grid)
                plan.wall = None
                self._cal.tasks.discard(task)
            self._arm(task, _after(finished_at, plan.interval))

    # -- calendar tasks: dues on the wall clock ---------------------------------------------------------

    def wall(self) -> float:
        """The wall clock now, in POSIX seconds (the scheduler's `wall_clock`)."""
        return self._cal.clock()

    @property
    def calendar(self) -> int:
        """How many calendar tasks and wall timers (dues on the wall clock) there are: a driver that has
        some wakes now and then to notice a step of the wall clock."""
        cal = self._cal
        return len(cal.tasks) + sum(len(group) for group in cal.groups) if cal.groups else len(cal.tasks)

    def add_wall_timer(self, timer: WallTimer, wall: float) -> None:
        """Arm a WallTimer (not armed) at the wall-clock time `wall` (POSIX seconds, finite). O(1)."""
        due = wall - (self._cal.offset if self._draining else self._wall_offset())
        kind = self._kind_index if type(timer) is self._kind_class else _kind_of(self, timer)
        timer.id = self._add_at(due, timer)  # add_timer(), inline
        timer.due = due
        timer.wall = wall
        self._timers[kind] += 1
        if due < self.wake_below and not self._draining:
            self._wake(due)

    def move_wall_timer(self, timer: WallTimer, wall: float) -> bool:
        """Move an armed WallTimer to the wall-clock time `wall`. O(1). False if it is not armed."""
        if timer.id is None:
            return False
        due = wall - (self._cal.offset if self._draining else self._wall_offset())
        if not self._move_at(timer.id, due):  # move_timer(), inline
            return False
        timer.due = due
        timer.wall = wall
        if due < self.wake_below and not self._draining:
            self._wake(due)
        return True

    def _wall_offset(self) -> float:
        """The wall offset (wall - monotonic) as it is now, for a wall timer armed outside a drain: the
        wall clock is followed first (a drain follows it at its start). An engine with no calendar work
        drains seldom or never, its driver does not wake to notice a step, and a timer armed by the offset
        seen last would come due late by every step since (an hour, after a machine slept an hour). A
        step seen here moves the armed calendar (follow()), and wakes the driver, armed for the old dues.
        A clock that fails leaves the offset seen last (a WallTimer never fires before its wall time)."""
        cal = self._cal
        offset = cal.offset
        try:
            cal.follow(self.now(), self._store)
        except Exception:
            return offset
        if cal.offset != offset and -math.inf < self.wake_below:
            self._wake(-math.inf)
        return cal.offset

    def add_calendar(self, group: Collection[WallTimer]) -> None:
        """Make a collection of WallTimers (iterated when the wall clock steps, to move the armed ones)
        known to the engine: drivers then wake now and then to notice a step (see `calendar`)."""
        self._cal.groups.append(group)
        if -math.inf < self.wake_below and not self._draining:
            self._wake(-math.inf)

    def remove_calendar(self, group: Collection[WallTimer]) -> None:
        """Forget a collection given to add_calendar(); no error if it is not known."""
        groups = self._cal.groups
        if any(g is group for g in groups):
            groups[:] = [g for g in groups if g is not group]

    def _arm_wall(self, task: _Task, when: float) -> None:
        """Arm a live calendar task (not armed) at the wall time `when`."""
        now = self.now()
        wall_now = self._cal.follow(now, self._store)
        _own_plan(task).wall = when
        self._arm(task, now if when <= wall_now else now + (when - wall_now))
        if task.live:  # (not if the store could not hold its due: _arm ended it)
            self._cal.tasks.add(task)

    def _arm_cron(self, task: _Task, after: float) -> None:
        """Arm a cron task at its first point after the wall time `after`; end it if there is none.

        A point that is not after `after` would fire again at once, for ever; it ends the task with an
        error recorded, as does a calendar that fails (OverflowError at the ends of datetime's range):
        never a loop, and nothing raised into the drain."""
        error: Exception | None = None
        wall: float | None = None
        try:
            point = task.plan.cron.next_after(utc_not_after(after))
            if point is not None:
                wall = point.timestamp()
                if not wall > after:
                    raise ValueError(f"cron: {task.plan.cron!r} gave {point!r}, not after {after!r}")
        except Exception as exc:  # (a calendar or a zone that fails: the task ends, saying why)
            error, wall = exc, None
        if wall is None:  # an expression that matches nothing more (or a calendar that failed): over
            task.live = False
            self._tasks.pop(task.id, None)
            self._cal.tasks.discard(task)
            if error is not None:
                self._reports.error(task.id, error)
            return
        self._arm_wall(task, wall)

    def _log(self, level: int, msg: str, *args: Any, exc_info: Any = None) -> None:
        self._reports.log(level, msg, *args, exc_info=exc_info)

    def discard(self) -> None:
        """Forget every task (a driver closing): nothing will run, a waiting run will not start; no
        counter changes. Plain timers stay (the driver decides what becomes of them)."""
        for task in list(self._tasks.values()):
            task.live = False
            if task.timer_id:
                self._cancel_at(task.timer_id)
                task.timer_id = 0
            if task.waiting is not None:
                task.waiting.forget()
        self._tasks.clear()
        self._cal.tasks.clear()

    # -- introspection -----------------------------------------------------------------------------------

    def next_fire_time(self, task_id: int) -> float | None:
        """The clock time of a task's next run, or None if it is not armed (unknown, finished, cancelled)."""
        if type(task_id) is not int:
            identifier(task_id, "task_id")
        task = self._tasks.get(task_id)
        if task is None or not task.timer_id:
            return None
        return task.due

    def pending(self) -> list[TimerInfo]:
        """Every armed task, sorted by next fire time, then id. O(n log n)."""
        infos = [
            TimerInfo(task.id, task.due, task.plan.interval, task.plan.mode)
            for task in list(self._tasks.values())
            if task.timer_id
        ]
        infos.sort(key=lambda info: (info.next_fire_at, info.id))
        return infos

    def stats(self) -> Stats:
        """A snapshot of the counters (see Stats). O(1) (from within a drain, O(what it holds)). `pending`
        counts armed tasks, as pending() lists them; `running` runs started and not finished (executing
        now); `queued` runs taken and not started (waiting for a worker or a slot): a run is in one of
        the two from the moment drain() hands it over until it finishes, or is dropped or forgotten."""
        timers = self._armed_timers()
        pending = len(self._store) - timers
        for timer_id, item in self._batch:  # taken out of the store by drain(), not dealt with yet
            if type(item) is _Task:
                pending += item.timer_id == timer_id
            else:
                pending += item.id == timer_id  # an armed plain timer or deadline, counted in _timers
        return Stats(
            pending=pending,
            executed=self._executed,
            cancelled=self._cancelled,
            running=self._running,
            dropped=self._dropped,
            skipped=self._skipped,
            failed=self._failed,
            queued=self._waiting,
            timers=timers,
            keys=self._timers[_KEYS],
            handles=self._timers[_HANDLES],
            timeouts=self._timers[_TIMEOUTS],
            sleeps=self._timers[_SLEEPS],
            deadlines=self._timers[_DEADLINES],
        )


class Scheduler(_Engine):
    """The job engine: schedule, cancel and reschedule jobs in O(1) on a TimerWheel; run them when due.

    Deterministic and tick-driven: nothing runs until something calls run_pending(), which reads the clock
    once and runs every task due by then (or a driver calls drain()). The rules, exactly:

    1. Task ids are 1, 2, 3, ... in the order scheduled.
    2. A task scheduled at clock time t with delay d is due at exactly t + d. run_pending() reads the clock
       once, at its start, and runs every task due at or before that now, earliest due first; equal dues run
       in the order scheduled. A recurring task is re-armed once the executor has taken its run: here,
       where jobs run inline, when the job has returned (so a task that the job schedules for the same due
       as its own next run comes first); under a driver that runs jobs elsewhere, when the run is handed
       over (so FIXED_RATE runs may overlap). The re-arm counts as scheduled at that moment. A job that
       cancelled or rescheduled its own task is not re-armed again.
    3. A one-shot task runs once: it is finished once its run has finished (while it runs it has no next
       run to reschedule, and can still be cancelled). A recurring task (interval given) is re-armed for
       due + interval; if that is not after now, `missed` decides (Missed.DELAY: now + interval;
       Missed.SKIP: the first point of the grid first_due + k * interval after now). A re-arm is always
       after now, however small the interval. A recurring task runs at most once per run_pending() call:
       missed runs are never replayed in a burst (and a recurring task that a job moves to a due at or
       before now runs at the next call). Under a driver, a recurring task has at most one run waiting
       for a worker or a slot: a fire while one waits is dropped and counted.
    4. A job that raises an Exception is recorded in `errors` as "task <id>: <message>" and the others go
       on; a recurring job that failed is still re-armed. Other BaseExceptions (KeyboardInterrupt,
       SystemExit) propagate after the run is accounted for; the tasks not yet run stay due.
    5. A job may cancel itself or any other task; a task cancelled by an earlier job of the same call does
       not run, and a recurring job that cancels itself is not re-armed. A run that has been taken but
       not started (under a driver: waiting for a worker or a slot) can still be cancelled. cancel()
       returns True for a task that is scheduled, waiting or running (a one-shot included: its run goes
       on, and it never runs again), and False only for an unknown, finished or cancelled one.
    6. A task that a job schedules with a due at or before the call's now runs in the same call, after the
       tasks already due.
    7. cancel and reschedule are O(1).
    8. delay < 0, interval <= 0, or a non-finite delay, when or interval: ValueError; fn not callable:
       TypeError; a call that raised schedules nothing.

    Time never goes backwards in here: a clock read earlier than an earlier read counts as that earlier
    read. A clock that steps back (a wall clock given by mistake) therefore delays what is scheduled
    meanwhile by up to the step; nothing ever runs before its delay has elapsed on the clock.

    Repeat modes (RepeatMode): FIXED_RATE (default) keeps the grid due, due + interval, ...; FIXED_DELAY
    re-arms `interval` after the run finished (clock read when the job returns); SKIP_IF_RUNNING keeps the
    grid but skips, and counts, a fire while the previous run is still going. Jobs run inline here, so
    runs never overlap; the modes matter under the drivers, which run jobs concurrently.

    A finalizer that the garbage collector runs in the middle of any call (a `weakref.finalize` that
    cancels the timer of a dead connection) may call back in: it finds the scheduler consistent.

    Not thread-safe: use ThreadedScheduler to schedule from several threads.

    Args:
        clock: a Clock, or a callable returning monotonic seconds (default time.monotonic).
        store: the timer store (default: a TimerWheel with this resolution, slots and levels).
        resolution: seconds per tick of the TimerWheel (not with `store`).
        slots: slots per level of the TimerWheel (not with `store`).
        levels: levels of the TimerWheel (not with `store`).
        observer: called with a JobEvent for every run, drop and skip.
        error_handler: called with (task_id, exception) when a job raises.
        logger: where errors and warnings go (default: logging.getLogger("timerwheel")).
        propagate: what an observer, an error handler, a logger or a plain timer's callback may raise
            through run_pending() (default KeyboardInterrupt and SystemExit; the rest is logged).
        wall_clock: POSIX seconds, for calendar tasks (schedule_wall, schedule_cron); default the clock's
            own wall() (time.time, or a ManualClock's wall).

    Example:
        >>> from timerwheel.testing import ManualClock
        >>> clock = ManualClock()
        >>> sched = Scheduler(clock)
        >>> sched.schedule(2.0, print, args=("rotate logs",))
        1
        >>> clock.advance(2.0)
        2.0
        >>> sched.run_pending()
        rotate logs
        1
    """

    # -- scheduling --------------------------------------------------------------------------------------

    def schedule(
        self,
        delay: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed = ENGINE_MISSED,
        options: RunOptions | None = None,
    ) -> int:
        """Run fn(*args, **kwargs) `delay` seconds from now (the clock read now); return the task id. O(1).

        With `interval`, the task repeats every `interval` seconds after that, as `mode` and `missed` say.
        `options` (RunOptions) gives the job a context or a timeout.

        Raises:
            ValueError: delay < 0, interval <= 0, or either not finite.
            TypeError: fn is not callable, or an argument has the wrong type.
        """
        return self.schedule_positional(delay, fn, interval, args, kwargs, mode, missed, options)

    def schedule_positional(
        self,
        delay: float,
        fn: Callable[..., Any],
        interval: float | None,
        args: Iterable[Any],
        kwargs: Mapping[str, Any] | None,
        mode: RepeatMode,
        missed: Missed,
        options: RunOptions | None,
    ) -> int:
        """schedule(), with every argument positional and none defaulted: for drivers, which forward
        their users' calls here (in the compiled engine, parsing keywords costs more than the
        scheduling). Returns the task's id; raises what schedule() raises."""
        # (`span` and `now` are C doubles in the compiled build: the common case compares no objects)
        span = delay if type(delay) is float else -1.0
        if not 0.0 <= span < _INF:  # the common case costs two compares
            span = seconds(delay, "delay")
            if span < 0:
                raise ValueError(f"delay must be >= 0, got {span!r}")
        read = self._read()
        now = read if type(read) is float else _NAN
        if self._latest <= now < self._horizon:  # now(), inline: the common case
            self._latest = now
        else:
            now = self.now()
        return self._add(now + span, fn, interval, args, kwargs, mode, missed, options, "delay")

    def schedule_at(
        self,
        when: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed = ENGINE_MISSED,
        options: RunOptions | None = None,
    ) -> int:
        """Run fn at the clock time `when` (a past `when` runs at the next run_pending()); as schedule().

        Raises:
            ValueError: when is not finite; interval <= 0 or not finite.
            TypeError: fn is not callable, or an argument has the wrong type.
        """
        return self.schedule_at_positional(when, fn, interval, args, kwargs, mode, missed, options)

    def schedule_at_positional(
        self,
        when: float,
        fn: Callable[..., Any],
        interval: float | None,
        args: Iterable[Any],
        kwargs: Mapping[str, Any] | None,
        mode: RepeatMode,
        missed: Missed,
        options: RunOptions | None,
    ) -> int:
        """schedule_at(), with every argument positional and none defaulted (see schedule_positional).
        Returns the task's id; raises what schedule_at() raises."""
        return self._add(seconds(when, "when"), fn, interval, args, kwargs, mode, missed, options, "when")

    def _add(
        self,
        due: float,
        fn: Callable[..., Any],
        interval: float | None,
        args: Iterable[Any],
        kwargs: Mapping[str, Any] | None,
        mode: RepeatMode,
        missed: Missed,
        options: RunOptions | None,
        name: str,
    ) -> int:
        if not callable(fn):  # the checks inline, the validators only to say what is wrong
            function(fn, "fn")
        if interval is not None:
            interval = seconds(interval, "interval")
            if interval <= 0:
                raise ValueError(f"interval must be > 0, got {interval!r}")
        if type(mode) is not RepeatMode:
            member(mode, RepeatMode, "mode")
        if type(missed) is not Missed:
            member(missed, Missed, "missed")
        if options is None:
            options = _NO_OPTIONS
        elif not isinstance(options, RunOptions):
            raise TypeError(f"options must be a RunOptions or None, not {type(options).__name__}")
        if type(args) is not tuple:
            args = arguments(args)
        kw = keywords(kwargs) if kwargs else None  # most jobs take none: no dict per task
        # The id is taken before anything that allocates: a finalizer that the GC runs meanwhile may
        # schedule too, and must get the next one. It is given back if the call fails (and nothing took
        # a later one), so that a call that raised takes no id.
        task_id = self._last_id + 1
        self._last_id = task_id
        try:
            task = _new_task(task_id, fn, interval, args, kw, mode, missed, due, options)
            timer_id = self._add_at(due, task)
        except BaseException as exc:
            if self._last_id == task_id:
                self._last_id = task_id - 1
            if isinstance(exc, OverflowError):  # a due out of the store's range: nothing changed
                raise OverflowError(f"{name} is too far ahead: {exc}") from None
            raise
        task.timer_id = timer_id
        self._tasks[task_id] = task
        if due < self.wake_below and not self._draining:
            self._wake(due)
        return task_id

    def cancel(self, task_id: int) -> bool:
        """Cancel a task: it will not start again. O(1).

        A run in progress is not interrupted: it finishes, and the task is not re-armed after it. (A
        one-shot cancelled while it runs does not run again; it counts in stats().cancelled.)

        Returns:
            True if the task was scheduled, running (a one-shot whose run has started and not finished
            included), or its run taken and not started; False if unknown, finished (a one-shot whose
            run has finished) or already cancelled.
        """
        if type(task_id) is not int:
            identifier(task_id, "task_id")
        task = self._tasks.pop(task_id, None)
        if task is None:
            return False
        task.live = False
        if task.plan.wall is not None:
            self._cal.tasks.discard(task)
        timer_id = task.timer_id
        task.timer_id = 0
        if timer_id:
            self._cancel_at(timer_id)  # False when just taken: drain() sees the task is not live
        if task.waiting is not None:  # its run waits for a worker or a slot: it will not start
            task.waiting.forget()
        self._cancelled += 1
        return True

    def reschedule(self, task_id: int, delay: float) -> bool:
        """Move a task's next run to `delay` seconds from now (clock read now). O(1).

        A recurring task then goes on from there: its grid (for Missed.SKIP) starts at the new due.

        Returns:
            True if the task was scheduled; False (and nothing changes) if unknown, finished or
            cancelled, or a one-shot whose run has started (it has no next run to move).

        Raises:
            ValueError: delay < 0 or not finite.
        """
        if type(task_id) is not int:
            identifier(task_id, "task_id")
        span = delay if type(delay) is float else -1.0  # (C doubles, as in schedule_positional)
        if not 0.0 <= span < _INF:  # the common case costs two compares
            span = seconds(delay, "delay")
            if span < 0:
                raise ValueError(f"delay must be >= 0, got {span!r}")
        task = self._tasks.get(task_id)
        if task is None or (task.running and not task.repeat and task.waiting is None):
            return False  # (a one-shot whose run started: it has no next run to move)
        read = self._read()
        now = read if type(read) is float else _NAN
        if self._latest <= now < self._horizon:  # now(), inline: the common case
            self._latest = now
        else:
            now = self.now()
        due = now + span
        timer_id = task.timer_id
        try:
            if not timer_id or not self._move_at(timer_id, due):
                # not armed (a FIXED_DELAY task while it runs) or just taken for running: arm it afresh
                timer_id = self._add_at(due, task)
                if not task.live:  # cancelled by a finalizer while the store worked
                    self._cancel_at(timer_id)
                    return True
                task.timer_id = timer_id
        except OverflowError as exc:  # raised before anything changed
            raise OverflowError(f"delay is too far ahead: {exc}") from None
        if not task.repeat and task.waiting is not None:  # a one-shot's waiting run is superseded
            task.waiting._forget()
        task.due = due
        plan = task.plan
        if plan is not _ONE_SHOT:  # (the shared plan of plain one-shots is never written to)
            plan.overdue = False
            plan.first_due = due
            if plan.wall is not None:
                plan.wall = due + self._cal.offset
        if due < self.wake_below and not self._draining:
            self._wake(due)
        return True

    # -- calendar tasks: on the wall clock --------------------------------------------------------------

    def schedule_wall(
        self,
        when: float | datetime,
        fn: Callable[..., Any],
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        options: RunOptions | None = None,
    ) -> int:
        """Run fn once at the wall-clock time `when` (POSIX seconds, or an aware datetime); the task id.

        A calendar task: its due is converted to the monotonic clock when it is armed, and moved again
        whenever the wall clock steps (an NTP correction, a machine that slept), at the next drain (the next
        run_pending()); it never runs before its wall time. A past `when` runs at the next run_pending().

        Raises:
            ValueError: when is not finite, or a naive datetime. TypeError: as schedule().
        """
        wall = _posix(when, "when")
        now = self.now()
        if not now + (wall - self._cal.follow(now, self._store)) < self._horizon:
            raise OverflowError(f"when is too far ahead: {when!r} is past what the timer store can hold")
        task_id = self._add(now, fn, None, args, kwargs, RepeatMode.FIXED_RATE, Missed.DELAY, options, "when")
        self._make_calendar(task_id, wall, None)
        return task_id

    def reschedule_wall(self, task_id: int, when: float | datetime) -> bool:
        """Move a task's next run to the wall-clock time `when` (it becomes a calendar task). O(1).

        Returns:
            True if the task was scheduled; False (and nothing changes) if unknown, finished or cancelled.
        """
        if type(task_id) is not int:
            identifier(task_id, "task_id")
        wall = _posix(when, "when")
        task = self._tasks.get(task_id)
        if task is None:
            return False
        now = self.now()
        delay = max(0.0, wall - self._cal.follow(now, self._store))
        plan = _own_plan(task)  # before the move: it allocates, and a finalizer may cancel the task
        if not self.reschedule(task_id, delay):
            return False
        plan.wall = wall
        if task.live:  # (not if something that reschedule() called, a finalizer or a clock, cancelled it)
            self._cal.tasks.add(task)
        return True

    def schedule_cron(
        self,
        cron: Any,
        fn: Callable[..., Any],
        *,
        tz: Any = None,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        options: RunOptions | None = None,
    ) -> int:
        """Run fn at every point of a cron schedule (a Cron, or an expression with `tz`); the task id.

        Points are wall-clock times, kept as calendar tasks (see schedule_wall()). A task late by one or
        more points runs once, late, and goes on at the first point after now: never a burst. `mode` as
        for schedule(): FIXED_RATE (the next point after the one due), FIXED_DELAY (the first point after
        the run finished), SKIP_IF_RUNNING.

        Raises:
            ValueError: a bad expression or zone (the message quotes it). TypeError: as schedule();
                tz given with a Cron. ImportError: cronsim is missing (pip install 'timerwheel[cron]').
        """
        from .._cron import Cron

        if isinstance(cron, Cron):
            if tz is not None:
                raise TypeError("tz goes with a cron expression, not with a Cron (it has its own zone)")
        elif isinstance(cron, str):
            cron = Cron(cron, tz)
        else:
            raise TypeError(f"cron must be a Cron or a cron expression, not {type(cron).__name__}")
        now = self.now()
        first = cron.next_after(utc_not_after(self._cal.follow(now, self._store)))
        if first is None:
            raise ValueError(f"cron: {cron!r} has no point in the future")
        task_id = self._add(now, fn, None, args, kwargs, mode, Missed.SKIP, options, "cron")
        self._make_calendar(task_id, first.timestamp(), cron)
        return task_id

    def _make_calendar(self, task_id: int, wall: float, cron: Any) -> None:
        """A task just added (armed at now, a placeholder): make it a calendar task armed at `wall`."""
        task = self._tasks[task_id]
        _own_plan(task).cron = cron
        task.repeat = cron is not None
        timer_id, task.timer_id = task.timer_id, 0
        if timer_id:
            self._cancel_at(timer_id)
        self._arm_wall(task, wall)

    # -- running -----------------------------------------------------------------------------------------

    def run_pending(self) -> int:
        """Run every task due at or before now (the clock read once, here); return how many ran.

        Jobs run inline, one after the other, earliest due first. See the class docstring for the rules.
        """
        return self.drain(self.now(), self)

    def next_run_in(self) -> float | None:
        """Seconds until the next task (or timer) is due, never negative; None when nothing is armed."""
        due = self._store.next_due()
        if due is None:
            return None
        return max(0.0, due - self.now())
