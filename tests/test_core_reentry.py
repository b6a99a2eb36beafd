"""Finalizers that the garbage collector runs in the middle of a wheel operation, calling back into it.

The tests that could crash the interpreter run in a child process, so that a crash (the Cython core used
to segfault here) is a failure and not a lost test run: the first reproducers, the same through the
Scheduler, and a randomized test against a model (tests/_reentry.py) with finalizers at arbitrary
allocation points. The pure-Python twin's next_due() under re-entry is checked in this process.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).parent


def child(code: str, core: ModuleType, *args: str) -> str:
    """Run `code` (or, with args, the script tests/_reentry.py) in a fresh interpreter on `core`'s backend."""
    env = dict(os.environ)
    if core.__name__.endswith(".wheel"):
        env["TIMERWHEEL_NO_EXTENSIONS"] = "1"
    else:
        env.pop("TIMERWHEEL_NO_EXTENSIONS", None)
    argv = [sys.executable, str(HERE / "_reentry.py"), *args] if args else [sys.executable, "-c", code]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert "Exception ignored" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def test_a_finalizer_cancels_a_timer_while_advance_runs(core: ModuleType) -> None:
    """A finalizer's cancel() during advance() says True only if the timer does not come out of it (the
    Cython core segfaulted; the Python one returned True and fired it anyway)."""
    out = child(
        textwrap.dedent(f"""
        import gc, {core.__name__} as core
        w = core.TimerWheel(); ids = [w.add_at(1.0, i) for i in range(3000)]
        said = []
        class Conn:
            def __init__(s, t): s.me, s.t = s, t      # a reference cycle: only the GC frees it
            def __del__(s): said.append(w.cancel(s.t))
        gc.collect(); gc.disable(); Conn(ids[-1]); gc.enable()
        out = w.advance(1.0)
        gc.collect()
        fired = [t for t, _ in out]
        assert said == [ids[-1] not in fired], (said, len(fired))  # True only if it did not come out
        assert sorted(fired) == sorted(ids[:-1] if said[0] else ids)
        assert len(w) == 0 and w.next_due() is None
        w._check()
        print("ok", said)
        """),
        core,
    )
    assert out.startswith("ok")


def test_a_finalizer_adds_while_add_grows_the_pool(core: ModuleType) -> None:
    """A finalizer's add() while add() grows the pool gets an id of its own and the wheel stays consistent
    (it was a heap-buffer-overflow in the Cython core, and two adds with one id in Python)."""
    out = child(
        textwrap.dedent(f"""
        import gc, {core.__name__} as core
        w = core.TimerWheel()
        got, ids = [], []
        class Conn:
            __slots__ = ("me",)
            def __init__(s): s.me = s
            def __del__(s): got.append(w.add(2.0, "from __del__"))   # the slot of the adds below
        ids += [w.add(100.0, i) for i in range(17)]   # elsewhere: the slot is nearly full as the pool grows
        ids += [w.add(2.0, i) for i in range(127)]    # 144 in the pool (its capacity), 127 in the slot (128)
        gc.collect(); gc.disable(); Conn(); gc.set_threshold(1); gc.enable()
        ids.append(w.add(2.0, "grows the pool"))
        gc.set_threshold(700, 10, 10)
        ids += [w.add(2.0, i) for i in range(300)]
        everything = ids + got
        assert len(set(everything)) == len(everything) == len(w), (len(set(everything)), len(w))
        w._check()
        assert sorted(t for t, _ in w.advance(200.0)) == sorted(everything)
        print("ok")
        """),
        core,
    )
    assert out.startswith("ok")


@pytest.mark.parametrize("engine", ["Scheduler", "HeapScheduler"])
def test_weakref_finalize_cancels_tasks_due_together(core: ModuleType, engine: str) -> None:
    """The realistic form: weakref.finalize(request, sched.cancel, tid) on 20 of 3,000 tasks due at once."""
    out = child(
        textwrap.dedent(f"""
        import gc, weakref
        from timerwheel import {engine}
        from timerwheel.testing import ManualClock
        clock = ManualClock()
        sched = {engine}(clock)
        ran, said = [], {{}}
        class Request:
            def __init__(s): s.me = s
        tids = [sched.schedule(1.0, ran.append, args=(i,)) for i in range(3000)]
        clock.advance(1.0)
        gc.collect(); gc.disable()
        for i in range(0, 3000, 150):
            weakref.finalize(Request(), lambda t=tids[i]: said.__setitem__(t, sched.cancel(t)))
        gc.enable()
        n = sched.run_pending()
        gc.collect()
        assert len(said) == 20 and len(ran) == len(set(ran)) == n
        for i, t in enumerate(tids):
            assert (i in ran) != bool(said.get(t)), (i, said.get(t))   # ran, or cancelled with True
        assert sched.stats().pending == 0 and sched.stats().cancelled == sum(said.values())
        print("ok", n)
        """),
        core,
    )
    assert out.startswith("ok")


@pytest.mark.parametrize("seed", range(int(os.environ.get("TIMERWHEEL_REENTRY_SEEDS", "12"))))
def test_randomized_finalizers_against_a_model(core: ModuleType, seed: int) -> None:
    assert child("", core, core.__name__, str(seed), "400").strip() == "ok"


def test_a_finalizer_cannot_advance_while_advance_computes_its_tick(core: ModuleType) -> None:
    """On 3.11 the pure-Python _tick_of allocates (int(x)'s argument tuple), so a finalizer's advance()
    ran before the outer one marked itself as under way, and time went back; it is refused (or never
    runs there), and the outer advance() ends at its own time."""
    out = child(
        textwrap.dedent(f"""
        import gc, {core.__name__} as core
        w = core.TimerWheel(0.01, slots=4, levels=2)
        ids = [w.add(d, d) for d in (0.5, 2.0, 3.0, 9.0)]
        log = []
        class Fin:
            def __init__(s): s.me = s
            def __del__(s):
                if log == ["over"]:
                    return  # collected after the test (Cython's advance allocates nothing it could run in)
                try:
                    w.advance(5.0)
                    log.append("accepted")
                except RuntimeError:
                    log.append("refused")
        gc.disable(); gc.set_threshold(1); Fin()
        keep = [(i,) for i in range(5000)]   # empty the 1-tuple free list: int(x)'s tuple is a GC allocation
        gc.enable()
        out = w.advance(1.0)
        gc.disable(); gc.set_threshold(700, 10, 10)
        assert log in ([], ["refused"]), log
        assert w.now == 1.0 and [d for _, d in out] == [0.5]
        w._check()
        assert [d for _, d in w.advance(9.5)] == [2.0, 3.0, 9.0]
        print("ok", log)
        log[:] = ["over"]
        """),
        core,
    )
    assert out.startswith("ok")


def test_next_due_from_a_finalizer_during_advance_is_never_a_fired_timer(core: ModuleType) -> None:
    """A finalizer's next_due() during advance() never names a timer already fired (the pure-Python wheel
    kept its next_due cache until the end of advance())."""
    out = child(
        textwrap.dedent(f"""
        import gc, {core.__name__} as core
        w = core.TimerWheel(0.01)
        a, b = w.add(0.5, "a"), w.add(0.9, "b")
        c = w.add(10.0, "c")
        assert w.next_due() == 0.5  # cached
        seen = []
        class Chain:  # each link, collected, makes the next: a finalizer at nearly every allocation
            def __init__(s, n): s.n, s.me = n, s
            def __del__(s):
                if s.n:
                    seen.append((w.next_due(), a in w, b in w))
                    Chain(s.n - 1)
        gc.disable(); gc.set_threshold(1); Chain(200); gc.enable()
        w.advance(1.0)
        gc.disable(); gc.set_threshold(700, 10, 10)
        for due, a_pending, b_pending in seen:
            assert (due == 0.5) <= a_pending and (due == 0.9) <= b_pending, seen
        assert w.next_due() == 10.0
        print("ok", seen)
        """),
        core,
    )
    assert out.startswith("ok")


@pytest.mark.parametrize("op", ["add", "move_within", "move_into"])
def test_next_due_from_a_finalizer_while_a_node_is_pushed(op: str) -> None:
    """The pure-Python slot heap: a placement into its bucket pushes the node after the commit, and Python
    code may run there (the GC at the node's allocation, or at the call on 3.12+). A finalizer's next_due()
    then must see the placed timer, not the heap without it. The C twin pushes inside the commit.

    heappush is wrapped to run the finalizer's call at that very point, deterministically (a tuple from
    the free list does not run the GC, so the Chain of the other tests would rarely reach it)."""
    from timerwheel._core import wheel as core

    w = core.TimerWheel(0.001)
    crowd = [w.add_at(100.0 + k / 1000, k) for k in range(100)]  # one level-2 slot: a slot heap
    other = w.add_at(200.0, "other")  # another slot, for move_into
    w.cancel(crowd[0])
    assert w.next_due() == 100.001  # found through the slot heap, built now
    w.cancel(crowd[1])  # the cache is stale again: the next next_due() asks
    seen = []

    def push(heap: list, node: tuple) -> None:  # type: ignore[type-arg]
        seen.append(w.next_due())
        real_push(heap, node)

    real_push = core.heappush
    core.heappush = push  # type: ignore[assignment]
    try:
        if op == "add":
            w.add_at(100.0005, "new")
        elif op == "move_within":
            w.reschedule_at(crowd[50], 100.0005)
        else:
            w.reschedule_at(other, 100.0005)
    finally:
        core.heappush = real_push  # type: ignore[assignment]
    assert seen == [100.0005]
    w._check()
    assert w.next_due() == 100.0005


class AsksNextDue:
    """A cycle whose finalizer asks the wheel's next_due() (a weakref.finalize / __del__ may)."""

    def __init__(self, wheel: Any, seen: list[Any]) -> None:
        self.me, self.wheel, self.seen = self, wheel, seen

    def __del__(self) -> None:
        self.seen.append(self.wheel.next_due())


class Cancels:
    """A cycle whose finalizer cancels timers (weakref.finalize(conn, wheel.cancel, tid))."""

    def __init__(self, wheel: Any, ids: list[int]) -> None:
        self.me, self.wheel, self.ids = self, wheel, ids

    def __del__(self) -> None:
        for t in self.ids:
            self.wheel.cancel(t)


def _collect_inside(call: Any, threshold: int) -> Any:
    """call() with the collector set to run at its `threshold`-th allocation (the garbage made just before
    is collected there, and its finalizer runs inside the call); the collector's settings are restored."""
    gc.set_threshold(threshold)
    gc.enable()
    try:
        return call()
    finally:
        gc.disable()
        gc.set_threshold(700, 10, 10)
        gc.enable()
        gc.collect()


def test_next_due_is_exact_when_a_finalizer_asks_it_while_the_first_slot_is_computed() -> None:
    """The pure-Python wheel: a finalizer's next_due(), run while the outer next_due() computes the exact
    epoch of a slot whose bound is stale, tightens that bound; the outer call then returned the slot it
    had picked on the old bound, no longer the earliest, and cached its minimum (a driver sleeping until
    it fired the 6.5 timer 7 s late). Every allocation point of the call is tried. The C twin allocates
    nothing there."""
    from timerwheel._core.wheel import FREE, TimerWheel

    bad = []
    for threshold in range(1, 40):
        w = TimerWheel(1.0, slots=4, levels=1)
        a = w.add_at(5.5, "a")  # tick 5: epoch 1 of slot 1
        w.add_at(13.5, "b")  # tick 13: epoch 3 of slot 1
        w.cancel(a)  # slot 1 keeps epoch bound 1 (a lower bound; its real epoch is 3)
        w.add_at(6.5, "c")  # tick 6: epoch 1 of slot 2: the earliest due
        seen = []

        gc.collect()
        gc.disable()
        AsksNextDue(w, seen)
        got = _collect_inside(w.next_due, threshold)
        true_min = min(e.due for e in w._entries if e.bucket != FREE)
        if got != true_min:
            bad.append((threshold, got, true_min, seen, w.next_due()))
    assert not bad, "(threshold, next_due(), earliest pending, the finalizer's next_due(), cached)"


def test_next_due_when_a_finalizer_empties_the_slot_it_scans() -> None:
    """The pure-Python wheel: a finalizer that cancels every timer of the earliest slot while next_due()
    scans it (at the allocation of the slot's snapshot) made next_due() raise ValueError ('min() arg is
    an empty sequence'); a finalizer may cancel in the middle of any call, and next_due() goes on to the
    next due. Every allocation point of the call is tried."""
    from timerwheel._core.wheel import TimerWheel

    errors = []
    for threshold in range(1, 40):
        w = TimerWheel(1.0, slots=4, levels=1)
        ids = [w.add_at(1.5, i) for i in range(3)]
        w.add_at(2.5, "later")
        w.next_due()
        w.cancel(w.add_at(0.5, "x"))  # the cached next_due is invalid: the next call scans

        gc.collect()
        gc.disable()
        Cancels(w, ids)
        try:
            _collect_inside(w.next_due, threshold)
        except Exception as exc:
            errors.append((threshold, repr(exc)))
    assert not errors
