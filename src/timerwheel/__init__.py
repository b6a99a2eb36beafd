"""timerwheel: O(1) timers for programs that track very many of them.

TimerWheel is the core data structure; Scheduler is the job engine on it; ThreadedScheduler drives the
engine from its own thread, with a worker pool; AsyncScheduler drives it from an asyncio event loop, with
wheel-backed timeouts; HeapScheduler is the same engine on a binary heap, for
comparisons. timerwheel.testing has ManualClock for tests.
"""

from ._asyncio import AsyncScheduler, TimerHandle
from ._core import BACKEND, TimerWheel
from ._heap import HeapScheduler
from ._scheduler import Scheduler
from ._threaded import JobContext, ThreadedScheduler
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
    TimerWheelError,
)
from ._version import __version__

__all__ = [
    "BACKEND",
    "AlreadyRunningError",
    "AsyncScheduler",
    "Backpressure",
    "ClosedError",
    "HeapScheduler",
    "JobContext",
    "JobEvent",
    "Missed",
    "NotStartedError",
    "RepeatMode",
    "Scheduler",
    "Stats",
    "ThreadedScheduler",
    "TimerHandle",
    "TimerInfo",
    "TimerWheel",
    "TimerWheelError",
    "__version__",
]
