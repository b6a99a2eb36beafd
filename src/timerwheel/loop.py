"""Every asyncio program on the wheel: an event loop whose call_later and call_at, and so asyncio.sleep,
wait_for, asyncio.timeout and every library's timers, cost O(1).

    import asyncio, timerwheel.loop

    asyncio.run(main(), loop_factory=timerwheel.loop.new_event_loop)   # Python 3.12+
    timerwheel.loop.install()                                          # any: the default policy's loops
    asyncio.run(main())

See docs/event-loop.md.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ._drivers.loop import SelectorEventLoop, TimerHandle, new_event_loop

if TYPE_CHECKING:
    from ._drivers.loop import UVLoop

__all__ = ["EventLoopPolicy", "SelectorEventLoop", "TimerHandle", "UVLoop", "install", "new_event_loop"]

_BASES = ("asyncio", "uvloop")


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """asyncio's default event loop policy, whose new_event_loop() is timerwheel's: for code that makes
    its loop through the policy (asyncio.run on Python 3.11, servers that take no loop factory).

    Args:
        base: "asyncio" (asyncio's selector loop) or "uvloop" (uvloop's loop), with the timers on a wheel.

    Raises:
        ValueError: base is neither. ImportError: "uvloop" and uvloop is not installed.
    """

    def __init__(self, base: str = "asyncio") -> None:
        if base not in _BASES:
            raise ValueError(f'base must be "asyncio" or "uvloop", not {base!r}')
        if base == "uvloop":
            import uvloop  # noqa: F401  (refused now, not at the first loop)
        super().__init__()
        self.base = base

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        """A new event loop with its timers on the wheel (see new_event_loop())."""
        return new_event_loop(self.base)


def install(base: str = "asyncio") -> None:
    """Make EventLoopPolicy(base) asyncio's event loop policy: every loop made from then on through
    asyncio (asyncio.run, asyncio.new_event_loop, a server that makes its own) has its timers on the
    wheel. Raises as EventLoopPolicy."""
    asyncio.set_event_loop_policy(EventLoopPolicy(base))


def __getattr__(name: str) -> Any:
    if name == "UVLoop":  # (made when first asked for: uvloop is optional)
        from ._drivers import loop

        return loop.UVLoop
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
