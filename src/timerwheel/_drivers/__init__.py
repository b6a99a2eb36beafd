"""Pick the build of the drivers' shared base, once, at import: compiled wherever the engine is.

The base has one source, base.py. Built with Cython (setup.py compiles that very file, with the C
types of _base_c.pxd) it is the module _base_c, whose hot record types the engine as the compiled
Scheduler and calls it as C: it is used with the compiled engine only (see timerwheel._engine). Imported as it
is, it is the pure-Python base. Both builds pass the same tests. The drivers (ThreadedScheduler,
AsyncScheduler) and the keyed layer import these names from here; the engine does not know of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._engine import ENGINE

if TYPE_CHECKING:
    from .base import (
        CALENDAR_WAKE,
        DriverBase,
        TimeoutTypes,
        TimerHandle,
        call_later_fast,
        check_caller,
        engine_of,
        is_async,
        lifecycle_of,
        lock_of,
        time_after,
        timeout_enter,
        timeout_exit,
        timeout_fast,
        timeout_init,
        timeout_reschedule,
        timeout_types,
    )
else:
    try:
        if ENGINE != "cython":
            raise ImportError("the pure-Python engine: the pure-Python base")
        from . import _base_c as _build
    except ImportError:
        from . import base as _build
    CALENDAR_WAKE = _build.CALENDAR_WAKE
    DriverBase = _build.DriverBase
    TimerHandle = _build.TimerHandle
    TimeoutTypes = _build.TimeoutTypes
    call_later_fast = _build.call_later_fast
    check_caller = _build.check_caller
    engine_of = _build.engine_of
    is_async = _build.is_async
    lifecycle_of = _build.lifecycle_of
    lock_of = _build.lock_of
    time_after = _build.time_after
    timeout_enter = _build.timeout_enter
    timeout_exit = _build.timeout_exit
    timeout_fast = _build.timeout_fast
    timeout_init = _build.timeout_init
    timeout_reschedule = _build.timeout_reschedule
    timeout_types = _build.timeout_types

__all__ = [
    "CALENDAR_WAKE",
    "DriverBase",
    "TimeoutTypes",
    "TimerHandle",
    "call_later_fast",
    "check_caller",
    "engine_of",
    "is_async",
    "lifecycle_of",
    "lock_of",
    "time_after",
    "timeout_enter",
    "timeout_exit",
    "timeout_fast",
    "timeout_init",
    "timeout_reschedule",
    "timeout_types",
]
