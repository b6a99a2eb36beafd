"""A Hypothesis state machine: the wheel against a plain heap-free model (a dict of id -> (due, seq, item)).

Random add, add_at (also in the past), cancel (also of stale and unknown ids), reschedule, advance (tiny
and huge steps) and next_due, for several geometries, the tiny ones forcing rounds and cascades. After
every step the wheel's bookkeeping is verified with _check().
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, multiple, rule

from .conftest import BACKENDS

GEOMETRIES = [(4, 1), (4, 2), (8, 3), (64, 4), (1024, 8)]

delays = st.one_of(
    st.just(0.0),
    st.floats(0, 0.01),  # within a few ticks
    st.floats(0, 10),
    st.floats(0, 1e7),  # far beyond the tiny wheels' spans: rounds
    st.sampled_from([0.001, 0.004, 0.016, 0.064, 0.0639999, 4.096, 262.144]),  # level boundaries
)
steps = st.one_of(st.just(0.0), st.floats(0, 0.005), st.floats(0, 5), st.floats(0, 1e6), st.just(1e9))


class WheelMachine(RuleBasedStateMachine):
    core: ModuleType
    geometry: tuple[int, int]
    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        slots, levels = self.geometry
        self.wheel = self.core.TimerWheel(0.001, slots=slots, levels=levels)
        self.model: dict[int, tuple[float, int, Any]] = {}
        self.seq = 0
        self.dead: set[int] = set()

    def _record(self, tid: int, due: float, item: Any) -> int:
        assert tid not in self.model and tid not in self.dead
        self.seq += 1
        self.model[tid] = (due, self.seq, item)
        return tid

    @rule(target=ids, delay=delays)
    def add(self, delay: float) -> int:
        due = self.wheel.now + delay
        return self._record(self.wheel.add(delay, object()), due, None)

    @rule(target=ids, offset=st.floats(-1e6, 10))
    def add_at(self, offset: float) -> int:
        due = self.wheel.now + offset
        return self._record(self.wheel.add_at(due, object()), due, None)

    @rule(target=ids, delay=delays, width=st.sampled_from([0.0, 0.0005, 0.01, 3.0]))
    def add_crowd(self, delay: float, width: float) -> Any:
        """40 timers within `width` of one due: a bucket big enough for the slot heap (HEAP_MIN is 32)."""
        tids = []
        for k in range(40):
            d = delay + width * ((k * 7) % 40) / 40
            tids.append(self._record(self.wheel.add(d, None), self.wheel.now + d, None))
        return multiple(*tids)

    @rule(delay=delays, cancel=st.booleans())
    def move_earliest(self, delay: float, cancel: bool) -> None:
        """Cancel or move the earliest timer, then ask for the next due: the slot heap's query."""
        if not self.model:
            return
        tid = min(self.model, key=lambda t: self.model[t][:2])
        if cancel:
            assert self.wheel.cancel(tid)
            del self.model[tid]
            self.dead.add(tid)
        else:
            assert self.wheel.reschedule(tid, delay)
            self.seq += 1
            self.model[tid] = (self.wheel.now + delay, self.seq, None)
        assert self.wheel.next_due() == min((due for due, _, _ in self.model.values()), default=None)

    @rule(tid=consumes(ids))
    def cancel(self, tid: int) -> None:
        assert self.wheel.cancel(tid) == (tid in self.model)
        self.model.pop(tid, None)
        self.dead.add(tid)
        assert not self.wheel.cancel(tid)

    @rule(tid=st.one_of(st.integers(-5, 2**70), st.sampled_from([0, 1, 2**32, 2**32 + 1])))
    def cancel_unknown(self, tid: int) -> None:
        assert self.wheel.cancel(tid) == (tid in self.model)
        if tid in self.model:
            del self.model[tid]
            self.dead.add(tid)

    @rule(tid=ids, delay=delays)
    def reschedule(self, tid: int, delay: float) -> None:
        pending = tid in self.model
        assert self.wheel.reschedule(tid, delay) == pending
        if pending:
            self.seq += 1
            self.model[tid] = (self.wheel.now + delay, self.seq, None)

    @rule(tid=ids, offset=st.floats(-100, 1e6))
    def reschedule_at(self, tid: int, offset: float) -> None:
        pending = tid in self.model
        due = self.wheel.now + offset
        assert self.wheel.reschedule_at(tid, due) == pending
        if pending:
            self.seq += 1
            self.model[tid] = (due, self.seq, None)

    @rule(step=steps)
    def advance(self, step: float) -> None:
        now = self.wheel.now + step
        expected = sorted((due, seq, tid) for tid, (due, seq, _) in self.model.items() if due <= now)
        fired = self.wheel.advance(now)
        assert [tid for tid, _ in fired] == [tid for _, _, tid in expected]
        for _, _, tid in expected:
            del self.model[tid]
            self.dead.add(tid)

    @rule()
    def next_due(self) -> None:
        expected = min((due for due, _, _ in self.model.values()), default=None)
        assert self.wheel.next_due() == expected

    @rule(tid=ids)
    def due(self, tid: int) -> None:
        entry = self.model.get(tid)
        assert self.wheel.due(tid) == (entry[0] if entry else None)
        assert (tid in self.wheel) == (entry is not None)

    @invariant()
    def consistent(self) -> None:
        self.wheel._check()
        assert len(self.wheel) == len(self.model)


def _machines() -> list[Any]:
    params = []
    for backend, module in BACKENDS.items():
        for geometry in GEOMETRIES:
            name = f"{backend}-{geometry[0]}x{geometry[1]}"
            machine = type(f"Wheel_{name}", (WheelMachine,), {"core": module, "geometry": geometry})
            marks = [pytest.mark.skip(reason="Cython backend not in use")] if module is None else []
            params.append(pytest.param(machine, id=name, marks=marks))
    return params


@pytest.mark.parametrize("machine", _machines())
def test_wheel_matches_model(machine: Any) -> None:
    from hypothesis import settings

    machine.TestCase.settings = settings(stateful_step_count=60)
    machine.TestCase().runTest()
