"""The job engine: every rule about when and in what order a task runs lives here, once.

Scheduler is deterministic and driven from outside: something calls run_pending() (a test, a loop of your
own, or one of the drivers). The drivers (ThreadedScheduler, AsyncScheduler) only decide where a job runs;
they talk to the engine through a small protocol of private methods:

    _run_due(now, execute)   take every task due at `now` in order, apply the rules, and hand each run to
                             execute(run); returns the number of runs started
    _finish(run, started_at, error, finished_at)   a run returned or raised: count it, re-arm FIXED_DELAY
    _drop(run, now)          a run was not executed (backpressure): count it, keep a repeating task armed
    _forget(run)             a taken run will not start because its task was cancelled meanwhile
    _is_cancelled(run)       whether that is the case

Not thread-safe: a driver serialises calls into it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ._core import TimerWheel
from ._core_py import _seconds
from ._types import JobEvent, Missed, RepeatMode, Stats, TimerInfo

__all__ = ["Run", "Scheduler", "report_run"]

logger = logging.getLogger("timerwheel")

#: errors keeps the messages of the most recent failed runs, at most this many.
MAX_ERRORS = 1000


class TimerStore(Protocol):
    """What the engine needs from its timer store: TimerWheel, or the heap of HeapScheduler."""

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


class _Task:
    """One scheduled task. `timer_id` is its entry in the store while armed, None otherwise."""

    __slots__ = (
        "args",
        "due",
        "extra",
        "first_due",
        "fn",
        "id",
        "interval",
        "kwargs",
        "last_call",
        "live",
        "missed",
        "mode",
        "running",
        "timer_id",
    )

    def __init__(
        self,
        task_id: int,
        fn: Callable[..., Any],
        interval: float | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        mode: RepeatMode,
        missed: Missed,
        due: float,
    ) -> None:
        self.id = task_id
        self.fn = fn
        self.interval = interval
        self.args = args
        self.kwargs = kwargs
        self.mode = mode
        self.missed = missed
        self.first_due = due  # the origin of the Missed.SKIP grid: first_due + k * interval
        self.due: float = (
            due  # the due of the armed fire (kept after it is taken, as the run's scheduled_for)
        )
        self.timer_id: int | None = None
        self.running = 0
        self.extra: Any = None  # a driver's own per-task data (ThreadedScheduler: context and timeout)
        self.last_call = 0  # the _run_due call that last started it: at most one run per call
        self.live = True  # False once cancelled or finished: read without a call (see Scheduler._arm)


class Run:
    """One fire of a task handed to a driver's executor: call run.task.fn, then report to the engine."""

    __slots__ = ("scheduled_for", "task")

    def __init__(self, task: _Task, scheduled_for: float) -> None:
        self.task = task
        self.scheduled_for = scheduled_for

    @property
    def task_id(self) -> int:
        """The id of the task this run belongs to."""
        return self.task.id

    def call(self) -> Any:
        """Call the job with its arguments (no error handling: the driver reports the outcome)."""
        task = self.task
        if task.kwargs is None:
            return task.fn(*task.args)
        return task.fn(*task.args, **task.kwargs)


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


class Scheduler:
    """The job engine: schedule, cancel and reschedule jobs in O(1) on a TimerWheel; run them when due.

    Deterministic and tick-driven: nothing runs until something calls run_pending(), which reads the clock
    once and runs every task due by then. The rules, exactly:

    1. Task ids are 1, 2, 3, ... in the order scheduled.
    2. A task scheduled at clock time t with delay d is due at exactly t + d. run_pending() reads the clock
       once, at its start, and runs every task due at or before that now, earliest due first; equal dues run
       in the order scheduled. A recurring task is re-armed once the executor has taken its run: here,
       where jobs run inline, when the job has returned (so a task that the job schedules for the same due
       as its own next run comes first); under a driver that runs jobs elsewhere, when the run is handed
       over (so FIXED_RATE runs may overlap). The re-arm counts as scheduled at that moment. A job that
       cancelled or rescheduled its own task is not re-armed again.
    3. A one-shot task is removed after it runs. A recurring task (interval given) is re-armed for
       due + interval; if that is not after now, `missed` decides (Missed.DELAY: now + interval;
       Missed.SKIP: the first point of the grid first_due + k * interval after now). A re-arm is always
       after now, however small the interval. A recurring task runs at most once per run_pending() call:
       missed runs are never replayed in a burst (and a recurring task that a job moves to a due at or
       before now runs at the next call).
    4. A job that raises an Exception is recorded in `errors` as "task <id>: <message>" and the others go
       on; a recurring job that failed is still re-armed. Other BaseExceptions (KeyboardInterrupt,
       SystemExit) propagate after the run is accounted for; the tasks not yet run stay due.
    5. A job may cancel itself or any other task; a task cancelled by an earlier job of the same call does
       not run, and a recurring job that cancels itself is not re-armed.
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
        clock: a callable returning monotonic seconds (time.monotonic; ManualClock in tests).
        resolution: seconds per tick of the TimerWheel.
        slots: slots per level of the TimerWheel.
        levels: levels of the TimerWheel.
        observer: called with a JobEvent for every run, drop and skip; its errors are logged, never raised.

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

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        resolution: float = 0.001,
        slots: int = 64,
        levels: int = 4,
        observer: Callable[[JobEvent], object] | None = None,
    ) -> None:
        if not callable(clock):
            raise TypeError(f"clock must be callable, not {type(clock).__name__}")
        if observer is not None and not callable(observer):
            raise TypeError(f"observer must be callable or None, not {type(observer).__name__}")
        self._clock = clock
        start = _clock_value(clock())
        self._latest = start  # the latest clock read: time never goes backwards in here
        self._store: TimerStore = self._make_store(resolution, slots, levels, start)
        self._horizon = self._store.horizon  # a clock reading from here on is a failure, not a time
        self._observer = observer
        self._tasks: dict[int, _Task] = {}
        self._last_id = 0
        self.errors: list[str] = []
        """Messages "task <id>: <message>" of failed runs, oldest first (the most recent 1000)."""
        self._executed = self._cancelled = self._running = self._dropped = self._skipped = self._failed = 0
        self._calls = 0  # _run_due calls so far
        self._in_run_due = False  # a job calling run_pending() again would break the once-per-call rule
        self._logger = logger  # a driver may set its own
        # What an observer or a logger may raise and still stop us: KeyboardInterrupt and SystemExit on
        # the caller's thread; a driver whose threads must never die sets () (nothing).
        self._propagate: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)

    def _make_store(self, resolution: float, slots: int, levels: int, start: float) -> TimerStore:
        """The timer store; HeapScheduler overrides this and nothing else."""
        return TimerWheel(resolution, slots=slots, levels=levels, start=start)

    @property
    def clock(self) -> Callable[[], float]:
        """The clock this scheduler reads."""
        return self._clock

    def __repr__(self) -> str:
        return f"<{type(self).__name__} pending={len(self._store)} running={self._running}>"

    def _now(self) -> float:
        """The clock, never earlier than its latest read (a clock that steps back stands still).

        A reading that is not a finite number, or that the store cannot hold (past the wheel's 2**62
        ticks), raises and leaves the latest read as it was: a clock that glitches once comes back.
        """
        now = self._clock()
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

    # -- scheduling -----------------------------------------------------------------------------------

    def schedule(
        self,
        delay: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed = Missed.DELAY,
    ) -> int:
        """Run fn(*args, **kwargs) `delay` seconds from now (the clock read now); return the task id. O(1).

        With `interval`, the task repeats every `interval` seconds after that, as `mode` and `missed` say.

        Raises:
            ValueError: delay < 0, interval <= 0, or either not finite.
            TypeError: fn is not callable, or an argument has the wrong type.
        """
        if not (type(delay) is float and 0.0 <= delay < math.inf):  # the common case costs two compares
            delay = _seconds(delay, "delay")
            if delay < 0:
                raise ValueError(f"delay must be >= 0, got {delay!r}")
        return self._add(self._now() + delay, fn, interval, args, kwargs, mode, missed, "delay")

    def schedule_at(
        self,
        when: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed = Missed.DELAY,
    ) -> int:
        """Run fn at the clock time `when` (a past `when` runs at the next run_pending()); as schedule().

        Raises:
            ValueError: when is not finite; interval <= 0 or not finite.
            TypeError: fn is not callable, or an argument has the wrong type.
        """
        return self._add(_seconds(when, "when"), fn, interval, args, kwargs, mode, missed, "when")

    def _add(
        self,
        due: float,
        fn: Callable[..., Any],
        interval: float | None,
        args: Iterable[Any],
        kwargs: Mapping[str, Any] | None,
        mode: RepeatMode,
        missed: Missed,
        name: str,
    ) -> int:
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        if interval is not None:
            interval = _seconds(interval, "interval")
            if interval <= 0:
                raise ValueError(f"interval must be > 0, got {interval!r}")
        if not isinstance(mode, RepeatMode):
            raise TypeError(f"mode must be a RepeatMode, not {mode!r}")
        if not isinstance(missed, Missed):
            raise TypeError(f"missed must be a Missed, not {missed!r}")
        if type(args) is not tuple:
            if isinstance(args, (str, bytes)):
                raise TypeError("args must be an iterable of arguments, not a string")
            args = tuple(args)
        kw = dict(kwargs) if kwargs else None  # most jobs take none: no dict per task
        # The id is taken before anything that allocates: a finalizer that the GC runs meanwhile may
        # schedule too, and must get the next one. It is given back if the call fails (and nothing took
        # a later one), so that a call that raised takes no id.
        task_id = self._last_id + 1
        self._last_id = task_id
        try:
            task = _Task(task_id, fn, interval, args, kw, mode, missed, due)
            timer_id = self._store.add_at(due, task)
        except BaseException as exc:
            if self._last_id == task_id:
                self._last_id = task_id - 1
            if isinstance(exc, OverflowError):  # a due out of the store's range: nothing changed
                raise OverflowError(f"{name} is too far ahead: {exc}") from None
            raise
        task.timer_id = timer_id
        self._tasks[task_id] = task
        return task_id

    def cancel(self, task_id: int) -> bool:
        """Cancel a task: it will not start again. O(1).

        Returns:
            True if the task was scheduled; False if unknown, already finished (a one-shot that has started
            counts as finished) or already cancelled.
        """
        if type(task_id) is not int:
            self._check_id(task_id)
        task = self._tasks.pop(task_id, None)
        if task is None:
            return False
        task.live = False
        timer_id = task.timer_id
        task.timer_id = None
        if timer_id is not None:
            # False when it was just taken for running: _run_due sees the task is not live and skips it
            self._store.cancel(timer_id)
        self._cancelled += 1
        return True

    def reschedule(self, task_id: int, delay: float) -> bool:
        """Move a task's next run to `delay` seconds from now (clock read now). O(1).

        A recurring task then goes on from there: its grid (for Missed.SKIP) starts at the new due.

        Returns:
            True if the task was scheduled; False (and nothing changes) if unknown, finished or cancelled.

        Raises:
            ValueError: delay < 0 or not finite.
        """
        if type(task_id) is not int:
            self._check_id(task_id)
        if not (type(delay) is float and 0.0 <= delay < math.inf):  # the common case costs two compares
            delay = _seconds(delay, "delay")
            if delay < 0:
                raise ValueError(f"delay must be >= 0, got {delay!r}")
        task = self._tasks.get(task_id)
        if task is None:
            return False
        due = self._now() + delay
        timer_id = task.timer_id
        try:
            if timer_id is None or not self._store.reschedule_at(timer_id, due):
                # not armed (a FIXED_DELAY task while it runs) or just taken for running: arm it afresh
                timer_id = self._store.add_at(due, task)
                if not task.live:  # cancelled by a finalizer while the store worked
                    self._store.cancel(timer_id)
                    return True
                task.timer_id = timer_id
        except OverflowError as exc:  # raised before anything changed
            raise OverflowError(f"delay is too far ahead: {exc}") from None
        task.due = task.first_due = due
        return True

    @staticmethod
    def _check_id(task_id: Any) -> int:
        if not isinstance(task_id, int):
            raise TypeError(f"task_id must be an int, not {type(task_id).__name__}")
        return task_id

    # -- running ----------------------------------------------------------------------------------------

    def run_pending(self) -> int:
        """Run every task due at or before now (the clock read once, here); return how many ran.

        Jobs run inline, one after the other, earliest due first. See the class docstring for the rules.
        """
        return self._run_due(self._now(), self._run_inline)

    def next_run_in(self) -> float | None:
        """Seconds until the next task is due, never negative; None when nothing is scheduled."""
        due = self._store.next_due()
        if due is None:
            return None
        return max(0.0, due - self._now())

    def _run_due(self, now: float, execute: Callable[[Run], object]) -> int:
        """Take every task due at `now`, apply the run rules, hand each run to `execute`; count them."""
        if self._in_run_due:
            raise RuntimeError("run_pending() must not be called from a job it runs")
        store = self._store
        if now < store.now:  # a clock that stepped back: time does not go backwards in here
            now = store.now
        self._calls += 1
        started = 0
        deferred: list[_Task] = []  # recurring tasks due again in this call (a job moved them): next call
        batch: list[tuple[int, Any]] = []
        taken = 0  # entries of `batch` dealt with
        self._in_run_due = True
        try:
            while True:
                batch = store.advance(now)  # again after each batch: jobs may schedule due tasks (rule 6)
                taken = 0
                if not batch:
                    return started
                for timer_id, task in batch:
                    taken += 1
                    # cancelled or rescheduled by an earlier job of this batch (or by a finalizer)
                    if task.timer_id != timer_id or not task.live:
                        continue
                    task.timer_id = None
                    if task.last_call == self._calls:  # a recurring task runs at most once per call
                        deferred.append(task)
                        continue
                    started += self._fire(task, now, execute)
        finally:
            # Normally only `deferred`; after a BaseException also the rest of the batch, which did not run.
            for timer_id, task in batch[taken:]:
                if task.timer_id == timer_id and task.live:
                    task.timer_id = None
                    deferred.append(task)
            for task in deferred:  # unless a later job cancelled it, or rescheduled it (which armed it)
                if task.timer_id is None and task.live:
                    self._arm(task, task.due)
            self._in_run_due = False

    def _fire(self, task: _Task, now: float, execute: Callable[[Run], object]) -> int:
        scheduled_for = task.due
        if task.mode is RepeatMode.SKIP_IF_RUNNING and task.running:
            self._skipped += 1
            self._rearm_on_grid(task, scheduled_for, now)
            self._emit(task.id, scheduled_for, now, now, skipped=True)
            return 0
        if task.interval is None:
            task.live = False
            del self._tasks[task.id]  # a one-shot is finished once it starts
        task.running += 1
        self._running += 1
        task.last_call = self._calls
        try:
            execute(Run(task, scheduled_for))
        finally:
            # Rule 2: re-armed once the executor has taken the run (inline: the job returned), unless the
            # job cancelled it or moved it (which armed it); FIXED_DELAY re-arms when the run finishes.
            if (
                task.interval is not None
                and task.mode is not RepeatMode.FIXED_DELAY
                and task.timer_id is None
                and task.live
            ):
                self._rearm_on_grid(task, scheduled_for, now)
        return 1

    def _rearm_on_grid(self, task: _Task, scheduled_for: float, now: float) -> None:
        interval = task.interval
        assert interval is not None
        due = scheduled_for + interval
        if not due > now:  # late: never replay the missed runs
            if task.missed is Missed.DELAY:
                due = _after(now, interval)
            else:
                due = _first_grid_point_after(task.first_due, interval, now)
        self._arm(task, due)

    def _arm(self, task: _Task, due: float) -> None:
        """Put a live task's next run in the store (its timer_id must be None).

        A finalizer may cancel the task while the store works: `live` is read again afterwards, without a
        call in between, and the new timer is taken back. A due that the store cannot hold (an interval
        that runs off the end of the clock's range) ends the task, with an error recorded.
        """
        try:
            timer_id = self._store.add_at(due, task)
        except (OverflowError, ValueError) as exc:
            if task.live:
                task.live = False
                self._tasks.pop(task.id, None)
                self._record_error(task.id, exc)
            return
        if not task.live:
            self._store.cancel(timer_id)
            return
        task.timer_id = timer_id
        task.due = due

    def _run_inline(self, run: Run) -> None:
        started_at = self._started(run)
        try:
            run.call()
        except Exception as exc:
            self._finish(run, started_at, exc)
        except BaseException as exc:
            self._finish(run, started_at, exc)
            raise
        else:
            self._finish(run, started_at, None)

    def _started(self, run: Run) -> float:
        """A run's job is about to be called: count it (Stats.executed counts runs started); the time.

        If the clock fails just now, the latest good reading is the start: the run goes on (a driver
        notices the clock at its next pass).
        """
        self._executed += 1
        try:
            return self._now()
        except Exception:
            return self._latest

    def _finish(
        self,
        run: Run,
        started_at: float,
        error: BaseException | None,
        finished_at: float | None = None,
        *,
        timed_out: bool = False,
    ) -> None:
        """A run returned (error None) or raised: count it, record its error, re-arm a FIXED_DELAY task."""
        if finished_at is None:
            finished_at = self._now()
        task = run.task
        task.running -= 1
        self._running -= 1
        if error is not None:
            self._failed += 1
            self._record_error(task.id, error)
        if task.mode is RepeatMode.FIXED_DELAY:
            self._rearm_after(task, finished_at)
        self._emit(task.id, run.scheduled_for, started_at, finished_at, error=error, timed_out=timed_out)

    def _drop(self, run: Run, now: float) -> None:
        """A run was not executed (backpressure): count it; a repeating task stays armed."""
        task = run.task
        task.running -= 1
        self._running -= 1
        self._dropped += 1
        if task.mode is RepeatMode.FIXED_DELAY:
            self._rearm_after(task, now)
        self._emit(task.id, run.scheduled_for, now, now, dropped=True)

    def _discard_pending(self) -> None:
        """Forget every task (a driver closing): nothing will run; no counter changes."""
        for task in list(self._tasks.values()):
            task.live = False
            if task.timer_id is not None:
                self._store.cancel(task.timer_id)
                task.timer_id = None
        self._tasks.clear()

    def _is_cancelled(self, run: Run) -> bool:
        """A recurring task cancelled after this run was taken (a one-shot cannot be: it is finished)."""
        task = run.task
        return task.interval is not None and not task.live

    def _forget(self, run: Run) -> None:
        """A taken run that will not start: its task was cancelled before it did. Not counted anywhere."""
        run.task.running -= 1
        self._running -= 1

    def _rearm_after(self, task: _Task, finished_at: float) -> None:
        # Only a live task that nothing armed meanwhile (a reschedule from inside the job arms it itself).
        if task.interval is not None and task.timer_id is None and task.live:
            self._arm(task, _after(finished_at, task.interval))

    def _record_error(self, task_id: int, error: BaseException) -> None:
        self.errors.append(f"task {task_id}: {error}")
        if len(self.errors) > MAX_ERRORS:
            del self.errors[0]
        self._log(logging.ERROR, "timerwheel: task %d failed: %r", task_id, error, exc_info=error)

    def _log(self, level: int, msg: str, *args: Any, exc_info: Any = None) -> None:
        """Log on the scheduler's logger; a logger that raises is reported on stderr, never raised further
        (but for what `_propagate` lets through)."""
        log_safely(self._logger, self._propagate, level, msg, *args, exc_info=exc_info)

    def _emit(
        self,
        task_id: int,
        scheduled_for: float,
        started_at: float,
        finished_at: float,
        *,
        error: BaseException | None = None,
        dropped: bool = False,
        skipped: bool = False,
        timed_out: bool = False,
    ) -> None:
        observer = self._observer
        if observer is None:
            return
        event = JobEvent(
            task_id=task_id,
            scheduled_for=scheduled_for,
            started_at=started_at,
            finished_at=finished_at,
            lateness=max(0.0, started_at - scheduled_for),
            duration=finished_at - started_at,
            error=error,
            dropped=dropped,
            skipped=skipped,
            timed_out=timed_out,
        )
        try:
            observer(event)
        except BaseException as exc:
            if isinstance(exc, self._propagate):
                raise
            self._log(logging.ERROR, "timerwheel: the observer raised on %r; ignored", event, exc_info=exc)

    # -- introspection --------------------------------------------------------------------------------

    def next_fire_time(self, task_id: int) -> float | None:
        """The clock time of a task's next run, or None if it is not armed (unknown, finished, cancelled)."""
        task = self._tasks.get(self._check_id(task_id))
        if task is None or task.timer_id is None:
            return None
        return task.due

    def pending(self) -> list[TimerInfo]:
        """Every armed task, sorted by next fire time, then id. O(n log n)."""
        infos = [
            TimerInfo(task.id, task.due, task.interval, task.mode)
            for task in list(self._tasks.values())
            if task.timer_id is not None
        ]
        infos.sort(key=lambda info: (info.next_fire_at, info.id))
        return infos

    def stats(self) -> Stats:
        """A snapshot of the counters (see Stats)."""
        return Stats(
            pending=len(self._store),
            executed=self._executed,
            cancelled=self._cancelled,
            running=self._running,
            dropped=self._dropped,
            skipped=self._skipped,
            failed=self._failed,
        )


def _clock_value(value: Any) -> float:
    """A clock's reading as a finite float, or a ValueError / TypeError that says the clock gave it."""
    try:
        return _seconds(value, "the clock's reading")
    except (TypeError, ValueError, OverflowError) as exc:
        raise type(exc)(f"{exc} (the scheduler's clock returned {value!r})") from None


def log_safely(
    logger: logging.Logger,
    propagate: tuple[type[BaseException], ...],
    level: int,
    msg: str,
    *args: Any,
    exc_info: Any = None,
) -> None:
    """logger.log(level, msg, *args), where a logger that raises (a handler, a filter) cannot stop a
    scheduler: what it raised is written to stderr instead, unless it is one of `propagate`."""
    try:
        logger.log(level, msg, *args, exc_info=exc_info)
    except BaseException as exc:
        if isinstance(exc, propagate):
            raise
        with contextlib.suppress(BaseException):  # a closed or broken stderr: nothing is left to tell
            sys.stderr.write(f"timerwheel: the logger raised {exc!r} while logging: {msg % args}\n")


def report_run(
    logger: logging.Logger,
    propagate: tuple[type[BaseException], ...],
    error_handler: Callable[[int, BaseException], object] | None,
    task_id: int,
    interval: float | None,
    error: BaseException | None,
    duration: float,
    timed_out: bool = False,
) -> None:
    """What a driver does after a run finished, beyond the engine's accounting (shared by the drivers).

    Pass a failed run's error to `error_handler`; warn about a run past its timeout, and about a run longer
    than half its task's interval. Whatever the error handler or the logger raises is logged (or written to
    stderr) and goes no further, unless it is one of `propagate`: a driver thread never dies of it.
    """
    if error is not None and error_handler is not None:
        try:
            error_handler(task_id, error)
        except BaseException as exc:
            if isinstance(exc, propagate):
                raise
            log_safely(
                logger,
                propagate,
                logging.ERROR,
                "timerwheel: the error_handler raised for task %d; ignored",
                task_id,
                exc_info=exc,
            )
    if timed_out:
        log_safely(
            logger,
            propagate,
            logging.WARNING,
            "timerwheel: task %d ran %.3f s, past its timeout",
            task_id,
            duration,
        )
    if interval is not None and duration > interval / 2:
        log_safely(
            logger,
            propagate,
            logging.WARNING,
            "timerwheel: task %d ran %.3f s, more than half its interval of %.3f s: the interval is "
            "probably the wrong knob",
            task_id,
            duration,
            interval,
        )
