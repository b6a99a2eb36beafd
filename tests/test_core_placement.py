"""Table-driven placement tests: level, slot and rounds at one tick either side of every level boundary.

The expected values come from base-`slots` digits, found by division (digit_level below), not from the
bit tricks of the implementation (an exclusive or, a bit length, shifts and masks).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


def digit_level(elapsed: int, tick: int, slots: int, top: int) -> int:
    """The highest position at which the base-`slots` digits of elapsed and tick differ, capped at top."""
    level = position = 0
    while elapsed != tick:
        if elapsed % slots != tick % slots:
            level = position
        elapsed, tick, position = elapsed // slots, tick // slots, position + 1
    return min(level, top)


def top_level(slots: int, levels: int) -> int:
    """The wheel's top level: the last of `levels`, or of the fewest levels whose span covers 2**62 ticks."""
    used = 1
    while used < levels and slots**used < 2**62:
        used += 1
    return used - 1


def boundary_cases(bits: int, levels: int) -> list[tuple[int, int, int]]:
    """(elapsed, tick, expected level) at +-1 tick of every level boundary, from a few starting ticks."""
    slots = 1 << bits
    top = top_level(slots, levels)
    cases = []
    for elapsed in (0, 1, slots - 1, slots**2 + 5, 3 * slots**3 - 1):
        for level in range(top + 2):
            span = slots ** (level + 1)  # the first tick of the next block at this level
            boundary = (elapsed // span + 1) * span
            for tick in (boundary - 1, boundary, boundary + 1):
                if elapsed < tick < 2**62:
                    cases.append((elapsed, tick, digit_level(elapsed, tick, slots, top)))
    return cases


@pytest.mark.parametrize(("bits", "levels"), [(2, 1), (2, 2), (3, 3), (6, 4), (10, 8)])
def test_level_slot_rounds_at_every_boundary(core: ModuleType, bits: int, levels: int) -> None:
    slots = 1 << bits
    cases = boundary_cases(bits, levels)
    assert len(cases) > 20
    top = top_level(slots, levels)
    span_bits = min((top + 1) * bits, 62)
    for elapsed, tick, level in cases:
        assert core.level_for(elapsed, tick, bits, top) == level, (elapsed, tick)
        assert core.slot_for(tick, level, bits) == (tick // slots**level) % slots
        assert core.rounds_for(elapsed, tick, span_bits) == tick // 2**span_bits - elapsed // 2**span_bits


@pytest.mark.parametrize(
    ("elapsed", "tick", "level", "slot", "rounds"),
    [
        # 64 slots, 4 levels: level spans 64, 4096, 262144, 16777216 ticks
        (0, 1, 0, 1, 0),
        (0, 63, 0, 63, 0),
        (0, 64, 1, 1, 0),
        (63, 64, 1, 1, 0),  # one tick apart, but across a level-1 block boundary: aligned blocks
        (64, 127, 0, 63, 0),
        (0, 4095, 1, 63, 0),
        (0, 4096, 2, 1, 0),
        (0, 262143, 2, 63, 0),
        (0, 262144, 3, 1, 0),
        (0, 16777215, 3, 63, 0),
        (0, 16777216, 3, 0, 1),  # beyond the span: the top level, one round on
        (0, 16777216 * 5 + 262144 * 7, 3, 7, 5),
        (16777215, 16777216, 3, 0, 1),
    ],
)
def test_default_geometry_table(
    core: ModuleType, elapsed: int, tick: int, level: int, slot: int, rounds: int
) -> None:
    assert core.level_for(elapsed, tick, 6, 3) == level
    assert core.slot_for(tick, level, 6) == slot
    assert core.rounds_for(elapsed, tick, 24) == rounds


@pytest.mark.parametrize(
    ("ticks", "level"),
    [
        (0, 4),
        (1, 0),
        (63, 0),
        (64, 1),
        (4095, 1),
        (4096, 2),
        (262143, 2),
        (262144, 3),
        (16777215, 3),
        (16777216, 3),
    ],
)
def test_wheel_places_timers_by_tick(core: ModuleType, ticks: int, level: int) -> None:
    """The wheel itself (not only the helpers) stores a timer `ticks` ahead at the expected level.

    Level 4 (the number of levels) is the CURRENT bucket: due within the current tick. Dues sit in the
    middle of their tick so that rounding cannot move them across a boundary.
    """
    w = core.TimerWheel(1.0)
    tid = w.add(ticks + 0.5, None)
    assert w._location(tid)[0] == level
    w._check()


def test_tick_rounding_at_boundaries(core: ModuleType) -> None:
    """Seconds become ticks in one function: floor((t - start) / resolution), computed in doubles.

    An exact multiple of a binary fraction lands exactly; a decimal multiple may land a tick low (0.015 *
    (1 / 0.003) is 4.999999999999999), which is harmless because the due itself is compared exactly.
    """
    w = core.TimerWheel(0.25)
    for due, level in [(0.24999, 4), (0.25, 0), (0.5, 0), (15.99, 0), (16.0, 1), (16.0 - 1e-12, 0)]:
        tid = w.add_at(due, None)
        assert w._location(tid)[0] == level, due
    w2 = core.TimerWheel(0.003)
    tid = w2.add_at(0.015, "x")
    assert w2._location(tid)[:2] == (0, 4)  # 4.999999999999999 ticks: slot 4, not 5
    assert w2.advance(0.0149999) == []
    assert w2.advance(0.015) == [(tid, "x")]


@pytest.mark.parametrize("levels", range(1, 9))
def test_helpers_and_wheel_place_by_digits_in_every_geometry(core: ModuleType, levels: int) -> None:
    """level_for, slot_for and rounds_for, in both twins, give the base-`slots` digit answers at +-1 tick of
    every level boundary, for every documented geometry (4 to 4096 slots, 1 to 8 levels); and the wheel
    itself puts a timer in that level and slot."""
    for bits in range(2, 13):
        slots = 1 << bits
        top = top_level(slots, levels)
        span = min(slots ** (top + 1), 2**62)  # the ticks of one turn of the top level
        span_bits = span.bit_length() - 1
        wheels: dict[int, Any] = {}  # one wheel per starting tick, standing at it (1 s ticks)
        for elapsed, tick, level in boundary_cases(bits, levels):
            slot = tick // slots**level % slots
            assert core.level_for(elapsed, tick, bits, top) == level, (bits, top, elapsed, tick)
            assert core.slot_for(tick, level, bits) == slot, (bits, level, tick)
            rounds = tick // span - elapsed // span
            assert core.rounds_for(elapsed, tick, span_bits) == rounds, (bits, top, elapsed, tick)
            if float(tick) == tick:  # a due of exactly `tick` seconds is in tick `tick` (1 s ticks)
                wheel = wheels.get(elapsed)
                if wheel is None:
                    wheel = wheels[elapsed] = core.TimerWheel(1.0, slots=slots, levels=levels)
                    wheel.advance(elapsed)
                tid = wheel.add_at(float(tick), None)
                assert wheel._location(tid)[:2] == (level, slot), (bits, levels, elapsed, tick)
        for wheel in wheels.values():
            wheel._check()
