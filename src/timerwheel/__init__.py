"""timerwheel: O(1) timers for programs that track very many of them.

TimerWheel is the core data structure; Scheduler is the job engine on it; HeapScheduler is the same engine
on a binary heap, for comparisons. timerwheel.testing has ManualClock for tests.
"""

from ._core import BACKEND, TimerWheel
from ._heap import HeapScheduler
from ._scheduler import Scheduler
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
    "Backpressure",
    "ClosedError",
    "HeapScheduler",
    "JobEvent",
    "Missed",
    "NotStartedError",
    "RepeatMode",
    "Scheduler",
    "Stats",
    "TimerInfo",
    "TimerWheel",
    "TimerWheelError",
    "__version__",
]
