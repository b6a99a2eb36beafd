"""TimerWheel behaviour, run against both backends through the `core` fixture."""

from __future__ import annotations

import copy
import math
import pickle
from decimal import Decimal
from fractions import Fraction
from types import ModuleType
from typing import Any

import pytest


def make(core: ModuleType, *args: Any, **kwargs: Any) -> Any:
    wheel = core.TimerWheel(*args, **kwargs)
    wheel._check()
    return wheel


# -- construction ------------------------------------------------------------------------------------


def test_defaults(core: ModuleType) -> None:
    w = make(core)
    assert (w.resolution, w.slots, w.levels, w.now, len(w)) == (0.001, 64, 4, 0.0, 0)
    assert w.next_due() is None
    assert w.advance(1.0) == []
    assert repr(w) == "TimerWheel(resolution=0.001, slots=64, levels=4, now=1.0, pending=0)"


def test_start(core: ModuleType) -> None:
    w = make(core, 0.01, start=1000.0)
    assert w.now == 1000.0
    tid = w.add(0.5, "x")
    assert w.due(tid) == 1000.5
    with pytest.raises(ValueError, match="now must not go backwards"):
        w.advance(999.0)
    assert w.advance(1000.5) == [(tid, "x")]


def test_readonly_geometry(core: ModuleType) -> None:
    w = make(core)
    for name in ("resolution", "slots", "levels", "now"):
        with pytest.raises(AttributeError):
            setattr(w, name, 1)


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"resolution": 0}, ValueError, "resolution must be > 0"),
        ({"resolution": -1.0}, ValueError, "resolution must be > 0"),
        ({"resolution": math.inf}, ValueError, "resolution must be finite"),
        ({"resolution": math.nan}, ValueError, "resolution must be finite"),
        ({"resolution": "1"}, TypeError, "resolution must be a real number, not str"),
        ({"slots": 48}, ValueError, "slots must be a power of two from 4 to 4096, got 48"),
        ({"slots": 2}, ValueError, "slots must be a power of two"),
        ({"slots": 8192}, ValueError, "slots must be a power of two"),
        ({"slots": 64.0}, TypeError, "slots must be an int, not float"),
        ({"slots": True}, TypeError, "slots must be an int, not bool"),
        ({"levels": 0}, ValueError, "levels must be from 1 to 8, got 0"),
        ({"levels": 9}, ValueError, "levels must be from 1 to 8, got 9"),
        ({"levels": "4"}, TypeError, "levels must be an int, not str"),
        ({"start": math.nan}, ValueError, "start must be finite"),
    ],
)
def test_bad_geometry(core: ModuleType, kwargs: dict[str, Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=message):
        core.TimerWheel(**kwargs)


@pytest.mark.parametrize("slots", [4, 8, 64, 256, 1024, 4096])
@pytest.mark.parametrize("levels", [1, 2, 4, 8])
def test_every_documented_geometry_works(core: ModuleType, slots: int, levels: int) -> None:
    w = make(core, 0.001, slots=slots, levels=levels)
    delays = [0.0, 0.0005, 0.001, 0.063, 0.064, 0.065, 4.1, 300.0, 1e5, 1e9]
    ids = [w.add(d, d) for d in delays]
    w._check()
    assert w.next_due() == 0.0
    out = w.advance(2e9)
    assert [item for _, item in out] == delays
    assert [tid for tid, _ in out] == ids
    assert all(tid not in w for tid in ids)
    w._check()


# -- add, due, ordering ------------------------------------------------------------------------------


def test_add_returns_positive_unique_ids(core: ModuleType) -> None:
    w = make(core)
    ids = [w.add(0.001 * (i % 7), i) for i in range(1000)]
    assert len(set(ids)) == 1000
    assert all(isinstance(t, int) and t > 0 for t in ids)


def test_fires_in_due_order_ties_in_add_order(core: ModuleType) -> None:
    w = make(core)
    a = w.add(0.005, "a")
    b = w.add(0.002, "b")
    c = w.add(0.005, "c")
    d = w.add_at(0.002, "d")
    e = w.add(0.0025, "e")
    assert w.advance(0.01) == [(b, "b"), (d, "d"), (e, "e"), (a, "a"), (c, "c")]
    assert len(w) == 0


def test_exact_not_rounded_to_tick(core: ModuleType) -> None:
    """Two timers in the same 1 s tick: each comes out exactly at its own due, not at the tick."""
    w = make(core, 1.0)
    early = w.add(0.25, "early")
    late = w.add(0.75, "late")
    assert w.advance(0.2499) == []
    assert w.next_due() == 0.25
    assert w.advance(0.25) == [(early, "early")]
    assert w.advance(0.7499999) == []
    assert w.next_due() == 0.75
    assert w.advance(0.75) == [(late, "late")]


def test_never_before_due(core: ModuleType) -> None:
    w = make(core, 0.01)
    tid = w.add(1.0, None)
    t = 0.0
    while True:
        t += 0.0037
        out = w.advance(t)
        if out:
            assert t >= 1.0 and t - 0.0037 < 1.0
            assert out == [(tid, None)]
            break


def test_zero_delay_and_past_due(core: ModuleType) -> None:
    w = make(core, start=10.0)
    w.advance(20.0)
    now_id = w.add(0, "now")
    past_id = w.add_at(-1e300, "long ago")
    recent = w.add_at(19.9995, "recent")
    assert w.next_due() == -1e300
    assert w.advance(20.0) == [(past_id, "long ago"), (recent, "recent"), (now_id, "now")]


def test_advance_same_now_is_allowed(core: ModuleType) -> None:
    w = make(core)
    w.advance(1.0)
    tid = w.add(0, "x")
    assert w.advance(1.0) == [(tid, "x")]
    assert w.advance(1.0) == []


def test_due_and_contains(core: ModuleType) -> None:
    w = make(core)
    tid = w.add(2.5, "x")
    assert tid in w
    assert w.due(tid) == 2.5
    w.advance(3)
    assert tid not in w
    assert w.due(tid) is None
    assert w.due(12345) is None
    assert 0 not in w and -5 not in w and 2**200 not in w


def test_accepts_ints_and_real_numbers(core: ModuleType) -> None:
    w = make(core)
    a = w.add(1, "int")
    b = w.add(Fraction(1, 2), "fraction")
    c = w.add_at(Decimal("1.25"), "decimal")
    assert (w.due(a), w.due(b), w.due(c)) == (1.0, 0.5, 1.25)


def test_bools_are_refused_as_times_and_ids(core: ModuleType) -> None:
    """One policy everywhere: a bool is not a number of seconds, nor an id (True is almost always a slip)."""
    w = make(core)
    tid = w.add(1.0, "x")
    with pytest.raises(TypeError, match="due must be a real number, not bool"):
        w.add_at(True, "bool")
    with pytest.raises(TypeError, match="delay must be a real number, not bool"):
        w.add(False, "bool")
    with pytest.raises(TypeError, match="timer_id must be an int, not bool"):
        w.cancel(True)
    assert len(w) == 1 and w.due(tid) == 1.0


# -- cancel ------------------------------------------------------------------------------------------


def test_cancel(core: ModuleType) -> None:
    w = make(core)
    a = w.add(1.0, "a")
    b = w.add(1.0, "b")
    assert w.cancel(a) is True
    assert w.cancel(a) is False
    assert len(w) == 1
    w._check()
    assert w.advance(2.0) == [(b, "b")]
    assert w.cancel(b) is False
    assert w.cancel(999_999) is False
    assert w.cancel(-1) is False
    assert w.cancel(2**100) is False


def test_stale_id_never_touches_a_newer_timer(core: ModuleType) -> None:
    w = make(core)
    old = w.add(1.0, "old")
    assert w.cancel(old)
    new = w.add(1.0, "new")  # reuses the pool entry
    assert new != old
    assert w.cancel(old) is False
    assert w.reschedule(old, 5.0) is False
    assert w.due(old) is None and old not in w
    assert w.due(new) == 1.0
    fired = w.advance(1.0)
    assert fired == [(new, "new")]
    again = w.add(1.0, "again")
    assert again not in (old, new)
    assert w.cancel(new) is False


def test_ids_unique_over_many_reuses(core: ModuleType) -> None:
    w = make(core)
    seen = set()
    for _ in range(5000):
        tid = w.add(0.5, None)
        seen.add(tid)
        assert w.cancel(tid)
    assert len(seen) == 5000


@pytest.mark.parametrize("bad", ["1", 1.0, None, (1,)])
def test_timer_id_must_be_int(core: ModuleType, bad: Any) -> None:
    w = make(core)
    w.add(1.0, None)
    for call in (w.cancel, w.due, lambda t: w.reschedule(t, 1.0), lambda t: t in w):
        with pytest.raises(TypeError, match="timer_id must be an int"):
            call(bad)
    assert len(w) == 1


# -- reschedule --------------------------------------------------------------------------------------


def test_reschedule_keeps_id_and_moves_due(core: ModuleType) -> None:
    w = make(core)
    tid = w.add(1.0, "x")
    w.advance(0.5)
    assert w.reschedule(tid, 2.0) is True
    assert w.due(tid) == 2.5
    w._check()
    assert w.advance(1.0) == []
    assert w.advance(2.5) == [(tid, "x")]
    assert w.reschedule(tid, 1.0) is False


def test_reschedule_at(core: ModuleType) -> None:
    w = make(core)
    tid = w.add(1.0, "x")
    w.advance(0.5)
    assert w.reschedule_at(tid, 7.25) is True
    assert w.due(tid) == 7.25
    assert w.reschedule_at(tid, 0.1) is True  # in the past: comes out at the next advance
    assert w.advance(0.5) == [(tid, "x")]
    assert w.reschedule_at(tid, 1.0) is False
    with pytest.raises(ValueError, match="due must be finite"):
        w.reschedule_at(tid, math.nan)
    with pytest.raises(TypeError, match="timer_id must be an int"):
        w.reschedule_at("1", 1.0)


def test_reschedule_earlier(core: ModuleType) -> None:
    w = make(core)
    tid = w.add(100.0, "x")
    assert w.next_due() == 100.0
    assert w.reschedule(tid, 0.001)
    assert w.next_due() == 0.001
    assert w.advance(0.001) == [(tid, "x")]


def test_reschedule_counts_as_fresh_add_for_ties(core: ModuleType) -> None:
    w = make(core)
    a = w.add(1.0, "a")
    b = w.add(1.0, "b")
    w.reschedule(a, 1.0)
    assert w.advance(1.0) == [(b, "b"), (a, "a")]


def test_a_reschedule_later_is_noted_in_place_and_an_earlier_one_moves_the_timer(core: ModuleType) -> None:
    """The keep-alive case: a later due, in the same slot or another, is noted in the entry, which stays
    in its slot until time reaches it; an earlier due in another slot moves the timer at once."""
    w = make(core)  # level 2 slots are 4.096 s wide
    ids = [w.add(10.0, i) for i in range(3)]
    before = [w._location(t) for t in ids]
    assert before[0][0] == 2
    assert w.reschedule(ids[0], 10.5)
    assert w.reschedule(ids[0], 100.0)  # later, another slot: noted, not moved
    assert [w._location(t) for t in ids] == before and w.due(ids[0]) == 100.0
    w._check()
    assert w.reschedule(ids[1], 1.0)  # earlier, another slot: it moves; the others stay in their slot
    assert w._location(ids[1])[:2] != before[1][:2]
    assert [w._location(t)[:2] for t in (ids[0], ids[2])] == [before[0][:2], before[2][:2]]
    if core.__name__.endswith("_wheel_c"):  # C arrays: swap-and-shrink, the last entry fills the hole
        assert w._location(ids[2]) == before[1]
    w._check()
    assert w.next_due() == 1.0
    assert w.advance(1.0) == [(ids[1], 1)]
    assert w.advance(99.999) == [(ids[2], 2)]  # the moved one is filed where it is due as its slot passes
    assert w._location(ids[0])[:2] != before[0][:2]
    w._check()
    assert w.next_due() == 100.0
    assert w.advance(100.0) == [(ids[0], 0)]


def test_next_due_is_exact_when_there_is_no_memory_to_file_timers_moved_later(
    core: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """next_due() files a first slot of timers moved later before it answers; where filing them needs
    memory there is none of, it reads every entry instead: still exact, and the wheel whole (a driver
    arming its wake-up from next_due() must not lose its timers to a MemoryError)."""
    if core.__name__.endswith("_wheel_c"):  # C: the bucket they go to must grow; every allocation fails
        _testcapi = pytest.importorskip("_testcapi")

        def no_memory() -> Any:
            _testcapi.set_nomemory(0)
            return _testcapi.remove_mem_hooks

    else:  # Python allocates everywhere: only the filing fails

        def refuse(self: Any, bucket: int) -> None:
            raise MemoryError

        def no_memory() -> Any:
            monkeypatch.setattr(core._Wheel, "_cascade", refuse)
            return monkeypatch.undo

    unfiled = 0
    for k in range(70):  # k timers where they go: the bucket is full (must grow) for some k
        w = make(core, resolution=1.0, slots=4, levels=3)
        moved = [w.add_at(5.0 + i * 0.01, i) for i in range(3)]
        for j in range(k):
            w.add_at(1000.0 + j, j)
        w.add_at(40.0, "x")
        for tid in moved:
            w.reschedule_at(tid, 1000.5)
        where = w._location(moved[0])
        restore = no_memory()
        try:
            due = w.next_due()
        finally:
            restore()
        assert due == 40.0, k
        unfiled += w._location(moved[0]) == where
        w._check()
        assert [item for _, item in w.advance(1000.5)] == ["x"] + [0] * (k > 0) + [0, 1, 2], k
    assert unfiled  # (the case this is about was met)


@pytest.mark.parametrize(
    ("slots", "levels", "level", "slot"), [(4096, 4, 2, 200), (1024, 5, 3, 3), (64, 8, 5, 2)]
)
def test_check_accepts_a_timer_moved_later_in_a_slot_that_starts_past_2_to_the_31_ticks(
    core: ModuleType, slots: int, levels: int, level: int, slot: int
) -> None:
    """_check() computes where a slot starts in 64-bit ticks: a timer moved later and left in a slot of a
    large geometry (slot << level*bits >= 2**31) is filed right, and said so."""
    w = make(core, resolution=1.0, slots=slots, levels=levels)
    width = slots**level
    t = w.add_at(slot * width + 5.0, "x")
    assert w._location(t)[:2] == (level, slot)
    assert w.reschedule_at(t, (slot + 1) * width + 5.0)  # later: left in its slot
    assert w._location(t)[:2] == (level, slot)
    w._check()
    assert w.next_due() == (slot + 1) * width + 5.0
    w._check()
    assert w.advance((slot + 1) * width + 5.0) == [(t, "x")]


def test_next_due_is_exact_when_the_first_slot_holds_only_timers_moved_later(core: ModuleType) -> None:
    w = make(core)
    a = w.add(10.0, "a")
    b = w.add(50.0, "b")
    c = w.add(10.1, "c")
    assert w.next_due() == 10.0
    w.reschedule(a, 200.0)
    w.reschedule(c, 300.0)
    w._check()
    assert w.next_due() == 50.0  # not 10.0 nor 200.0: the slot of 10 s holds no timer due there any more
    w._check()
    assert w.advance(49.999) == []
    assert w.advance(50.0) == [(b, "b")]
    assert w.next_due() == 200.0
    assert w.advance(199.999) == []
    assert w.advance(300.0) == [(a, "a"), (c, "c")]
    w._check()


@pytest.mark.parametrize(
    ("delay", "exc", "message"),
    [
        (-0.001, ValueError, "delay must be >= 0"),
        (math.inf, ValueError, "delay must be finite"),
        (math.nan, ValueError, "delay must be finite"),
        ("1", TypeError, "delay must be a real number, not str"),
        (None, TypeError, "delay must be a real number, not NoneType"),
        (10**400, OverflowError, "delay is too large"),
        (1e300, OverflowError, "delay is too far ahead"),
    ],
)
def test_bad_delay_changes_nothing(core: ModuleType, delay: Any, exc: type[Exception], message: str) -> None:
    w = make(core)
    tid = w.add(1.0, "x")
    snapshot = (len(w), w.next_due(), w.due(tid), w._location(tid), w.now)
    with pytest.raises(exc, match=message):
        w.add(delay, "y")
    with pytest.raises(exc, match=message):
        w.reschedule(tid, delay)
    with pytest.raises(exc, match=message):
        w.reschedule(tid + 1, delay)  # argument errors come before the lookup
    assert (len(w), w.next_due(), w.due(tid), w._location(tid), w.now) == snapshot
    w._check()


@pytest.mark.parametrize(
    ("value", "exc", "message"),
    [
        (math.inf, ValueError, "must be finite"),
        (-math.inf, ValueError, "must be finite"),
        (math.nan, ValueError, "must be finite"),
        ("now", TypeError, "must be a real number, not str"),
        (1e300, OverflowError, "is too far ahead"),
    ],
)
def test_bad_due_and_now_change_nothing(
    core: ModuleType, value: Any, exc: type[Exception], message: str
) -> None:
    w = make(core)
    tid = w.add(1.0, "x")
    with pytest.raises(exc, match="due " + message):
        w.add_at(value, "y")
    with pytest.raises(exc, match="now " + message):
        w.advance(value)
    assert len(w) == 1 and w.now == 0.0 and w.due(tid) == 1.0
    w._check()


def test_time_does_not_go_backwards(core: ModuleType) -> None:
    w = make(core)
    tid = w.add(5.0, None)
    w.advance(2.0)
    with pytest.raises(ValueError, match=r"now must not go backwards: 1\.0 < wheel\.now 2\.0"):
        w.advance(1.0)
    assert w.now == 2.0 and tid in w


# -- next_due and advance over gaps ------------------------------------------------------------------


def test_next_due_is_exact_across_levels(core: ModuleType) -> None:
    w = make(core, 0.001, slots=4, levels=2)  # span 16 ticks: most of these are beyond it
    dues = [0.0031, 0.0179, 0.3337, 12.5, 0.0178]
    ids = {w.add_at(d, d): d for d in dues}
    for expected in sorted(dues):
        assert w.next_due() == expected
        out = w.advance(expected)
        assert [item for _, item in out] == [expected]
        w._check()
    assert w.next_due() is None
    assert len(ids) == 5


def test_next_due_after_cancel_of_min(core: ModuleType) -> None:
    w = make(core)
    a = w.add(1.0, "a")
    w.add(2.0, "b")
    w.add(3.0, "c")
    assert w.next_due() == 1.0
    w.cancel(a)
    assert w.next_due() == 2.0
    w.advance(2.0)
    assert w.next_due() == 3.0


def test_huge_gap_is_cheap(core: ModuleType) -> None:
    """10**13 ticks in one advance: cost follows the non-empty slots, not the ticks (no per-tick loop)."""
    w = make(core, 0.001, slots=4, levels=2)
    far = w.add(1e10, "far")  # 10**13 ticks, ~6e11 spans of this tiny wheel
    near = w.add(0.5, "near")
    assert w.advance(1e10 - 1) == [(near, "near")]
    assert w.next_due() == 1e10
    assert w.advance(1e10) == [(far, "far")]
    w._check()


def test_many_far_timers_come_out_in_order(core: ModuleType) -> None:
    w = make(core, 0.001, slots=4, levels=1)  # every timer past 4 ms counts rounds
    dues = [0.001 * k * 7.3 for k in range(200)]
    for d in reversed(dues):
        w.add_at(d, d)
    out: list[float] = []
    t = 0.0
    while len(w):
        t += 0.05
        out += [item for _, item in w.advance(t)]
        w._check()
    assert out == sorted(dues)


def test_clear(core: ModuleType) -> None:
    w = make(core)
    ids = [w.add(i * 0.7, i) for i in range(100)]
    w.advance(3.0)
    w.clear()
    w._check()
    assert len(w) == 0 and w.next_due() is None and w.now == 3.0
    assert not any(t in w for t in ids)
    assert not any(w.cancel(t) for t in ids)
    tid = w.add(1.0, "after")
    assert w.advance(4.0) == [(tid, "after")]


def test_items_are_any_object(core: ModuleType) -> None:
    w = make(core)
    items = [None, 0, "s", (1, 2), object(), w]
    ids = [w.add(0.001, it) for it in items]
    out = w.advance(1)
    assert [t for t, _ in out] == ids
    assert all(a is b for (_, a), b in zip(out, items, strict=True))


def test_not_picklable_or_copyable(core: ModuleType) -> None:
    w = make(core)
    for action in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot be pickled or copied"):
            action(w)


TEST_HOOKS = ("_age", "_check", "_location")  # private methods that the tests call on either twin


def test_twins_have_the_same_public_names(compiled_core: ModuleType) -> None:
    """The compiled core and the Python twin: TimerWheel has the same public methods and properties (and
    test hooks) in both, and every name of the twin's __all__ is in the compiled module, a constant with the
    same value, a function or class as something callable."""
    from timerwheel._core import wheel as _core_py

    def public(obj: object) -> set[str]:
        return {n for n in dir(obj) if not n.startswith("_") or n in TEST_HOOKS}

    assert public(compiled_core.TimerWheel) == public(_core_py.TimerWheel)
    for name in _core_py.__all__:
        compiled, pure = getattr(compiled_core, name), getattr(_core_py, name)
        if callable(pure):
            assert callable(compiled), name
        else:
            assert compiled == pure, name


def test_clear_with_an_item_whose_del_calls_back(core: ModuleType) -> None:
    """Items die after clear() has finished its bookkeeping: a __del__ may use the wheel."""
    w = make(core)
    ids: list[int] = []

    class CallsBack:
        def __del__(self) -> None:
            assert w.cancel(ids[-1]) is False  # already cleared
            w.add(1.0, "added from __del__")

    ids += [w.add(0, CallsBack()), w.add(0, "b")]
    w.clear()
    w._check()
    assert len(w) == 1
    a, b = w.add(0, "x"), w.add(0, "y")
    assert a != b


def test_new_without_init_is_a_default_wheel(core: ModuleType) -> None:
    w = core.TimerWheel.__new__(core.TimerWheel)
    if core.__name__.endswith(".wheel"):
        w.__init__()  # a Python object without __init__ has no state at all
    tid = w.add(1.0, "x")
    assert w.advance(2.0) == [(tid, "x")]


def test_twins_have_the_same_docstrings(compiled_core: ModuleType) -> None:
    """help(timerwheel.TimerWheel) shows the Cython class under the default backend: its docstrings are
    the Python twin's, word for word (Cython adds the signature as a first line)."""
    import inspect

    from timerwheel._core import wheel as _core_py

    def doc(obj: Any) -> str:
        text = inspect.getdoc(obj) or ""
        first, _, rest = text.partition("\n")
        return (
            rest.lstrip("\n")
            if first.endswith(")") and "(" in first and first.split("(")[0].isidentifier()
            else text
        )

    assert doc(compiled_core.TimerWheel) == doc(_core_py.TimerWheel)
    for name in dir(_core_py.TimerWheel):
        if name.startswith("__") and name not in ("__len__", "__contains__"):
            continue
        member = getattr(_core_py.TimerWheel, name)
        if (name.startswith("_") and name not in ("_check", "_location", "__len__", "__contains__")) or not (
            callable(member) or isinstance(member, property)
        ):
            continue
        assert doc(getattr(compiled_core.TimerWheel, name)) == doc(member), name


MAX_GEN = 1 << 31  # _core_py.MAX_GEN


@pytest.mark.parametrize("how", ["cancel", "advance", "clear"])
def test_an_entry_is_retired_at_its_last_generation_and_ids_fit_63_bits(core: ModuleType, how: str) -> None:
    """An entry whose generation reaches 2**31 is never handed out again: every id stays below 2**63 (the
    compiled engine keeps a task's timer id as a C integer), and no id is issued twice."""
    wheel = core.TimerWheel(0.001)
    first = wheel.add_at(1.0, "a")
    assert wheel.cancel(first)
    wheel._age(0, MAX_GEN - 1)  # entry 0, free: its next timer is of the last generation
    last = wheel.add_at(1.0, "b")
    assert last == ((MAX_GEN - 1) << 32) | 0 and last < 2**63
    if how == "cancel":
        assert wheel.cancel(last)
    elif how == "advance":
        assert wheel.advance(1.0) == [(last, "b")]
    else:
        wheel.clear()
    wheel._check()
    fresh = wheel.add_at(2.0, "c")
    assert fresh & 0xFFFFFFFF == 1  # a new entry: entry 0 is retired
    assert fresh not in (first, last) and last not in wheel and not wheel.cancel(last)
    assert [wheel.add_at(2.0, i) & 0xFFFFFFFF for i in range(3)] == [2, 3, 4]
    assert len(wheel) == 4
    wheel._check()
    assert wheel.cancel(2**63 + 5) is False and wheel.cancel(-(2**64)) is False  # no id at all
