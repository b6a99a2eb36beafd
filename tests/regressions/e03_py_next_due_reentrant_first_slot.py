"""Pure-Python core (_core_py): next_due() returns, and caches, a due later than the earliest pending one when
a GC finalizer calls next_due() while the outer next_due() is in _first_slot() computing the exact epoch of a
top slot whose epoch bound is stale. The nested call tightens _top_epoch[slot] (without bumping _version); the
outer call then finds `exact == _top_epoch[slot]`, returns the slot it picked with the old, lower bound (no
longer the earliest), and commits that slot's minimum. Present before and after the slot-heap commit (HEAD
routes the exact computation through _slot_min, which allocates); the C core is not affected. A driver that
sleeps until next_due() then fires the 6.5 timer 7 s late. Exits 1 while the bug is present."""

import gc

from timerwheel._core_py import FREE, TimerWheel

bad = []
for threshold in range(1, 40):  # where the GC runs inside next_due(): every allocation point is tried
    w = TimerWheel(1.0, slots=4, levels=1)
    a = w.add_at(5.5, "a")  # tick 5: epoch 1 of slot 1
    w.add_at(13.5, "b")  # tick 13: epoch 3 of slot 1
    w.cancel(a)  # slot 1 keeps epoch bound 1 (a lower bound; its real epoch is 3)
    w.add_at(6.5, "c")  # tick 6: epoch 1 of slot 2: the earliest due
    seen = []

    class Garbage:  # a cycle whose finalizer asks next_due() (a weakref.finalize / __del__ may)
        def __init__(self):
            self.me = self

        def __del__(self):
            seen.append(w.next_due())

    gc.collect()
    gc.disable()
    Garbage()
    gc.set_threshold(threshold)
    gc.enable()
    got = w.next_due()
    gc.disable()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    gc.collect()
    true_min = min(e.due for e in w._entries if e.bucket != FREE)
    if got != true_min:
        bad.append((threshold, got, true_min, seen, w.next_due()))
for threshold, got, true_min, seen, again in bad:
    print(
        f"gc threshold {threshold}: next_due() = {got} (cached: again {again}), earliest pending {true_min}; "
        f"the finalizer's nested next_due() saw {seen}"
    )
assert not bad, "next_due() is not exact when a finalizer calls it re-entrantly"
print("ok")
