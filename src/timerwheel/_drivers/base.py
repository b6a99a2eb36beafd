"""DriverBase: what ThreadedScheduler and AsyncScheduler share, so that a driver adds only where a run
executes and how its waiting loop is woken.

The base holds the engine (a Scheduler, bound to the driver) and owns the lifecycle (new, running, closed),
the validation of the constructor's and schedule()'s arguments, the forwarding of the scheduling and
introspection methods to the engine under the driver's lock, and the policy for a clock that fails. A
driver implements the engine's Driver protocol (execute, wake, timed_out), start() and close(), and
the loop that calls engine.drain().
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import math
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from contextvars import copy_context
from datetime import datetime
from functools import partial
from typing import Any

try:  # only for the compiled build: the thread checks of the hot paths call CPython's C function
    import cython
except ImportError:
    cython = types.SimpleNamespace(compiled=False)
if cython.compiled:
    from cython.cimports.cpython.pythread import PyThread_get_thread_ident as get_ident
else:
    from threading import get_ident

from .._clock import Clock
from .._core import TimerWheel
from .._engine import Run, Scheduler, Timer, TimerStore, log_safely
from .._types import (
    AlreadyRunningError,
    ClockError,
    ClosedError,
    JobEvent,
    Lifecycle,
    Missed,
    NotStartedError,
    RepeatMode,
    RunOptions,
    Stats,
    TimerInfo,
)
from .._validate import boolean, callable_or_none, deadline, member, timer_store

__all__ = ["CALENDAR_WAKE", "DriverBase", "Lifecycle", "is_async"]

#: A driver with calendar tasks wakes at least this often (seconds), to notice a step of the wall clock.
CALENDAR_WAKE = 30.0


_INF = math.inf
_NEW, _RUNNING = Lifecycle.NEW, Lifecycle.RUNNING  # (a global read is cheaper than the class attribute)
_AS_COROUTINE = RunOptions(coroutine=True)  # the options of every coroutine job without others (frozen)
_PENDING, _DONE, _CANCELLED = 0, 1, 2  # a TimerHandle's states


class DriverBase:
    """The shared half of a driver: lifecycle, validation, forwarding, and the failing-clock policy.

    Subclasses set `_PROPAGATE` (what a user callback may raise through the driver: nothing on threads
    that must never die) and the two flags below, call `_make_engine()` once they know their clock, and
    implement execute(), wake() and timed_out() (the engine's Driver protocol). They may keep the engine's
    `wake_below` at the time they next look at the store anyway: the engine then calls wake() only for
    what comes before it (see Scheduler.bind).

    What the hot paths read is copied in `_hot` (see _Hot): subclasses write `_state` and `_fault` only
    through _set_state() and _set_fault(), and make their engine with _make_engine().
    """

    _PROPAGATE: tuple[type[BaseException], ...] = ()
    #: Whether a coroutine function is a coroutine job (AsyncScheduler): if not, no job needs to be asked.
    _COROUTINES = False
    #: Whether schedule(), cancel() and reschedule() take the lock: not in a driver that refuses every
    #: thread but one (AsyncScheduler), where it would guard nothing.
    _LOCKING = True

    def __init__(
        self,
        *,
        store: TimerStore | None,
        resolution: float | None,
        slots: int | None,
        levels: int | None,
        missed: Missed,
        observer: Callable[[JobEvent], object] | None,
        error_handler: Callable[[int, BaseException], object] | None,
        logger: logging.Logger | None,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        member(missed, Missed, "missed")
        timer_store(store, resolution, slots, levels)
        callable_or_none(wall_clock, "wall_clock")
        callable_or_none(observer, "observer")
        callable_or_none(error_handler, "error_handler")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger or None, not {type(logger).__name__}")
        self._engine_kwargs: dict[str, Any] = {
            "store": store,
            "resolution": resolution,
            "slots": slots,
            "levels": levels,
            "observer": observer,
            "error_handler": error_handler,
            "logger": logger,
            "propagate": self._PROPAGATE,
            "wall_clock": wall_clock,
        }
        if store is None:  # the geometry is checked now, also by a driver that makes its engine later
            TimerWheel(
                0.001 if resolution is None else resolution,
                slots=64 if slots is None else slots,
                levels=4 if levels is None else levels,
            )
        self._logger = logger or logging.getLogger("timerwheel")
        # One reentrant lock guards everything: an observer or an error handler may call back in.
        self._lock = threading.RLock()
        self._state = Lifecycle.NEW  # written by _set_state() only, as _fault by _set_fault()
        self._fault: BaseException | None = None  # why the clock cannot be read just now, or None
        self._clock_errors = 0
        self._engine: Scheduler = None  # type: ignore[assignment]  # until _make_engine()
        # What the hot paths read, in one record (see _Hot). The hooks a subclass overrides are the ones
        # they call (a base's own does nothing).
        cls = type(self)
        self._hot = _Hot(
            missed,
            self._COROUTINES,
            self._LOCKING,
            cls._check_caller is not DriverBase._check_caller,
            cls._after_cancel is not DriverBase._after_cancel,
            self._lock,
        )

    def _make_engine(self, clock: Clock | Callable[[], float] | None) -> Scheduler:
        """The engine on `clock`, bound to this driver (once the driver knows its clock)."""
        engine = Scheduler(clock, **self._engine_kwargs)
        engine.bind(self)
        self._engine = self._hot.engine = engine
        self._hot.horizon = engine.store.horizon
        return engine

    def __repr__(self) -> str:
        engine = self._engine
        pending, timers = (engine.stats().pending, engine.timers) if engine is not None else (0, 0)
        fault = f" clock failing: {self._fault!r}" if self._fault is not None else ""
        return f"<{type(self).__name__} {self._state.value} pending={pending} timers={timers}{fault}>"

    # -- the engine's Driver protocol: the subclass's -------------------------------------------------

    def execute(self, run: Run) -> None:
        """Run a due job (the engine calls it from drain()): where, is the driver's choice."""
        raise NotImplementedError

    def wake(self, due: float) -> None:
        """Something was armed at `due`: wake the driver's waiting loop if it sleeps past it."""
        raise NotImplementedError

    def timed_out(self, run: Run) -> None:
        """A started run passed its deadline (its context's `cancelled` is set already)."""

    # -- lifecycle ----------------------------------------------------------------------------------------

    def _begin(self) -> None:
        """new -> running, or the error that says why not."""
        if self._state is Lifecycle.RUNNING:
            raise AlreadyRunningError("the scheduler is already running")
        if self._state is Lifecycle.CLOSED:
            raise ClosedError("the scheduler is closed: a closed scheduler cannot be started again")
        if self._state is not _NEW:
            raise _uninitialised(self)
        self._set_state(Lifecycle.RUNNING)

    def _set_state(self, state: Lifecycle) -> None:
        """The one writer of `_state` (the hot record's `running` and `accepting` follow it)."""
        self._hot.sync(state, self._fault)  # (the record first: from here on, a closing driver refuses)
        self._state = state

    def _set_fault(self, fault: BaseException | None) -> None:
        """The one writer of `_fault`: why the clock cannot be read just now, or None (as _set_state)."""
        self._hot.sync(self._state, fault)
        self._fault = fault

    def _check_caller(self) -> None:
        """A hook: AsyncScheduler refuses calls from other threads (overridden, the hot paths call it)."""

    def _check_running(self) -> None:
        self._check_caller()
        if self._state is not _RUNNING:
            if self._state is _NEW:
                raise NotStartedError("start() the scheduler before scheduling on it")
            if self._state is not Lifecycle.CLOSED:
                raise _uninitialised(self)
            raise ClosedError("the scheduler is closed")

    def _check_accepting(self) -> None:
        """Running, and able to read its clock: new work would otherwise never run."""
        self._check_running()
        if self._fault is not None:
            raise ClockError(
                f"the scheduler cannot read its clock ({self._fault!r}): its driver retries, and work is "
                "refused until it can, since it would not run"
            ) from self._fault

    def _clock_failed(self, exc: BaseException, retry_in: float) -> None:
        """The driver could not read its clock: remember it (new work is refused), count it, log it."""
        self._set_fault(exc)
        self._clock_errors += 1
        log_safely(
            self._logger,
            self._PROPAGATE,
            logging.ERROR,
            "timerwheel: %s cannot read its clock (%r); retrying in %.3f s",
            type(self).__name__,
            exc,
            retry_in,
            exc_info=exc,
        )

    # -- scheduling, forwarded to the engine ----------------------------------------------------------------

    def _options(self, fn: Callable[..., Any], context: bool, timeout: float | None) -> RunOptions | None:
        return _options(self._COROUTINES, fn, context, timeout)

    def schedule(
        self,
        delay: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed | None = None,
        context: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Run fn `delay` seconds from now, as Scheduler.schedule; return the task id. O(1).

        missed defaults to the scheduler's policy. With context=True the job is called as
        fn(ctx, *args, **kwargs) with a JobContext. With timeout, a run that lasts longer is reported (a
        JobEvent with timed_out=True and a logged warning) and its context's `cancelled` event is set.

        Raises:
            NotStartedError / ClosedError: before start() / after stop() or close().
            ClockError: the driver cannot read its clock just now.
            ValueError, TypeError: as Scheduler.schedule; timeout not > 0; context not a bool.
        """
        return _add(self._hot, self, False, delay, fn, interval, args, kwargs, mode, missed, context, timeout)

    def schedule_at(
        self,
        when: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed | None = None,
        context: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Run fn at the clock time `when`, as Scheduler.schedule_at; otherwise as schedule()."""
        return _add(self._hot, self, True, when, fn, interval, args, kwargs, mode, missed, context, timeout)

    def schedule_wall(
        self,
        when: float | datetime,
        fn: Callable[..., Any],
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        context: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Run fn once at the wall-clock time `when` (POSIX seconds or an aware datetime), as
        Scheduler.schedule_wall: a calendar task, moved when the wall clock steps, never early."""
        options = self._options(fn, context, timeout)
        with self._lock:
            self._check_accepting()
            return self._engine.schedule_wall(when, fn, args=args, kwargs=kwargs, options=options)

    def reschedule_wall(self, task_id: int, when: float | datetime) -> bool:
        """Move a task's next run to the wall-clock time `when`. As Scheduler.reschedule_wall. O(1)."""
        with self._lock:
            self._check_accepting()
            return self._engine.reschedule_wall(task_id, when)

    def schedule_cron(
        self,
        cron: Any,
        fn: Callable[..., Any],
        *,
        tz: Any = None,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        context: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Run fn at every point of a cron schedule (a Cron, or an expression with `tz`), as
        Scheduler.schedule_cron: late by one or more points, it runs once and goes on after now."""
        options = self._options(fn, context, timeout)
        with self._lock:
            self._check_accepting()
            return self._engine.schedule_cron(
                cron, fn, tz=tz, args=args, kwargs=kwargs, mode=mode, options=options
            )

    def cancel(self, task_id: int) -> bool:
        """Cancel a task; once this returns True the task never starts again. As Scheduler.cancel. O(1)."""
        return _cancel(self._hot, self, task_id)

    def _after_cancel(self) -> None:
        """A hook: a cancel left nothing armed at all (AsyncScheduler lets go of its loop handle)."""

    def reschedule(self, task_id: int, delay: float) -> bool:
        """Move a task's next run to `delay` seconds from now. As Scheduler.reschedule. O(1)."""
        return _reschedule(self._hot, self, task_id, delay)

    def _refuse_if_the_clock_fails(self, exc: Exception) -> None:
        """A call failed: if the clock is what fails (read again now), say so with ClockError, and wake
        the driver so that it notices and backs off; else let the call's own error through."""
        try:
            self._engine.now()
        except Exception as clock_error:
            self._set_fault(clock_error)
            with contextlib.suppress(Exception):  # a driver whose wake-up reads that clock: ClockError still
                self.wake(-math.inf)
            raise ClockError(
                f"the scheduler cannot read its clock ({clock_error!r}): work is refused until it can, "
                "since it would not run"
            ) from clock_error

    # -- introspection --------------------------------------------------------------------------------------

    def wall(self) -> float:
        """The scheduler's wall clock now, in POSIX seconds (its `wall_clock`).

        Raises:
            NotStartedError: it has no clock yet (an AsyncScheduler made outside a loop, not started).
        """
        if self._engine is None:
            if self._state is not _NEW:
                raise _uninitialised(self)
            raise NotStartedError("the scheduler has no clock yet: start() it on its event loop")
        return self._engine.wall()

    def next_fire_time(self, task_id: int) -> float | None:
        """The clock time of a task's next run, or None if it is not armed."""
        self._check_caller()
        with self._lock:
            return self._engine.next_fire_time(task_id) if self._engine is not None else None

    def pending(self) -> list[TimerInfo]:
        """Every armed task, sorted by next fire time, then id."""
        self._check_caller()
        with self._lock:
            return self._engine.pending() if self._engine is not None else []

    def stats(self) -> Stats:
        """A snapshot of the counters (see Stats)."""
        self._check_caller()
        with self._lock:
            if self._engine is None:
                return Stats()
            stats = self._engine.stats()
            return dataclasses.replace(stats, clock_errors=self._clock_errors)

    @property
    def timers(self) -> int:
        """How many plain timers and run deadlines are armed: timeouts, sleeps and call_later handles,
        KeyedScheduler keys (tasks are stats().pending; stats() has these by kind). O(1)."""
        self._check_caller()
        with self._lock:
            return self._engine.timers if self._engine is not None else 0

    @property
    def errors(self) -> list[str]:
        """Messages "task <id>: <message>" of failed runs, oldest first (a copy; the most recent 1000)."""
        self._check_caller()
        with self._lock:
            return list(self._engine.errors) if self._engine is not None else []


class _Hot:
    """What schedule(), schedule_at(), cancel() and reschedule() read, in one record beside the driver.

    In the compiled build it is an extension type (see _base_c.pxd): its fields are C fields, read
    without the dictionary lookup that each attribute of the driver (a Python class) costs there, and its
    engine is the compiled Scheduler, called as C. `running` and `accepting` follow the driver's `_state`
    and `_fault`: DriverBase._set_state() and _set_fault(), their only writers, keep them in step.
    """

    __slots__ = (
        "accepting",
        "acquire",
        "checks_caller",
        "coroutines",
        "engine",
        "exact",
        "horizon",
        "idle_hook",
        "locking",
        "loop",
        "missed",
        "own_check",
        "release",
        "running",
        "time",
    )

    def __init__(
        self,
        missed: Missed,
        coroutines: bool,
        locking: bool,
        checks_caller: bool,
        idle_hook: bool,
        lock: Any,
    ) -> None:
        self.engine: Scheduler = None  # type: ignore[assignment]  # until the driver makes it
        self.missed = missed  # the driver's default policy
        self.coroutines = coroutines  # a coroutine function is a coroutine job (the class flags, as fields)
        self.locking = locking
        self.checks_caller = checks_caller  # the driver overrides _check_caller() / _after_cancel()
        self.idle_hook = idle_hook
        # (the lock's bound methods: on the hot paths they cost less than `with lock`)
        self.acquire, self.release = lock.acquire, lock.release
        self.running = self.accepting = False  # new
        # For the moves of an event loop driver's plain timers (TimerHandle, timeout_reschedule): its loop
        # (None: those moves take their slow path), whether the loop records its thread (`_thread_id`),
        # its clock's reader, and the store's horizon (a due from there on is the slow path's).
        self.loop: Any = None
        self.own_check = False  # the driver's _check_caller() is its class's own (not a subclass's)
        self.exact = False
        self.time: Callable[[], float] | None = None
        self.horizon = 0.0

    def sync(self, state: Lifecycle, fault: BaseException | None) -> None:
        """The driver's state or clock fault changed."""
        self.running = state is _RUNNING
        self.accepting = self.running and fault is None


def _options(
    coroutines: bool, fn: Callable[..., Any], context: bool, timeout: float | None
) -> RunOptions | None:
    if context is False and timeout is None:  # the common case: no options, or only `coroutine`
        return _AS_COROUTINE if coroutines and is_async(fn) else None
    boolean(context, "context")
    return RunOptions(context=context, timeout=timeout, coroutine=coroutines and is_async(fn))


def _caller_ok(hot: _Hot, driver: Any) -> bool:
    """The hot paths' thread check where the driver's own _check_caller() is AsyncScheduler's: True where
    that check would accept the caller, even with the loop running nowhere (False: ask it). See
    _on_loop_thread."""
    return hot.own_check and _on_loop_thread(hot, driver, True)


def _check_thread(hot: _Hot, driver: DriverBase) -> None:
    """driver._check_caller() on the hot paths, inline where _caller_ok() can tell."""
    if not _caller_ok(hot, driver):
        driver._check_caller()


def _no_engine(driver: DriverBase) -> NotStartedError:
    """The error for a driver running without an engine (a subclass that never called _make_engine()):
    the compiled build checks, since a method called on None would crash the interpreter."""
    return NotStartedError(f"{type(driver).__name__} has no engine: it never called _make_engine()")


def _add(
    hot: _Hot,
    driver: DriverBase,
    at: bool,
    time_arg: float,
    fn: Callable[..., Any],
    interval: float | None,
    args: Iterable[Any],
    kwargs: Mapping[str, Any] | None,
    mode: RepeatMode,
    missed: Missed | None,
    context: bool,
    timeout: float | None,
) -> int:
    """DriverBase.schedule() and schedule_at()."""
    options = _options(hot.coroutines, fn, context, timeout)
    locking = hot.locking
    if locking:
        hot.acquire()
    try:
        if hot.checks_caller:
            _check_thread(hot, driver)
        if not hot.accepting:
            driver._check_accepting()  # (says why not; running and reading its clock is the common case)
        if missed is None:
            missed = hot.missed
        engine = hot.engine
        if engine is None:
            raise _no_engine(driver)
        try:
            if at:
                task_id = engine.schedule_at_positional(
                    time_arg, fn, interval, args, kwargs, mode, missed, options
                )
            else:
                task_id = engine.schedule_positional(
                    time_arg, fn, interval, args, kwargs, mode, missed, options
                )
        except Exception as exc:
            driver._refuse_if_the_clock_fails(exc)
            raise
        if not hot.accepting:
            # Closed (or its clock failed) during the call: by something the call ran, a finalizer that
            # the garbage collector ran, a store or a clock of the user's. Refused as if it came after.
            try:
                driver._check_accepting()
            except BaseException:
                engine.cancel(task_id)
                raise
        return task_id
    finally:
        if locking:
            hot.release()


def _cancel(hot: _Hot, driver: DriverBase, task_id: int) -> bool:
    """DriverBase.cancel()."""
    locking = hot.locking
    if locking:
        hot.acquire()
    try:
        if hot.checks_caller:
            _check_thread(hot, driver)
        if not hot.running:
            driver._check_running()
        engine = hot.engine
        if engine is None:
            raise _no_engine(driver)
        cancelled = engine.cancel(task_id)
        if cancelled and hot.idle_hook and not len(engine._store):
            driver._after_cancel()
        return cancelled
    finally:
        if locking:
            hot.release()


def _reschedule(hot: _Hot, driver: DriverBase, task_id: int, delay: float) -> bool:
    """DriverBase.reschedule()."""
    locking = hot.locking
    if locking:
        hot.acquire()
    try:
        if hot.checks_caller:
            _check_thread(hot, driver)
        if not hot.accepting:
            driver._check_accepting()
        engine = hot.engine
        if engine is None:
            raise _no_engine(driver)
        try:
            return engine.reschedule(task_id, delay)
        except Exception as exc:
            driver._refuse_if_the_clock_fails(exc)
            raise
    finally:
        if locking:
            hot.release()


# -- the plain timers an event loop driver hands out (AsyncScheduler's TimerHandle and Timeout), compiled
# here beside the engine they call as C: a handle's fields are C fields, and its reset costs no Python
# frame. What is not the common case goes to the general path, the same result, slower.


def _fill(
    handle: TimerHandle, sched: Any, hot: _Hot, when: float, callback: Any, args: Any, context: Any
) -> None:
    """A new handle's fields (its __init__, and call_later's fast path, which makes one without it)."""
    handle.due = 0.0  # (Timer.__init__, inline)
    handle.id = None
    handle._sched = sched
    handle._hot = hot  # (sched._hot)
    handle._when = when
    handle._callback = callback
    handle._args = args
    handle._context = context
    handle._state = _PENDING
    handle._fallback = None  # its handle on the loop's own timers, once the scheduler is closed


def call_later_fast(
    sched: Any, cls: type[TimerHandle], delay: Any, callback: Any, args: tuple[Any, ...], context: Any
) -> TimerHandle | None:
    """sched.call_later(delay, callback, *args, context=context) where it is the common case (a finite
    float delay, on the loop's thread, running, no context given): the handle, a new `cls`, armed; None
    where it is not (the driver's general path takes the call, with nothing changed)."""
    hot: _Hot = sched._hot
    if (
        type(delay) is float
        and -_INF < delay < _INF
        and hot.running
        and context is None
        and callable(callback)
        and _caller_ok(hot, sched)
    ):
        when: float = hot.time() + delay  # type: ignore[misc]
        timer: TimerHandle = TimerHandle.__new__(cls)
        _fill(timer, sched, hot, when, callback, args, copy_context())
        if when < _INF:  # (else never; as the driver's general path)
            try:  # noqa: SIM105  (contextlib.suppress costs a context manager per call)
                hot.engine.add_timer(timer, when)
            except OverflowError:
                pass  # beyond the store's range: never, as the general path says
        return timer
    return None


def time_after(now: float, delay: float) -> float:
    """now + delay, where a delay beyond the floats is infinitely far (as call_later takes it)."""
    try:
        return now + delay
    except OverflowError:
        return _INF if delay > 0 else -_INF


class TimerHandle(Timer):
    """What AsyncScheduler's TimerHandle is and does (the class itself, in the asyncio driver, adds its
    kind and its documentation; this module imports no asyncio)."""

    __slots__ = ("_args", "_callback", "_context", "_fallback", "_hot", "_sched", "_state", "_when")
    # (their types, for the type checker: _fill() sets them)
    _args: tuple[Any, ...]
    _callback: Callable[..., object]
    _context: Any
    _fallback: Any
    _hot: _Hot
    _sched: Any
    _state: int
    _when: float

    def __init__(
        self,
        sched: Any,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...] = (),
        context: Any = None,
    ) -> None:
        _fill(self, sched, sched._hot, when, callback, args, context)

    def __repr__(self) -> str:
        state = ("pending", "done", "cancelled")[self._state]
        return f"<TimerHandle {state} when={self._when!r} callback={self._callback!r}>"

    def when(self) -> float:
        """The loop time it is due at."""
        self._sched._check_caller()
        return self._when

    def cancel(self) -> None:
        """Cancel it: the callback will not run. Does nothing once it ran.

        Raises:
            RuntimeError: called from another thread while the loop runs (use loop.call_soon_threadsafe).
        """
        hot: _Hot = self._hot
        sched = self._sched
        if not _caller_ok(hot, sched):
            sched._check_caller()
        if self._state == _PENDING:
            self._state = _CANCELLED
            if self.id is not None:  # (_discard(), its common case inline)
                hot.engine.cancel_timer(self)
            else:
                self._discard()
            if not len(hot.engine._store):  # (nothing left armed: the loop handle may go)
                sched._disarm_if_idle()

    def cancelled(self) -> bool:
        """Whether cancel() was called before it ran."""
        self._sched._check_caller()
        return self._state == _CANCELLED

    def reset(self, delay: float) -> bool:
        """Move it to `delay` seconds from now (loop time), O(1): the keep-alive reset.

        Nothing is allocated, and the loop is not touched unless the timer moves earlier than the
        scheduler's one loop handle.

        Returns:
            True if it was pending and moved; False (and nothing changes) if it already ran or was cancelled.

        Raises:
            TypeError: delay is not a number. ValueError: delay is NaN.
            RuntimeError: called from another thread while the loop runs.
        """
        # (The common cases here, a float delay on the loop's thread: an armed timer, moved in place by the
        # engine to a due the store takes; an armed one moved to never (a delay of inf), taken out; a
        # pending one armed at no due (inf) put in at a due the store takes, with the scheduler running.
        # Anything else is _reset(), the same result, slower; a handle that ran or was cancelled reads no
        # clock.)
        hot: _Hot = self._hot
        if self.id is not None and type(delay) is float and _on_loop_thread(hot, self._sched, False):
            due: float = hot.time() + delay  # type: ignore[misc]
            if -_INF < due < hot.horizon:  # (NaN is not)
                try:
                    moved = hot.engine.move_timer(self, due)
                except BaseException as exc:
                    if self.due == due:  # moved, then arming the loop handle failed: it stays moved
                        self._when = due
                        raise
                    if not isinstance(exc, (ValueError, OverflowError)):
                        raise
                    moved = False  # the store refused the due: the general path
                if moved:
                    self._when = due
                    return True
            elif due == _INF:  # never (until moved again): out of the store, as _move() does
                hot.engine.cancel_timer(self)
                self._when = due
                return True
        elif (
            self._state == _PENDING
            and type(delay) is float
            and hot.running
            and self.id is None
            and _on_loop_thread(hot, self._sched, False)
        ):
            due = hot.time() + delay  # type: ignore[misc]
            if -_INF < due < hot.horizon:
                self._when = due  # (first, as _move(): whatever arming raises, it is due there)
                hot.engine.add_timer(self, due)
                return True
        return self._reset(delay)

    def _reset(self, delay: float) -> bool:
        """reset(delay) where it is not the common case (another thread, a closed scheduler, a delay that
        is not a finite float): the same result, slower."""
        sched = self._sched
        sched._check_caller()
        if self._state != _PENDING:
            return False
        return self._move(time_after(sched._time(), deadline(delay, "delay")))

    def reschedule(self, when: float) -> bool:
        """Move it to the loop time `when`, O(1). Returns and raises as reset()."""
        self._sched._check_caller()
        if self._state != _PENDING:
            return False
        return self._move(deadline(when, "when"))

    def _move(self, when: float) -> bool:
        self._discard()
        self._when = when
        self._sched._arm_timer(self)
        return True

    def _discard(self) -> None:
        if self.id is not None:
            self._hot.engine.cancel_timer(self)
        elif self._fallback is not None:
            self._fallback.cancel()
            self._fallback = None

    def fire(self) -> None:
        """Its due came (the engine took it out of the store): run the callback, as asyncio's handle does."""
        self._state = _DONE
        try:
            self._call()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # as asyncio reports an exception in a callback
            self._sched._loop.call_exception_handler(
                {"message": f"Exception in callback {self._callback!r}", "exception": exc, "handle": self}
            )

    def _call(self) -> None:
        if self._context is None:
            self._callback(*self._args)
        else:
            self._context.run(self._callback, *self._args)

    def _on_loop(self) -> None:
        """Its due came on the loop's own timers (the scheduler was closed meanwhile)."""
        self._fallback = None
        self._state = _DONE
        self._call()


def timeout_reschedule(self: Any, when: float | None) -> None:
    """Move the deadline to the loop time `when`, or disable it with None (as asyncio.Timeout).

    A deadline later than now moves the timeout's wheel entry in place (O(1), nothing allocated; the
    loop is not touched unless it moves earlier than the scheduler's one loop handle).

    Raises:
        RuntimeError: called from another thread while the loop runs.
    """
    # (Timeout.reschedule itself. The common case here: an entered timeout, a float later than now that
    # the store takes, on the loop's thread; anything else is Timeout._reschedule_slow.)
    if type(when) is float and self._state is _entered:
        handle = self._timeout_handler
        if type(handle) is _timeout_handle:  # moved: its wheel entry moves in place
            timer: TimerHandle = handle
            hot: _Hot = timer._hot
            if (
                timer.id is not None
                and _on_loop_thread(hot, timer._sched, False)
                and hot.time() < when < hot.horizon  # type: ignore[misc]
            ):
                try:
                    moved = hot.engine.move_timer(timer, when)
                except BaseException as exc:
                    if timer.due == when:  # moved, then arming the loop handle failed: as said
                        self._when = timer._when = when
                        raise
                    if not isinstance(exc, (ValueError, OverflowError, TypeError)):
                        raise
                    moved = False  # the store refused the due: the general path
                if moved:
                    self._when = timer._when = when
                    return
        elif handle is None and _enter_wheel(self, when, None):  # entered: its wheel entry is made
            return
    self._reschedule_slow(when)


def _enter_wheel(self: Any, when: float, task: Any) -> bool:
    """Make the wheel entry of an entered timeout with none, at `when` (a float), where that is the common
    case (a running scheduler, called on its loop, a due after now the store takes): True if made, False
    for the general path. `task`, if not None, is the current task of the caller's thread (its loop runs
    there): the scheduler's loop if it is the task's."""
    sched = self._sched
    hot: _Hot = sched._hot
    if task is not None:  # (any loop, uvloop too: the running loop of this thread is the task's)
        here = hot.own_check and task.get_loop() is hot.loop
    else:  # (asyncio's loops only: the loop's own record of its thread)
        here = hot.own_check and hot.exact and _on_loop_thread(hot, sched, False)
    if hot.running and here and hot.time() < when < hot.horizon:  # type: ignore[misc]
        handle: TimerHandle = TimerHandle.__new__(_timeout_handle)  # (its __init__, inline)
        _fill(handle, sched, hot, when, self._on_timeout, (), None)
        self._when = when
        self._timeout_handler = handle  # (first: whatever arming it raises, it is this timeout's)
        try:  # noqa: SIM105  (contextlib.suppress costs a context manager per call)
            hot.engine.add_timer(handle, when)
        except OverflowError:  # as the general path does (AsyncScheduler._arm_timer)
            pass
        return True
    return False


# (what help() and tracebacks call it: the method it is)
timeout_reschedule.__name__, timeout_reschedule.__qualname__ = "reschedule", "Timeout.reschedule"


def _on_loop_thread(hot: _Hot, driver: Any, idle: bool) -> bool:
    """Whether the caller is on the thread of the driver's loop, as far as the fast paths may tell: for
    asyncio's loops, the thread the loop runs on (its `_thread_id`), or, with `idle`, any thread while it
    runs nowhere; for others (uvloop), the thread the driver last saw it run on (the first thing
    AsyncScheduler's _check_caller() accepts). False sends the caller to the slow path, which checks in
    full (and raises). (Not asyncio's _get_running_loop(): on Python 3.11 it costs a getpid() system call
    while a loop runs.)
    """
    loop = hot.loop
    if loop is None:  # not bound
        return False
    if hot.exact:
        tid = loop._thread_id
        return bool(tid == get_ident() or (idle and tid is None))
    return bool(get_ident() == driver._thread)


def timeout_init(self: Any, when: float | None, sched: Any) -> None:
    """A timeout at the loop time `when` (None: none) on `sched`: what asyncio's Timeout.__init__ sets, and
    the scheduler (the asyncio driver uses it only where that is all asyncio's sets)."""
    self._state = _created
    self._timeout_handler = None
    self._task = None
    self._when = when
    self._sched = sched


def timeout_fast(sched: Any, delay: Any) -> Any:
    """sched.timeout(delay) where it is the common case (a float delay, the scheduler running, called on its
    loop's thread (_caller_ok), Timeout's own __init__ the one below): the new Timeout; None where it is not
    (the driver's general path takes the call)."""
    hot: _Hot = sched._hot
    if (
        type(delay) is float
        and delay == delay  # (not NaN)
        and hot.running
        and _init_inline
        and _caller_ok(hot, sched)
    ):
        timeout = _timeout_class.__new__(_timeout_class)  # (its __init__, inline)
        timeout_init(timeout, hot.time() + delay, sched)  # type: ignore[misc]
        return timeout
    return None


async def timeout_enter(self: Any) -> Any:
    """Enter the timeout (`async with`): asyncio's Timeout.__aenter__, its common case compiled."""
    # (The common case, as asyncio's own __aenter__ does it: a timeout not yet entered, inside a task.
    # Anything else, and every Python whose asyncio does not note the task's cancelling() as it enters,
    # is asyncio's own coroutine.)
    if self._state is _created and _notes_cancelling:
        task = _current_task()
        if task is not None:
            self._state = _entered
            self._task = task
            self._cancelling = task.cancelling()
            when = self._when
            # (self.reschedule(when), as asyncio's; for this class, its common case inline)
            if (
                type(self) is not _timeout_class
                or type(when) is not float
                or not _enter_wheel(self, when, task)
            ):
                self.reschedule(when)
            return self
    return await _asyncio.enter(self)


async def timeout_exit(self: Any, exc_type: Any, exc_val: Any, exc_tb: Any) -> Any:
    """Leave the timeout (`async with`): asyncio's Timeout.__aexit__, its common case compiled."""
    # (The common case, the same in every asyncio: left before it expired. Anything else is asyncio's.)
    if self._state is _entered:
        handle = self._timeout_handler
        if handle is not None:
            handle.cancel()
            self._timeout_handler = None
        self._state = _exited
        return None
    return await _asyncio.exit(self, exc_type, exc_val, exc_tb)


# (what help() and tracebacks call them: the methods they are)
timeout_init.__name__, timeout_init.__qualname__ = "__init__", "Timeout.__init__"
timeout_enter.__name__, timeout_enter.__qualname__ = "__aenter__", "Timeout.__aenter__"
timeout_exit.__name__, timeout_exit.__qualname__ = "__aexit__", "Timeout.__aexit__"


@dataclasses.dataclass
class TimeoutTypes:
    """What the compiled paths of the asyncio driver's Timeout need of asyncio (this module imports no
    asyncio): the driver's Timeout class, the class of its wheel entry, asyncio's Timeout states,
    current_task(), asyncio's own __aenter__ and __aexit__, whether that __aenter__ notes the task's
    cancelling(), and whether the driver's Timeout.__init__ is timeout_init."""

    timeout: Any = None
    handle: Any = None
    created: Any = None
    entered: Any = None
    exited: Any = None
    current_task: Any = None
    enter: Any = None
    exit: Any = None
    enter_notes_cancelling: bool = False
    init_is_compiled: bool = False  # whether the driver's Timeout.__init__ is timeout_init


_asyncio = TimeoutTypes()  # (until timeout_types() is called, no timeout takes a compiled path)
# (and its fields the compiled paths read, as module globals: C variables in the compiled build)
_timeout_class: Any = None
_timeout_handle: Any = None
_created: Any = None
_entered: Any = None
_exited: Any = None
_current_task: Any = None
_notes_cancelling = False
_init_inline = False


def timeout_types(types: TimeoutTypes) -> None:
    """Tell the compiled paths of the asyncio driver's Timeout what they need of asyncio (the asyncio driver
    does, when it is imported)."""
    global _asyncio, _timeout_class, _timeout_handle, _created, _entered, _exited, _current_task
    global _notes_cancelling, _init_inline
    _asyncio = types
    _timeout_class = types.timeout
    _timeout_handle, _created, _entered, _exited = types.handle, types.created, types.entered, types.exited
    _current_task, _notes_cancelling = types.current_task, bool(types.enter_notes_cancelling)
    _init_inline = bool(types.init_is_compiled)


def _uninitialised(driver: DriverBase) -> AttributeError:
    """The error for a driver whose __init__ never ran (the compiled build's fields are None, not missing)."""
    return AttributeError(f"{type(driver).__name__} is not initialised: its __init__() did not run")


# -- what the layers above a driver may ask of it (the keyed layer), without its private attributes --------


def engine_of(driver: DriverBase) -> Scheduler:
    """The driver's engine (once it is started; None before)."""
    return driver._engine


def lifecycle_of(driver: DriverBase) -> Lifecycle:
    """Where the driver is in its life: NEW, RUNNING, STOPPED or CLOSED."""
    return driver._state


def check_caller(driver: DriverBase) -> None:
    """Raise what the driver raises for a call from a thread it does not take calls from (an
    AsyncScheduler, from another thread than its loop's while it runs); nothing for the others."""
    driver._check_caller()


def lock_of(driver: DriverBase) -> Any:
    """The lock under which the driver touches its engine (a ThreadedScheduler's; its own for others)."""
    return driver._lock


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether fn is a coroutine function, or an object whose __call__ is one (a coroutine job)."""
    if type(fn) is _FUNCTION and getattr(fn, "_is_coroutine_marker", None) is None:
        # inspect.iscoroutinefunction's answer for a plain function not marked by
        # inspect.markcoroutinefunction (3.12+), without its unwrapping: a quarter of its cost
        return bool(fn.__code__.co_flags & _CO_COROUTINE)
    if inspect.iscoroutinefunction(fn):
        return True
    if type(fn) in _PLAIN_CALLABLES:  # their type's __call__ is never a coroutine function: not asked
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)


_FUNCTION, _CO_COROUTINE = types.FunctionType, inspect.CO_COROUTINE
_PLAIN_CALLABLES = frozenset(
    {types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType, partial}
)
