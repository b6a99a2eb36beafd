"""The compiled engine dereferences typed attributes (Run.task, Run._engine, Scheduler._reports,
Scheduler._cal) without a None check. Objects that the pure-Python engine reports with AttributeError crash
the interpreter (SIGSEGV) in the compiled one: repr(Run()), Run().start(), and on a Scheduler whose
__init__ has not run (a subclass that touches it before super().__init__(), Scheduler.__new__):
.errors, .calendar, .wall(), .add_calendar(), .remove_calendar().
Each case runs in a child process; exits 1 if any child dies of a signal."""

import subprocess
import sys

CASES = {
    "repr(Run())": "from timerwheel._engine import Run; repr(Run())",
    "Run().start()": "from timerwheel._engine import Run; Run().start()",
    "uninitialised .errors": "from timerwheel import Scheduler; Scheduler.__new__(Scheduler).errors",
    "uninitialised .calendar": "from timerwheel import Scheduler; Scheduler.__new__(Scheduler).calendar",
    "subclass calling wall() before super().__init__": (
        "from timerwheel import Scheduler\n"
        "class S(Scheduler):\n"
        "    def __init__(self, clock):\n"
        "        self.started = self.wall()\n"
        "        super().__init__(clock)\n"
        "S(None)"
    ),
}
crashed = []
for name, code in CASES.items():
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    print(f"{name}: returncode {proc.returncode} {last}")
    if proc.returncode < 0:
        crashed.append(name)
assert not crashed, f"the interpreter crashed (signal) in: {crashed}"
print("ok")
