"""The engine's three hot operations, three builds in one process, interleaved rounds: the pure-Python
engine of an earlier commit (default 0d659ef, before issue 13), the pure-Python engine now, and the
compiled engine now. All on the Cython wheel, the default clock, the collector off while timing; medians
of 9 rounds. Run from a checkout (git gives the earlier engine):

    python benchmarks/engine_builds.py [PENDING [COMMIT]]      # default 1e6 0d659ef
"""

import gc
import importlib
import os
import statistics
import subprocess
import sys
import time

import timerwheel

OLD = os.path.join(timerwheel.__path__[0], "_scheduler_old.py")
before = sys.argv[2] if len(sys.argv) > 2 else "0d659ef"
with open(OLD, "w") as f:
    f.write(
        subprocess.run(
            ["git", "show", f"{before}:src/timerwheel/_scheduler.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
try:
    builds = {
        "python, before": importlib.import_module("timerwheel._scheduler_old"),
        "python, now": importlib.import_module("timerwheel._engine.scheduler"),
        "compiled, now": importlib.import_module("timerwheel._engine._scheduler_c"),
    }
finally:
    os.remove(OLD)
from timerwheel.testing import ManualClock  # noqa: E402

N = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**6
OPS = 20000


def noop():
    pass


def make(mod):
    s = mod.Scheduler()
    ids = [s.schedule(1000.0 + i * (1000.0 / N), noop) for i in range(N)]
    return s, ids


def sc(s, ids):
    sch, c = s.schedule, s.cancel
    for _ in range(OPS):
        c(sch(50.0, noop))


CURSOR = [0]  # where the resets of the next round start


def rs(s, ids, st=CURSOR):
    r = s.reschedule
    base = st[0]
    st[0] += OPS
    for k in range(OPS):
        r(ids[(base + k) % len(ids)], 3000.0 + (base + k) * 1e-6)


def run(mod):
    clock = ManualClock()
    s = mod.Scheduler(clock)
    sch = s.schedule
    t = time.perf_counter()
    for i in range(OPS):
        sch((i % 1000) / 1000, noop)
    for k in range(1, 1001):
        clock.set(k / 1000)
        s.run_pending()
    return (time.perf_counter() - t) / OPS * 1e9


state = {name: make(mod) for name, mod in builds.items()}
res = {(name, op): [] for name in builds for op in ("schedule+cancel", "reschedule", "schedule+run")}
gc.collect()
gc.disable()
for _ in range(9):
    for name, mod in builds.items():
        s, ids = state[name]
        t = time.perf_counter()
        sc(s, ids)
        res[name, "schedule+cancel"].append((time.perf_counter() - t) / OPS * 1e9)
        t = time.perf_counter()
        rs(s, ids)
        res[name, "reschedule"].append((time.perf_counter() - t) / OPS * 1e9)
        res[name, "schedule+run"].append(run(mod))
gc.enable()
print(f"pending {N:,}; ns per operation, median of 9 interleaved rounds")
for op in ("schedule+cancel", "reschedule", "schedule+run"):
    base = statistics.median(res["python, before", op])
    cells = []
    for name in builds:
        median = statistics.median(res[name, op])
        cells.append(f"  {name}: {median:7,.0f} ({median / base:.2f}x)")
    print(f"{op:16}" + "".join(cells))
