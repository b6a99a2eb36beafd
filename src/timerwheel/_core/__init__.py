"""Pick the backend of the timing wheel, once, at import.

The Cython extension is used unless the environment variable TIMERWHEEL_NO_EXTENSIONS is set to a non-empty
value, the interpreter is not CPython, or the extension cannot be imported (an install without a compiler).
REASON says which, in words (`python -m timerwheel` prints it).
Type checkers always see the pure-Python twin, whose names the extension mirrors one for one.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING


def _not_built(error: ImportError) -> str:
    """Why the extension is not there: the reason its build recorded (setup.py), or the import's error."""
    try:
        with open(os.path.join(os.path.dirname(__file__), "build-failed.txt"), encoding="utf-8") as f:
            recorded = f.read().strip()
    except OSError:
        return f"the Cython extension is not installed ({error})"
    return f"the Cython extension could not be built when timerwheel was installed ({recorded})"


if TYPE_CHECKING:
    from .wheel import TaskTable, TimerWheel

    BACKEND: str
    REASON: str
else:
    BACKEND = "python"
    if os.environ.get("TIMERWHEEL_NO_EXTENSIONS"):
        REASON = "TIMERWHEEL_NO_EXTENSIONS is set"
    elif sys.implementation.name != "cpython":
        REASON = f"the interpreter is {sys.implementation.name}, not CPython"
    else:
        try:
            from ._wheel_c import TaskTable, TimerWheel

            BACKEND, REASON = "cython", "the compiled Cython extension"
        except ImportError as exc:  # built without a compiler: the install said so, and why
            REASON = _not_built(exc)
    if BACKEND == "python":
        from .wheel import TaskTable, TimerWheel

__all__ = ["BACKEND", "REASON", "TaskTable", "TimerWheel"]
