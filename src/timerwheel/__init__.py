"""timerwheel: O(1) timers for programs that track very many of them."""

from ._core import BACKEND, TimerWheel
from ._version import __version__

__all__ = ["BACKEND", "TimerWheel", "__version__"]
