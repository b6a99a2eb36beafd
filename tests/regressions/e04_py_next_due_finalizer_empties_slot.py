"""Pure-Python core (_core_py): next_due() raises ValueError('min() arg is an empty sequence') when a GC
finalizer cancels every timer of the earliest slot while next_due() is scanning it (_slot_min's
`min(list(lst), ...)`: the list's allocation runs the finalizer, the snapshot is then empty). The README
says a finalizer may call cancel() in the middle of any call; next_due() should return the next due (2.5)
instead. Present before and after the slot-heap commit; the C core is not affected. Exits 1 while present."""

import gc

from timerwheel._core_py import TimerWheel

errors = []
for threshold in range(1, 40):  # where the GC runs inside next_due(): every allocation point is tried
    w = TimerWheel(1.0, slots=4, levels=1)
    ids = [w.add_at(1.5, i) for i in range(3)]
    w.add_at(2.5, "later")
    w.next_due()
    w.cancel(w.add_at(0.5, "x"))  # the cached next_due is invalid: the next call scans

    class Garbage:  # a cycle whose finalizer cancels timers (weakref.finalize(conn, wheel.cancel, tid))
        def __init__(self):
            self.me = self

        def __del__(self):
            for t in ids:
                w.cancel(t)

    gc.collect()
    gc.disable()
    Garbage()
    gc.set_threshold(threshold)
    gc.enable()
    try:
        w.next_due()
    except Exception as exc:
        errors.append((threshold, repr(exc)))
    finally:
        gc.disable()
        gc.set_threshold(700, 10, 10)
        gc.enable()
        gc.collect()
for threshold, err in errors:
    print(f"gc threshold {threshold}: next_due() raised {err}")
assert not errors, "next_due() raised when a finalizer emptied the slot it was scanning"
print("ok")
