"""Found in the second review of the compiled drivers (issue 13):
1. A job (or a call_later callback) whose schedule() saw the loop's clock fail left the fault set with no
   retry armed (the driver was dispatching, so wake() armed nothing): schedule() was refused for ever, or
   until the next task's due an hour later, though the clock worked again. Older than issue 13.
2. An AsyncScheduler subclass that overrides _check_caller() was skipped by call_later(float) and
   TimerHandle.cancel() (their inline thread check stood in for ours).
3. An AsyncScheduler whose __init__ never ran could be closed (compiled build), and then said "closed".
Virtual time: nothing sleeps."""

import asyncio
import logging
import sys

from timerwheel import AsyncScheduler, ClockError
from timerwheel.testing import VirtualTimeLoop

logging.disable(logging.CRITICAL)  # the clock failures are logged with tracebacks: expected here
failures = []


class FlakyLoop(VirtualTimeLoop):
    """time() fails while `fail` is set, except for asyncio's own machinery (which runs the handles)."""

    fail = False

    def time(self) -> float:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if self.fail and caller not in ("asyncio.base_events", "timerwheel.testing"):
            raise OSError("clock down")
        return super().time()


def fault_in_a_job(far_task: bool, via_call_later: bool) -> None:
    loop = FlakyLoop()
    seen = []

    async def main() -> None:
        sched = AsyncScheduler()
        sched.start()

        def job() -> None:
            loop.fail = True
            try:
                sched.schedule(1, print)
            except ClockError:
                seen.append("refused")
            loop.fail = False

        if via_call_later:
            sched.call_later(1, job)
        else:
            sched.schedule(1, job)
        if far_task:
            sched.schedule(3600, print)
        await asyncio.sleep(5)  # well within one back-off (at most 1 s) of the failure
        try:
            sched.schedule(1, print)
            seen.append("accepted")
        except ClockError:
            seen.append("still refused")
        await sched.close()

    loop.run_until_complete(main())
    loop.close()
    if seen != ["refused", "accepted"]:
        failures.append(f"fault in a job (far task {far_task}, call_later {via_call_later}): {seen}")


for far_task in (False, True):
    for via_call_later in (False, True):
        fault_in_a_job(far_task, via_call_later)


class Picky(AsyncScheduler):
    calls = 0

    def _check_caller(self) -> None:
        Picky.calls += 1
        super()._check_caller()


async def picky() -> None:
    sched = Picky()
    sched.start()
    for name, call in [
        ("call_later(1.0)", lambda: sched.call_later(1.0, print)),
        ("handle.cancel()", lambda: sched.call_later(1.0, print).cancel()),
        ("schedule", lambda: sched.schedule(1.0, print)),
        ("cancel", lambda: sched.cancel(1)),
    ]:
        before = Picky.calls
        call()
        if Picky.calls == before:
            failures.append(f"{name} did not call the subclass's _check_caller")
    await sched.close()


loop = VirtualTimeLoop()
loop.run_until_complete(picky())
loop.close()

blank = AsyncScheduler.__new__(AsyncScheduler)
try:
    asyncio.run(blank.close())
except AttributeError:
    pass
else:
    failures.append("close() of an uninitialised AsyncScheduler succeeded")

print(failures)
assert not failures, f"FAIL: {failures}"
print("ok")
