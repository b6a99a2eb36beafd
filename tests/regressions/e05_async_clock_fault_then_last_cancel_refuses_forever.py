"""AsyncScheduler: its loop's clock fails once, so the driver arms a retry and refuses new work; then the
last task is cancelled before the retry fires. _disarm_if_idle took the retry handle off the loop, so the
fault was never cleared: every later schedule() raised ClockError, though the clock worked again (older
than issue 13; found in its review). Virtual time: nothing sleeps."""

import asyncio
import logging
import sys

from timerwheel import AsyncScheduler, ClockError
from timerwheel.testing import VirtualTimeLoop


class FlakyLoop(VirtualTimeLoop):
    """A virtual loop whose time() fails while `fail` is set, when timerwheel reads it (asyncio's own
    machinery, which runs the handles, still reads it)."""

    fail = False

    def time(self) -> float:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if self.fail and caller.startswith("timerwheel.") and caller != "timerwheel.testing":
            raise OSError("clock down")
        return super().time()


logging.disable(logging.CRITICAL)  # the failures are logged with tracebacks: expected here
loop = FlakyLoop()
results = []


async def main() -> None:
    sched = AsyncScheduler()
    sched.start()
    task = sched.schedule(1, lambda: None)
    loop.fail = True
    await asyncio.sleep(1.5)  # our handle fires at 1: the clock fails, a retry is armed
    loop.fail = False
    assert sched._fault is not None, "the clock failure was not seen"
    sched.cancel(task)  # the last task, while the retry is armed
    await asyncio.sleep(5)  # the retry fires now and finds the clock working
    for _ in range(3):
        try:
            results.append(sched.schedule(1, lambda: None) > 0)
        except ClockError as exc:
            results.append(f"ClockError: {exc}")
        await asyncio.sleep(2)
    await sched.close()


loop.run_until_complete(main())
loop.close()
print(results)
assert results == [True, True, True], f"FAIL: schedule() still refused after the clock recovered: {results}"
print("ok")
