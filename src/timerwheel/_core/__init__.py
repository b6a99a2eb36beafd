"""Pick the backend of the timing wheel, once, at import.

The Cython extension is used unless the environment variable TIMERWHEEL_NO_EXTENSIONS is set to a non-empty
value, the interpreter is not CPython, or the extension cannot be imported (an install without a compiler).
Type checkers always see the pure-Python twin, whose names the extension mirrors one for one.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .wheel import TaskTable, TimerWheel

    BACKEND: str
else:
    _want_c = not os.environ.get("TIMERWHEEL_NO_EXTENSIONS") and sys.implementation.name == "cpython"
    BACKEND = "python"
    if _want_c:
        try:
            from ._wheel_c import TaskTable, TimerWheel

            BACKEND = "cython"
        except ImportError:  # built without a compiler: the install said so; fall back quietly
            pass
    if BACKEND == "python":
        from .wheel import TaskTable, TimerWheel

__all__ = ["BACKEND", "TaskTable", "TimerWheel"]
