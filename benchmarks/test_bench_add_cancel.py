"""schedule + cancel with 10**6 timers pending: the Cython wheel, its floor, the heap schedulers, asyncio.

The registry's schedule_cancel (timerwheel.bench): add a timer due in 50 s and cancel it, among timers due
1000 to 2000 s ahead. "floor" is the same loop on two empty Cython calls (benchmarks/_floor.pyx).
"""

from __future__ import annotations

from typing import Any

import pytest

PENDING = 10**6


@pytest.mark.parametrize("name", ["timerwheel", "floor", "heapq", "asyncio", "timerwheel-py"])
def test_schedule_cancel_1e6(measure: Any, name: str) -> None:
    measure(name, "schedule_cancel", PENDING)
