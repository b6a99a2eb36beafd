"""The idle-timeout reset on a running asyncio loop: 10**4 or 10**5 timers pending, 10**6 resets each.

Each round runs one coroutine on the loop (the stdlib loop) that resets OPS pending timers, round-robin,
to IDLE seconds from now, yielding to the loop after every BATCH resets so that the loop's own upkeep of
its timers (asyncio pops and rebuilds its heap of TimerHandles in every iteration) is counted too:

    asyncio_handle    handle.cancel(); handle = loop.call_later(IDLE, cb)    (what Protocol servers do)
    asyncio_timeout   cm.reschedule(loop.time() + IDLE), cm an asyncio.timeout
    wheel_timeout     cm.reschedule(loop.time() + IDLE), cm an AsyncScheduler.timeout
    wheel_handle      handle.reset(IDLE), handle an AsyncScheduler.call_later        (the same, on the wheel)
    wheel_task        sched.reschedule(task_id, IDLE), an AsyncScheduler job
    floor             sink(cm, loop.time() + IDLE): the loop, the list and the clock read alone

No timer comes due during a benchmark (IDLE is 30 s). report.py divides by OPS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from _workloads import noop
from timerwheel import AsyncScheduler

SIZES = {"1e4": 10**4, "1e5": 10**5}
OPS = 10_000
ROUNDS = 100  # x OPS = 10**6 resets
BATCH = 1000
IDLE = 30.0


def _sink(*args: Any) -> None:
    """Takes what a reset takes and does nothing: the floor."""


class Env:
    """A loop, the timers pending on it, and the coroutine function of one round of resets."""

    def __init__(self, kind: str, n: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.sched: AsyncScheduler | None = None
        self.n = n
        self.cursor = 0
        self.round: Callable[[int], Any] = getattr(self, f"_{kind}")
        self.loop.run_until_complete(getattr(self, f"_setup_{kind}")())

    def close(self) -> None:
        if self.sched is not None:
            self.loop.run_until_complete(self.sched.close())
        self.loop.close()

    def _next(self, count: int) -> range:
        start = self.cursor
        self.cursor = (start + count) % self.n
        return (
            range(start, start + count)
            if start + count <= self.n
            else range(start - self.n, start + count - self.n)
        )

    # -- setups (run on the loop) --

    async def _setup_asyncio_handle(self) -> None:
        self.items: list[Any] = [self.loop.call_later(IDLE, noop) for _ in range(self.n)]

    async def _setup_asyncio_timeout(self) -> None:
        self.items = [asyncio.timeout(IDLE) for _ in range(self.n)]
        for cm in self.items:
            await cm.__aenter__()  # entered by this setup task, which ends: nothing ever expires anyway

    async def _setup_wheel_timeout(self) -> None:
        self.sched = AsyncScheduler()
        self.sched.start()
        self.items = [self.sched.timeout(IDLE) for _ in range(self.n)]
        for cm in self.items:
            await cm.__aenter__()

    async def _setup_wheel_handle(self) -> None:
        self.sched = AsyncScheduler()
        self.sched.start()
        self.items = [self.sched.call_later(IDLE, noop) for _ in range(self.n)]

    async def _setup_wheel_task(self) -> None:
        self.sched = AsyncScheduler()
        self.sched.start()
        self.items = [self.sched.schedule(IDLE, noop) for _ in range(self.n)]

    _setup_floor = _setup_wheel_timeout

    # -- one round: `ops` resets, yielding to the loop every BATCH --

    async def _asyncio_handle(self, ops: int) -> None:
        items, call_later = self.items, self.loop.call_later
        for _ in range(ops // BATCH):
            for i in self._next(BATCH):
                items[i].cancel()
                items[i] = call_later(IDLE, noop)
            await asyncio.sleep(0)

    async def _asyncio_timeout(self, ops: int) -> None:
        items, time = self.items, self.loop.time
        for _ in range(ops // BATCH):
            for i in self._next(BATCH):
                items[i].reschedule(time() + IDLE)
            await asyncio.sleep(0)

    _wheel_timeout = _asyncio_timeout

    async def _wheel_handle(self, ops: int) -> None:
        items = self.items
        for _ in range(ops // BATCH):
            for i in self._next(BATCH):
                items[i].reset(IDLE)
            await asyncio.sleep(0)

    async def _wheel_task(self, ops: int) -> None:
        assert self.sched is not None
        items, reschedule = self.items, self.sched.reschedule
        for _ in range(ops // BATCH):
            for i in self._next(BATCH):
                reschedule(items[i], IDLE)
            await asyncio.sleep(0)

    async def _floor(self, ops: int) -> None:
        items, time = self.items, self.loop.time
        for _ in range(ops // BATCH):
            for i in self._next(BATCH):
                _sink(items[i], time() + IDLE)
            await asyncio.sleep(0)


@pytest.fixture(scope="module")
def envs() -> Iterator[dict[tuple[str, int], Env]]:
    made: dict[tuple[str, int], Env] = {}
    yield made
    for env in made.values():
        env.close()


def _bench(per_op: Any, envs: dict[tuple[str, int], Env], kind: str, size: str) -> None:
    key = (kind, SIZES[size])
    if key not in envs:
        for env in envs.values():  # one size and kind at a time: 10**5 entered timeouts are ~100 MB
            env.close()
        envs.clear()
        envs[key] = Env(kind, SIZES[size])
    env = envs[key]
    per_op(lambda e, ops: e.loop.run_until_complete(e.round(ops)), env, OPS, ROUNDS)


@pytest.mark.benchmark(group="asyncio reset")
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize(
    "kind", ["asyncio_handle", "asyncio_timeout", "wheel_handle", "wheel_timeout", "wheel_task", "floor"]
)
def test_reset(per_op: Any, envs: dict[tuple[str, int], Env], kind: str, size: str) -> None:
    _bench(per_op, envs, kind, size)
