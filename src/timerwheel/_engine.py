"""Pick the build of the job engine and of the drivers' base, once, at import: compiled wherever the core is.

The engine has one source, _scheduler.py. Built with Cython (setup.py compiles that very file, with the C
types of _scheduler_c.pxd) it is the module _scheduler_c; imported as it is, it is the pure-Python engine.
The drivers' shared base, _driver.py, is built the same way (_driver_c, with _driver_c.pxd), and used with
the compiled engine only (its hot record types the engine as the compiled Scheduler, called as C). Both
builds pass the same tests. The compiled ones are used with the Cython core (see _core.py: the same
TIMERWHEEL_NO_EXTENSIONS switch turns them off), unless they are missing (a build that compiled only the
core). Every other module imports these names from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._core import BACKEND

if TYPE_CHECKING:
    from ._driver import (
        CALENDAR_WAKE,
        DriverBase,
        check_caller,
        engine_of,
        is_async,
        lifecycle_of,
        lock_of,
    )
    from ._scheduler import (
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
        from . import _scheduler as _build
    TIMER_KINDS = _build.TIMER_KINDS
    Driver = _build.Driver
    JobContext = _build.JobContext
    Run = _build.Run
    Scheduler = _build.Scheduler
    Timer = _build.Timer
    TimerStore = _build.TimerStore
    WallTimer = _build.WallTimer
    log_safely = _build.log_safely
    # The drivers' base imports the names above from here: it comes last.
    try:
        if ENGINE != "cython":
            raise ImportError("the pure-Python engine: the pure-Python base")
        from . import _driver_c as _drivers
    except ImportError:
        from . import _driver as _drivers
    CALENDAR_WAKE = _drivers.CALENDAR_WAKE
    DriverBase = _drivers.DriverBase
    check_caller = _drivers.check_caller
    engine_of = _drivers.engine_of
    is_async = _drivers.is_async
    lifecycle_of = _drivers.lifecycle_of
    lock_of = _drivers.lock_of

__all__ = [
    "CALENDAR_WAKE",
    "ENGINE",
    "TIMER_KINDS",
    "Driver",
    "DriverBase",
    "JobContext",
    "Run",
    "Scheduler",
    "Timer",
    "TimerStore",
    "WallTimer",
    "check_caller",
    "engine_of",
    "is_async",
    "lifecycle_of",
    "lock_of",
    "log_safely",
]
