"""VirtualTimeLoop: an asyncio event loop on virtual time (its clock jumps to the next timer instead of
sleeping). timerwheel.testing offers it to tests; KeyedScheduler.preview runs a key's schedule on it."""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Callable

from ._validate import seconds


class _VirtualSelector(selectors.DefaultSelector):
    """The platform's selector, except that a wait on timers alone moves the virtual clock instead."""

    def __init__(self, start: float) -> None:
        super().__init__()
        self.now = start
        self.next_timer: Callable[[], float | None] = lambda: None  # the loop's earliest timer, if any

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: wait for real I/O, as a real loop would
            result: list[tuple[selectors.SelectorKey, int]] = super().select(None)
            return result
        # Nothing to do before the next timer: be there now, exactly (now + (when - now) may fall an ulp
        # short of when, and a timer must never look early).
        stop = self.now + timeout
        target = self.next_timer()
        if target is not None and stop < target <= math.nextafter(stop, math.inf) + 1e-12 * abs(stop):
            stop = target
        self.now = stop
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on virtual time: when it has nothing to do but wait for a timer, its clock
    (loop.time()) jumps to that timer instead of sleeping.

    Code that waits on timers (asyncio.sleep, asyncio.timeout, call_later, an AsyncScheduler's jobs,
    timeouts and sleeps) runs exactly as on a real loop, in the same order and at the same loop times, but
    at once: an hour of timers takes milliseconds, and tests never flake on a busy machine. Ready I/O is
    still served first; while the loop waits on real I/O only, virtual time stands still.

    Its wall clock (wall(), POSIX seconds from `wall`) moves with the virtual time; set_wall() steps it
    alone. An AsyncScheduler on this loop takes it as its wall clock.

    Example:
        >>> import asyncio
        >>> loop = VirtualTimeLoop()
        >>> start = loop.time()
        >>> loop.run_until_complete(asyncio.sleep(3600))
        >>> loop.time() - start
        3600.0
        >>> loop.close()
    """

    def __init__(self, start: float = 1000.0, *, wall: float = 0.0) -> None:
        try:
            start = seconds(start, "start")
            self._wall_offset = seconds(wall, "wall") - start
        except (TypeError, ValueError, OverflowError):
            self._closed = True  # nothing was opened: asyncio's __del__ must not look for it
            raise
        self._virtual = _VirtualSelector(start)
        super().__init__(self._virtual)
        self._virtual.next_timer = self._next_timer

    def wall(self) -> float:
        """The virtual wall clock, in POSIX seconds: it moves with loop.time()."""
        return self._virtual.now + self._wall_offset

    def set_wall(self, t: float) -> None:
        """Step the wall clock alone to `t` (either way); loop.time() does not move.

        Raises:
            ValueError: t is not finite. TypeError: t is not a number.
        """
        self._wall_offset = seconds(t, "t") - self._virtual.now

    def _next_timer(self) -> float | None:
        scheduled = self._scheduled  # type: ignore[attr-defined]  # asyncio's heap of TimerHandles
        return scheduled[0].when() if scheduled else None

    def time(self) -> float:
        """The virtual time, in seconds: it moves only when the loop would otherwise sleep."""
        now = self._virtual.now
        # (asyncio runs the timers due before time() + its clock resolution: past 2**24 s a nanosecond is
        # less than half a unit of the time's last place, the sum rounds back to the time, and a timer
        # due now would never run; the resolution is at least that unit)
        ulp = math.ulp(now)
        if ulp > self._clock_resolution:  # type: ignore[has-type]
            self._clock_resolution = ulp
        return now
