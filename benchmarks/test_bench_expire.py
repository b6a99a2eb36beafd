"""schedule + expire: add 10**6 timers due over the next second (1000 distinct dues) and run them all,
moving time in 1 ms steps; per timer. The wheel, heapq, the job engine on each, and asyncio."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("name", ["timerwheel", "heapq", "Scheduler", "HeapScheduler", "asyncio"])
def test_schedule_expire_1e6(measure: Any, name: str) -> None:
    measure(name, "schedule_expire", 10**6, rounds=3)
