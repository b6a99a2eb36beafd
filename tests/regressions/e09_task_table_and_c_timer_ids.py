"""Found in the review of the task table and of the C timer ids (issue 13):
1. TaskTable (compiled) crashed the interpreter for keys near 2**63: base + index overflowed.
2. Scheduler.pending() (TaskTable.values()) raised KeyError when a finalizer that the sort ran cleared
   the table (Scheduler.discard()).
3. A task id given as an int subclass (an IntEnum member) was not found: cancel() said False and the
   task ran anyway.
4. The window's front never moved past its first hole (ids start at 1): tasks that come and go in order
   made the window grow, then moved every pending task into the dict at once.
5. A timer store whose add_at() returns something that is not an id from 1 to 2**63 - 1 (-1, 2**63, a
   str) raised SystemError or OverflowError ("delay is too far ahead") in the compiled engine, and left
   the timer in the store. It must raise a TypeError naming the store, with nothing left armed.
6. (older than issue 13) reschedule() of a one-shot whose run waits, to a due the store cannot hold:
   the waiting run was forgotten before the store refused, so the task never ran again.
Exits 1 if any fails (prints FAIL)."""

from __future__ import annotations

import enum
import gc
import sys

from timerwheel import Scheduler
from timerwheel._core import TaskTable
from timerwheel._heap import HeapQueue
from timerwheel.testing import ManualClock

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    if not ok:
        failures.append(what)
        print("FAIL", what)


class T:
    pass


# 1
table = TaskTable()
table[2**63 - 1] = T()
table.pop(2**63 - 1)
table[5] = five = T()
check(table.get(5) is five and len(table) == 1, "1: a key near 2**63, then a small one")
table = TaskTable()
table[2**62 + 3] = T()
table.clear()
table[5] = five
check(table.get(5) is five and len(table) == 1, "1: a key near 2**62, clear(), then a small one")


# 2
class Discarding:
    """A cycle whose finalizer discards every task of the scheduler."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.me = self

    def __del__(self) -> None:
        self.sched.discard()


for threshold in range(1, 12):
    sched = Scheduler(ManualClock())
    ids = [sched.schedule(1.0 + i, print) for i in range(3)]
    for i in range(2000, 2060):  # some tasks in the table's dict: far ahead of the window
        sched._tasks[10_000 + i] = sched._tasks[ids[0]]
    Discarding(sched)
    gc.collect(0)
    Discarding(sched)
    old = gc.get_threshold()
    gc.set_threshold(threshold)
    try:
        sched.pending()
    except KeyError as exc:
        check(
            False, f"2: pending() raised KeyError({exc}) with a finalizer discarding (threshold {threshold})"
        )
    finally:
        gc.set_threshold(*old)
        gc.collect()


# 3
class Job(enum.IntEnum):
    FIRST = 1


clock = ManualClock()
sched = Scheduler(clock)
ran: list[int] = []
assert sched.schedule(5.0, ran.append, args=(1,)) == 1
check(sched.next_fire_time(Job.FIRST) == 5.0, "3: next_fire_time of an IntEnum id")
check(sched.cancel(Job.FIRST) is True, "3: cancel of an IntEnum id")
clock.advance(10.0)
sched.run_pending()
check(ran == [] and sched.stats().pending == 0, "3: the task cancelled through an IntEnum id ran")

# 4
sched = Scheduler(ManualClock())
ids = [sched.schedule(1.0, print) for _ in range(500)]
for _ in range(20_000):  # the oldest goes, a new one comes: a FIFO of 500
    sched.cancel(ids.pop(0))
    ids.append(sched.schedule(1.0, print))
layout = getattr(sched._tasks, "_layout", None)
if layout is not None:  # the compiled table (the pure-Python one is a dict)
    base, front, window, live, old = layout()
    check(old == 0 and live == 500, f"4: FIFO tasks moved to the dict: {layout()}")
    check(window - front <= 500 + 1024, f"4: the window kept its holes: {layout()}")


# 5
class Ids(HeapQueue):
    """A store that numbers its timers its own way: the heap's ids shifted by OFFSET."""

    OFFSET = 0

    def add_at(self, due: float, item: object) -> int:
        return super().add_at(due, item) + self.OFFSET

    def cancel(self, timer_id: int) -> bool:
        return super().cancel(timer_id - self.OFFSET)

    def reschedule_at(self, timer_id: int, due: float) -> bool:
        return super().reschedule_at(timer_id - self.OFFSET, due)

    def advance(self, now: float) -> list[tuple[int, object]]:
        return [(i + self.OFFSET, x) for i, x in super().advance(now)]


for offset in (-2, -1, 2**63 - 1):
    store = type("S", (Ids,), {"OFFSET": offset})()
    sched = Scheduler(ManualClock(), store=store)
    try:
        sched.schedule(1.0, print)
    except TypeError as exc:
        check("store" in str(exc) and "add_at" in str(exc), f"5: the message names the store: {exc}")
    except Exception as exc:
        check(False, f"5: offset {offset}: {type(exc).__name__}: {exc}")
    else:
        check(False, f"5: offset {offset}: an id out of range was taken")
    check(
        len(store) == 0 and sched.stats().pending == 0 and sched.pending() == [], f"5: {offset}: left armed"
    )
sched = Scheduler(ManualClock(), store=type("S", (Ids,), {"OFFSET": 7})())
tid = sched.schedule(1.0, print)  # a store's own ids in range: taken as they are
check(
    sched.reschedule(tid, 2.0) and sched.cancel(tid) and len(sched.store) == 0, "5: a store with its own ids"
)


# 6
class Holding:
    """A driver that takes runs and starts them later."""

    def __init__(self) -> None:
        self.runs: list[object] = []

    def execute(self, run: object) -> None:
        self.runs.append(run)

    def wake(self, due: float) -> None:
        pass

    def timed_out(self, run: object) -> None:
        pass


clock = ManualClock()
sched = Scheduler(clock)
driver = Holding()
tid = sched.schedule(1.0, print)
clock.advance(2.0)
sched.drain(sched.now(), driver)
try:
    sched.reschedule(tid, 1e300)
except OverflowError:
    pass
else:
    check(False, "6: a due beyond the store was taken")
run = driver.runs[0]
check(not run.cancelled and sched.stats().queued == 1, "6: the failed reschedule forgot the waiting run")  # type: ignore[attr-defined]

sys.exit(1 if failures else 0)
