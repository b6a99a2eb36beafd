"""schedule + cancel with 10**3 to 10**7 timers pending: is the cost flat? The wheel against heapq.

The pending timers of a size are built once, one competitor and size at a time (10**7: seconds, and
gigabytes for heapq).
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("size", [10**3, 10**5, 10**6, 10**7])
@pytest.mark.parametrize("name", ["timerwheel", "heapq"])
def test_scaling(measure: Any, name: str, size: int) -> None:
    measure(name, "schedule_cancel", size)
