"""timerwheel: O(1) timers for programs that track very many of them.

TimerWheel is the core data structure; Scheduler is the job engine on it; ThreadedScheduler drives the
engine from its own thread, with a worker pool; AsyncScheduler drives it from an asyncio event loop, with
wheel-backed timeouts; HeapScheduler is the same engine on a binary heap, for
comparisons. timerwheel.testing has ManualClock and VirtualTimeLoop for tests.
"""

import logging
from typing import TYPE_CHECKING, Any

from ._clock import Clock
from ._core import BACKEND, TimerWheel
from ._cron import Cron
from ._drivers.threaded import ThreadedScheduler
from ._engine import JobContext, Scheduler
from ._engine.heap import HeapScheduler
from ._keyed import (
    CatchUp,
    Fence,
    HistoryEntry,
    KeyedScheduler,
    KeyedStats,
    KeyInfo,
    KeyState,
    LeaseLapsed,
    Overlap,
    Recover,
    Reschedule,
    Retry,
)
from ._schedules import AnyOf, Every, Excluding
from ._stores import MemoryStore, PostgresStore, SQLiteStore, StoreError
from ._types import (
    AlreadyRunningError,
    Backpressure,
    ClockError,
    ClosedError,
    JobEvent,
    Missed,
    NotStartedError,
    RepeatMode,
    RunOptions,
    Stats,
    TimerInfo,
    TimerWheelError,
)
from ._version import __version__

# A library's logger does not print unless the application configures logging: without a handler of
# its own, a warning would go to logging's last-resort handler (stderr). Once, here, at import.
logging.getLogger("timerwheel").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from ._drivers.asyncio import AsyncScheduler, TimerHandle


def __getattr__(name: str) -> Any:
    """AsyncScheduler and TimerHandle are imported on first use: importing asyncio costs ~35 ms."""
    if name in ("AsyncScheduler", "TimerHandle"):
        from ._drivers import asyncio as _asyncio

        return getattr(_asyncio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "BACKEND",
    "AlreadyRunningError",
    "AnyOf",
    "AsyncScheduler",
    "Backpressure",
    "CatchUp",
    "Clock",
    "ClockError",
    "ClosedError",
    "Cron",
    "Every",
    "Excluding",
    "Fence",
    "HeapScheduler",
    "HistoryEntry",
    "JobContext",
    "JobEvent",
    "KeyInfo",
    "KeyState",
    "KeyedScheduler",
    "KeyedStats",
    "LeaseLapsed",
    "MemoryStore",
    "Missed",
    "NotStartedError",
    "Overlap",
    "PostgresStore",
    "Recover",
    "RepeatMode",
    "Reschedule",
    "Retry",
    "RunOptions",
    "SQLiteStore",
    "Scheduler",
    "Stats",
    "StoreError",
    "ThreadedScheduler",
    "TimerHandle",
    "TimerInfo",
    "TimerWheel",
    "TimerWheelError",
    "__version__",
]
