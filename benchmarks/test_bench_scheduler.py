"""The job engine on the wheel (Scheduler) and on a heap (HeapScheduler), with 10**3 to 10**6 tasks pending.

HeapScheduler is the same engine (the same code for every rule) on heapq and a dict, so the ratios compare
the data structures between equals. The registry's operations (timerwheel.bench): schedule + cancel of a
task due in 50 s; reset, a reschedule past every other task (the keep-alive); next due after the earliest
task moved; schedule + expire, per task. HeapScheduler leaves a cancelled or moved task's entry in its
heap and rebuilds the heap, O(n), once that garbage outnumbers the live tasks: medians leave most of those
rebuilds out.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("size", [10**3, 10**6])
@pytest.mark.parametrize("op", ["schedule_cancel", "reset", "next_due"])
@pytest.mark.parametrize("name", ["Scheduler", "HeapScheduler"])
def test_engine(measure: Any, name: str, op: str, size: int) -> None:
    measure(name, op, size)


@pytest.mark.parametrize("size", [10**3, 10**5])
@pytest.mark.parametrize("name", ["Scheduler", "HeapScheduler"])
def test_engine_expire(measure: Any, name: str, size: int) -> None:
    measure(name, "schedule_expire", size, rounds=5)
