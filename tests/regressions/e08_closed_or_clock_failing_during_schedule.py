"""Found in the review of the drivers' hot record (issue 13); both older than it:
1. Something that schedule() runs closes the scheduler meanwhile (a store or a clock of the user's, a
   finalizer the garbage collector runs): schedule() returned an id, and the task stayed armed on the
   closed scheduler, against close()'s promise of returning with stats().pending == 0. It must raise
   ClosedError and arm nothing.
2. An AsyncScheduler on a loop whose call_at() reads its own failing time() (uvloop does): the first
   schedule() raised the loop's OSError instead of ClockError, and the loop handle already armed was
   cancelled without a new one: once the clock worked again, nothing ever ran.
Each case runs in a child process; exits 1 if any fails."""

import subprocess
import sys

CASES = {
    "a store that closes a ThreadedScheduler during schedule()": """
from timerwheel import ClosedError, ThreadedScheduler
from timerwheel._heap import HeapQueue
class ClosingStore(HeapQueue):
    armed = False
    def add_at(self, due, item):
        if self.armed:
            self.armed = False
            sched.close()
        return super().add_at(due, item)
store = ClosingStore()
sched = ThreadedScheduler(store=store)
sched.start()
store.armed = True
try:
    tid = sched.schedule(100, print)
except ClosedError:
    pass
else:
    raise SystemExit(f"FAIL: schedule() returned {tid} from a scheduler it closed")
assert sched.stats().pending == 0 and sched.pending() == [], (sched.stats(), sched.pending())
""",
    "an AsyncScheduler whose loop's call_at() reads a failing clock": """
import asyncio, logging
logging.disable(logging.CRITICAL)
from timerwheel import AsyncScheduler, ClockError
try:
    import uvloop
except ImportError:
    print("skipped: uvloop is not installed (the compare extra)")
    raise SystemExit(0)

class Flaky(uvloop.Loop):
    fail = False
    def time(self):
        if self.fail:
            raise OSError("loop clock broke")
        return super().time()

async def main():
    loop = asyncio.get_running_loop()
    sched = AsyncScheduler()
    sched.start()
    ran = []
    sched.schedule(0.05, lambda: ran.append("armed before"))
    loop.fail = True
    try:
        sched.schedule(0.01, print)
    except ClockError:
        pass
    except OSError as exc:
        raise SystemExit(f"FAIL: schedule() raised the loop's {exc!r}, not ClockError")
    loop.fail = False
    for _ in range(100):  # (bounded: 2 s at most)
        await asyncio.sleep(0.02)
        if ran:
            break
    assert ran == ["armed before"], f"FAIL: the task armed before the failure never ran: {ran}"
    await sched.close()

loop = Flaky()
try:
    loop.run_until_complete(main())
finally:
    loop.close()
""",
}
failed = []
for name, code in CASES.items():
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""])[-1]
    print(f"{name}: returncode {proc.returncode} {last}")
    if proc.returncode != 0:
        failed.append(name)
assert not failed, f"FAIL: {failed}"
print("ok")
