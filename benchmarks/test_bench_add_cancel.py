"""add then cancel, 10**6 timers pending (1..100 s): the Cython wheel, its floor, the heap schedulers.

Every round does OPS x cancel(add(...)); report.py divides by OPS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from _workloads import (
    HeapqTimers,
    add_cancel,
    asyncio_add_cancel,
    delays,
    heap_add_cancel,
    loop_with,
    wheel_with,
)
from timerwheel import _core_c, _core_py

PENDING = 10**6
OPS = 10_000
ROUNDS = 30
SLOW_ROUNDS = 10  # asyncio keeps every cancelled handle in its heap: 11 x OPS more by the end (+11 %)

pytestmark = pytest.mark.benchmark(group="add+cancel, 10**6 pending")


@pytest.fixture(scope="module")
def pending() -> list[float]:
    return delays(PENDING)


def test_add_cancel_wheel_c_1e6(per_op, pending):
    per_op(add_cancel, wheel_with(_core_c.TimerWheel, pending), OPS, ROUNDS)


def test_add_cancel_floor_1e6(per_op, floor):
    per_op(add_cancel, floor(), OPS, ROUNDS)


def test_add_cancel_heapq_1e6(per_op, pending):
    sched = HeapqTimers(pending)
    per_op(heap_add_cancel, sched, OPS, ROUNDS, setup=sched.reset)


@pytest.fixture
def loop(pending) -> Iterator[asyncio.AbstractEventLoop]:
    loop = loop_with(pending)
    yield loop
    loop.close()


def test_add_cancel_asyncio_1e6(per_op, loop):
    per_op(asyncio_add_cancel, loop, OPS, SLOW_ROUNDS)


def test_add_cancel_wheel_py_1e6(per_op, pending):
    per_op(add_cancel, wheel_with(_core_py.TimerWheel, pending), OPS, SLOW_ROUNDS)
