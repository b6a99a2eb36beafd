"""Expire 10**6 timers, dues uniform over 1 s, one 1 ms tick at a time: advance() against heappop.

Each round starts from freshly built timers (untimed) and ends with none left; report.py divides by TIMERS.
"""

from __future__ import annotations

import heapq

import pytest

from _workloads import RESOLUTION, expire_dues, heap_expire, wheel_expire
from timerwheel import _core_c

TIMERS = 10**6
ROUNDS = 7

pytestmark = pytest.mark.benchmark(group="expire 10**6 over 1000 ticks")


@pytest.fixture(scope="module")
def dues() -> list[float]:
    return expire_dues(TIMERS)


def test_expire_wheel_c_1e6(benchmark, dues):
    def setup():
        wheel = _core_c.TimerWheel(RESOLUTION)
        add_at = wheel.add_at
        for due in dues:
            add_at(due, None)
        return (wheel,), {}

    benchmark.extra_info["ops"] = TIMERS
    assert benchmark.pedantic(wheel_expire, setup=setup, rounds=ROUNDS, warmup_rounds=1) == TIMERS


def test_expire_heapq_1e6(benchmark, dues):
    entries = [(due, seq) for seq, due in enumerate(dues)]

    def setup():
        heap = entries.copy()
        heapq.heapify(heap)
        return (heap,), {}

    benchmark.extra_info["ops"] = TIMERS
    assert benchmark.pedantic(heap_expire, setup=setup, rounds=ROUNDS, warmup_rounds=1) == TIMERS
