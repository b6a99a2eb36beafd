"""Found in the review of the _Plan record (issue 13): reschedule_wall() of a plain one-shot gave it its own
_Plan after the move, and that allocation may run the garbage collector. A finalizer that cancels the
task there left the cancelled task in the calendar set (s.calendar stayed 1, the task and its job were
kept alive, and a driver would go on waking to watch the wall clock for it). The plan is now made before
the move, and the task is added to the calendar only if it is still live (the compiled build had that
second window before the change: something reschedule() allocates). Exits 1 if it fails (prints FAIL)."""

from __future__ import annotations

import gc
import sys

from timerwheel import Scheduler
from timerwheel.testing import ManualClock


def trial(pad: int) -> tuple[bool, int, int]:
    clock = ManualClock(0.0, wall=1_000_000.0)
    s = Scheduler(clock)
    task_id = s.schedule(100.0, lambda: None)

    class Canceller:
        def __del__(self) -> None:
            s.cancel(task_id)

    call = s.reschedule_wall  # (bound first: no allocation at the call)
    gc.collect()
    c = Canceller()
    c.me = c  # type: ignore[attr-defined]  # cyclic garbage with a finalizer: only the collector frees it
    del c
    old = gc.get_threshold()
    gc.set_threshold(gc.get_count()[0] + pad)  # the collection runs at about the pad-th allocation
    try:
        moved = call(task_id, 1_000_050.0)
    finally:
        gc.set_threshold(*old)
    clock.advance(200.0)
    s.run_pending()
    return moved, s.calendar, s.stats().pending


def trial_at_the_clock_read() -> tuple[bool, int, int]:
    """The same finalizer, made garbage at the clock read of reschedule() (the collector then runs at the
    next allocation, wherever that falls: in the compiled build before this change too)."""
    now = [0.0]
    reads = [0]
    target = [-1]

    def clock() -> float:
        reads[0] += 1
        if reads[0] == target[0]:
            c = Canceller()
            c.me = c  # type: ignore[attr-defined]
            del c
            gc.set_threshold(1)
        return now[0]

    s = Scheduler(clock, wall_clock=lambda: 1_000_000.0 + now[0])
    task_id = s.schedule(100.0, print)

    class Canceller:
        def __del__(self) -> None:
            s.cancel(task_id)

    old = gc.get_threshold()
    target[0] = reads[0] + 2  # now() in reschedule_wall(), then reschedule()'s own reading
    try:
        moved = s.reschedule_wall(task_id, 1_000_050.0)
    finally:
        gc.set_threshold(*old)
    return moved, s.calendar, s.stats().pending


failed = False
moved, calendar, pending = trial_at_the_clock_read()
if calendar and not pending:
    print(f"FAIL: at the clock read: reschedule_wall() -> {moved}, then calendar={calendar}, nothing pending")
    failed = True
for pad in range(8):  # (each allocation of the call in turn: the one that matters moves with the code)
    moved, calendar, pending = trial(pad)
    if calendar and not pending:
        print(f"FAIL: pad {pad}: reschedule_wall() -> {moved}, then calendar={calendar} with nothing pending")
        failed = True
sys.exit(1 if failed else 0)
