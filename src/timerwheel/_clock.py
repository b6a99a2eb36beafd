"""Time as a protocol: where schedulers read the time, and how their drivers wait for a deadline.

A Clock is called for the time now (monotonic seconds). A driver that must wait until a deadline asks the
clock how many real seconds that may take (`sleep_time`) and waits that long or until it is woken; a clock
that moves only when told (ManualClock) answers "until woken" and wakes its subscribers when it moves.
This is trio's Clock and MockClock, for threads: the drivers never look at which clock they have.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ._validate import function

__all__ = ["Clock", "FunctionClock", "MonotonicClock", "as_clock", "utc_not_after"]

_MICROSECOND = timedelta(microseconds=1)


def utc_not_after(t: float) -> datetime:
    """POSIX seconds as an aware UTC datetime that is not after `t`: the microsecond at or before it.

    (datetime.fromtimestamp rounds to the nearest microsecond: a time just before a calendar point would
    become the point itself, and the first point after it would skip that one.)
    """
    dt = datetime.fromtimestamp(t, UTC)
    return dt - _MICROSECOND if dt.timestamp() > t else dt


class Clock:
    """The base of the clocks a scheduler reads: subclass it and define __call__ (and sleep_time, wall,
    subscribe and unsubscribe where the defaults, made for a clock that moves by itself in real time, do
    not fit).

    Any plain callable that returns monotonic seconds can be given where a clock is expected: it is
    wrapped in a FunctionClock.
    """

    __slots__ = ()

    def __call__(self) -> float:
        """The time now, in seconds, on a scale that never goes backwards."""
        raise NotImplementedError

    @property
    def reader(self) -> Callable[[], float]:
        """The cheapest callable that reads this clock (the engine calls it on every schedule)."""
        return self

    def sleep_time(self, deadline: float) -> float:
        """The real seconds a driver may sleep before this clock can reach `deadline` (never negative;
        math.inf: until something wakes it). The default: the difference, for a clock of real time (of
        any real number type: a Decimal reading too)."""
        return max(0.0, deadline - float(self()))

    def wall(self) -> float:
        """The wall-clock time now, in POSIX seconds (the default: time.time())."""
        return time.time()

    def subscribe(self, callback: Callable[[float], object]) -> None:
        """Call callback(now) whenever the clock is moved by hand. The default: never (it moves itself)."""
        function(callback, "callback")

    def unsubscribe(self, callback: Callable[[float], object]) -> None:
        """Stop calling `callback`; no error if it was not subscribed."""


class MonotonicClock(Clock):
    """time.monotonic(), the default clock of every scheduler."""

    __slots__ = ()

    def __call__(self) -> float:
        """time.monotonic()."""
        return time.monotonic()

    @property
    def reader(self) -> Callable[[], float]:
        """time.monotonic itself."""
        return time.monotonic

    def __repr__(self) -> str:
        return "MonotonicClock()"


class FunctionClock(Clock):
    """A plain callable of monotonic seconds, seen as a Clock of real time."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], float]) -> None:
        self._fn: Callable[[], float] = function(fn, "clock")

    def __call__(self) -> float:
        """The wrapped callable's reading."""
        return self._fn()

    @property
    def reader(self) -> Callable[[], float]:
        """The wrapped callable itself."""
        return self._fn

    def __repr__(self) -> str:
        return f"FunctionClock({self._fn!r})"


def as_clock(clock: Any) -> Clock:
    """A Clock for `clock`: a Clock as it is, None as MonotonicClock(), a callable wrapped; else TypeError."""
    if isinstance(clock, Clock):
        return clock
    if clock is None or clock is time.monotonic:
        return MonotonicClock()
    if not callable(clock):
        raise TypeError(f"clock must be a Clock or a callable returning seconds, not {type(clock).__name__}")
    return FunctionClock(clock)
