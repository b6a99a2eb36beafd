"""Found in the review of the compiled drivers' base (issue 13):
1. A driver subclass that overrides _check_caller() was no longer checked on schedule/cancel/reschedule
   (the hot paths read a class flag it did not set); pending() still refused the same caller.
2. A driver whose __init__ never ran: in the compiled build, AsyncScheduler.start() succeeded (state
   None passed as new) and schedule() said "the scheduler is closed". They must raise, schedule() and
   cancel() AttributeError as in the pure-Python build, and the interpreter must not crash.
3. AsyncScheduler made outside a loop: wall() raised AttributeError on None; it says NotStartedError.
4. ThreadedScheduler.cancel() asked len(store) on every cancel, for a hook it does not have: a store
   whose __len__ fails then failed cancels that had happened.
Each case runs in a child process; exits 1 if any fails."""

import subprocess
import sys

CASES = {
    "overridden _check_caller is called by the hot paths": """
from timerwheel import ThreadedScheduler
class Picky(ThreadedScheduler):
    def _check_caller(self):
        raise PermissionError("not you")
s = Picky(); s.start()
for name, call in [("schedule", lambda: s.schedule(1, print)), ("cancel", lambda: s.cancel(1)),
                   ("reschedule", lambda: s.reschedule(1, 1.0)), ("pending", s.pending)]:
    try:
        call()
    except PermissionError:
        continue
    raise SystemExit(f"FAIL: {name} did not call the overridden _check_caller")
s.close()
""",
    "start() of an uninitialised ThreadedScheduler": """
from timerwheel import ThreadedScheduler
try:
    ThreadedScheduler.__new__(ThreadedScheduler).start()
except (AttributeError, TypeError):  # (its lock is missing, or None in the compiled build)
    pass
else:
    raise SystemExit("FAIL: start() succeeded")
""",
    "start() of an uninitialised AsyncScheduler": """
from timerwheel import AsyncScheduler
try:
    AsyncScheduler.__new__(AsyncScheduler).start()
except (AttributeError, RuntimeError):
    pass
else:
    raise SystemExit("FAIL: start() succeeded")
""",
    "schedule() and cancel() of an uninitialised driver": """
from timerwheel import AsyncScheduler, ThreadedScheduler
for cls in (ThreadedScheduler, AsyncScheduler):
    for name in ("schedule", "cancel", "reschedule"):
        s = cls.__new__(cls)
        args = {"schedule": (1, print), "cancel": (1,), "reschedule": (1, 1.0)}[name]
        try:
            getattr(s, name)(*args)
        except AttributeError:
            continue
        except Exception as exc:
            raise SystemExit(f"FAIL: {cls.__name__}.{name} raised {exc!r}, not AttributeError")
        raise SystemExit(f"FAIL: {cls.__name__}.{name} succeeded")
""",
    "wall() before an AsyncScheduler has a loop": """
from timerwheel import AsyncScheduler, NotStartedError
try:
    AsyncScheduler().wall()
except NotStartedError:
    pass
""",
    "cancel() does not ask len(store) for a hook ThreadedScheduler lacks": """
from timerwheel import ThreadedScheduler
from timerwheel._heap import HeapQueue
class Store(HeapQueue):
    def __len__(self):
        raise RuntimeError("len() asked")
s = ThreadedScheduler(store=Store()); s.start()
ids = [s.schedule(100, print) for _ in range(3)]
assert [s.cancel(i) for i in ids] == [True, True, True]
s.close()
""",
}
failed = []
for name, code in CASES.items():
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    print(f"{name}: returncode {proc.returncode} {last}")
    if proc.returncode != 0:
        failed.append(name)
assert not failed, f"FAIL: {failed}"
print("ok")
