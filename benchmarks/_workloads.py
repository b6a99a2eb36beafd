"""The workloads measured by the benchmarks and by memory.py: pending timers, the loops, the rivals.

Each loop does `ops` operations and nothing else; the callers divide the time by `ops`. Every rival gets its
cheapest reasonable form: bound methods in locals, and the heapq scheduler written inline in the loop (a
real one would sit behind two Python methods and cost more).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from typing import Any

SEED = 20240611
DELAY = 50.5  # the delay of every add in the add+cancel loops: in the middle of the pending timers' spread
RESOLUTION = 0.001
EXPIRE_TICKS = 1000  # the expiry benchmark: dues uniform over [0, 1) s, advanced one 1 ms tick at a time
NOWS = [k / EXPIRE_TICKS for k in range(1, EXPIRE_TICKS + 1)]  # ends at exactly 1.0: everything is due


def delays(n: int, low: float = 1.0, high: float = 100.0) -> list[float]:
    """`n` delays uniform in [low, high), the same for every implementation (seeded)."""
    rnd = random.Random(SEED).random
    span = high - low
    return [low + span * rnd() for _ in range(n)]


def noop() -> None:
    """The callback of every asyncio handle."""


# -- pending timers -------------------------------------------------------------------------------------


def wheel_with(cls: Any, pending: list[float]) -> Any:
    """A wheel (either backend, or anything with add()) holding one timer per delay, each carrying None."""
    wheel = cls(RESOLUTION)
    add = wheel.add
    for d in pending:
        add(d, None)
    return wheel


class HeapqTimers:
    """A heap scheduler's state: a heap of (due, seq, id) and a dict of live ids; cancel = lazy deletion.

    The id is the seq (one counter). Its add and cancel are written inline in heap_add_cancel(). (Not
    timerwheel.HeapScheduler, the package's job engine on a heap.)
    """

    def __init__(self, pending: list[float]) -> None:
        self.now = 0.0
        self.counter = itertools.count(len(pending))
        self.heap = [(self.now + d, n, n) for n, d in enumerate(pending)]
        heapq.heapify(self.heap)  # O(n); heappush one by one takes minutes at 10**7
        self.live: dict[int, Any] = dict.fromkeys(range(len(pending)))
        self.base = self.heap.copy()

    def reset(self) -> None:
        """Drop the cancelled entries the last loop left in the heap (in place, so the loop's locals hold)."""
        self.heap[:] = self.base


def loop_with(pending: list[float]) -> asyncio.AbstractEventLoop:
    """A new, not running, stdlib event loop with one call_later() handle per delay in its heap."""
    loop = asyncio.new_event_loop()
    call_later = loop.call_later
    for d in pending:
        call_later(d, noop)
    return loop


# -- add + cancel ---------------------------------------------------------------------------------------


def add_cancel(wheel: Any, ops: int) -> None:
    """`ops` x cancel(add(DELAY, None)): the wheel of either backend, or the floor."""
    add, cancel = wheel.add, wheel.cancel
    for _ in range(ops):
        cancel(add(DELAY, None))


def heap_add_cancel(sched: HeapqTimers, ops: int) -> None:
    """`ops` x (heappush + dict insert) then dict pop: the heapq scheduler's add and cancel, inline."""
    heap, push, live, pop, counter = sched.heap, heapq.heappush, sched.live, sched.live.pop, sched.counter
    due = sched.now + DELAY
    for _ in range(ops):
        n = next(counter)
        push(heap, (due, n, n))
        live[n] = None
        pop(n)


def asyncio_add_cancel(loop: asyncio.AbstractEventLoop, ops: int) -> None:
    """`ops` x loop.call_later(DELAY, noop).cancel()."""
    call_later = loop.call_later
    for _ in range(ops):
        call_later(DELAY, noop).cancel()


# -- expiry ---------------------------------------------------------------------------------------------


def expire_dues(n: int) -> list[float]:
    """`n` dues uniform over [0, 1) s: EXPIRE_TICKS ticks of RESOLUTION."""
    return delays(n, 0.0, EXPIRE_TICKS * RESOLUTION)


def wheel_expire(wheel: Any) -> int:
    """advance() once per tick until every timer has expired; returns how many did."""
    advance = wheel.advance
    fired = 0
    for now in NOWS:
        fired += len(advance(now))
    return fired


def heap_expire(heap: list[tuple[float, int]]) -> int:
    """Pop (due, seq) while due <= now, once per tick, until the heap is empty; returns how many popped."""
    pop = heapq.heappop
    size = len(heap)
    for now in NOWS:
        while heap and heap[0][0] <= now:
            pop(heap)
    return size - len(heap)
