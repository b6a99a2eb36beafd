"""The compiled engine turns Scheduler into a cdef class without __weakref__ and __dict__: a Scheduler can
no longer be weakly referenced (weakref.ref, WeakMethod(sched.run_pending), WeakKeyDictionary/WeakSet of
schedulers, weakref.finalize(sched, ...)) nor carry an attribute, nor be monkeypatched per instance.
The pure-Python engine (and the engine before the patch) allows all of these. Exits 1 while the bug is present.
Run with the default build (TIMERWHEEL_NO_EXTENSIONS unset)."""

import weakref

from timerwheel import Scheduler
from timerwheel._engine import ENGINE
from timerwheel.testing import ManualClock

s = Scheduler(ManualClock())
failures = []
for what, op in [
    ("weakref.ref(sched)", lambda: weakref.ref(s)),
    ("weakref.WeakMethod(sched.run_pending)", lambda: weakref.WeakMethod(s.run_pending)),
    ("weakref.WeakSet().add(sched)", lambda: weakref.WeakSet().add(s)),
    ("sched.name = 'x'", lambda: setattr(s, "name", "x")),
    ("monkeypatch sched.now", lambda: setattr(s, "now", lambda: 0.0)),
]:
    try:
        op()
    except (TypeError, AttributeError) as exc:
        failures.append(f"{what}: {type(exc).__name__}: {exc}")
print("engine:", ENGINE)
for f in failures:
    print(" ", f)
assert not failures, "Scheduler lost weak references / instance attributes in the compiled engine"
print("ok")
