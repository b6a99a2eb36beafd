"""add then cancel with 10**3 to 10**7 timers pending (1..100 s): is the cost flat? The wheel and heapq.

Every round does OPS x add+cancel; report.py divides by OPS. The pending timers of a size are built once per
module (10**7: a few seconds, ~0.6 GB for the wheel and ~1.5 GB for heapq), one size at a time.
"""

from __future__ import annotations

import pytest

from _workloads import HeapqTimers, add_cancel, delays, heap_add_cancel, wheel_with
from timerwheel import _core_c

SIZES = {"1e3": 10**3, "1e5": 10**5, "1e6": 10**6, "1e7": 10**7}
OPS = 10_000
ROUNDS = 30


@pytest.fixture(scope="module", params=SIZES)
def size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def pending(size: str) -> list[float]:
    return delays(SIZES[size])


@pytest.fixture(scope="module")
def wheel(pending):
    return wheel_with(_core_c.TimerWheel, pending)


@pytest.fixture(scope="module")
def sched(pending) -> HeapqTimers:
    return HeapqTimers(pending)


def test_scaling_wheel_c(benchmark, per_op, size, wheel):
    benchmark.group = f"add+cancel vs pending: {size}"
    per_op(add_cancel, wheel, OPS, ROUNDS)
    assert len(wheel) == SIZES[size]


def test_scaling_heapq(benchmark, per_op, size, sched):
    benchmark.group = f"add+cancel vs pending: {size}"
    per_op(heap_add_cancel, sched, OPS, ROUNDS, setup=sched.reset)
    assert len(sched.live) == SIZES[size]
