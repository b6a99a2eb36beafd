"""KeyedScheduler.preview(key, start, end): what a key would do over a span, by the real KeyedScheduler
on virtual time, with the policies applied (overlap, jitter, windows, max_runs, catch-up after an
outage), and the key itself untouched. Time comes from a ManualClock or a VirtualTimeLoop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    CatchUp,
    Cron,
    HistoryEntry,
    KeyedScheduler,
    Overlap,
    Reschedule,
    Scheduler,
    SQLiteStore,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # a Monday


def hours(n: float) -> datetime:
    return START + timedelta(hours=n)


def keyed_on(clock: ManualClock, next_run: Any = None, **kwargs: Any) -> tuple[Scheduler, KeyedScheduler]:
    sched = Scheduler(clock)
    return sched, KeyedScheduler(sched, next_run or Cron("0 * * * *"), lambda key, data: None, **kwargs)


def shown(entries: list[HistoryEntry]) -> list[tuple[str, str, str]]:
    return [
        (e.scheduled_for.strftime("%H:%M") if e.scheduled_for else "-", e.at.strftime("%H:%M"), e.outcome)
        for e in entries
    ]


def test_a_preview_lists_the_runs_of_the_span_and_touches_nothing(tmp_path: Path) -> None:
    clock = ManualClock(0.0, wall=START.timestamp())
    _, keyed = keyed_on(clock, store=SQLiteStore(tmp_path / "keys.db"))
    keyed.upsert("report", {"v": 1})
    keyed.start()
    before = keyed.get("report")
    entries = keyed.preview("report", START, hours(3))
    assert shown(entries) == [("09:00", "09:00", "ran"), ("10:00", "10:00", "ran"), ("11:00", "11:00", "ran")]
    assert all(e.attempt == 1 and e.duration == 0.0 and e.error is None for e in entries)
    assert keyed.get("report") == before and keyed.history("report") == [] and keyed.stats().started == 0
    keyed.close()


def test_a_preview_applies_the_overlap_policy_to_runs_that_take_long() -> None:
    """BEFORE_RUN, every hour, runs of 90 minutes: SKIP skips every other fire; QUEUE_ONE runs it late."""
    clock = ManualClock(0.0, wall=START.timestamp())
    _, keyed = keyed_on(clock, reschedule=Reschedule.BEFORE_RUN, overlap=Overlap.SKIP)
    keyed.upsert("etl")
    keyed.upsert("queued", overlap=Overlap.QUEUE_ONE)
    skipped = keyed.preview("etl", START, hours(4), duration=5400.0)
    # (in the order they were decided: the skip of 10:00 before the end of the run of 09:00)
    assert shown(skipped) == [
        ("10:00", "10:00", "skipped"),
        ("09:00", "10:30", "ran"),
        ("12:00", "12:00", "skipped"),
        ("11:00", "12:30", "ran"),
    ]
    queued = keyed.preview("queued", START, hours(4), duration=5400.0)
    assert [(s, o) for s, _, o in shown(queued)] == [("09:00", "ran"), ("10:00", "ran"), ("11:00", "ran")]
    assert [e.at for e in queued] == [hours(2.5), hours(4), hours(5.5)]  # (each after the one before)
    keyed.close()


def test_a_preview_has_the_jitter_the_key_will_have() -> None:
    """The preview's fires are those the key then has: its jitter is drawn from a hash, not at random."""
    clock = ManualClock(0.0, wall=START.timestamp())
    ran: list[float] = []
    sched = Scheduler(clock)
    keyed = KeyedScheduler(
        sched,
        Cron("*/15 * * * *"),
        lambda ctx, k, d: ran.append(ctx.scheduled_for),
        context=True,
        jitter=300.0,
    )
    keyed.upsert("poll")
    keyed.start()
    previewed = [e.scheduled_for.timestamp() for e in keyed.preview("poll", START, hours(1))]
    for _ in range(3600):
        clock.advance(1.0)
        sched.run_pending()
    assert len(previewed) == 4 and all(a != round(a) for a in previewed)  # (delayed, not on the minute)
    assert ran[:4] == previewed
    keyed.close()


def test_a_preview_keeps_to_the_keys_window_and_its_runs_left() -> None:
    clock = ManualClock(0.0, wall=START.timestamp())
    _, keyed = keyed_on(clock)
    keyed.upsert("campaign", start=hours(2), end=hours(10))
    keyed.upsert("three", max_runs=3)
    assert [e.scheduled_for for e in keyed.preview("campaign", START, hours(24))] == [
        hours(h) for h in range(2, 11)
    ]
    assert len(keyed.preview("three", START, hours(24))) == 3
    keyed.close()


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        (CatchUp.ONCE, [("09:00", "missed"), ("10:00", "missed"), ("11:00", "ran"), ("12:00", "ran")]),
        (CatchUp.ALL, [("09:00", "ran"), ("10:00", "ran"), ("11:00", "ran"), ("12:00", "ran")]),
        (CatchUp.SKIP, [("09:00", "missed"), ("10:00", "missed"), ("11:00", "missed"), ("12:00", "ran")]),
    ],
)
def test_a_preview_after_an_outage_applies_the_catch_up_rules(catch_up: CatchUp, expected: list[Any]) -> None:
    """Nobody holds the key from 08:00 to 11:30: the fires of 09:00, 10:00 and 11:00 fell due; at 11:30
    the catch-up rules decide, as at a restart."""
    clock = ManualClock(0.0, wall=START.timestamp())
    _, keyed = keyed_on(clock, catch_up=catch_up)
    keyed.upsert("k")
    entries = keyed.preview("k", START, hours(4.5), outage=3.5 * 3600)
    assert [(s, o) for s, _, o in shown(entries)] == expected
    assert all(e.at == hours(3.5) for e in entries[:3])
    assert {e.error for e in entries if e.outcome == "missed"} <= {"missed during the outage"}
    keyed.close()


def test_a_preview_stops_at_its_limit() -> None:
    clock = ManualClock(0.0, wall=START.timestamp())
    _, keyed = keyed_on(clock, Cron("* * * * *"))
    keyed.upsert("k")
    entries = keyed.preview("k", START, START + timedelta(days=365), limit=50)
    assert len(entries) == 50 and entries[-1].scheduled_for == START + timedelta(minutes=50)
    keyed.close()


def test_a_preview_runs_from_a_coroutine_on_a_running_loop() -> None:
    loop = VirtualTimeLoop(0.0, wall=START.timestamp())
    sched = AsyncScheduler(loop=loop)
    keyed = KeyedScheduler(sched, Cron("0 * * * *"), lambda key, data: None)
    keyed.upsert("k")

    async def main() -> list[HistoryEntry]:
        return keyed.preview("k", START, hours(2))

    try:
        assert len(loop.run_until_complete(main())) == 2
    finally:
        loop.run_until_complete(keyed.aclose())
        loop.run_until_complete(sched.close())
        loop.close()


def test_bad_preview_arguments_name_themselves() -> None:
    clock = ManualClock(0.0, wall=START.timestamp())
    _, keyed = keyed_on(clock)
    keyed.upsert("k")
    with pytest.raises(KeyError):
        keyed.preview("unknown", START, hours(1))
    with pytest.raises(TypeError, match="key must be hashable"):
        keyed.preview(["k"], START, hours(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start must be an aware datetime"):
        keyed.preview("k", START.replace(tzinfo=None), hours(1))
    with pytest.raises(ValueError, match="end must be after start"):
        keyed.preview("k", hours(1), START)
    with pytest.raises(ValueError, match="duration must be from 0 to"):
        keyed.preview("k", START, hours(1), duration=-1)
    with pytest.raises(ValueError, match="outage must be from 0 to"):
        keyed.preview("k", START, hours(1), outage=-1)
    with pytest.raises(ValueError, match="limit must be >= 1"):
        keyed.preview("k", START, hours(1), limit=0)
    with pytest.raises(TypeError, match="duration must be"):
        keyed.preview("k", START, hours(1), duration="1")  # type: ignore[arg-type]
    keyed.close()
