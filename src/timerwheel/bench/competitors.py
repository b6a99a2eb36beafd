"""The competitors: one class per implementation, each doing the workloads of workloads.py its cheapest
reasonable way (bound methods in locals). COMPETITORS is the registry, by name.

Competitors that need an event loop get one, and yield to it every BATCH operations, so that the loop's
own upkeep of its timers (asyncio pops cancelled handles and rebuilds its heap) is counted too.
"""

from __future__ import annotations

import asyncio
import heapq
import importlib
import itertools
import platform
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .workloads import BATCH, DELAY, FAR, RESET, STEPS, Counter, Unsupported, noop

__all__ = ["COMPETITORS", "PYPI_WHEELS", "Competitor"]


class Competitor:
    """One implementation under test. Subclasses fill in the operations; `state` is built by build(n)."""

    name = ""
    title = ""
    module = ""  # what must be importable (its version is reported)
    big = False  # also measured with 10**7 pending
    note = ""  # a remark printed under the table

    def version(self) -> str:
        mod = importlib.import_module(self.module)
        return str(getattr(mod, "__version__", platform.python_version()))

    def build(self, n: int) -> None:
        raise NotImplementedError

    def schedule_cancel(self, ops: int) -> None:
        raise NotImplementedError

    def reset(self, ops: int) -> None:
        raise NotImplementedError

    def next_due(self, ops: int) -> None:
        raise Unsupported("no public way to ask for the next due")

    def schedule_expire(self, n: int) -> int:
        """Add n timers due within the next second, run them all; return how many callbacks ran."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _cursor(self, ops: int) -> Iterator[int]:
        """Indexes of the pending timers to reset, round-robin; each call also moves `later` on by 1 s.

        The pending timers start in due order and every reset moves one after all others, so the timer
        at the cursor is always the earliest: next_due moves it, then asks.
        """
        n = len(self.items)
        start = self.pos
        self.pos = (start + ops) % n
        self.later += 1.0
        for k in range(ops):
            yield (start + k) % n

    items: list[Any]
    pos = 0
    later = RESET  # the delay of the resets of the current call


# -- timerwheel ---------------------------------------------------------------------------------------------


class Wheel(Competitor):
    name, title, module, big = "timerwheel", "timerwheel TimerWheel (Cython)", "timerwheel", True

    def _class(self) -> Any:
        import timerwheel

        if timerwheel.BACKEND != "cython":
            raise RuntimeError("the Cython backend is not in use here")
        return timerwheel.TimerWheel

    def version(self) -> str:
        import timerwheel

        self._class()
        return timerwheel.__version__

    def build(self, n: int) -> None:
        self.wheel = wheel = self._class()()
        add_at = wheel.add_at
        self.items = [add_at(FAR + i * (FAR / n), noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        add, cancel = self.wheel.add, self.wheel.cancel
        for _ in range(ops):
            cancel(add(DELAY, noop))

    def reset(self, ops: int) -> None:
        items, reschedule = self.items, self.wheel.reschedule
        for i in self._cursor(ops):
            reschedule(items[i], self.later)

    def next_due(self, ops: int) -> None:
        items, reschedule, next_due = self.items, self.wheel.reschedule, self.wheel.next_due
        for i in self._cursor(ops):  # the cursor is always at the earliest timer (see Competitor._cursor)
            reschedule(items[i], self.later)
            next_due()

    def schedule_expire(self, n: int) -> int:
        wheel = self._class()()
        add_at, advance, ran = wheel.add_at, wheel.advance, Counter()
        for i in range(n):
            add_at((i % 1000) / 1000, ran)
        for step in STEPS:
            for _, callback in advance(step):
                callback()
        return ran.count


class WheelPy(Wheel):
    name, title, big = "timerwheel-py", "timerwheel TimerWheel (pure Python)", False

    def _class(self) -> Any:
        from timerwheel._core.wheel import TimerWheel

        return TimerWheel


class Heapq(Competitor):
    """The classic heap scheduler, written inline: a heapq of (due, seq, id, callback) and a dict of the
    live id's current seq. Cancel and reset are lazy (the old entry stays in the heap until it comes up)."""

    name, title, module, big = "heapq", "heapq + dict, inline (the classic heap scheduler)", "heapq", True
    note = "heapq: written inline in the loop (a real scheduler sits behind Python methods and costs more)."

    def version(self) -> str:
        return platform.python_version()

    def build(self, n: int) -> None:
        self.now = 0.0
        self.counter = itertools.count(n)
        # Sorted by due: already a heap (heappush one by one takes minutes at 10**7).
        self.heap = [(FAR + i * (FAR / n), i, i, noop) for i in range(n)]
        self.live = {i: i for i in range(n)}
        self.items = list(range(n))

    def schedule_cancel(self, ops: int) -> None:
        heap, push, live, pop, counter = self.heap, heapq.heappush, self.live, self.live.pop, self.counter
        due = self.now + DELAY
        for _ in range(ops):
            n = next(counter)
            push(heap, (due, n, n, noop))
            live[n] = n
            pop(n)

    def reset(self, ops: int) -> None:
        heap, push, live, counter, items = self.heap, heapq.heappush, self.live, self.counter, self.items
        due = self.now + self.later
        for i in self._cursor(ops):
            tid, n = items[i], next(counter)
            push(heap, (due + i * 1e-6, n, tid, noop))
            live[tid] = n

    def next_due(self, ops: int) -> None:
        heap, push, pop, live, counter, items = (
            self.heap,
            heapq.heappush,
            heapq.heappop,
            self.live,
            self.counter,
            self.items,
        )
        due = self.now + self.later
        for i in self._cursor(ops):
            tid, n = items[i], next(counter)
            push(heap, (due + i * 1e-6, n, tid, noop))
            live[tid] = n
            while live.get(heap[0][2]) != heap[0][1]:  # dead entries at the top go now
                pop(heap)

    def schedule_expire(self, n: int) -> int:
        heap: list[tuple[float, int, int, Any]] = []
        live: dict[int, int] = {}
        push, pop, ran = heapq.heappush, heapq.heappop, Counter()
        for i in range(n):
            push(heap, ((i % 1000) / 1000, i, i, ran))
            live[i] = i
        for step in STEPS:
            while heap and heap[0][0] <= step:
                _, seq, tid, callback = pop(heap)
                if live.get(tid) == seq:
                    del live[tid]
                    callback()
        return ran.count


class Engine(Competitor):
    name, title, module, big = "Scheduler", "timerwheel Scheduler (the job engine)", "timerwheel", True

    def _make(self) -> Any:
        from timerwheel import Scheduler
        from timerwheel.testing import ManualClock

        self.clock = ManualClock()
        return Scheduler(self.clock)

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__} ({timerwheel.BACKEND})"

    def build(self, n: int) -> None:
        self.sched = sched = self._make()
        schedule = sched.schedule
        self.items = [schedule(FAR + i * (FAR / n), noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        schedule, cancel = self.sched.schedule, self.sched.cancel
        for _ in range(ops):
            cancel(schedule(DELAY, noop))

    def reset(self, ops: int) -> None:
        items, reschedule = self.items, self.sched.reschedule
        for i in self._cursor(ops):
            reschedule(items[i], self.later)

    def next_due(self, ops: int) -> None:
        items, reschedule, next_run_in = self.items, self.sched.reschedule, self.sched.next_run_in
        for i in self._cursor(ops):
            reschedule(items[i], self.later)
            next_run_in()

    def schedule_expire(self, n: int) -> int:
        sched, ran = self._make(), Counter()
        schedule, run_pending, clock = sched.schedule, sched.run_pending, self.clock
        for i in range(n):
            schedule((i % 1000) / 1000, ran)
        for step in STEPS:
            clock.set(step)
            run_pending()
        return ran.count


class Heap(Engine):
    name, title = "HeapScheduler", "timerwheel HeapScheduler (the same engine on heapq + dict)"

    def _make(self) -> Any:
        from timerwheel import HeapScheduler
        from timerwheel.testing import ManualClock

        self.clock = ManualClock()
        return HeapScheduler(self.clock)


# -- asyncio and friends ------------------------------------------------------------------------------------


class Loop(Competitor):
    """loop.call_later and TimerHandle.cancel on a running event loop; a reset is cancel + call_later."""

    name, title, module = "asyncio", "asyncio loop.call_later (stdlib loop)", "asyncio"
    note = "asyncio, uvloop, AsyncScheduler: no public way to ask for the next due."

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        if virtual:
            from timerwheel.testing import VirtualTimeLoop

            return VirtualTimeLoop(start=0.0)
        return asyncio.new_event_loop()

    def build(self, n: int) -> None:
        self.loop = loop = self._loop(virtual=True)
        call_later = loop.call_later
        self.items = [call_later(FAR + i * (FAR / n), noop) for i in range(n)]

    def _run(self, body: Callable[[int], None], ops: int) -> None:
        async def batches() -> None:
            done = 0
            while done < ops:
                k = min(BATCH, ops - done)
                body(k)
                done += k
                await asyncio.sleep(0)

        self.loop.run_until_complete(batches())

    def schedule_cancel(self, ops: int) -> None:
        call_later = self.loop.call_later

        def body(k: int) -> None:
            for _ in range(k):
                call_later(DELAY, noop).cancel()

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items, call_later = self.items, self.loop.call_later

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].cancel()
                items[i] = call_later(self.later, noop)

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=True), Counter()
        try:
            call_later = loop.call_later
            for i in range(n):
                call_later((i % 1000) / 1000, ran)
            loop.run_until_complete(asyncio.sleep(1.0))
        finally:
            loop.close()
        return ran.count

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            for handle in self.items:
                handle.cancel()
            loop.close()


class UvLoop(Loop):
    name, title, module = "uvloop", "uvloop loop.call_later", "uvloop"
    note = "uvloop: schedule_expire adds timers due now (no virtual time): they run at the next iteration."

    def version(self) -> str:
        if sys.platform == "win32":
            raise RuntimeError("uvloop does not run on Windows")
        return super().version()

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        import uvloop

        return uvloop.new_event_loop()

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=False), Counter()
        try:
            done = loop.create_future()
            call_later = loop.call_later
            for _ in range(n):
                call_later(0, ran)
            call_later(0, done.set_result, None)
            loop.run_until_complete(done)
        finally:
            loop.close()
        return ran.count


class WheelLoop(UvLoop):
    """timerwheel.loop: the same calls as asyncio's, on a loop whose timers are on the wheel."""

    name, module = "timerwheel.loop", "asyncio"
    title = "timerwheel.loop call_later (asyncio's loop, wheel timers)"
    note = "timerwheel.loop*: real time; schedule_expire adds timers due now, as for uvloop."

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__}, {timerwheel.BACKEND}"

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        from timerwheel.loop import new_event_loop

        return new_event_loop()


class WheelUvLoop(WheelLoop):
    name, title = "timerwheel.loop-uvloop", "timerwheel.loop call_later (uvloop, wheel timers)"

    def version(self) -> str:
        if sys.platform == "win32":
            raise RuntimeError("uvloop does not run on Windows")
        import uvloop

        return f"{super().version()}, uvloop {getattr(uvloop, '__version__', '?')}"

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        from timerwheel.loop import new_event_loop

        return new_event_loop("uvloop")


class _Connection:
    """What the hand-kept pattern keeps per connection: its own idle deadline."""

    __slots__ = ("close_at",)

    def __init__(self, close_at: float) -> None:
        self.close_at = close_at


class HandKept(Loop):
    """aiohttp's keep-alive: a reset stores close_at = loop.time() + idle; one loop timer per connection,
    armed at the first deadline, re-arms itself at close_at when it fires early (not measured here)."""

    name, title = "hand-kept", "hand-kept deadline, aiohttp's pattern (stdlib loop)"
    note = "hand-kept: a reset stores loop.time() + delay; it has no timer of its own to add or cancel."

    def build(self, n: int) -> None:
        self.loop = loop = self._loop(virtual=True)
        now = loop.time()
        self.items = [_Connection(now + FAR + i * (FAR / n)) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        raise Unsupported("a deadline kept by hand is not added or cancelled")

    def reset(self, ops: int) -> None:
        items, time = self.items, self.loop.time

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].close_at = time() + self.later

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        raise Unsupported("a deadline kept by hand is not added or cancelled")

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.close()


class Async(Loop):
    name, title, module = "AsyncScheduler", "timerwheel AsyncScheduler.call_later (stdlib loop)", "timerwheel"
    note = "asyncio, AsyncScheduler: schedule_expire runs on a virtual-time loop (asyncio's own code)."

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__} ({timerwheel.BACKEND})"

    def _start(self, loop: asyncio.AbstractEventLoop) -> Any:
        from timerwheel import AsyncScheduler

        sched = AsyncScheduler(loop=loop)
        sched.start()
        return sched

    def build(self, n: int) -> None:
        self.loop = self._loop(virtual=True)
        self.sched = sched = self._start(self.loop)
        call_later = sched.call_later
        self.items = [call_later(FAR + i * (FAR / n), noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        call_later = self.sched.call_later

        def body(k: int) -> None:
            for _ in range(k):
                call_later(DELAY, noop).cancel()

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items = self.items

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].reset(self.later)

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=True), Counter()
        try:
            sched = self._start(loop)
            call_later = sched.call_later
            for i in range(n):
                call_later((i % 1000) / 1000, ran)
            loop.run_until_complete(sched.sleep(1.0))
            loop.run_until_complete(sched.close())
        finally:
            loop.close()
        return ran.count

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.run_until_complete(self.sched.close())
            loop.close()


class _OnUvloop:
    """A mixin: the competitor on a uvloop loop (real time: it has no virtual clock)."""

    def version(self) -> str:
        import uvloop

        return f"{super().version()}, uvloop {getattr(uvloop, '__version__', '?')}"  # type: ignore[misc]

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        import uvloop

        return uvloop.new_event_loop()


class UvHandKept(_OnUvloop, HandKept):
    name, title = "hand-kept-uvloop", "hand-kept deadline, aiohttp's pattern (uvloop)"
    note = ""


class UvAsync(_OnUvloop, Async):
    name, title = "AsyncScheduler-uvloop", "timerwheel AsyncScheduler.call_later (uvloop)"
    note = "*-uvloop: on uvloop's real clock; schedule_expire adds timers due now, as for uvloop."

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=False), Counter()
        try:
            sched = self._start(loop)
            done = loop.create_future()
            call_later = sched.call_later
            for _ in range(n):
                call_later(0.0, ran)
            call_later(0.0, done.set_result, None)  # (after them: equal dues run in the order added)
            loop.run_until_complete(done)
            loop.run_until_complete(sched.close())
        finally:
            loop.close()
        return ran.count


class AsyncJobs(Async):
    """AsyncScheduler's jobs: schedule(), cancel() and reschedule() of a task id (not call_later handles)."""

    name, title = "AsyncScheduler-jobs", "timerwheel AsyncScheduler.schedule (jobs, stdlib loop)"
    note = ""

    def build(self, n: int) -> None:
        self.loop = self._loop(virtual=True)
        self.sched = sched = self._start(self.loop)
        schedule = sched.schedule
        self.items = [schedule(FAR + i * (FAR / n), noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        schedule, cancel = self.sched.schedule, self.sched.cancel

        def body(k: int) -> None:
            for _ in range(k):
                cancel(schedule(DELAY, noop))

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items, reschedule = self.items, self.sched.reschedule

        def body(k: int) -> None:
            for i in self._cursor(k):
                reschedule(items[i], self.later)

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=True), Counter()
        try:
            sched = self._start(loop)
            schedule = sched.schedule
            for i in range(n):
                schedule((i % 1000) / 1000, ran)
            loop.run_until_complete(sched.sleep(1.0))
            loop.run_until_complete(sched.close())
        finally:
            loop.close()
        return ran.count


class LoopTimeout(Loop):
    """asyncio.timeout(): schedule + cancel is entering and leaving one; reset is cm.reschedule()."""

    name, title = "asyncio.timeout", "asyncio.timeout (stdlib loop)"
    note = "asyncio.timeout, AsyncScheduler.timeout: schedule + cancel enters and leaves one."

    def _timeout(self, delay: float) -> Any:
        return asyncio.timeout(delay)

    def build(self, n: int) -> None:
        self.loop = self._loop(virtual=True)
        self._setup()
        self.items = []

        async def enter() -> None:  # entered by this task, which ends: nothing ever expires anyway
            for i in range(n):
                cm = self._timeout(FAR + i * (FAR / n))
                await cm.__aenter__()
                self.items.append(cm)

        self.loop.run_until_complete(enter())

    def _setup(self) -> None:
        pass

    def schedule_cancel(self, ops: int) -> None:
        timeout = self._timeout

        async def batches() -> None:
            done = 0
            while done < ops:
                k = min(BATCH, ops - done)
                for _ in range(k):
                    async with timeout(DELAY):
                        pass
                done += k
                await asyncio.sleep(0)

        self.loop.run_until_complete(batches())

    def reset(self, ops: int) -> None:
        items, time = self.items, self.loop.time

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].reschedule(time() + self.later)

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        raise Unsupported("a timeout that expires cancels its task: not a timer workload")

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.close()


class WheelTimeout(LoopTimeout):
    """AsyncScheduler.timeout(): the same as asyncio.timeout, on the wheel."""

    name, title, module = "AsyncScheduler.timeout", "timerwheel AsyncScheduler.timeout", "timerwheel"
    note = ""

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__} ({timerwheel.BACKEND})"

    def _setup(self) -> None:
        from timerwheel import AsyncScheduler

        self.sched = AsyncScheduler(loop=self.loop)
        self.sched.start()

    def _timeout(self, delay: float) -> Any:
        return self.sched.timeout(delay)

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.run_until_complete(self.sched.close())
            loop.close()


class UvLoopTimeout(_OnUvloop, LoopTimeout):
    name, title = "asyncio.timeout-uvloop", "asyncio.timeout (uvloop)"
    note = ""


class UvWheelTimeout(_OnUvloop, WheelTimeout):
    name, title = "AsyncScheduler.timeout-uvloop", "timerwheel AsyncScheduler.timeout (uvloop)"
    note = ""


class Threaded(Competitor):
    """ThreadedScheduler on the real clock, called from another thread than its own: the lock included."""

    name, title, module = (
        "ThreadedScheduler",
        "timerwheel ThreadedScheduler (from another thread)",
        "timerwheel",
    )
    note = "ThreadedScheduler: jobs run on its thread in real time, so schedule + expire is not measured."

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__} ({timerwheel.BACKEND})"

    def build(self, n: int) -> None:
        from timerwheel import ThreadedScheduler

        self.sched = sched = ThreadedScheduler(workers=0)
        sched.start()
        schedule = sched.schedule
        self.items = [schedule(FAR + i * (FAR / n), noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        schedule, cancel = self.sched.schedule, self.sched.cancel
        for _ in range(ops):
            cancel(schedule(DELAY, noop))

    def reset(self, ops: int) -> None:
        items, reschedule = self.items, self.sched.reschedule
        for i in self._cursor(ops):
            reschedule(items[i], self.later)

    def schedule_expire(self, n: int) -> int:
        raise Unsupported("its jobs run in real time on its thread")

    def close(self) -> None:
        sched = getattr(self, "sched", None)
        if sched is not None:
            sched.close()


# -- sched and Twisted --------------------------------------------------------------------------------------


class _Clock:
    """A settable clock for sched and Twisted."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sched(Competitor):
    name, title, module = "sched", "sched.scheduler (stdlib)", "sched"
    note = "sched: cancel is O(n) (list.remove, then heapify); a reset is cancel + enter."

    def _make(self) -> Any:
        import sched

        self.clock = _Clock()
        return sched.scheduler(self.clock, lambda _: None)

    def build(self, n: int) -> None:
        self.sched = s = self._make()
        enter = s.enter
        self.items = [enter(FAR + i * (FAR / n), 0, noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        enter, cancel = self.sched.enter, self.sched.cancel
        for _ in range(ops):
            cancel(enter(DELAY, 0, noop))

    def reset(self, ops: int) -> None:
        items, enter, cancel = self.items, self.sched.enter, self.sched.cancel
        for i in self._cursor(ops):
            cancel(items[i])
            items[i] = enter(self.later, 0, noop)

    def next_due(self, ops: int) -> None:
        items, enter, cancel, run = self.items, self.sched.enter, self.sched.cancel, self.sched.run
        for i in self._cursor(ops):
            cancel(items[i])
            items[i] = enter(self.later, 0, noop)
            run(blocking=False)  # runs what is due (nothing) and returns the delay to the next event

    def schedule_expire(self, n: int) -> int:
        s, ran = self._make(), Counter()
        enter, run, clock = s.enter, s.run, self.clock
        for i in range(n):
            enter((i % 1000) / 1000, 0, ran)
        for step in STEPS:
            clock.now = step
            run(blocking=False)
        return ran.count


class Twisted(Competitor):
    name, title, module = "twisted", "Twisted reactor.callLater", "twisted"
    note = "Twisted: a reset to later is lazy (O(1)); the reactor re-sorts the call when it comes up."

    def _reactor(self) -> Any:
        from twisted.internet import reactor

        self.clock = _Clock()
        setattr(reactor, "seconds", self.clock)  # noqa: B010  # time stands still unless we move it
        return reactor

    def build(self, n: int) -> None:
        self.reactor = r = self._reactor()
        call_later = r.callLater
        self.items = [call_later(FAR + i * (FAR / n), noop) for i in range(n)]
        r.runUntilCurrent()

    def _run(self, body: Callable[[int], None], ops: int) -> None:
        upkeep = self.reactor.runUntilCurrent  # the reactor's own timer upkeep, once per loop iteration
        done = 0
        while done < ops:
            k = min(BATCH, ops - done)
            body(k)
            done += k
            upkeep()

    def schedule_cancel(self, ops: int) -> None:
        call_later = self.reactor.callLater

        def body(k: int) -> None:
            for _ in range(k):
                call_later(DELAY, noop).cancel()

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items = self.items

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].reset(self.later)

        self._run(body, ops)

    def next_due(self, ops: int) -> None:
        items, timeout = self.items, self.reactor.timeout
        for i in self._cursor(ops):
            items[i].reset(self.later)
            timeout()

    def schedule_expire(self, n: int) -> int:
        r, ran = self._reactor(), Counter()
        clock, call_later, run = self.clock, r.callLater, r.runUntilCurrent
        for i in range(n):
            call_later((i % 1000) / 1000, ran)
        for step in STEPS:
            clock.now = step
            run()
        return ran.count

    def close(self) -> None:
        for call in getattr(self, "items", []):
            if call.active():
                call.cancel()
        if hasattr(self, "reactor"):
            self.reactor.runUntilCurrent()  # purges the cancelled calls from its heap


COMPETITORS: dict[str, type[Competitor]] = {
    c.name: c
    for c in (
        Wheel,
        WheelPy,
        Heapq,
        Engine,
        Heap,
        Async,
        AsyncJobs,
        Loop,
        UvLoop,
        WheelLoop,
        WheelUvLoop,
        HandKept,
        UvAsync,
        UvHandKept,
        WheelTimeout,
        LoopTimeout,
        UvWheelTimeout,
        UvLoopTimeout,
        Threaded,
        Sched,
        Twisted,
    )
}

#: Timer-wheel packages on PyPI, and why they are not measured (checked on CPython 3.11, 2026-11).
PYPI_WHEELS = {
    "timingwheel 0.4": "does not install: its setup.py imports the package, which fails (a circular import)",
    "bazaar-contrib-timer-wheel 0.3.0rc8": "does not install: requires Python >= 3.15",
    "timewheel-scheduler 0.3.0": "a crontab-style job scheduler polling once a second: no per-timer cancel",
    "millwheel 0.1.2": "a cron-like task runner on threads: no per-timer cancel or reset",
}
