"""Test helpers for code that uses timerwheel: a clock that moves only when the test says so."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

__all__ = ["ManualClock"]


class ManualClock:
    """A clock for tests: calling it returns the current time; advance() and set() move it, never backwards.

    Pass it as `clock=` to a Scheduler or a ThreadedScheduler so that time moves only when the test moves
    it: no sleeping, no flakiness. Drivers subscribe to it, so that moving the clock wakes a driver that is
    waiting for its next due. Safe to use from several threads.

    Example:
        >>> clock = ManualClock()
        >>> clock()
        0.0
        >>> clock.advance(1.5)
        1.5
        >>> clock.set(10.0)
        >>> clock()
        10.0
    """

    __slots__ = ("_listeners", "_lock", "_now")

    def __init__(self, start: float = 0.0) -> None:
        self._now = _finite(start, "start")
        self._lock = threading.Lock()
        self._listeners: list[Callable[[float], None]] = []

    def __call__(self) -> float:
        """The current time, in seconds."""
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"

    def advance(self, seconds: float) -> float:
        """Move the clock forward by `seconds` (>= 0) and return the new time.

        Raises:
            ValueError: seconds is negative or not finite.
        """
        seconds = _finite(seconds, "seconds")
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0 (the clock never goes backwards), got {seconds!r}")
        with self._lock:
            now = self._now + seconds
            if not math.isfinite(now):
                raise ValueError(f"seconds takes the clock past the largest float: {seconds!r}")
            self._now = now
        self._notify(now)
        return now

    def set(self, t: float) -> None:
        """Set the clock to `t`, which must not be earlier than the current time.

        Raises:
            ValueError: t is earlier than the current time, or not finite.
        """
        t = _finite(t, "t")
        with self._lock:
            if t < self._now:
                raise ValueError(f"t must not be earlier than the current time {self._now!r}, got {t!r}")
            self._now = t
        self._notify(t)

    def subscribe(self, callback: Callable[[float], None]) -> None:
        """Call `callback(now)` after every advance() or set(); drivers use it to wake their waiting loop."""
        with self._lock:
            self._listeners.append(callback)

    def unsubscribe(self, callback: Callable[[float], None]) -> None:
        """Stop calling `callback`; no error if it was not subscribed."""
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def _notify(self, now: float) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:  # outside the lock: a listener may read or move the clock
            callback(now)


def _finite(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value
