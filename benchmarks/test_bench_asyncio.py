"""On a running asyncio loop, 10**4 or 10**5 timers pending: schedule + cancel, and the idle-timeout reset.

Each round yields to the loop every 1,000 operations, so that the loop's own upkeep of its timers (asyncio
pops and rebuilds its heap of TimerHandles in every iteration) is counted too (timerwheel.bench):

    asyncio                  loop.call_later(...).cancel(); reset: handle.cancel(); loop.call_later(...)
    AsyncScheduler           sched.call_later(...).cancel(); reset: handle.reset(...)
    AsyncScheduler-jobs      sched.cancel(sched.schedule(...)); reset: sched.reschedule(task_id, ...)
    asyncio.timeout          entering and leaving asyncio.timeout(...); reset: cm.reschedule(...)
    AsyncScheduler.timeout   the same with sched.timeout(...)
"""

from __future__ import annotations

from typing import Any

import pytest

NAMES = ["asyncio", "AsyncScheduler", "AsyncScheduler-jobs", "asyncio.timeout", "AsyncScheduler.timeout"]


@pytest.mark.parametrize("size", [10**4, 10**5])
@pytest.mark.parametrize("op", ["schedule_cancel", "reset"])
@pytest.mark.parametrize("name", NAMES)
def test_asyncio(measure: Any, name: str, op: str, size: int) -> None:
    measure(name, op, size)
