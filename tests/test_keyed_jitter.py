"""Delayed fires (jitter=, spread=): each fire of a key at a point P of its schedule runs at P + a delay
drawn from a hash of the key (spread: one phase per key) and of P (jitter: one per fire), forward only,
never as far as the next point; the same in every process and every life, so that a restart and a
shared store's processes agree on it.

Time comes from a ManualClock."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import KeyedScheduler, KeyState, MemoryStore, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

from . import test_keyed_pause as pause
from .test_keyed_pause import T0

clock, store = pause.clock, pause.store  # (the fixtures: a ManualClock; a MemoryStore, a SQLiteStore)


class Life(pause.Life):
    """A life (see test_durable) whose runs record (key, start) in seconds after T0, its keys every 10 s
    by default."""


def starts(life: Life, key: Any) -> list[float]:
    return [at for k, at in life.ran if k == key]


def test_jitter_delays_each_fire_forward_by_its_own_amount_less_than_the_jitter(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock, jitter=3.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(100)
    ran = starts(life, "k")
    # one run for each of the points 0 (now, at start(): its delayed fire is still to come), 10, ... 90
    assert len(ran) == 10
    delays = [at - point for at, point in zip(ran, range(0, 100, 10), strict=True)]
    assert all(0 <= d < 3.0 for d in delays)
    assert len(set(delays)) > 5  # (each its own)
    info = life.keyed.get("k")
    assert info is not None and info.jitter == 3.0 and info.spread == 0.0
    life.keyed.close()


def test_spread_delays_every_fire_of_a_key_by_one_amount_and_spreads_the_keys(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock, spread=8.0)
    for key in "abcdefgh":
        life.keyed.upsert(key)
    life.keyed.start()
    life.advance(60)
    phases = {}
    for key in "abcdefgh":
        ran = starts(life, key)
        offsets = {round(at % 10, 6) for at in ran}
        assert len(offsets) == 1  # (one phase per key)
        phases[key] = offsets.pop()
        assert 0 <= phases[key] < 8.0
    assert len(set(phases.values())) == 8  # (the keys spread over the period)
    life.keyed.close()


def test_a_delay_never_reaches_the_next_fire(store: Any, clock: ManualClock) -> None:
    """A jitter larger than the period: each delay is scaled into the room before the next point."""
    life = Life(store, clock, jitter=1000.0, spread=1000.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(200)
    ran = starts(life, "k")
    # (the points 10, ... 190: the reach, 2,000 s, holds more than 64 points before now, and start()
    # does not look at them: the point of 0 is not planned)
    assert len(ran) == 19
    for i, at in enumerate(ran):
        assert 10 * (i + 1) <= at < 10 * (i + 2)  # (each in its own period, in order)
    life.keyed.close()


def test_the_delays_are_the_same_in_another_process_and_another_life(tmp_path: Path) -> None:
    """The delay of a fire is drawn from a hash of the key and the fire's time: a process with another
    PYTHONHASHSEED plans the same times, and so does the next life of a file."""
    script = (
        "from datetime import datetime, UTC\n"
        "from timerwheel import KeyedScheduler, Scheduler\n"
        "from timerwheel.testing import ManualClock\n"
        f"T0 = {T0!r}\n"
        "def every(now, key, data):\n"
        "    return datetime.fromtimestamp(T0 + ((now.timestamp() - T0) // 10 + 1) * 10, UTC)\n"
        "k = KeyedScheduler(Scheduler(ManualClock(0.0, wall=T0)), every, print, jitter=5.0, spread=2.0)\n"
        "for key in ['a', 'b', 7]:\n"
        "    k.upsert(key)\n"
        "print(sorted((str(key), i.next_run_at.timestamp()) for key, i in k.snapshot().items()))\n"
    )
    seen = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        seen.add(done.stdout)
    assert len(seen) == 1
    clock = ManualClock(0.0, wall=T0)
    first = KeyedScheduler(Scheduler(clock), pause.every_10s, print, store=SQLiteStore(tmp_path / "k.db"))
    first.upsert("a", jitter=5.0, spread=2.0)
    planned = first.get("a").next_run_at  # type: ignore[union-attr]
    first.close()
    again = KeyedScheduler(Scheduler(clock), pause.every_10s, print, store=SQLiteStore(tmp_path / "k.db"))
    info = again.get("a")
    assert info is not None and (info.jitter, info.spread) == (5.0, 2.0)  # (kept with the key)
    again.start()
    assert again.get("a").next_run_at == planned  # type: ignore[union-attr]
    assert f"('a', {planned.timestamp()})" in seen.pop()  # type: ignore[union-attr]
    again.close()


def test_a_cadence_counted_from_now_is_delayed_forward_only(store: Any, clock: ManualClock) -> None:
    """next_run = now + 60 s (a cadence from each run): each fire comes at least 60 s after the one before
    (the delay starts from next_run's point, never before it), and never 120 s."""

    def every_minute_after(now: datetime, key: Any, data: Any) -> datetime:
        return now + timedelta(seconds=60)

    life = Life(store, clock, next_run=every_minute_after, jitter=30.0)
    for key in "abcd":
        life.keyed.upsert(key)
    assert all(60 <= info.next_run_at.timestamp() - T0 < 90 for info in life.keyed.snapshot().values())  # type: ignore[union-attr]
    life.keyed.start()
    life.advance(900)
    for key in "abcd":
        ran = starts(life, key)
        gaps = [b - a for a, b in itertools.pairwise(ran)]
        assert 10 <= len(ran) <= 15 and all(60 <= g < 90 for g in gaps)
    life.keyed.close()


def test_a_schedule_that_ends_leaves_the_key_disabled(store: Any, clock: ManualClock) -> None:
    def until_50(now: datetime, key: Any, data: Any) -> datetime | None:
        at = pause.every_10s(now, key, data)
        return at if at.timestamp() <= T0 + 50 else None

    life = Life(store, clock, next_run=until_50, jitter=10.0, spread=5.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(300)
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED and info.last_error is None
    assert len(starts(life, "k")) == 6  # (the points 0, 10, ... 50)
    life.keyed.close()


def test_planning_a_delayed_fire_asks_next_run_a_bounded_number_of_times(clock: ManualClock) -> None:
    """Whatever the jitter: the points within the reach before now (at most 64 of them, then none), the
    point after now and the one after it (the room for the delay)."""
    calls = [0]

    def every_second(now: datetime, key: Any, data: Any) -> datetime:
        calls[0] += 1
        return datetime.fromtimestamp(int(now.timestamp()) + 1, UTC)

    life = Life(MemoryStore(), clock, next_run=every_second, spread=1800.0, jitter=1e9)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(5)
    calls[0] = 0
    life.advance(10)
    assert len(starts(life, "k")) >= 9 and calls[0] <= 70 * len(starts(life, "k"))
    assert life.keyed.get("k").state is KeyState.PENDING  # type: ignore[union-attr]
    life.keyed.close()


def test_an_upsert_changing_the_jitter_does_not_run_a_point_again(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock)
    life.keyed.upsert("k", jitter=1.0)
    life.keyed.start()
    life.advance(11.5)
    assert [int(at) // 10 for at in starts(life, "k")] == [0, 1]
    life.keyed.upsert("k", jitter=9.0)  # (the point of 10, delayed by up to 9 s now: it ran)
    life.advance(18.4)
    assert [int(at) // 10 for at in starts(life, "k")] == [0, 1, 2]
    life.keyed.close()


def test_catch_up_after_downtime_counts_the_delayed_fires(tmp_path: Path, clock: ManualClock) -> None:
    """Down from 5 to 45 s: the fires of 10, 20, 30 and 40 (each delayed) were missed; catch_up=ONCE runs
    one and reports three."""
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path), clock, jitter=4.0)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(5)
    life.keyed.close()
    clock.set_wall(T0 + 45)
    again = Life(SQLiteStore(path), clock, jitter=4.0)
    again.keyed.start()
    again.advance(0)
    assert [k for k, _ in again.ran] == ["k"] and [m[1] for m in again.missed] == [3]
    nxt = again.keyed.get("k").next_run_at.timestamp() - T0  # type: ignore[union-attr]
    assert 50 <= nxt < 54
    again.keyed.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"jitter": -1}, ValueError, "jitter must be from 0 to 1000000000 seconds"),
        ({"spread": float("inf")}, ValueError, "spread must be finite"),
        ({"spread": 1e308}, ValueError, "spread must be from 0 to 1000000000 seconds"),
        ({"jitter": "1"}, TypeError, "jitter must be a real number"),
        ({"spread": float("nan")}, ValueError, "spread"),
    ],
)
def test_bad_jitter_or_spread_is_refused_naming_it_and_changes_nothing(
    clock: ManualClock, kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    sched = Scheduler(clock)
    with pytest.raises(error, match=words):
        KeyedScheduler(sched, pause.every_10s, print, **kwargs)
    keyed = KeyedScheduler(sched, pause.every_10s, print)
    keyed.upsert("k", "old")
    with pytest.raises(error, match=words):
        keyed.upsert("k", "new", **kwargs)
    info = keyed.get("k")
    assert info is not None and info.data == "old" and info.jitter == 0.0
    keyed.close()


def test_delays_follow_the_wall_clock_through_a_dst_change(clock: ManualClock) -> None:
    """A daily 02:30 in Europe/Berlin: every fire runs within its spread after 02:30 local time, on the
    day the clocks go back too (each fire once)."""
    from zoneinfo import ZoneInfo

    from timerwheel import Cron

    berlin = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 10, 23, 12, 0, tzinfo=berlin).timestamp()
    clock = ManualClock(0.0, wall=start)
    ran: list[datetime] = []
    sched = Scheduler(clock)
    keyed = KeyedScheduler(
        sched,
        Cron("30 2 * * *", tz="Europe/Berlin"),
        lambda key, data: ran.append(datetime.fromtimestamp(clock.wall(), berlin)),
        spread=600.0,
    )
    keyed.upsert("nightly")
    keyed.start()
    end = clock() + 6 * 86400
    while (wait := sched.next_run_in()) is not None and clock() + wait <= end:
        clock.advance(wait)
        sched.run_pending()
    assert [r.day for r in ran] == [24, 25, 26, 27, 28, 29]
    assert all(r.hour == 2 and 30 <= r.minute < 40 for r in ran)
    assert len({(r.minute, r.second) for r in ran}) == 1  # (the key's one phase, every day)
    keyed.close()


def test_a_plan_from_a_time_far_in_the_past_ends(clock: ManualClock) -> None:
    """A delayed key whose next_run gives times far behind: the plan is one fire, not a walk of each."""
    keyed = KeyedScheduler(
        Scheduler(clock), lambda now, key, data: datetime(2000, 1, 1, tzinfo=UTC), print, jitter=1.0
    )
    keyed.upsert("old")
    info = keyed.get("old")
    assert info is not None and info.next_run_at is not None and info.next_run_at.year == 2000
    keyed.close()


def test_the_last_points_delayed_fire_is_kept_when_the_schedule_ends_after_it(
    store: Any, clock: ManualClock
) -> None:
    """A schedule whose last point is 30 (its window ends there): an upsert between that point and its
    delayed fire keeps the fire. The plan looked only at next_run's point after now, None, and made the
    key DISABLED: the last fire was lost."""
    life = Life(store, clock, jitter=5.0)
    life.keyed.upsert("k", end=datetime.fromtimestamp(T0 + 30, UTC))
    life.keyed.start()
    life.advance(25)
    planned = life.keyed.get("k").next_run_at  # type: ignore[union-attr]
    assert planned is not None and 30 <= planned.timestamp() - T0 < 35
    life.advance(30.0 - 25 + 1e-3)  # (just after the point, before its delayed fire)
    life.keyed.upsert("k", end=datetime.fromtimestamp(T0 + 30, UTC))
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PENDING and info.next_run_at == planned
    life.advance(10)
    ran = starts(life, "k")
    assert len(ran) == 4 and all(0 <= t - p < 5 for t, p in zip(ran, (0, 10, 20, 30), strict=True))
    assert ran[-1] == planned.timestamp() - T0
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.DISABLED
    life.keyed.close()
