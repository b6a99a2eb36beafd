"""An asyncio event loop whose call_later and call_at put their timers in the engine's wheel.

Every library's timers go through loop.call_later and loop.call_at: asyncio.sleep, wait_for,
asyncio.timeout, uvicorn's keep-alive, aiohttp's deadlines, database drivers. On asyncio's own loop each
is an entry of a heap, O(log n), and a cancelled entry stays there until it comes up or the heap is
rebuilt. Here each is a plain timer of a job engine (Scheduler) on a TimerWheel: added and cancelled in
O(1), a cancelled one gone at once.

What asyncio promises is kept, by construction: the handle's callback, arguments, context, repr and run
are asyncio.Handle's own methods (so an exception in a callback reaches the loop's exception handler with
the same context, and debug mode's source tracebacks are there); due timers are taken, in the loop
iteration in which they fall due (a timer is due when its `when` is before the loop's time plus its clock
resolution, as asyncio says), in the order of their `when`, ties in the order they were made, and run
after the I/O callbacks of that iteration, as asyncio runs them. A `when` the wheel cannot hold (not
finite, or beyond its 2**62 ticks) goes on asyncio's own heap, which this loop keeps running too.

SelectorEventLoop is asyncio's selector loop with its iteration, _run_once, written for both stores of
timers. UVLoop (uvloop's Loop) cannot be changed inside: the wheel sits behind one uvloop timer armed at
its next due, and the timers due when it fires run in that callback, in order.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import sys
from asyncio import base_events
from collections.abc import Callable
from contextvars import Context, copy_context
from typing import TYPE_CHECKING, Any

from .._engine import Scheduler, Timer

__all__ = ["SelectorEventLoop", "TimerHandle", "UVLoop", "new_event_loop"]

if TYPE_CHECKING:
    UVLoop: type[asyncio.AbstractEventLoop]  # (made when first asked for: see __getattr__)

_Handle = asyncio.Handle
_TimerHandle = asyncio.TimerHandle
_MAX_SELECT = getattr(base_events, "MAXIMUM_SELECT_TIMEOUT", 24 * 3600)
_format_handle = getattr(base_events, "_format_handle", repr)
_INF = math.inf
_LOWEST = -sys.float_info.max  # (an int below it is no float: asyncio's heap takes it, as it is)
_NUMBERS = (float, int)
_copy_context = copy_context  # (a `when` of another type, a bool, a Decimal, goes to asyncio's heap as it is)


class TimerHandle(Timer):
    """A callback at a loop time, in the loop's wheel: what this loop's call_later and call_at return.

    It has asyncio.TimerHandle's interface, with asyncio's own code behind it: cancel(), cancelled(),
    when(), get_context(), its repr, and the run of the callback (in its context; an exception goes to the
    loop's exception handler). It is not an asyncio.TimerHandle instance (its storage is the engine's
    timer), as uvloop's handles are not: code that only calls its methods cannot tell. O(1) to make and
    to cancel; a cancelled handle leaves the wheel at once.
    """

    __module__ = "timerwheel.loop"
    __slots__ = (
        "__weakref__",
        "_args",
        "_callback",
        "_cancelled",
        "_context",
        "_loop",
        "_repr",
        "_scheduled",
        "_source_traceback",
        "_when",
    )
    # (their types, for the type checker: asyncio's Handle and TimerHandle fields)
    _args: tuple[Any, ...] | None
    _callback: Callable[..., object] | None
    _cancelled: bool
    _context: Context
    _loop: Any
    _repr: str | None
    _scheduled: bool
    _source_traceback: Any
    _when: float

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: Context | None = None,
    ) -> None:
        Timer.__init__(self)
        _Handle.__init__(self, callback, args, loop, context)  # type: ignore[arg-type]
        if self._source_traceback:
            del self._source_traceback[-1]  # (this frame: the stack ends where call_at was called)
        self._when = when
        self._scheduled = False

    # asyncio's own methods: the same behaviour on every Python, including its debug mode
    _run = _Handle._run
    __repr__ = _Handle.__repr__
    cancelled = _Handle.cancelled
    when = _TimerHandle.when

    def _repr_info(self) -> list[str]:
        info: list[str] = _Handle._repr_info(self)
        info.insert(2 if self._cancelled else 1, f"when={self._when}")  # (where asyncio's shows it)
        return info

    def get_context(self) -> Context:
        """The contextvars.Context the callback runs in (asyncio's get_context, from Python 3.12)."""
        return self._context

    def fire(self) -> None:
        """Its due came (the engine took it out of the wheel): run it in this loop iteration."""
        self._scheduled = False
        self._loop._due.append(self)

    def cancel(self) -> None:
        """Cancel it: the callback will not run. O(1): it leaves the wheel at once."""
        if not self._cancelled:
            if self._scheduled:
                self._scheduled = False
                self._loop._timers.cancel_timer(self)
            self._cancelled = True  # (asyncio's Handle.cancel, inline)
            if self._loop.get_debug():
                self._repr = repr(self)  # (kept for a log of it: its callback is dropped)
            self._callback = None
            self._args = None

    def __hash__(self) -> int:
        return hash(self._when)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, (TimerHandle, _TimerHandle)):
            return self._when < other._when
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, (TimerHandle, _TimerHandle)):
            return self._when < other._when or self.__eq__(other)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, (TimerHandle, _TimerHandle)):
            return self._when > other._when
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, (TimerHandle, _TimerHandle)):
            return self._when > other._when or self.__eq__(other)
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (TimerHandle, _TimerHandle)):
            return (
                self._when == other._when
                and self._callback == other._callback
                and self._args == other._args
                and self._cancelled == other._cancelled
            )
        return NotImplemented


class _WheelTimers:
    """What both loops share: the engine whose wheel holds the timers, and call_at's common path."""

    _timers: Scheduler
    _scheduled: list[asyncio.TimerHandle]  # (asyncio's heap, for the timers the wheel cannot hold)
    _timer_cancelled_count: int
    _due: Any  # where a due timer's fire() puts it: the loop's ready queue, or UVLoop's batch

    def _init_timers(self) -> None:
        try:  # (the wheel's start; a subclass whose clock is not ready yet in __init__ starts it at 0)
            start = float(self.time())
        except Exception:
            start = 0.0
        self._timers = Scheduler(lambda: start)  # (the engine reads no clock after this: times come in)
        self._timers.wake_below = -_INF  # (never woken: the loop asks for the next due each iteration)
        self._horizon = self._timers.store.horizon

    def _wheel_call_at(
        self, when: float, callback: Callable[..., object], args: tuple[Any, ...], context: Context | None
    ) -> TimerHandle | None:
        """The timer in the wheel (made by TimerHandle's __init__: a debug mode's stack kept), or None: a
        `when` the wheel cannot hold (asyncio's heap takes it)."""
        if not (_LOWEST <= when < self._horizon):
            return None
        timer = TimerHandle(when, callback, args, self, context)  # type: ignore[arg-type]
        if timer._source_traceback:
            del timer._source_traceback[-2:]  # (this frame and call_at's: it ends where call_at was called)
        self._timers.add_timer(timer, float(when))  # (a bool, an np.float64: its `when` stays as it is)
        timer._scheduled = True
        return timer


def _when_of(handle: Any) -> Any:
    return handle._when


_new_handle = TimerHandle.__new__  # (a handle with no __init__ run: _armed sets every field)


def _armed(
    loop: Any, when: float, callback: Callable[..., object], args: tuple[Any, ...], context: Context | None
) -> TimerHandle:
    """A timer made and put in the wheel at `when` (finite, within its horizon), outside debug mode: the
    common path of call_later and call_at, TimerHandle's __init__ and asyncio's Handle.__init__ inline."""
    timer: Any = _new_handle(TimerHandle)
    timer._context = _copy_context() if context is None else context
    timer._loop = loop
    timer._callback = callback
    timer._args = args
    timer._cancelled = False
    timer._repr = None
    timer._source_traceback = None
    timer._when = when
    timer._scheduled = True
    timer.id = None  # (the engine's: set by add_timer)
    loop._timers.add_timer(timer, when)
    return timer  # type: ignore[no-any-return]


class SelectorEventLoop(_WheelTimers, asyncio.SelectorEventLoop):
    """asyncio's selector event loop with its timers in a wheel: see the module's docstring."""

    __module__ = "timerwheel.loop"

    def __init__(self, selector: Any = None) -> None:
        super().__init__(selector)
        self._init_timers()
        self._due = self._ready
        self._own_call_at = type(self).call_at is SelectorEventLoop.call_at  # (else call_later calls it)

    def call_at(
        self, when: float, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.TimerHandle:
        """Call callback(*args) at the loop time `when` (asyncio's call_at), on the wheel: O(1)."""
        if (
            not self._debug
            and not self._closed
            and type(when) in _NUMBERS
            and _LOWEST <= when < self._horizon
            and callable(callback)
        ):
            return _armed(self, when, callback, args, context)  # type: ignore[return-value]
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        timer: Any = (
            self._wheel_call_at(when, callback, args, context) if isinstance(when, _NUMBERS) else None
        )
        if timer is None:
            timer = super().call_at(when, callback, *args, context=context)
            if timer._source_traceback:
                del timer._source_traceback[-1]  # (this frame: the stack ends where call_at was called)
        return timer  # type: ignore[no-any-return]

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.TimerHandle:
        """Call callback(*args) `delay` seconds from now (asyncio's call_later), on the wheel: O(1)."""
        if (
            type(delay) in _NUMBERS
            and not self._debug
            and not self._closed
            and callable(callback)
            and self._own_call_at
            and "call_at" not in self.__dict__  # (asyncio's call_later goes through call_at: a patched one)
        ):
            when = self.time() + delay
            if _LOWEST <= when < self._horizon:
                return _armed(self, when, callback, args, context)  # type: ignore[return-value]
        if delay is None:
            raise TypeError("delay must not be None")
        timer = self.call_at(self.time() + delay, callback, *args, context=context)
        if timer._source_traceback:
            del timer._source_traceback[-1]
        return timer

    def close(self) -> None:
        """asyncio's close(); the timers pending are dropped as asyncio drops its own (not cancelled)."""
        super().close()
        timers = getattr(self, "_timers", None)  # (None: an __init__ that failed before it was made)
        for timer in [] if timers is None else timers.release_timers():
            timer._scheduled = False

    def _run_once(self) -> None:
        """One iteration, as asyncio's: wait for I/O no longer than the earliest timer (of the wheel or of
        the heap); then the I/O callbacks; then every timer due, in order; then run what is ready."""
        heap = self._scheduled
        if heap:
            self._prune_heap()
            heap = self._scheduled
        timers = self._timers
        timeout: float | None = None
        if self._ready or self._stopping:
            timeout = 0
        else:
            due = timers.next_due()
            if heap and (due is None or not heap[0]._when >= due):  # (a NaN at the heap's head too)
                due = heap[0]._when
            if due is not None:
                timeout = min(max(0, due - self.time()), _MAX_SELECT)  # (NaN: 0, and it runs below)
        event_list = self._selector.select(timeout)
        self._process_events(event_list)
        event_list = None
        # Due: `when` before end_time (asyncio's rule), that is at or before the float just below it.
        end_time = self.time() + self._clock_resolution
        ready = self._ready
        popped = None  # (the heap's due timers: asyncio's own test, which a NaN passes at once)
        while heap and not heap[0]._when >= end_time:
            handle = heapq.heappop(heap)
            handle._scheduled = False
            if popped is None:
                popped = []
            popped.append(handle)
        due = timers.next_due()
        if due is not None and due < end_time:
            limit = math.nextafter(end_time, -_INF)
            if popped is None and limit >= timers.store.now:
                timers.drain(limit)  # (each due timer's fire() makes it ready)
            else:
                popped = self._drain_merged(limit, popped)
        if popped is not None:
            ready.extend(popped)
        ntodo = len(ready)
        for _ in range(ntodo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            if self._debug:
                try:
                    self._current_handle = handle
                    t0 = self.time()
                    handle._run()
                    dt = self.time() - t0
                    if dt >= self.slow_callback_duration:
                        base_events.logger.warning(  # (asyncio's logger, read where asyncio reads it)
                            "Executing %s took %.3f seconds", _format_handle(handle), dt
                        )
                finally:
                    self._current_handle = None
            else:
                handle._run()
        handle = None  # type: ignore[assignment]  # (no reference to the last callback kept between iterations)

    def _drain_merged(self, limit: float, popped: list[Any] | None) -> list[Any]:
        """The wheel's timers due by `limit`, in order, merged by `when` with the heap's (`popped`). The
        uncommon cases: both stores have due timers; or the clock went back (or a fake clock reads below
        the loop's start), where the wheel, which never goes back, gives more than is due: those are put
        back."""
        timers, ready = self._timers, self._ready
        fired: list[Any] = []
        self._due = fired
        try:
            timers.drain(limit)
        finally:
            self._due = ready
        if limit < timers.store.now:
            early = [h for h in fired if h._when > limit]
            if early:
                fired = [h for h in fired if h._when <= limit]
                for handle in early:
                    timers.add_timer(handle, float(handle._when))
                    handle._scheduled = True
        return fired if popped is None else list(heapq.merge(popped, fired, key=_when_of))

    def _prune_heap(self) -> None:
        """asyncio's upkeep of its heap (the timers the wheel cannot hold): drop cancelled entries."""
        heap = self._scheduled
        cancelled = self._timer_cancelled_count
        if len(heap) > 100 and cancelled / len(heap) > 0.5:
            kept = []
            for handle in heap:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    kept.append(handle)
            heapq.heapify(kept)
            self._scheduled = kept
            self._timer_cancelled_count = 0
        else:
            while heap and heap[0]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(heap)._scheduled = False


def _uvloop_class() -> type[asyncio.AbstractEventLoop]:
    import uvloop

    class UVLoop(_WheelTimers, uvloop.Loop):
        """uvloop's Loop with its timers in a wheel, behind one uvloop timer: see the module's docstring."""

        def __init__(self) -> None:
            super().__init__()
            self._init_timers()
            self._armed = _INF
            self._wake: asyncio.TimerHandle | None = None
            self._due: list[TimerHandle] = []  # (fire() appends to it: the wheel's due timers, in order)
            self._context = Context()  # (the wake's: it keeps no caller's context alive)

        def call_at(
            self, when: float, callback: Callable[..., object], *args: Any, context: Context | None = None
        ) -> asyncio.TimerHandle:
            """Call callback(*args) at the loop time `when` (asyncio's call_at), on the wheel: O(1).

            In debug mode, and for a `when` the wheel cannot hold, the timer is uvloop's own (so its
            debug checks and reports are uvloop's: the thread, the stack, a slow callback)."""
            if when is None:
                raise TypeError("when cannot be None")
            if not isinstance(when, _NUMBERS) or not (_LOWEST <= when < self._horizon) or self.get_debug():
                return self._native(when - self.time(), callback, args, context)
            if self.is_closed():
                raise RuntimeError("Event loop is closed")
            if not callable(callback):
                raise TypeError("a callable object was expected by call_at()")
            timer = _armed(self, float(when), callback, args, context)
            timer._when = when
            if when < self._armed:
                self._arm(when)
            return timer  # type: ignore[return-value]

        def call_later(
            self, delay: float, callback: Callable[..., object], *args: Any, context: Context | None = None
        ) -> asyncio.TimerHandle:
            """Call callback(*args) `delay` seconds from now (asyncio's call_later), on the wheel: O(1);
            uvloop's own timer in debug mode (see call_at)."""
            if delay is None:
                raise TypeError("delay must not be None")
            if type(delay) not in _NUMBERS or self.get_debug():
                return self._native(delay, callback, args, context)
            return self.call_at(self.time() + delay, callback, *args, context=context)

        def _native(
            self,
            delay: float,
            callback: Callable[..., object],
            args: tuple[Any, ...],
            context: Context | None,
        ) -> asyncio.TimerHandle:
            """uvloop's own timer (its call_at is its call_later, which would come back here)."""
            handle = uvloop.Loop.call_later(self, delay, callback, *args, context=context)
            stack = getattr(handle, "_source_traceback", None)
            if stack:
                del stack[-2:]  # (this frame and call_at's or call_later's: it ends at their caller)
            return handle

        def close(self) -> None:
            """uvloop's close(); the timers pending are cancelled, as uvloop cancels its own."""
            super().close()
            timers = getattr(self, "_timers", None)
            for timer in [] if timers is None else timers.release_timers():
                timer._scheduled = False
                timer.cancel()

        def _arm(self, when: float) -> None:
            # (uvloop counts whole milliseconds, rounding a delay: rounded up, it never wakes before `when`)
            delay = max(math.ceil((when - self.time()) * 1000.0), 0) / 1000.0
            wake = uvloop.Loop.call_later(self, delay, self._on_wake, context=self._context)
            if self._wake is not None:
                self._wake.cancel()
            self._wake, self._armed = wake, when

        def _on_wake(self) -> None:
            """Our uvloop timer fired: run every wheel timer due, in order; arm it at the next due."""
            self._wake, self._armed = None, _INF
            timers = self._timers
            now = self.time()
            due = timers.next_due()
            if due is not None and due <= now:
                timers.drain(now)
            batch, self._due = self._due, []
            done = 0
            try:
                for handle in batch:
                    done += 1
                    if not handle._cancelled:
                        handle._run()
            except BaseException:  # (KeyboardInterrupt, SystemExit: the rest run first at the next wake)
                self._due[:0] = batch[done:]
                if self._due:
                    self._arm(now)
                raise
            finally:
                due = timers.next_due()
                if due is not None and due < self._armed:
                    self._arm(due)

    UVLoop.__qualname__ = "UVLoop"
    UVLoop.__module__ = "timerwheel.loop"
    return UVLoop


def __getattr__(name: str) -> Any:
    if name == "UVLoop":  # (uvloop is optional: the class is made when it is first asked for)
        cls = _uvloop_class()
        globals()["UVLoop"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def new_event_loop(base: str = "asyncio") -> asyncio.AbstractEventLoop:
    """A new event loop whose timers are on the wheel: asyncio's selector loop (`base="asyncio"`) or
    uvloop's (`base="uvloop"`, which needs uvloop installed).

    Raises:
        ValueError: base is neither "asyncio" nor "uvloop".
        ImportError: base="uvloop" and uvloop is not installed.
    """
    if base == "asyncio":
        return SelectorEventLoop()
    if base == "uvloop":
        return __getattr__("UVLoop")()  # type: ignore[no-any-return]
    raise ValueError(f'base must be "asyncio" or "uvloop", not {base!r}')
