"""AsyncScheduler: the job engine and wheel-backed timeouts on an asyncio event loop, with no threads.

The loop holds at most one timer handle of ours, armed at the earliest due we know of. Everything else is
in two wheels: the Scheduler's (jobs) and `_timers` (the deadlines of timeout() and sleep()). Moving a
deadline later never touches the loop: the handle stays where it is, and when it fires early it finds
nothing due and is armed again at the true next due. Moving one earlier re-arms the handle, O(1) too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import math
import time
from asyncio import events
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextvars import Context, copy_context
from functools import partial
from threading import get_ident
from typing import Any

from ._core import TimerWheel
from ._scheduler import Run, Scheduler, log_safely, report_run
from ._types import (
    AlreadyRunningError,
    Backpressure,
    ClosedError,
    JobEvent,
    Missed,
    NotStartedError,
    RepeatMode,
    Stats,
    TimerInfo,
)

__all__ = ["AsyncScheduler", "TimerHandle"]

#: What a user callback (observer, error handler, logger) may raise through the loop: as asyncio's own
#: callbacks, KeyboardInterrupt and SystemExit; anything else is logged.
_PROPAGATE = (KeyboardInterrupt, SystemExit)
_get_running_loop = events._get_running_loop  # C: the running loop of this thread, or None; no exception
# The one state of asyncio's Timeout in which it can be moved. Should a future asyncio rename it, every
# timeout simply runs on asyncio's own timers (Timeout._reschedule hands it over): slower, never wrong.
_ENTERED = getattr(getattr(asyncio.timeouts, "_State", None), "ENTERED", object())


class TimerHandle:
    """A callback on an AsyncScheduler's wheel: what call_later() and call_at() return.

    It has the interface of asyncio.TimerHandle (cancel(), cancelled(), when()) and two more methods that
    move it in O(1), allocating nothing and leaving the loop alone unless it moves earlier than the
    scheduler's one loop handle: reset(delay), the keep-alive reset, and reschedule(when). A timer with an
    infinite due is pending but never fires (until it is moved). After the scheduler closes, a pending
    timer lives on as a handle on the loop's own timers: none is lost.
    """

    __slots__ = ("_args", "_callback", "_context", "_fallback", "_id", "_sched", "_state", "_timers", "_when")

    def __init__(
        self,
        sched: AsyncScheduler,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...] = (),
        context: Context | None = None,
    ) -> None:
        self._sched = sched
        self._timers = sched._timers
        self._when = when
        self._callback = callback
        self._args = args
        self._context = context
        self._state = _PENDING
        self._id: int | None = None  # its wheel entry; None once it ran or was cancelled, or while `never`
        self._fallback: asyncio.TimerHandle | None = None  # its loop handle, once the scheduler is closed

    def __repr__(self) -> str:
        state = ("pending", "done", "cancelled")[self._state]
        return f"<TimerHandle {state} when={self._when!r} callback={self._callback!r}>"

    def when(self) -> float:
        """The loop time it is due at. RuntimeError from another thread while the loop runs."""
        if get_ident() != self._sched._thread:
            self._sched._check_thread()
        return self._when

    def cancel(self) -> None:
        """Cancel it: the callback will not run. Does nothing once it ran.

        Raises:
            RuntimeError: called from another thread while the loop runs (use loop.call_soon_threadsafe).
        """
        if get_ident() != self._sched._thread:
            self._sched._check_thread()
        if self._state == _PENDING:
            self._state = _CANCELLED
            self._discard()
            if not self._timers:
                self._sched._disarm_if_idle()

    def cancelled(self) -> bool:
        """Whether cancel() was called before it ran. RuntimeError from another thread while the loop runs."""
        if get_ident() != self._sched._thread:
            self._sched._check_thread()
        return self._state == _CANCELLED

    def reset(self, delay: float) -> bool:
        """Move it to `delay` seconds from now (loop time), O(1): the keep-alive reset.

        Returns:
            True if it was pending and moved; False (and nothing changes) if it already ran or was cancelled.

        Raises:
            TypeError: delay is not a number. ValueError: delay is NaN.
            RuntimeError: called from another thread while the loop runs.
        """
        sched = self._sched
        timer_id = self._id
        if timer_id is not None and type(delay) is float and get_ident() == sched._thread:
            due = sched._time() + delay
            try:
                moved = self._timers.reschedule_at(timer_id, due)
            except (ValueError, OverflowError):  # NaN, infinite or too far: the general path below
                moved = False
            if moved:
                self._when = due
                if due < sched._armed:
                    sched._arm(due)
                return True
        sched._check_thread()
        if self._state != _PENDING:
            return False
        return self._move(_plus(sched._time(), _number(delay, "delay")), "delay")

    def reschedule(self, when: float) -> bool:
        """Move it to the loop time `when`, O(1). Returns and raises as reset()."""
        self._sched._check_thread()
        if self._state != _PENDING:
            return False
        return self._move(_number(when, "when"), "when")

    def _move(self, when: float, name: str) -> bool:
        if when != when:  # NaN
            raise ValueError(f"{name} must not be NaN")
        self._discard()
        self._when = when
        self._sched._arm_timer(self)
        return True

    def _wheel_due(self) -> float:
        """Its due as the wheel takes it: a due of -inf (past, as asyncio allows) is the wheel's now."""
        when = self._when
        return self._timers.now if when == -math.inf else when

    def _discard(self) -> None:
        if self._id is not None:
            self._timers.cancel(self._id)
            self._id = None
        elif self._fallback is not None:
            self._fallback.cancel()
            self._fallback = None

    def _run(self) -> None:
        """Its due came (called by the scheduler with the entry already taken out of the wheel)."""
        self._id = None
        self._state = _DONE
        try:
            if self._context is None:
                self._callback(*self._args)
            else:
                self._context.run(self._callback, *self._args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # as asyncio reports an exception in a callback
            self._sched._loop.call_exception_handler(
                {"message": f"Exception in callback {self._callback!r}", "exception": exc, "handle": self}
            )

    def _on_loop(self) -> None:
        """Its due came on the loop's own timers (the scheduler was closed meanwhile)."""
        self._fallback = None
        self._state = _DONE
        if self._context is None:
            self._callback(*self._args)
        else:
            self._context.run(self._callback, *self._args)


_PENDING, _DONE, _CANCELLED = 0, 1, 2


def _plus(now: float, delay: float) -> float:
    """now + delay, where a delay beyond the floats is infinitely far (as call_later takes it)."""
    try:
        return now + delay
    except OverflowError:
        return math.inf if delay > 0 else -math.inf


def _number(value: Any, name: str) -> float:
    """`value` as a float (infinities and NaN included; ints beyond the floats become infinities), or a
    TypeError that names `name`."""
    if type(value) is float:
        return value
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(type(value), "__float__"):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int beyond the floats: as far as infinity, for a timer
        return math.inf if value > 0 else -math.inf


class Timeout(asyncio.Timeout):  # type: ignore[misc]  # typeshed marks it final; we only replace the handle
    """asyncio's own Timeout, whose deadline lives in an AsyncScheduler's wheel instead of the loop's heap.

    Everything but reschedule() is asyncio's code for the running Python version (entering, exiting,
    expiring, uncancel(), the repr), so it behaves as asyncio.timeout() does. reschedule() keeps asyncio's
    rules: None disables; a deadline at or before loop.time() expires on the next loop iteration (call_soon);
    any other deadline is a wheel entry, moved in place on every reschedule (O(1), no handle on the loop).
    """

    # asyncio's private attributes, which typeshed does not declare (annotations only: nothing changes)
    _state: Any
    _when: float | None
    _timeout_handler: Any
    _on_timeout: Callable[[], None]

    def __init__(self, when: float | None, sched: AsyncScheduler) -> None:
        super().__init__(when)
        self._sched = sched

    def when(self) -> float | None:
        """The deadline, as asyncio's. RuntimeError from another thread while the loop runs."""
        if get_ident() != self._sched._thread:
            self._sched._check_thread()
        return super().when()

    def expired(self) -> bool:
        """Whether it expired, as asyncio's. RuntimeError from another thread while the loop runs."""
        if get_ident() != self._sched._thread:
            self._sched._check_thread()
        return super().expired()

    def reschedule(self, when: float | None) -> None:
        """Move the deadline to the loop time `when`, or disable it with None (as asyncio.Timeout).

        Raises:
            RuntimeError: called from another thread while the loop runs.
        """
        handle = self._timeout_handler
        if (
            type(handle) is TimerHandle
            and handle._id is not None
            and when is not None
            and self._state is _ENTERED
        ):
            # The keep-alive reset, first and lean: a live wheel entry (so the scheduler is running) moves
            # in place; nothing is allocated and the loop is not touched unless the deadline moves earlier
            # than our loop handle.
            sched = handle._sched
            if get_ident() == sched._thread and when > sched._time():
                try:
                    moved = handle._timers.reschedule_at(handle._id, when)
                except (ValueError, OverflowError):  # NaN, or too far to represent: the general path says
                    moved = False
                if moved:
                    self._when = handle._when = when
                    if when < sched._armed:
                        sched._arm(when)
                    return
        if get_ident() != self._sched._thread:
            self._sched._check_thread()
        self._reschedule(when)

    def _reschedule(self, when: float | None) -> None:
        sched = self._sched
        if self._state is not _ENTERED or sched._state != "running":
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
        if when != when:  # NaN
            raise ValueError(f"when must be a number or None, got {when!r}")
        timer = sched._call_at(when, self._on_timeout)
        self._when = when
        if handle is not None:
            handle.cancel()
        self._timeout_handler = timer


def _set_result_unless_cancelled(future: asyncio.Future[Any], result: Any) -> None:
    if not future.cancelled():
        future.set_result(result)


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether fn is a coroutine function, or an object whose __call__ is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    return inspect.iscoroutinefunction(type(fn).__call__)


class AsyncScheduler:
    """The Scheduler on an asyncio event loop, plus timeouts and sleeps kept in a timing wheel. No threads.

    The clock is the loop's own (loop.time()), so its deadlines mix freely with asyncio's. The loop holds at
    most one timer handle of ours, armed at the earliest due: no polling tick, no handle per timer. A
    deadline moved later leaves that handle where it is (it fires, finds nothing due, and is armed at the
    true next due); one moved earlier re-arms it.

    Jobs: a plain callable runs on the loop, inline, when due; a coroutine function (or a callable that
    returns an awaitable) runs as a task, and the run ends when the task does, which is what FIXED_DELAY and
    SKIP_IF_RUNNING look at. With max_concurrency, at most that many coroutine jobs run at once; a due one
    beyond it waits for a free slot, in due order (Backpressure.BLOCK), or is not run and is counted in
    stats().dropped and reported with a JobEvent with dropped=True (Backpressure.DROP). A plain callable
    that returns an awaitable is known to be one only after the call, so it is not held back by the bound.

    Timeouts: timeout() and timeout_at() are asyncio.timeout() and asyncio.timeout_at() with the deadline in
    the wheel: same class (a subclass of asyncio.Timeout), same methods, same behaviour, same repr, but an
    O(1) reschedule() that allocates nothing. sleep() is asyncio.sleep() on the wheel.

    Lifecycle: new -> running -> closed, never back; `async with AsyncScheduler() as sched:` starts and
    closes it. close() drops the runs waiting for a slot (counted), cancels the coroutine jobs still running
    and waits for them, and discards the pending tasks. Timeouts and sleeps still pending at close() are
    handed to the loop's own timers: none is lost, and timeout() and sleep() keep working, on asyncio's
    timers, after close().

    Errors: a job's Exception is recorded in errors, passed to error_handler(task_id, exc), and logged on
    the "timerwheel" logger (or `logger`); it never stops the scheduler. KeyboardInterrupt and SystemExit
    from a plain job are recorded, then propagate, as asyncio does with its own callbacks.

    Not thread-safe: call it from the loop's thread only (use loop.call_soon_threadsafe from others). A
    call from another thread while the loop runs raises RuntimeError.

    Args:
        loop: the event loop; by default the running loop (at construction, or else at start()).
        resolution: seconds per tick of the wheels.
        slots: slots per level of the wheels.
        levels: levels of the wheels.
        max_concurrency: most coroutine jobs running at once; None for no bound.
        backpressure: Backpressure.BLOCK or Backpressure.DROP, for a due coroutine job beyond the bound.
        missed: the default missed-run policy of schedule() and schedule_at().
        observer: called with a JobEvent for every run, drop and skip (on the loop, quickly).
        error_handler: called with (task_id, exception) when a job raises.
        logger: where errors and warnings go (default: logging.getLogger("timerwheel")).
    """

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        resolution: float = 0.001,
        slots: int = 64,
        levels: int = 4,
        max_concurrency: int | None = None,
        backpressure: Backpressure = Backpressure.BLOCK,
        missed: Missed = Missed.SKIP,
        observer: Callable[[JobEvent], object] | None = None,
        error_handler: Callable[[int, BaseException], object] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop or None, not {type(loop).__name__}")
        if max_concurrency is not None:
            if not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool):
                raise TypeError(
                    f"max_concurrency must be an int or None, not {type(max_concurrency).__name__}"
                )
            if max_concurrency < 1:
                raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if not isinstance(backpressure, Backpressure):
            raise TypeError(f"backpressure must be a Backpressure, not {backpressure!r}")
        if backpressure is Backpressure.RUN_INLINE:
            raise ValueError(
                "backpressure must be Backpressure.BLOCK or Backpressure.DROP: a coroutine job "
                "cannot run inline"
            )
        if not isinstance(missed, Missed):
            raise TypeError(f"missed must be a Missed, not {missed!r}")
        if observer is not None and not callable(observer):
            raise TypeError(f"observer must be callable or None, not {type(observer).__name__}")
        if error_handler is not None and not callable(error_handler):
            raise TypeError(f"error_handler must be callable or None, not {type(error_handler).__name__}")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger or None, not {type(logger).__name__}")
        TimerWheel(resolution, slots=slots, levels=levels)  # checks the geometry now, not at start()
        self._geometry = (resolution, slots, levels)
        self._limit = max_concurrency
        self._backpressure = backpressure
        self._missed = missed
        self._observer = observer
        self._error_handler = error_handler
        self._logger = logger or logging.getLogger("timerwheel")
        self._state = "new"
        self._thread: int | None = None  # the thread the loop was last seen running on
        self._armed = math.inf  # the due our loop handle is armed at; inf: no handle
        self._handle: asyncio.TimerHandle | None = None
        self._dispatching = False  # in _on_wake: it arms the handle itself when done
        self._active = 0  # coroutine jobs running
        self._waiting: deque[Run] = deque()  # due coroutine jobs waiting for a slot (Backpressure.BLOCK)
        self._waiting_by_task: dict[int, Run] = {}  # the one waiting run of each task; not here: cancelled
        self._jobs: dict[asyncio.Future[Any], tuple[Run, float]] = {}  # running job task -> (run, started)
        self._clock_errors = 0
        self._backoff = 0.0  # after a failed clock reading: seconds until we look again
        self._loop: asyncio.AbstractEventLoop
        self._sched: Scheduler
        self._timers: TimerWheel
        self._time: Callable[[], float]
        loop = loop or _get_running_loop()
        if loop is not None:
            self._bind(loop)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        resolution, slots, levels = self._geometry
        self._loop = loop
        # loop.time() itself, or time.monotonic when that is all loop.time() does (asyncio's own loops):
        # the same values, without a Python-level call on every schedule and reset.
        self._time = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        self._sched = Scheduler(
            self._time, resolution=resolution, slots=slots, levels=levels, observer=self._observer
        )
        self._sched._logger = self._logger
        self._timers = TimerWheel(resolution, slots=slots, levels=levels, start=loop.time())

    def __repr__(self) -> str:
        pending = len(self._sched._store) if hasattr(self, "_sched") else 0
        return f"<AsyncScheduler {self._state} pending={pending} timers={self._timers_pending()}>"

    def _timers_pending(self) -> int:
        return len(self._timers) if hasattr(self, "_timers") else 0

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start: from now on due jobs run and deadlines expire. Call it on the loop, or before it runs.

        Raises:
            AlreadyRunningError: it is running. ClosedError: it was closed.
            RuntimeError: no loop was given and none is running.
        """
        if self._state == "running":
            raise AlreadyRunningError("the scheduler is already running")
        if self._state == "closed":
            raise ClosedError("the scheduler is closed: a closed scheduler cannot be started again")
        if not hasattr(self, "_loop"):
            self._bind(asyncio.get_running_loop())  # RuntimeError("no running event loop") otherwise
        self._check_thread()
        self._state = "running"

    async def close(self) -> None:
        """Close: drop waiting runs, cancel running coroutine jobs and wait for them, discard pending tasks.

        Timeouts and sleeps still pending move to the loop's own timers. Idempotent; closing a scheduler
        that was never started just marks it closed.
        """
        if self._state != "running":
            self._state = "closed"
            return
        self._check_thread()
        self._state = "closed"
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed = math.inf
        now = self._time()
        while self._waiting:
            run = self._waiting.popleft()
            if self._waiting_by_task.pop(run.task.id, None) is run:
                self._drop(run, now)
        self._hand_timers_to_loop()
        me = asyncio.current_task()
        jobs = [job for job in self._jobs if job is not me]
        for job in jobs:
            job.cancel()
        if jobs:
            await asyncio.gather(*jobs, return_exceptions=True)
        self._sched._discard_pending()

    aclose = close

    async def __aenter__(self) -> AsyncScheduler:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _hand_timers_to_loop(self) -> None:
        timers = self._timers
        while (due := timers.next_due()) is not None:
            for _, timer in timers.advance(max(due, timers.now)):
                timer._id = None
                timer._fallback = self._loop.call_at(timer._when, timer._on_loop)

    def _check_thread(self) -> None:
        """Raise if the loop runs in another thread; remember this thread if the loop runs in it."""
        loop = self._loop
        if _get_running_loop() is loop:
            self._thread = get_ident()
        elif loop.is_running():
            raise RuntimeError(
                "AsyncScheduler is not thread-safe: call it from its event loop's thread "
                "(from another thread, use loop.call_soon_threadsafe)"
            )

    def _check_running(self) -> None:
        if self._state != "running":
            if self._state == "new":
                raise NotStartedError("start() the scheduler before scheduling on it")
            raise ClosedError("the scheduler is closed")
        if get_ident() != self._thread:  # asking asyncio for the running loop costs ~140 ns on 3.11
            self._check_thread()

    # -- jobs -------------------------------------------------------------------------------------------

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
    ) -> int:
        """Run fn `delay` seconds from now (loop time), as Scheduler.schedule; return the task id. O(1).

        fn may be a coroutine function: each run is then a task. missed defaults to the scheduler's policy.

        Raises:
            NotStartedError / ClosedError: before start() / after close().
            RuntimeError: called from another thread while the loop runs.
            ValueError, TypeError: as Scheduler.schedule.
        """
        self._check_running()
        task_id = self._sched.schedule(
            delay,
            fn,
            interval,
            args=args,
            kwargs=kwargs,
            mode=mode,
            missed=self._missed if missed is None else missed,
        )
        return self._added(task_id, fn)

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
    ) -> int:
        """Run fn at the loop time `when`, as Scheduler.schedule_at; otherwise as schedule()."""
        self._check_running()
        task_id = self._sched.schedule_at(
            when,
            fn,
            interval,
            args=args,
            kwargs=kwargs,
            mode=mode,
            missed=self._missed if missed is None else missed,
        )
        return self._added(task_id, fn)

    def _added(self, task_id: int, fn: Callable[..., Any]) -> int:
        task = self._sched._tasks[task_id]
        if _is_async(fn):
            task.extra = True
        self._arm_for(task)
        return task_id

    def cancel(self, task_id: int) -> bool:
        """Cancel a task: it will not start again. As Scheduler.cancel. O(1).

        A one-shot coroutine job waiting for a slot (max_concurrency) has not started: it is cancelled too.
        A coroutine job already running is not: cancel its task yourself if you must.
        """
        self._check_running()
        sched = self._sched
        if sched.cancel(task_id):
            if not sched._store:
                self._disarm_if_idle()
            return True
        run = self._waiting_by_task.pop(task_id, None)
        if run is None:
            return False
        sched._forget(run)  # its entry in _waiting is skipped when it comes up
        sched._cancelled += 1
        return True

    def reschedule(self, task_id: int, delay: float) -> bool:
        """Move a task's next run to `delay` seconds from now. As Scheduler.reschedule. O(1)."""
        self._check_running()
        sched = self._sched
        if sched.reschedule(task_id, delay):
            self._arm_for(sched._tasks[task_id])
            return True
        return False

    def next_fire_time(self, task_id: int) -> float | None:
        """The loop time of a task's next run, or None if it is not armed."""
        if not hasattr(self, "_sched"):
            return None
        if get_ident() != self._thread:
            self._check_thread()
        return self._sched.next_fire_time(task_id)

    def pending(self) -> list[TimerInfo]:
        """Every armed task, sorted by next fire time, then id."""
        if not hasattr(self, "_sched"):
            return []
        if get_ident() != self._thread:
            self._check_thread()
        return self._sched.pending()

    def stats(self) -> Stats:
        """A snapshot of the counters (see Stats); `running` counts coroutine jobs running or waiting for a
        slot, `queued` those waiting."""
        if not hasattr(self, "_sched"):
            return Stats()
        if get_ident() != self._thread:
            self._check_thread()
        return dataclasses.replace(
            self._sched.stats(), queued=len(self._waiting_by_task), clock_errors=self._clock_errors
        )

    @property
    def errors(self) -> list[str]:
        """Messages "task <id>: <message>" of failed runs, oldest first (a copy; the most recent 1000)."""
        if not hasattr(self, "_sched"):
            return []
        if get_ident() != self._thread:
            self._check_thread()
        return list(self._sched.errors)

    # -- timeouts and sleep -----------------------------------------------------------------------------

    def timeout(self, delay: float | None) -> asyncio.Timeout:
        """asyncio.timeout(delay) on the wheel: `async with sched.timeout(10): ...`.

        The deadline is loop.time() + delay, read now; None disables it. At the deadline the enclosing task
        is cancelled and the block raises TimeoutError on exit; when(), reschedule(when), expired() and the
        repr are asyncio's.

        Raises:
            NotStartedError: before start(). RuntimeError: not called on the scheduler's loop.
        """
        loop = self._timeout_loop()
        if _get_running_loop() is not loop:
            raise RuntimeError("sched.timeout() must be called on the scheduler's running event loop")
        return Timeout(self._time() + delay if delay is not None else None, self)

    def timeout_at(self, when: float | None) -> asyncio.Timeout:
        """asyncio.timeout_at(when) on the wheel: the deadline is the loop time `when`; None disables it.

        Raises:
            NotStartedError: before start().
        """
        self._timeout_loop()
        return Timeout(when, self)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        """asyncio.sleep(delay, result) on the wheel: a delay <= 0 just yields to the loop once.

        Raises:
            ValueError: delay is NaN. NotStartedError: before start().
        """
        loop = self._timeout_loop()
        if delay <= 0:
            await asyncio.sleep(0)
            return result
        if math.isnan(delay):
            raise ValueError("delay must not be NaN")
        future = loop.create_future()
        timer = self._call_at(self._time() + delay, partial(_set_result_unless_cancelled, future, result))
        try:
            return await future
        finally:
            timer.cancel()

    def _timeout_loop(self) -> asyncio.AbstractEventLoop:
        if self._state == "new":
            raise NotStartedError("start() the scheduler before using its timeouts")
        if get_ident() != self._thread:
            self._check_thread()
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
            TypeError: delay is not a number. ValueError: delay is NaN.
            NotStartedError / ClosedError: before start() / after close().
        """
        self._check_running()
        return self._new_timer(self._time() + _number(delay, "delay"), "delay", callback, args, context)

    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle:
        """loop.call_at on the wheel: call callback(*args) at the loop time `when`; as call_later()."""
        self._check_running()
        return self._new_timer(_number(when, "when"), "when", callback, args, context)

    def _new_timer(
        self,
        when: float,
        name: str,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: Context | None,
    ) -> TimerHandle:
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")
        if when != when:  # NaN
            raise ValueError(f"{name} must not be NaN")
        timer = TimerHandle(self, when, callback, args, copy_context() if context is None else context)
        self._arm_timer(timer)
        return timer

    def _call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        """Call callback() at the loop time `when`, with no context: the timeouts' and sleeps' timers."""
        timer = TimerHandle(self, when, callback)
        self._arm_timer(timer)
        return timer

    def _arm_timer(self, timer: TimerHandle) -> None:
        """Put a timer that has no entry at its due: in the wheel, or on the loop's timers once closed."""
        when = timer._when
        if self._state != "running":
            if when != math.inf:
                timer._fallback = self._loop.call_at(when, timer._on_loop)
            return
        if when == math.inf:
            return  # never
        try:
            timer._id = self._timers.add_at(timer._wheel_due(), timer)
        except OverflowError:
            return  # beyond 2**62 ticks (146 million years at 1 ms): never, in practice
        if when < self._armed:
            self._arm(when if when != -math.inf else self._time())  # -inf: at the next iteration

    # -- the driver -----------------------------------------------------------------------------------

    def _arm(self, due: float) -> None:
        """Arm our one loop handle at `due` (earlier than it is armed now)."""
        if self._dispatching or self._state != "running":
            return  # _on_wake arms it on its way out; a closed scheduler holds no handle
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(due, self._on_wake)
        self._armed = due

    def _arm_for(self, task: Any) -> None:
        """A task may have been armed (scheduled, moved, or re-armed after a FIXED_DELAY run): bring our
        loop handle forward if its due comes first. (The timers' hot paths inline this comparison.)"""
        if task.timer_id is not None and task.due < self._armed:
            self._arm(task.due)

    def _disarm_if_idle(self) -> None:
        """Nothing pending in either wheel: take our handle off the loop (an idle scheduler holds none)."""
        if self._handle is not None and not self._dispatching and not self._timers and not self._sched._store:
            self._handle.cancel()
            self._handle = None
            self._armed = math.inf

    def _on_wake(self) -> None:
        """Our loop handle fired: expire what is due, run the due jobs, arm the handle at the next due."""
        self._handle = None
        self._thread = get_ident()
        armed, self._armed = self._armed, math.inf
        try:
            now = self._sched._now()
        except Exception as exc:  # a loop whose time() fails: say so, and look again after a back-off
            self._clock_failed(exc)
            return
        self._backoff = 0.0
        if now < armed:
            # Early by the loop's own clock (uvloop rounds its timers to milliseconds; asyncio may run a
            # handle one clock resolution early): nothing is due yet. Never early: wait the rest.
            self._arm(armed)
            return
        self._dispatching = True
        try:
            self._run_timers(now)
            self._sched._run_due(now, self._execute)
        finally:
            self._dispatching = False
            if self._state == "running":
                due = self._sched._store.next_due()
                deadline = self._timers.next_due()
                if deadline is not None and (due is None or deadline < due):
                    due = deadline
                if due is not None:
                    self._arm(due)

    def _clock_failed(self, exc: Exception) -> None:
        self._clock_errors += 1
        self._backoff = min(max(2 * self._backoff, 0.001), 1.0)
        log_safely(
            self._logger,
            _PROPAGATE,
            logging.ERROR,
            "timerwheel: the AsyncScheduler cannot read the loop's clock (%r); retrying in %.3f s",
            exc,
            self._backoff,
            exc_info=exc,
        )
        if self._state == "running":
            self._handle = self._loop.call_later(self._backoff, self._on_wake)
            self._armed = -math.inf  # armed for a retry: anything due re-arms nothing before it

    def _run_timers(self, now: float) -> None:
        """Run the timers due at `now`, in due order; a timer that an earlier callback of the same batch
        cancelled or moved does not run (its entry changed). If a callback raises KeyboardInterrupt or
        SystemExit, the timers not yet run go back into the wheel, still due."""
        timers = self._timers
        batch = timers.advance(max(now, timers.now))
        taken = 0
        try:
            for timer_id, timer in batch:
                taken += 1
                if timer._id == timer_id:
                    timer._run()
        finally:
            for timer_id, timer in batch[taken:]:
                if timer._id == timer_id:
                    timer._id = timers.add_at(timer._wheel_due(), timer)

    def _execute(self, run: Run) -> None:
        if run.task.extra is None:
            self._run_plain(run)
        elif self._limit is not None and self._active >= self._limit:
            if self._backpressure is Backpressure.DROP or run.task.id in self._waiting_by_task:
                self._drop(run, self._time())  # a recurring task never has more than one run waiting
            else:
                self._waiting.append(run)
                self._waiting_by_task[run.task.id] = run
        else:
            self._start(run)

    def _run_plain(self, run: Run) -> None:
        started = self._sched._started(run)
        try:
            result = run.call()
        except (KeyboardInterrupt, SystemExit) as exc:
            self._finished(run, started, exc)
            raise
        except BaseException as exc:
            self._finished(run, started, exc)
            return
        if result is not None and inspect.isawaitable(result):
            self._start_task(run, started, result)
        else:
            self._finished(run, started, None)

    def _start(self, run: Run) -> None:
        started = self._sched._started(run)
        try:
            coro = run.call()
        except BaseException as exc:  # the coroutine function raised before making a coroutine
            self._finished(run, started, exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return
        self._start_task(run, started, coro)

    def _start_task(self, run: Run, started: float, awaitable: Any) -> None:
        job = asyncio.ensure_future(awaitable, loop=self._loop)
        self._active += 1
        self._jobs[job] = (run, started)
        job.add_done_callback(self._job_done)

    def _job_done(self, job: asyncio.Future[Any]) -> None:
        run, started = self._jobs.pop(job)
        self._active -= 1
        if job.cancelled():
            # Cancelled by close(): not a failure. Cancelled by anyone else: the run failed with it.
            error: BaseException | None = None if self._state == "closed" else asyncio.CancelledError()
        else:
            error = job.exception()
        try:
            self._finished(run, started, error)
        finally:  # even when an observer's KeyboardInterrupt goes through: the waiting runs start
            self._start_waiting()

    def _start_waiting(self) -> None:
        while self._waiting and self._active < (self._limit or 0) and self._state == "running":
            waiting = self._waiting.popleft()
            if self._waiting_by_task.get(waiting.task.id) is not waiting:
                continue  # a one-shot cancelled while it waited: already accounted for
            del self._waiting_by_task[waiting.task.id]
            if self._sched._is_cancelled(waiting):
                self._sched._forget(waiting)
            else:
                self._start(waiting)

    def _finished(self, run: Run, started: float, error: BaseException | None) -> None:
        finished = self._time()
        task = run.task
        self._sched._finish(run, started, error, finished)
        report_run(
            self._logger, _PROPAGATE, self._error_handler, task.id, task.interval, error, finished - started
        )
        self._arm_for(task)  # a FIXED_DELAY task is re-armed when its run finishes

    def _drop(self, run: Run, now: float) -> None:
        if self._sched._is_cancelled(run):
            self._sched._forget(run)
        else:
            self._sched._drop(run, now)
            self._arm_for(run.task)
