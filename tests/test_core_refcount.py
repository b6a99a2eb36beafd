"""Reference counts of stored items return to their baseline after every kind of operation cycle."""

from __future__ import annotations

import gc
import sys
from types import ModuleType

import pytest

pytestmark = pytest.mark.skipif(not hasattr(sys, "getrefcount"), reason="needs reference counting")


class Item:
    pass


def test_refcounts_return_to_baseline(core: ModuleType) -> None:
    items = [Item() for _ in range(50)]
    baseline = [sys.getrefcount(it) for it in items]
    w = core.TimerWheel(0.001, slots=4, levels=2)
    for cycle in range(3):
        ids = [w.add(0.001 * i * (cycle + 1), it) for i, it in enumerate(items)]
        ids += [w.add_at(-1.0, it) for it in items[:10]]
        for tid in ids[::3]:
            w.cancel(tid)
        for tid in ids[1::3]:
            w.reschedule(tid, 5.0)
        fired = w.advance(w.now + 0.02)
        del fired
        w.clear()
        ids2 = [w.add(0.5, it) for it in items]
        fired = w.advance(w.now + 1.0)
        assert len(fired) == len(ids2)
        del fired, ids, ids2
        gc.collect()
        assert [sys.getrefcount(it) for it in items] == baseline, f"cycle {cycle}"
    pending = [w.add(1.0, it) for it in items]
    assert len(pending) == 50
    del w
    gc.collect()
    assert [sys.getrefcount(it) for it in items] == baseline


def test_item_referencing_the_wheel_is_collected(core: ModuleType) -> None:
    """A cycle through an item (the item holds the wheel) is found by the garbage collector."""
    import weakref

    w = core.TimerWheel()
    holder = Item()
    holder.wheel = w  # type: ignore[attr-defined]
    w.add(1.0, holder)
    ref = weakref.ref(holder)
    del w, holder
    gc.collect()
    assert ref() is None
