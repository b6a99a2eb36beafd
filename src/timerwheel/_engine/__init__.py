"""Pick the build of the job engine, once, at import: compiled wherever the core is.

The engine has one source, scheduler.py. Built with Cython (setup.py compiles that very file, with the C
types of _scheduler_c.pxd) it is the module _scheduler_c; imported as it is, it is the pure-Python engine.
Both builds pass the same tests. The compiled one is used with the Cython core (see timerwheel._core: the same
TIMERWHEEL_NO_EXTENSIONS switch turns it off), unless it is missing (a build that compiled only the
core). Every other module imports these names from here (the drivers' base is picked in _drivers, above).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core import BACKEND

if TYPE_CHECKING:
    from .scheduler import (
        TIMER_KINDS,
        Driver,
        JobContext,
        Run,
        Scheduler,
        Timer,
        TimerStore,
        WallTimer,
        log_safely,
    )

    ENGINE: str
else:
    ENGINE = "python"
    if BACKEND == "cython":
        try:
            from . import _scheduler_c as _build

            ENGINE = "cython"
        except ImportError:  # the core alone was built: the engine runs as Python
            pass
    if ENGINE == "python":
        from . import scheduler as _build
    TIMER_KINDS = _build.TIMER_KINDS
    Driver = _build.Driver
    JobContext = _build.JobContext
    Run = _build.Run
    Scheduler = _build.Scheduler
    Timer = _build.Timer
    TimerStore = _build.TimerStore
    WallTimer = _build.WallTimer
    log_safely = _build.log_safely

__all__ = [
    "ENGINE",
    "TIMER_KINDS",
    "Driver",
    "JobContext",
    "Run",
    "Scheduler",
    "Timer",
    "TimerStore",
    "WallTimer",
    "log_safely",
]
