"""Test helpers for code that uses timerwheel: a clock that moves only when the test says so, a way to wait
until a ThreadedScheduler has done everything that is due, an asyncio event loop whose clock jumps to
the next timer instead of sleeping, a simulated cluster of KeyedSchedulers (SimulatedCluster, in
timerwheel.testing.simulate) that runs your jobs under kills, pauses and clock faults on virtual time,
and a throwaway PostgreSQL server (PostgresServer, in timerwheel.testing.postgres)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from .._clock import Clock
from .._validate import function, seconds
from .._virtual import VirtualTimeLoop

__all__ = [
    "ManualClock",
    "PostgresServer",
    "SimRun",
    "SimulatedCluster",
    "Violation",
    "VirtualTimeLoop",
    "postgres_bindir",
    "wait_until_idle",
]

_SIMULATION = ("SimRun", "SimulatedCluster", "Violation")
_POSTGRES = ("PostgresServer", "postgres_bindir")


def __getattr__(name: str) -> Any:
    # (imported when first asked for: `python -m timerwheel.testing.simulate` and `python -m
    # timerwheel.testing.postgres` run those modules as __main__, which must not be imported already)
    if name in _SIMULATION:
        from . import simulate

        return getattr(simulate, name)
    if name in _POSTGRES:
        from . import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ManualClock(Clock):
    """A clock for tests: calling it returns the current time; advance() and set() move it, never backwards.

    Pass it as `clock=` to a Scheduler or a ThreadedScheduler so that time moves only when the test moves
    it: no sleeping, no flakiness. A driver waiting for its next due sleeps until the clock is moved past
    it (sleep_time() is infinite; moving the clock calls its subscribers). Safe to use from several
    threads.

    It has a wall clock too (wall(), POSIX seconds), which advance() and set() move by the same amount,
    and which set_wall() steps alone, either way: an NTP correction, or a laptop that slept.

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

    __slots__ = ("_listeners", "_lock", "_now", "_wall")

    def __init__(self, start: float = 0.0, *, wall: float = 0.0) -> None:
        self._now = seconds(start, "start")
        self._wall = seconds(wall, "wall") - self._now  # wall() - (): what set_wall() changes
        self._lock = threading.Lock()
        self._listeners: list[Callable[[float], object]] = []

    def __call__(self) -> float:
        """The current time, in seconds."""
        return self._now

    @property
    def reader(self) -> Callable[[], float]:
        """What the schedulers call to read this clock: the same reading as calling it, cheaper to call
        (the clock itself, for a subclass that defines its own __call__)."""
        if type(self).__call__ is not ManualClock.__call__:
            return self
        return partial(getattr, self, "_now")

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r}, wall={self.wall()!r})"

    def wall(self) -> float:
        """The wall clock, POSIX seconds: it moves with advance() and set(); set_wall() steps it alone."""
        return self._now + self._wall

    def set_wall(self, t: float) -> None:
        """Step the wall clock alone to `t` (either way), as an NTP correction or a wake from sleep does;
        the monotonic time does not move. Subscribers are called, so that drivers notice.

        Raises:
            ValueError: t is not finite. TypeError: t is not a number.
        """
        t = _seconds(t, "t")
        with self._lock:
            self._wall = t - self._now
            now = self._now
        self._notify(now)

    def sleep_time(self, deadline: float) -> float:
        """math.inf: the clock reaches a deadline only when a test moves it, which wakes the subscribers."""
        return math.inf

    def advance(self, seconds: float) -> float:
        """Move the clock forward by `seconds` (>= 0) and return the new time.

        Raises:
            ValueError: seconds is negative or not finite. TypeError: seconds is not a number.
        """
        step = _seconds(seconds, "seconds")
        if step < 0:
            raise ValueError(f"seconds must be >= 0 (the clock never goes backwards), got {step!r}")
        with self._lock:
            now = self._now + step
            if not math.isfinite(now):
                raise ValueError(f"seconds takes the clock past the largest float: {seconds!r}")
            self._now = now
        self._notify(now)
        return now

    def set(self, t: float) -> None:
        """Set the clock to `t`, which must not be earlier than the current time.

        Raises:
            ValueError: t is earlier than the current time, or not finite. TypeError: t is not a number.
        """
        t = _seconds(t, "t")
        with self._lock:
            if t < self._now:
                raise ValueError(f"t must not be earlier than the current time {self._now!r}, got {t!r}")
            self._now = t
        self._notify(t)

    def subscribe(self, callback: Callable[[float], object]) -> None:
        """Call `callback(now)` after every advance() or set(); drivers use it to wake their waiting loop.

        Raises:
            TypeError: callback is not callable.
        """
        function(callback, "callback")
        with self._lock:
            self._listeners.append(callback)

    def unsubscribe(self, callback: Callable[[float], object]) -> None:
        """Stop calling `callback`; no error if it was not subscribed."""
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def _notify(self, now: float) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:  # outside the lock: a listener may read or move the clock
            callback(now)


_seconds = seconds  # ManualClock.advance's parameter is called `seconds`


def wait_until_idle(scheduler: Any, timeout: float = 10.0) -> None:
    """Wait until a ThreadedScheduler has nothing left to do at its clock's current time: its driver
    sleeps, no job runs or waits for a worker, and nothing is due. Then every job due by now has run.

    With a ManualClock this makes a test deterministic: move the clock, wait until idle, assert. It waits
    on the scheduler's condition (never by sleeping); `timeout` (real seconds) only keeps a broken test
    from hanging. A stopped scheduler is idle once its threads have exited.

    Raises:
        TimeoutError: not idle within `timeout` seconds.
        TypeError: not a ThreadedScheduler.
    """
    from .._drivers.threaded import wait_until_idle as wait

    wait(scheduler, timeout)
