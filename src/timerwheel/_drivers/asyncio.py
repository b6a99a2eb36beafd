"""AsyncScheduler: the job engine and wheel-backed timeouts on an asyncio event loop, with no threads.

Every timer is in the engine's one store: jobs, and the plain timers of timeout(), sleep() and
call_later(). The loop holds at most one timer handle of ours, armed at the engine's next due. Moving a
deadline later never touches the loop: the handle stays where it is, and when it fires early it finds
nothing due and is armed again at the true next due. Moving one earlier re-arms the handle, O(1) too.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from asyncio import events
from collections.abc import Callable
from contextvars import Context, copy_context
from functools import partial
from threading import get_ident
from typing import Any

from .._clock import Clock
from .._engine import Run, TimerStore
from .._types import DRIVER_MISSED, Backpressure, JobEvent, Lifecycle, Missed, NotStartedError
from .._validate import count, deadline, function, member
from . import (
    CALENDAR_WAKE,
    DriverBase,
    TimeoutTypes,
    call_later_fast,
    time_after,
    timeout_enter,
    timeout_exit,
    timeout_fast,
    timeout_init,
    timeout_reschedule,
    timeout_types,
)
from . import TimerHandle as _TimerHandle
from .pools import TaskPool

__all__ = ["AsyncScheduler", "TimerHandle"]

_get_running_loop = events._get_running_loop  # C: the running loop of this thread, or None; no exception
# The one state of asyncio's Timeout in which it can be moved. Should a future asyncio rename it, every
# timeout simply runs on asyncio's own timers (Timeout._reschedule hands it over): slower, never wrong.
_State = getattr(asyncio.timeouts, "_State", None)
_ENTERED = getattr(_State, "ENTERED", object())
_RUNNING, _INF = Lifecycle.RUNNING, math.inf


class TimerHandle(_TimerHandle):
    """A callback on an AsyncScheduler's wheel: what call_later() and call_at() return.

    It has the interface of asyncio.TimerHandle (cancel(), cancelled(), when()) and two more methods that
    move it in O(1), allocating nothing and leaving the loop alone unless it moves earlier than the
    scheduler's one loop handle: reset(delay), the keep-alive reset, and reschedule(when). A timer with an
    infinite due is pending but never fires (until it is moved). After the scheduler closes, a pending
    timer lives on as a handle on the loop's own timers: none is lost. Every method raises RuntimeError
    when called from another thread while the loop runs.
    """

    # (Its fields and methods are the drivers' base's TimerHandle: compiled there in the Cython build.)
    __slots__ = ()
    kind = "handles"  # (what stats() counts it as; the timeouts' and sleeps' own below)


class _TimeoutHandle(TimerHandle):
    """The wheel entry of a Timeout's deadline: counted apart in stats().timeouts."""

    __slots__ = ()
    kind = "timeouts"


class _SleepHandle(TimerHandle):
    """The wheel entry of a sleep(): counted apart in stats().sleeps."""

    __slots__ = ()
    kind = "sleeps"


class Timeout(asyncio.Timeout):  # type: ignore[misc]  # typeshed marks it final; we only replace the handle
    """asyncio's own Timeout, whose deadline lives in an AsyncScheduler's wheel instead of the loop's heap.

    Everything but reschedule() is asyncio's code for the running Python version (entering, exiting,
    expiring, uncancel(), the repr), so it behaves as asyncio.timeout() does. reschedule() keeps asyncio's
    rules: None disables; a deadline at or before loop.time() expires on the next loop iteration (call_soon);
    any other deadline is a wheel entry, moved in place on every reschedule (O(1), no handle on the loop).
    when(), expired() and reschedule() raise RuntimeError from another thread while the loop runs.
    """

    # asyncio's attributes, and the scheduler, as slots: read and written as such by asyncio's code too (a
    # slot is found before the instance dictionary), with no dictionary made unless asyncio sets others
    __slots__ = ("_cancelling", "_sched", "_state", "_task", "_timeout_handler", "_when")
    # (their types, which typeshed does not declare: annotations only)
    _state: Any
    _when: float | None
    _timeout_handler: Any
    _on_timeout: Callable[[], None]

    def __init__(self, when: float | None, sched: AsyncScheduler) -> None:
        super().__init__(when)
        self._sched = sched

    def when(self) -> float | None:
        """The deadline, as asyncio's."""
        self._sched._check_caller()
        return super().when()

    def expired(self) -> bool:
        """Whether it expired, as asyncio's."""
        self._sched._check_caller()
        return super().expired()

    reschedule = timeout_reschedule  # (compiled in the build: its common case costs no Python frame)
    """reschedule(when): move the deadline to the loop time `when`, or disable it with None (as asyncio's).
    A later deadline moves the wheel entry in place, O(1). RuntimeError from another thread while the loop
    runs."""

    # (asyncio's __aenter__ and __aexit__, their common case compiled in the build: entering and leaving
    # cost no coroutine; anything else is asyncio's own coroutine, called by them)
    __aenter__ = timeout_enter
    __aexit__ = timeout_exit

    def _reschedule_slow(self, when: float | None) -> None:
        """reschedule(when) where it is not the common case: the thread check, then _reschedule()."""
        self._sched._check_caller()
        self._reschedule(when)

    def _reschedule(self, when: float | None) -> None:
        sched = self._sched
        if when is not None:
            deadline(when, "when")  # refuses a non-number and NaN; the value itself stays as asyncio has it
        if self._state is not _ENTERED or sched._state is not Lifecycle.RUNNING:
            super().reschedule(when)  # asyncio's own errors; after close(), asyncio's own loop timer
            return
        handle = self._timeout_handler
        if when is None:
            self._when = None
            if handle is not None:
                handle.cancel()
            self._timeout_handler = None
            return
        loop = sched._loop
        if _get_running_loop() is not loop:
            raise RuntimeError("a timeout of an AsyncScheduler must be rescheduled on its event loop")
        sched._thread = get_ident()
        if when <= sched._time():  # asyncio's rule: expire on the next iteration, not here and now
            self._when = when
            if handle is not None:
                handle.cancel()
            self._timeout_handler = loop.call_soon(self._on_timeout)
            return
        # (its wheel entry takes the deadline as a float: an int beyond the floats is never, as for call_at)
        timer = sched._call_at(deadline(when, "when"), self._on_timeout, _TimeoutHandle)
        self._when = when
        if handle is not None:
            handle.cancel()
        self._timeout_handler = timer


_CREATED = getattr(_State, "CREATED", object())
# asyncio's Timeout.__init__ sets these and nothing else (Python 3.11 to 3.13): Timeout's own __init__,
# compiled in the build, sets them itself; where asyncio's sets more, it is called as it is.
_INIT_INLINE = vars(asyncio.Timeout(None)) == {
    "_state": _CREATED,
    "_timeout_handler": None,
    "_task": None,
    "_when": None,
}
if _INIT_INLINE:
    Timeout.__init__ = timeout_init  # type: ignore[method-assign]
timeout_types(
    TimeoutTypes(
        timeout=Timeout,
        handle=_TimeoutHandle,
        created=_CREATED,
        entered=_ENTERED,
        exited=getattr(_State, "EXITED", object()),
        current_task=asyncio.current_task,
        enter=asyncio.Timeout.__aenter__,
        exit=asyncio.Timeout.__aexit__,
        # (asyncio's own __aenter__ notes task.cancelling() as it enters, as the compiled one does, since
        # Python 3.11.3; before, __aexit__ compared uncancel() to 0: those take asyncio's coroutine)
        enter_notes_cancelling="_cancelling" in asyncio.Timeout.__aenter__.__code__.co_names,
        init_is_compiled=_INIT_INLINE,
    )
)


def _set_result_unless_cancelled(future: asyncio.Future[Any], result: Any) -> None:
    if not future.cancelled():
        future.set_result(result)


class _LoopClock(Clock):
    """An event loop's time as a Clock: loop.time(), or time.monotonic where that is all it does; its wall
    clock is the loop's own wall() where it has one (VirtualTimeLoop), else time.time()."""

    __slots__ = ("_time", "_wall")

    def __init__(self, read: Callable[[], float], wall: Callable[[], float]) -> None:
        self._time = read
        self._wall = wall

    def wall(self) -> float:
        """The loop's wall clock."""
        return self._wall()

    def __call__(self) -> float:
        """loop.time()."""
        return self._time()

    @property
    def reader(self) -> Callable[[], float]:
        """loop.time, or time.monotonic for asyncio's own loops (the same values, without a Python call)."""
        return self._time


class AsyncScheduler(DriverBase):
    """The Scheduler on an asyncio event loop, plus timeouts and sleeps kept in a timing wheel. No threads.

    The clock is the loop's own (loop.time()), so its deadlines mix freely with asyncio's. The loop holds at
    most one timer handle of ours, armed at the earliest due: no polling tick, no handle per timer. A
    callback, timeout or job never runs before its due by loop.time().

    Jobs: a plain callable runs on the loop, inline, when due; a coroutine function (or a callable that
    returns an awaitable) runs as a task, and the run ends when the task does. With max_concurrency, at
    most that many coroutine jobs run at once; a due one beyond it waits for a slot, in due order
    (Backpressure.BLOCK; a recurring task has at most one run waiting), or is dropped and counted
    (Backpressure.DROP). With timeout=, a coroutine job's task is cancelled at its deadline (TimeoutError).

    Timers: timeout() and timeout_at() are asyncio's (see Timeout), sleep() is asyncio.sleep(), and
    call_later() and call_at() return a TimerHandle that moves in O(1); all on the wheel.

    Lifecycle: new -> running -> closed, never back; `async with AsyncScheduler() as sched:` starts and
    closes it. close() drops the runs waiting for a slot (counted), cancels the coroutine jobs still running
    and waits for them, and discards the pending tasks; pending timeouts, sleeps and handles move to the
    loop's own timers, where they keep working.

    Errors: a job's Exception is recorded in errors, passed to error_handler(task_id, exc), and logged;
    it never stops the scheduler. KeyboardInterrupt and SystemExit from a plain job, an observer or an
    error handler are recorded, then propagate, as asyncio does with its own callbacks. A loop clock that
    fails is logged, counted (stats().clock_errors) and retried.

    Not thread-safe: call it from the loop's thread only (use loop.call_soon_threadsafe from others); a
    call from another thread while the loop runs raises RuntimeError.

    Args:
        loop: the event loop; by default the running loop (at construction, or else at start()).
        store: the timer store (default: a TimerWheel of this resolution, slots and levels).
        resolution: seconds per tick of the wheel.
        slots: slots per level of the wheel.
        levels: levels of the wheel.
        max_concurrency: most coroutine jobs running at once; None for no bound.
        backpressure: Backpressure.BLOCK or Backpressure.DROP, for a due coroutine job beyond the bound.
        missed: the default missed-run policy of schedule() and schedule_at().
        observer: called with a JobEvent for every run, drop and skip (on the loop, quickly).
        error_handler: called with (task_id, exception) when a job raises.
        logger: where errors and warnings go (default: logging.getLogger("timerwheel")).
        wall_clock: POSIX seconds, for calendar tasks (schedule_wall, schedule_cron, KeyedScheduler);
            default: the clock's own wall() (time.time for real clocks, the loop's for VirtualTimeLoop).
    """

    _PROPAGATE = (KeyboardInterrupt, SystemExit)  # through the loop, as asyncio's own callbacks do

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        store: TimerStore | None = None,
        resolution: float | None = None,
        slots: int | None = None,
        levels: int | None = None,
        max_concurrency: int | None = None,
        backpressure: Backpressure = Backpressure.BLOCK,
        missed: Missed = DRIVER_MISSED,
        observer: Callable[[JobEvent], object] | None = None,
        error_handler: Callable[[int, BaseException], object] | None = None,
        logger: logging.Logger | None = None,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop or None, not {type(loop).__name__}")
        if max_concurrency is not None:
            count(max_concurrency, "max_concurrency", 1)
        member(backpressure, Backpressure, "backpressure")
        if backpressure is Backpressure.RUN_INLINE:
            raise ValueError(
                "backpressure must be Backpressure.BLOCK or Backpressure.DROP: a coroutine job "
                "cannot run inline"
            )
        super().__init__(
            store=store,
            resolution=resolution,
            slots=slots,
            levels=levels,
            missed=missed,
            observer=observer,
            error_handler=error_handler,
            logger=logger,
            wall_clock=wall_clock,
        )
        self._limit = max_concurrency
        self._backpressure = backpressure
        self._thread: int | None = None  # the thread the loop was last seen running on
        self._exact = False
        self._armed = math.inf  # the due our loop handle is armed at; inf: no handle
        self._handle: asyncio.TimerHandle | None = None
        self._dispatching = False  # in _on_wake: it arms the handle itself when done
        self._backoff = 0.0  # after a failed clock reading: seconds until we look again
        self._tasks: TaskPool  # where coroutine jobs run, once bound to a loop
        self._loop: asyncio.AbstractEventLoop
        self._time: Callable[[], float]
        loop = loop or _get_running_loop()
        if loop is not None:
            self._bind(loop)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take `loop` and make the engine on its clock; if that fails (a store ahead of the loop's
        clock, a loop clock that fails), nothing is bound and start() may be retried."""
        # loop.time() itself, or time.monotonic when that is all loop.time() does (asyncio's own loops):
        # the same values, without a Python-level call on every schedule and reset.
        now = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        wall = getattr(loop, "wall", None)
        self._make_engine(_LoopClock(now, wall if callable(wall) else time.time))
        self._time = now
        self._loop = loop
        self._exact = hasattr(loop, "_thread_id")  # asyncio's loops: the thread they run on, exactly
        # The hot paths check the loop's thread inline (base._on_loop_thread): for DriverBase, call_later,
        # TimerHandle.cancel and sched.timeout() in place of our _check_caller(), so not for a subclass that
        # overrides it again; for the moves of handles and timeouts, always.
        ours = type(self)._check_caller is AsyncScheduler._check_caller
        self._hot.loop = loop
        self._hot.own_check = ours
        self._hot.exact = self._exact
        self._hot.time = now
        self._tasks = TaskPool(
            loop, self._limit, self._backpressure, lambda: self._state is Lifecycle.RUNNING
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start: from now on due jobs run and deadlines expire. Call it on the loop, or before it runs.

        Raises:
            AlreadyRunningError: it is running. ClosedError: it was closed.
            RuntimeError: no loop was given and none is running.
        """
        if self._state is Lifecycle.NEW and not hasattr(self, "_loop"):
            self._bind(asyncio.get_running_loop())  # RuntimeError("no running event loop") otherwise
        self._begin()
        self._check_caller()

    async def close(self) -> None:
        """Close: drop waiting runs, cancel running coroutine jobs and wait for them, discard pending tasks.

        Timeouts and sleeps still pending move to the loop's own timers. Idempotent; closing a scheduler
        that was never started just marks it closed.
        """
        if self._state is not Lifecycle.RUNNING:
            if self._state is not Lifecycle.NEW and self._state is not Lifecycle.CLOSED:
                raise AttributeError(f"{type(self).__name__} is not initialised: its __init__() did not run")
            self._set_state(Lifecycle.CLOSED)
            return
        self._check_caller()
        self._set_state(Lifecycle.CLOSED)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed = self._engine.wake_below = math.inf
        jobs = self._tasks.close()
        self._engine.discard()
        for timer in self._engine.release_timers():
            if isinstance(timer, TimerHandle):
                timer._fallback = self._loop.call_at(timer._when, timer._on_loop)
        if jobs:
            await asyncio.gather(*jobs, return_exceptions=True)

    aclose = close

    async def __aenter__(self) -> AsyncScheduler:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_caller(self) -> None:
        """Raise if the loop runs in another thread; remember this thread if the loop runs in it.

        asyncio's own loops record the thread they run on (loop._thread_id): the check is exact. Other
        loops (uvloop) are asked whether they run here, unless the caller is on the thread the loop was
        last seen running on.
        """
        if not hasattr(self, "_loop"):
            return
        loop = self._loop
        if self._exact:
            tid = loop._thread_id  # type: ignore[attr-defined]
            if tid is None or tid == get_ident():
                return
            raise RuntimeError(
                "AsyncScheduler is not thread-safe: call it from its event loop's thread "
                "(from another thread, use loop.call_soon_threadsafe)"
            )
        if get_ident() == self._thread:
            return
        if _get_running_loop() is loop:
            self._thread = get_ident()
        elif loop.is_running():
            raise RuntimeError(
                "AsyncScheduler is not thread-safe: call it from its event loop's thread "
                "(from another thread, use loop.call_soon_threadsafe)"
            )

    _COROUTINES = True
    _LOCKING = False  # every thread but the loop's is refused

    def _after_cancel(self) -> None:
        self._disarm_if_idle()  # (a cancel left nothing armed)

    # -- timeouts, sleep and plain timers ---------------------------------------------------------------

    def timeout(self, delay: float | None) -> asyncio.Timeout:
        """asyncio.timeout(delay) on the wheel: `async with sched.timeout(10): ...`.

        The deadline is loop.time() + delay, read now; None disables it. At the deadline the enclosing task
        is cancelled and the block raises TimeoutError on exit; when(), reschedule(when), expired() and the
        repr are asyncio's.

        Raises:
            NotStartedError: before start(). RuntimeError: not called on the scheduler's loop.
            TypeError, ValueError: delay is not a number (or is NaN).
        """
        cm = timeout_fast(self, delay)  # (the common case)
        if cm is not None:
            return cm  # type: ignore[no-any-return]
        loop = self._timeout_loop()
        if _get_running_loop() is not loop:
            raise RuntimeError("sched.timeout() must be called on the scheduler's running event loop")
        if delay is None:
            return Timeout(None, self)
        return Timeout(time_after(self._time(), deadline(delay, "delay")), self)

    def timeout_at(self, when: float | None) -> asyncio.Timeout:
        """asyncio.timeout_at(when) on the wheel: the deadline is the loop time `when`; None disables it.

        Raises:
            NotStartedError: before start(). TypeError, ValueError: when is not a number (or is NaN).
        """
        self._timeout_loop()
        if when is not None:
            deadline(when, "when")  # refuses a non-number and NaN; the value itself stays as asyncio has it
        return Timeout(when, self)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        """asyncio.sleep(delay, result) on the wheel: a delay <= 0 just yields to the loop once.

        Raises:
            TypeError, ValueError: delay is not a number (or is NaN). NotStartedError: before start().
        """
        loop = self._timeout_loop()
        delay = deadline(delay, "delay")
        if delay <= 0:
            await asyncio.sleep(0)
            return result
        future = loop.create_future()
        timer = self._call_at(
            time_after(self._time(), delay),
            partial(_set_result_unless_cancelled, future, result),
            _SleepHandle,
        )
        try:
            return await future
        finally:
            timer.cancel()

    def _timeout_loop(self) -> asyncio.AbstractEventLoop:
        if self._state is Lifecycle.NEW:
            raise NotStartedError("start() the scheduler before using its timeouts")
        self._check_caller()
        return self._loop

    def call_later(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle:
        """loop.call_later on the wheel: call callback(*args) `delay` seconds from now; return its handle.

        As asyncio: a delay <= 0 runs it at the next loop iteration; it runs in `context` (by default a copy
        of the current one); an exception it raises goes to the loop's exception handler. Unlike asyncio's,
        the handle moves in O(1): handle.reset(delay), handle.reschedule(when). An infinite delay never
        fires (until the handle is moved).

        Raises:
            TypeError: delay is not a number, callback not callable. ValueError: delay is NaN.
            NotStartedError / ClosedError: before start() / after close().
        """
        timer = call_later_fast(self, TimerHandle, delay, callback, args, context)  # (the common case)
        if timer is not None:
            return timer  # type: ignore[return-value]
        self._check_running()
        return self._new_timer(time_after(self._time(), deadline(delay, "delay")), callback, args, context)

    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle:
        """loop.call_at on the wheel: call callback(*args) at the loop time `when`; as call_later()."""
        self._check_running()
        return self._new_timer(deadline(when, "when"), callback, args, context)

    def _new_timer(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: Context | None,
    ) -> TimerHandle:
        function(callback, "callback")
        if context is not None and not isinstance(context, Context):
            raise TypeError(f"context must be a contextvars.Context or None, not {type(context).__name__}")
        timer = TimerHandle(self, when, callback, args, copy_context() if context is None else context)
        self._arm_timer(timer)
        return timer

    def _call_at(self, when: float, callback: Callable[[], object], kind: type[TimerHandle]) -> TimerHandle:
        """Call callback() at the loop time `when`, with no context: the timeouts' and sleeps' timers (a
        TimerHandle subclass of their own `kind`, which stats() counts)."""
        timer = kind(self, when, callback)
        self._arm_timer(timer)
        return timer

    def _arm_timer(self, timer: TimerHandle) -> None:
        """Put a timer that has no entry at its due: in the wheel, or on the loop's timers once closed."""
        when = timer._when
        if self._state is not Lifecycle.RUNNING:
            if when != math.inf:
                timer._fallback = self._loop.call_at(when, timer._on_loop)
            return
        if when == math.inf:
            return  # never
        engine = self._engine
        try:  # a due of -inf (past, as asyncio allows) is the store's now: the next iteration
            engine.add_timer(timer, engine.store.now if when == -math.inf else when)
        except OverflowError:
            return  # beyond 2**62 ticks (146 million years at 1 ms): never, in practice

    # -- the loop handle (how this driver is woken) ---------------------------------------------------------

    def wake(self, due: float) -> None:
        """Something was armed at `due`: bring our one loop handle forward if it comes first."""
        if due < self._armed:
            self._arm(due)

    def _arm(self, due: float) -> None:
        """Arm our one loop handle at `due` (earlier than it is armed now)."""
        if self._dispatching or self._state is not Lifecycle.RUNNING:
            return  # _on_wake arms it on its way out; a closed scheduler holds no handle
        handle = self._loop.call_at(due, self._on_wake)  # (first: if it fails, the old handle stays armed)
        if self._handle is not None:
            self._handle.cancel()
        self._handle = handle
        self._armed = self._engine.wake_below = due  # (the engine's copy: it calls wake() only below it)

    def _disarm_if_idle(self) -> None:
        """Nothing armed at all: take our handle off the loop (an idle scheduler holds none)."""
        # (not while the clock fails: that handle is the retry, which clears the fault when the clock works)
        if (
            self._handle is not None
            and not self._dispatching
            and self._fault is None
            and not len(self._engine.store)
        ):
            self._handle.cancel()
            self._handle = None
            self._armed = self._engine.wake_below = math.inf

    def _on_wake(self) -> None:
        """Our loop handle fired: run what is due (timers and jobs), arm the handle at the next due."""
        self._handle = None
        self._thread = get_ident()
        armed = self._armed
        self._armed = self._engine.wake_below = math.inf
        engine = self._engine
        try:
            now = engine.now()
        except Exception as exc:  # a loop whose time() fails: say so, and look again after a back-off
            self._backoff = min(max(2 * self._backoff, 0.001), 1.0)
            self._clock_failed(exc, self._backoff)
            if self._state is Lifecycle.RUNNING:
                self._handle = self._loop.call_later(self._backoff, self._on_wake)
                # armed for a retry: nothing armed meanwhile moves it
                self._armed = self._engine.wake_below = -math.inf
            return
        self._backoff = 0.0
        if self._fault is not None:
            self._set_fault(None)
        if now < armed:
            # Early by the loop's own clock (uvloop rounds its timers to milliseconds; asyncio may run a
            # handle one clock resolution early): nothing is due yet. Never early: wait the rest.
            self._arm(armed)
            return
        self._dispatching = True
        try:
            engine.drain(now)
        finally:
            self._dispatching = False
            if self._state is Lifecycle.RUNNING:
                due = engine.next_due()
                if engine.calendar:  # wake now and then: a step of the wall clock moves calendar tasks
                    due = min(now + CALENDAR_WAKE, math.inf if due is None else due)
                if self._fault is not None:
                    # a job's call saw the clock fail (work is refused meanwhile): look again at once,
                    # and back off from there if it still fails
                    due = now if due is None else min(due, now)
                if due is not None:
                    self._arm(due)

    # -- where runs execute (the engine's Driver protocol) ------------------------------------------------

    def execute(self, run: Run) -> None:
        """A due run: a plain job inline; a coroutine job as a task, within max_concurrency."""
        if run.options.coroutine:
            self._tasks.submit(run)
            return
        run.start()
        try:
            result = run.call()
        except (KeyboardInterrupt, SystemExit) as exc:
            run.finish(exc)
            raise
        except BaseException as exc:
            run.finish(exc)
            return
        if result is not None and inspect.isawaitable(result):
            self._tasks.adopt(run, result)
        else:
            run.finish(None)

    def timed_out(self, run: Run) -> None:
        """A coroutine job past its timeout: its task is cancelled (the run fails with TimeoutError)."""
        self._tasks.cancel(run)


def loop_of(scheduler: AsyncScheduler) -> asyncio.AbstractEventLoop:
    """The event loop an AsyncScheduler runs on (for the layers above it: the keyed layer posts to it)."""
    return scheduler._loop
