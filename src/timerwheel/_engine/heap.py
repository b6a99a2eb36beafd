"""HeapScheduler: the Scheduler's rules on a classic binary heap, for comparisons and as a test oracle."""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable
from typing import Any

from .._clock import Clock, as_clock
from .._types import JobEvent
from .._validate import seconds as _seconds
from . import Scheduler

__all__ = ["HeapQueue", "HeapScheduler"]


class HeapQueue:
    """The classic timer heap: heapq of (due, seq, timer_id), a dict of live timers, lazy deletion.

    It has the interface of TimerWheel that the Scheduler uses (add_at, cancel, reschedule_at, advance,
    next_due, now, len), with the same ordering (due, then order of add), so that HeapScheduler and
    Scheduler differ only in the data structure. Cancel and reschedule leave the old heap entry behind as
    garbage; like asyncio, the heap is rebuilt when more than half of it is garbage. add, reschedule:
    O(log n); cancel: O(1) plus the rebuilds; advance: O(log n) per timer popped.
    """

    __slots__ = ("_heap", "_ids", "_live", "_now", "_seq")

    def __init__(self, start: float = 0.0) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._live: dict[int, tuple[float, int, Any]] = {}  # timer_id -> (due, seq, item)
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self._now = _seconds(start, "start")

    @property
    def now(self) -> float:
        """The time passed to the last advance()."""
        return self._now

    @property
    def horizon(self) -> float:
        """The first time it cannot hold: none (infinity)."""
        return math.inf

    def __len__(self) -> int:
        return len(self._live)

    def add_at(self, due: float, item: Any) -> int:
        """Add a timer due at `due`; return its id. O(log n)."""
        due = _seconds(due, "due")
        timer_id = next(self._ids)
        seq = next(self._seq)
        self._live[timer_id] = (due, seq, item)
        heapq.heappush(self._heap, (due, seq, timer_id))
        return timer_id

    def cancel(self, timer_id: int) -> bool:
        """Forget a timer; its heap entry stays behind until popped or rebuilt away."""
        if self._live.pop(timer_id, None) is None:
            return False
        self._maybe_rebuild()
        return True

    def reschedule_at(self, timer_id: int, due: float) -> bool:
        """Move a timer to `due`, same id: a fresh heap entry, the old one left as garbage. O(log n)."""
        due = _seconds(due, "due")
        entry = self._live.get(timer_id)
        if entry is None:
            return False
        seq = next(self._seq)
        self._live[timer_id] = (due, seq, entry[2])
        heapq.heappush(self._heap, (due, seq, timer_id))
        self._maybe_rebuild()
        return True

    def _maybe_rebuild(self) -> None:
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
            self._heap = [(due, seq, tid) for tid, (due, seq, _) in self._live.items()]
            heapq.heapify(self._heap)

    def _is_live(self, entry: tuple[float, int, int]) -> bool:
        live = self._live.get(entry[2])
        return live is not None and live[1] == entry[1]

    def advance(self, now: float) -> list[tuple[int, Any]]:
        """Pop every live timer with due <= now, by (due, seq)."""
        now = _seconds(now, "now")
        if now < self._now:
            raise ValueError(f"now must not go backwards: {now!r} < now {self._now!r}")
        self._now = now
        heap, live, fired = self._heap, self._live, []
        while heap and heap[0][0] <= now:
            _, seq, timer_id = heapq.heappop(heap)
            entry = live.get(timer_id)
            if entry is not None and entry[1] == seq:
                del live[timer_id]
                fired.append((timer_id, entry[2]))
        return fired

    def next_due(self) -> float | None:
        """The earliest due, after popping the garbage at the top of the heap."""
        heap = self._heap
        while heap and not self._is_live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None


class HeapScheduler(Scheduler):
    """Scheduler with exactly the same API and rules, on a binary heap instead of the timing wheel.

    It is Scheduler(clock, store=HeapQueue(...)): the baseline that benchmarks compare the wheel against,
    between equals, since the engine is the same code and only the timer store differs. resolution, slots
    and levels are accepted and ignored (the heap has no geometry).
    """

    def __init__(
        self,
        clock: Clock | Callable[[], float] | None = None,
        *,
        resolution: float | None = None,
        slots: int | None = None,
        levels: int | None = None,
        observer: Callable[[JobEvent], object] | None = None,
        error_handler: Callable[[int, BaseException], object] | None = None,
        logger: logging.Logger | None = None,
        propagate: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit),
    ) -> None:
        clock = as_clock(clock)
        super().__init__(
            clock,
            store=HeapQueue(clock()),
            observer=observer,
            error_handler=error_handler,
            logger=logger,
            propagate=propagate,
        )
