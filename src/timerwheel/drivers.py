"""The extension API: what a driver or a timer store of one's own implements, subclasses and calls.

These are the engine's own classes, of the build in use (compiled or pure Python, see
`timerwheel.BACKEND`): a `Timer` subclassed from here is one the engine can arm, whichever build runs.

- `Driver`: what a driver gives the engine (where runs execute, how its loop is woken).
- `Run`: a due job handed to `Driver.execute`, and how the driver reports on it.
- `Timer` and `WallTimer`: plain timers, armed with `Scheduler.add_timer` / `add_wall_timer`.
- `TimerStore`: what the engine needs from its store of timers (`TimerWheel`, or a heap).
- `TIMER_KINDS`: the values a `Timer` subclass's `kind` may take (what `Stats` counts it as).
- `KeyStore`: what a KeyedScheduler needs of a store of keys; `StoredKey`, `StoredFire` and
  `FinishedFire` are the rows it reads and writes; `Put`: what a store that counts runs itself answers
  for a put; `SharedHolder`: what a shared store calls of the
  KeyedScheduler it serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._stores import FinishedFire, KeyStore, Put, SharedHolder, StoredFire, StoredKey

if TYPE_CHECKING:
    from ._engine.scheduler import TIMER_KINDS, Driver, Run, Timer, TimerStore, WallTimer
else:
    from ._engine import TIMER_KINDS, Driver, Run, Timer, TimerStore, WallTimer

__all__ = [
    "TIMER_KINDS",
    "Driver",
    "FinishedFire",
    "KeyStore",
    "Put",
    "Run",
    "SharedHolder",
    "StoredFire",
    "StoredKey",
    "Timer",
    "TimerStore",
    "WallTimer",
]
