"""The keyed layer: jobs managed by business key, each with a next run that one function computes.

scheduler.py is KeyedScheduler, the public face; keys.py the key's record, the public values and the
rules about a key's times; recovery.py what a key does when it is taken up after a stop (pure
functions); runs.py a fire on its way to a run; shared.py what a shared store adds.
"""

from .keys import (
    LATENESS_BUCKETS,
    CatchUp,
    HistoryEntry,
    KeyedStats,
    KeyInfo,
    KeyState,
    Overlap,
    Recover,
    Reschedule,
    Retry,
)
from .scheduler import KeyedScheduler
from .shared import Fence, LeaseLapsed

__all__ = [
    "LATENESS_BUCKETS",
    "CatchUp",
    "Fence",
    "HistoryEntry",
    "KeyInfo",
    "KeyState",
    "KeyedScheduler",
    "KeyedStats",
    "LeaseLapsed",
    "Overlap",
    "Recover",
    "Reschedule",
    "Retry",
]
