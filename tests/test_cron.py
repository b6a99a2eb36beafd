"""Cron schedules and the wall clock: the DST table, a simulated year fired exactly at cronsim's points on
every store, wall-clock steps either way, late points, and the three schedulers' schedule_cron(). A
Cron's points are one fixed set of instants: next_after(dt) is the least of them after dt at every
change of offset of many zones, 2020-2030, and a run that ends (or a schedule made) inside a repeated
hour runs no point twice, on every scheduler and under KeyedScheduler.

Time comes from a ManualClock (its wall() moves with it; set_wall() steps it alone) or a VirtualTimeLoop.
The expected points of the DST table are written out by hand (local time and UTC), not taken from
cronsim: they are the documented rule, and cronsim is checked against them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    Backpressure,
    Cron,
    HeapScheduler,
    Missed,
    RepeatMode,
    Scheduler,
    ThreadedScheduler,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop, wait_until_idle

from .conftest import BACKENDS

EPSILON = 1e-6  # float rounding of wall = monotonic + offset near 1.7e9 s; a run is never *before* its point


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)  # type: ignore[misc]


# -- the DST table (docs/keyed.md shows some of its rows) ----------------------------------------------

# (zone, expression, after (UTC), the next points as (local time with offset, UTC))
DST_TABLE: list[tuple[str, str, datetime, list[tuple[str, str]]]] = [
    # Europe/Berlin, 2024: spring 2024-03-31 02:00 -> 03:00, autumn 2024-10-27 03:00 -> 02:00
    (
        "Europe/Berlin",
        "30 2 * * *",
        utc(2024, 3, 30, 12),
        [
            ("03:00+0200", "2024-03-31 01:00"),  # 02:30 does not exist: the first existing time after it
            ("02:30+0200", "2024-04-01 00:30"),
        ],
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        utc(2024, 10, 26, 12),
        [
            ("02:30+0200", "2024-10-27 00:30"),  # the repeated 02:30: once, at the first
            ("02:30+0100", "2024-10-28 01:30"),
        ],
    ),
    (
        "Europe/Berlin",
        "0 * * * *",
        utc(2024, 10, 26, 22, 30),
        [
            ("01:00+0200", "2024-10-26 23:00"),
            ("02:00+0200", "2024-10-27 00:00"),  # hourly follows real time: both 02:00s
            ("02:00+0100", "2024-10-27 01:00"),
            ("03:00+0100", "2024-10-27 02:00"),
        ],
    ),
    (
        "Europe/Berlin",
        "0 * * * *",
        utc(2024, 3, 30, 23, 30),
        [
            ("01:00+0100", "2024-03-31 00:00"),
            ("03:00+0200", "2024-03-31 01:00"),  # one real hour later: only the skipped hour is skipped
            ("04:00+0200", "2024-03-31 02:00"),
        ],
    ),
    # Europe/Berlin, 2025: spring 2025-03-30, autumn 2025-10-26
    (
        "Europe/Berlin",
        "30 2 * * *",
        utc(2025, 3, 29, 12),
        [
            ("03:00+0200", "2025-03-30 01:00"),
            ("02:30+0200", "2025-03-31 00:30"),
        ],
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        utc(2025, 10, 25, 12),
        [
            ("02:30+0200", "2025-10-26 00:30"),
            ("02:30+0100", "2025-10-27 01:30"),
        ],
    ),
    (
        "Europe/Berlin",
        "*/30 * * * *",
        utc(2025, 10, 25, 23, 45),
        [
            ("02:00+0200", "2025-10-26 00:00"),
            ("02:30+0200", "2025-10-26 00:30"),
            ("02:00+0100", "2025-10-26 01:00"),
            ("02:30+0100", "2025-10-26 01:30"),
        ],
    ),
    # America/New_York, 2024: spring 2024-03-10 02:00 -> 03:00, autumn 2024-11-03 02:00 -> 01:00
    (
        "America/New_York",
        "30 2 * * *",
        utc(2024, 3, 9, 12),
        [
            ("03:00-0400", "2024-03-10 07:00"),
            ("02:30-0400", "2024-03-11 06:30"),
        ],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        utc(2024, 11, 2, 12),
        [
            ("01:30-0400", "2024-11-03 05:30"),  # the repeated 01:30: once
            ("01:30-0500", "2024-11-04 06:30"),
        ],
    ),
    (
        "America/New_York",
        "0 * * * *",
        utc(2024, 11, 3, 4, 30),
        [
            ("01:00-0400", "2024-11-03 05:00"),
            ("01:00-0500", "2024-11-03 06:00"),
            ("02:00-0500", "2024-11-03 07:00"),
        ],
    ),
    # America/New_York, 2025: spring 2025-03-09, autumn 2025-11-02
    (
        "America/New_York",
        "30 2 * * *",
        utc(2025, 3, 8, 12),
        [
            ("03:00-0400", "2025-03-09 07:00"),
            ("02:30-0400", "2025-03-10 06:30"),
        ],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        utc(2025, 11, 1, 12),
        [
            ("01:30-0400", "2025-11-02 05:30"),
            ("01:30-0500", "2025-11-03 06:30"),
        ],
    ),
    # Australia/Lord_Howe: a 30-minute change (+10:30 standard, +11 summer). 2024-04-07 02:00 -> 01:30;
    # 2024-10-06 02:00 -> 02:30
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        utc(2024, 10, 5, 0),
        [
            ("02:30+1100", "2024-10-05 15:30"),  # 02:15 does not exist
            ("02:15+1100", "2024-10-06 15:15"),
        ],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        utc(2024, 4, 6, 0),
        [
            ("01:45+1100", "2024-04-06 14:45"),  # the repeated 01:45: once
            ("01:45+1030", "2024-04-07 15:15"),
        ],
    ),
    (
        "Australia/Lord_Howe",
        "*/30 * * * *",
        utc(2024, 4, 6, 14),
        [
            ("01:30+1100", "2024-04-06 14:30"),
            ("01:30+1030", "2024-04-06 15:00"),  # half-hourly follows real time through the repeat
            ("02:00+1030", "2024-04-06 15:30"),
        ],
    ),
    # From inside the second copy of a repeated hour: a fixed-time point there was at its first occurrence,
    # so the next is the next day's; an elapsed-time schedule goes on in the second copy
    (
        "Europe/Berlin",
        "45 2 * * *",
        utc(2024, 10, 27, 1, 40),  # 02:40+0100
        [("02:45+0100", "2024-10-28 01:45")],
    ),
    (
        "Europe/Berlin",
        "*/30 * * * *",
        utc(2025, 10, 26, 1, 10),  # 02:10+0100
        [("02:30+0100", "2025-10-26 01:30"), ("03:00+0100", "2025-10-26 02:00")],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        utc(2024, 11, 3, 6, 10),  # 01:10-0500
        [("01:30-0500", "2024-11-04 06:30")],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        utc(2024, 4, 6, 15, 10),  # 01:40+1030
        [("01:45+1030", "2024-04-07 15:15")],
    ),
    # Elapsed time in zones that change by 30 or 45 minutes: every matching local time that exists
    (
        "Australia/Lord_Howe",
        "*/30 2 * * *",
        utc(2024, 4, 6, 14),
        [("02:00+1030", "2024-04-06 15:30"), ("02:30+1030", "2024-04-06 16:00")],
    ),
    (
        "Pacific/Chatham",  # 2024-09-29 02:45 -> 03:45 (+12:45 -> +13:45)
        "0 */2 * * *",
        utc(2024, 9, 28, 14),
        [("04:00+1345", "2024-09-28 14:15"), ("06:00+1345", "2024-09-28 16:15")],
    ),
]


@pytest.mark.parametrize(
    ("zone", "expr", "after", "points"),
    DST_TABLE,
    ids=[f"{zone}-{expr}-{after:%Y-%m-%dT%H:%M}" for zone, expr, after, _ in DST_TABLE],
)
def test_the_dst_table(zone: str, expr: str, after: datetime, points: list[tuple[str, str]]) -> None:
    cron = Cron(expr, zone)
    got: list[tuple[str, str]] = []
    at = after
    for _ in points:
        nxt = cron.next_after(at)
        # (timestamps: datetimes of one zone compare by local time, blind to the fold of a repeated hour)
        assert nxt is not None and nxt.timestamp() > at.timestamp() and nxt.tzinfo is not None
        got.append((nxt.strftime("%H:%M%z"), nxt.astimezone(UTC).strftime("%Y-%m-%d %H:%M")))
        at = nxt
    assert got == points


def test_the_dst_table_on_the_scheduler(make: Callable[..., Any]) -> None:
    """Each row, as the scheduler fires it: at those wall times exactly, none early, skipped or doubled."""
    for zone, expr, after, points in DST_TABLE:
        clock = ManualClock(1000.0, wall=after.timestamp())
        s = make(clock)
        ran: list[float] = []
        s.schedule_cron(Cron(expr, zone), lambda ran=ran, clock=clock: ran.append(clock.wall()))
        expected = [datetime.strptime(u, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp() for _, u in points]
        drive(s, clock, until=expected[-1])
        assert len(ran) == len(expected), (zone, expr)
        for got, want in zip(ran, expected, strict=True):
            assert 0 <= got - want < EPSILON, (zone, expr, got, want)


# -- a simulated year ----------------------------------------------------------------------------------


@pytest.fixture(params=["cython", "python", "heap"])
def make(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Scheduler(clock) on each wheel backend, and the heap."""
    if request.param == "heap":
        return HeapScheduler
    core = BACKENDS[request.param]
    if core is None:
        pytest.skip("the Cython backend is disabled (TIMERWHEEL_NO_EXTENSIONS) or not built")
    return lambda clock, **kw: Scheduler(clock, store=core.TimerWheel(0.001, start=clock()), **kw)


def drive(s: Any, clock: ManualClock, until: float, limit: int = 100_000) -> None:
    """Move the clock from due to due (as a driver would wake), running what is due, up to wall `until`."""
    for _ in range(limit):
        s.run_pending()
        wait = s.next_run_in()
        if wait is None or clock.wall() + wait > until + EPSILON:
            return
        clock.advance(wait)
    raise AssertionError("drive() did not reach the end")


def cronsim_points(expr: str, zone: str, start: datetime, end: datetime) -> Iterator[float]:
    cron = Cron(expr, zone)
    at: datetime | None = start
    while at is not None:
        at = cron.next_after(at)
        if at is None or at > end:
            return
        yield at.timestamp()


@pytest.mark.parametrize(
    ("expr", "zone", "start", "end"),
    [
        ("30 2 * * *", "Europe/Berlin", utc(2024, 1, 1), utc(2025, 1, 1)),  # a year, daily
        ("0 * * * *", "America/New_York", utc(2024, 1, 1), utc(2025, 1, 1)),  # a year, hourly
        ("*/30 * * * *", "Australia/Lord_Howe", utc(2024, 3, 31), utc(2024, 4, 14)),  # its autumn change
        ("*/30 * * * *", "Australia/Lord_Howe", utc(2024, 9, 29), utc(2024, 10, 13)),  # its spring change
        ("15 1 * * 0", "America/New_York", utc(2025, 1, 1), utc(2026, 1, 1)),  # Sundays 01:15 (repeated)
        ("0 0 29 2 *", "UTC", utc(2023, 1, 1), utc(2029, 1, 1)),  # leap days only
    ],
)
def test_a_simulated_year_fires_exactly_at_cronsims_points(
    make: Callable[..., Any], expr: str, zone: str, start: datetime, end: datetime
) -> None:
    clock = ManualClock(5.0, wall=start.timestamp())
    s = make(clock)
    ran: list[float] = []
    tid = s.schedule_cron(expr, lambda: ran.append(clock.wall()), tz=zone)
    expected = list(cronsim_points(expr, zone, start, end))
    drive(s, clock, until=end.timestamp())
    assert len(ran) == len(expected)  # none skipped, none doubled
    worst = max(got - want for got, want in zip(ran, expected, strict=True))
    early = [got for got, want in zip(ran, expected, strict=True) if got < want]
    assert early == [] and worst < EPSILON  # never early; on time to the float
    assert s.stats().executed == len(expected) and s.next_fire_time(tid) is not None


# -- late points, wall-clock steps ---------------------------------------------------------------------


def test_late_by_several_points_runs_once_then_on_the_next_point(make: Callable[..., Any]) -> None:
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = make(clock)
    ran: list[float] = []
    s.schedule_cron("0 * * * *", lambda: ran.append(clock.wall()))
    clock.advance(5 * 3600 + 600)  # a stall over five points (13:00 .. 17:00), to 17:10
    assert s.run_pending() == 1
    assert ran == [utc(2025, 6, 1, 17, 10).timestamp()]  # once, late
    drive(s, clock, until=utc(2025, 6, 1, 18).timestamp())
    assert ran[1:] == [utc(2025, 6, 1, 18).timestamp()]  # then on the grid, after now


def test_a_wall_clock_step_forward_runs_what_it_passed_once(make: Callable[..., Any]) -> None:
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = make(clock)
    ran: list[float] = []
    s.schedule_cron("0 3 * * *", lambda: ran.append(clock.wall()), tz="Europe/Berlin")
    interval: list[float] = []
    s.schedule(60.0, lambda: interval.append(clock()), 60.0)  # an interval task: the wall step moves it not
    clock.set_wall(utc(2025, 6, 4, 12).timestamp())  # the laptop slept three days (monotonic stood still)
    s.run_pending()
    assert ran == [utc(2025, 6, 4, 12).timestamp()]  # three points passed: one run
    assert interval == []
    drive(s, clock, until=utc(2025, 6, 5, 1, 0, 1).timestamp())
    assert ran[1:] == [utc(2025, 6, 5, 1).timestamp()]  # 03:00 CEST
    assert interval[:2] == [60.0, 120.0]


def test_a_wall_clock_step_back_never_runs_early(make: Callable[..., Any]) -> None:
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = make(clock)
    ran: list[float] = []
    s.schedule_cron("0 13 * * *", lambda: ran.append(clock.wall()))
    once = s.schedule_wall(utc(2025, 6, 1, 12, 30), lambda: ran.append(-clock.wall()))
    clock.advance(1800 - 60)  # 12:29
    clock.set_wall(utc(2025, 6, 1, 11).timestamp())  # NTP steps the wall clock back 89 minutes
    s.run_pending()
    assert ran == [] and s.next_fire_time(once) == pytest.approx(1740.0 + 5400.0)
    clock.advance(5400 - 1)  # to 12:29:59 on the new wall clock: still nothing
    s.run_pending()
    assert ran == []
    clock.advance(1)
    s.run_pending()
    assert ran == [-utc(2025, 6, 1, 12, 30).timestamp()]
    drive(s, clock, until=utc(2025, 6, 1, 13).timestamp())
    assert ran[1:] == [utc(2025, 6, 1, 13).timestamp()]


def test_a_wall_clock_that_lags_its_monotonic_due_waits_the_rest(make: Callable[..., Any]) -> None:
    """Drift below the step threshold moves no timer: at the fire the wall time is checked, and a task
    whose wall time has not come yet waits the rest."""
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = make(clock)
    ran: list[float] = []
    s.schedule_wall(utc(2025, 6, 1, 13), lambda: ran.append(clock.wall()))
    clock.advance(1800)
    clock.set_wall(clock.wall() - 0.0005)  # half a millisecond of slew: below a step (_WALL_STEP)
    clock.advance(1800)  # the monotonic due: the wall clock says 12:59:59.9995
    s.run_pending()
    assert ran == []
    clock.advance(0.0005)
    s.run_pending()
    assert len(ran) == 1 and 0 <= ran[0] - utc(2025, 6, 1, 13).timestamp() < EPSILON


# -- the three schedulers -----------------------------------------------------------------------------


def test_threaded_scheduler_schedule_cron_and_wall_steps() -> None:
    clock = ManualClock(10.0, wall=utc(2024, 10, 26, 23, 30).timestamp())
    ran: list[float] = []
    with ThreadedScheduler(clock=clock) as s:
        tid = s.schedule_cron("0 * * * *", lambda: ran.append(clock.wall()), tz="Europe/Berlin")
        for _ in range(4):  # across the autumn change: 02:00 CEST, 02:00 CET, 03:00, 04:00
            due = s.next_fire_time(tid)
            assert due is not None
            clock.set(due)
            wait_until_idle(s)
        assert ran == [utc(2024, 10, 27, h).timestamp() for h in (0, 1, 2, 3)]
        clock.set_wall(clock.wall() + 86400)  # a step forward wakes the driver (the clock tells it)
        wait_until_idle(s)
        assert len(ran) == 5 and ran[4] == utc(2024, 10, 28, 3).timestamp()
        assert s.stats().executed == 5


def test_async_scheduler_schedule_cron_and_wall_steps() -> None:
    loop = VirtualTimeLoop(100.0, wall=utc(2025, 3, 29, 23, 30).timestamp())
    ran: list[float] = []

    async def main() -> None:
        async with AsyncScheduler() as s:
            s.schedule_cron("30 2 * * *", lambda: ran.append(loop.wall()), tz="Europe/Berlin")
            await asyncio.sleep(2 * 86400)
            assert ran == [utc(2025, 3, 30, 1).timestamp(), utc(2025, 3, 31, 0, 30).timestamp()]
            loop.set_wall(loop.wall() + 2 * 86400)  # no one tells the loop: it looks within CALENDAR_WAKE
            await asyncio.sleep(31)
            assert len(ran) == 3 and ran[2] - loop.wall() > -31
            assert s.stats().executed == 3

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_schedule_cron_modes_and_bad_arguments(make: Callable[..., Any]) -> None:
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = make(clock)
    before = (s.pending(), s.stats())
    for call, error, words in [
        (
            lambda: s.schedule_cron("61 * * * *", print),
            ValueError,
            "bad cron expression '61 \\* \\* \\* \\*'",
        ),
        (
            lambda: s.schedule_cron("* * * * *", print, tz="Mars/Base"),
            ValueError,
            "unknown time zone 'Mars/Base'",
        ),
        (
            lambda: s.schedule_cron(Cron("* * * * *"), print, tz="UTC"),
            TypeError,
            "tz goes with a cron expression",
        ),
        (lambda: s.schedule_cron(5, print), TypeError, "cron must be a Cron or a cron expression"),
        (lambda: s.schedule_cron("* * * * *", None), TypeError, "fn must be callable"),
        (lambda: s.schedule_cron("* * * * *", print, mode="x"), TypeError, "mode must be a RepeatMode"),
        (lambda: Cron(5), TypeError, "expr must be a cron expression"),  # type: ignore[arg-type]
        (lambda: Cron("* * * * *", 5), TypeError, "tz must be an IANA time zone name"),  # type: ignore[arg-type]
        (lambda: Cron("* * * * *").next_after(datetime(2025, 1, 1)), ValueError, "naive"),
    ]:
        with pytest.raises(error, match=words):
            call()
    assert (s.pending(), s.stats()) == before
    # FIXED_DELAY: the first point after the run finished (the job takes 90 s of the clock here)
    ran: list[float] = []

    def slow() -> None:
        ran.append(clock.wall())
        clock.advance(90)

    s.schedule_cron("* * * * *", slow, mode=RepeatMode.FIXED_DELAY)
    drive(s, clock, until=utc(2025, 6, 1, 12, 5).timestamp())
    assert ran == [utc(2025, 6, 1, 12, m).timestamp() for m in (1, 3, 5)]


def test_a_six_field_expression_has_seconds() -> None:
    cron = Cron("*/10 * * * * *")
    assert cron.next_after(utc(2025, 1, 1, 0, 0, 5)) == utc(2025, 1, 1, 0, 0, 10)
    assert Cron("0 0 * * *", "Europe/Berlin") == Cron("0 0 * * *", "Europe/Berlin")
    assert repr(Cron("0 0 * * *", "Europe/Berlin")) == "Cron('0 0 * * *', 'Europe/Berlin')"


def test_without_cronsim_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cronsim", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'timerwheel\[cron\]'"):
        Cron("* * * * *")
    s = Scheduler(ManualClock())
    with pytest.raises(ImportError, match="cron extra"):
        s.schedule_cron("* * * * *", print)
    assert s.stats().pending == 0


def test_schedule_wall_takes_datetimes_and_refuses_naive_ones() -> None:
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = Scheduler(clock)
    ran: list[float] = []
    s.schedule_wall(utc(2025, 6, 1, 12) + timedelta(seconds=30), lambda: ran.append(clock.wall()))
    with pytest.raises(ValueError, match="naive"):
        s.schedule_wall(datetime(2025, 6, 1, 13), print)
    past = s.schedule_wall(utc(2025, 6, 1, 11), lambda: ran.append(-1.0))
    assert s.run_pending() == 1 and ran == [-1.0] and s.next_fire_time(past) is None
    clock.advance(30)
    s.run_pending()
    assert ran == [-1.0, utc(2025, 6, 1, 12, 0, 30).timestamp()]


# -- wall tasks in and out of the calendar; time zones that give no offset -----------------------------


def test_reschedule_wall_of_an_interval_task_then_a_wall_step(make: Callable[..., Any]) -> None:
    """reschedule_wall() made an interval task a calendar task for good, and the next wall step moved it
    back to its old (past) wall time: it ran at 15, its due being 110."""
    clock = ManualClock(0.0, wall=1_000_000.0)
    s = make(clock)
    ran: list[float] = []
    tid = s.schedule(100.0, lambda: ran.append(clock()), 100.0)
    assert s.reschedule_wall(tid, 1_000_010.0)  # the next run at wall +10, then every 100 s
    clock.advance(10)
    s.run_pending()
    assert ran == [10.0] and s.next_fire_time(tid) == 110.0
    clock.advance(5)
    clock.set_wall(clock.wall() + 0.5)  # a step: interval tasks do not move
    s.run_pending()
    assert ran == [10.0] and s.next_fire_time(tid) == 110.0 and s.calendar == 0


def test_a_wall_timer_in_no_calendar_group_still_fires(make: Callable[..., Any]) -> None:
    from timerwheel._engine import WallTimer

    clock = ManualClock(0.0, wall=1_000_000.0)
    s = make(clock)
    fired: list[float] = []

    class Recorded(WallTimer):
        __slots__ = ()

        def fire(self) -> None:
            fired.append(clock.wall())

    s.add_wall_timer(Recorded(), 1_000_010.0)
    clock.advance(10)
    s.run_pending()
    assert fired == [1_000_010.0]


def test_wall_tasks_that_end_leave_the_calendar(make: Callable[..., Any]) -> None:
    clock = ManualClock(0.0, wall=1_000_000.0)
    s = make(clock)
    if not isinstance(s, HeapScheduler):  # (the heap holds any finite time)
        with pytest.raises(OverflowError, match="when is too far ahead"):
            s.schedule_wall(1e300, print)
        assert s.calendar == 0 and s.stats().pending == 0 and s.errors == []
    s.schedule_wall(1_000_001.0, print)
    clock.advance(1)
    s.run_pending()
    assert s.calendar == 0


def test_a_dropped_wall_one_shot_leaves_the_calendar() -> None:
    clock = ManualClock(0.0, wall=1_000_000.0)
    import threading

    gate = threading.Event()
    with ThreadedScheduler(clock=clock, workers=1, queue_size=1, backpressure=Backpressure.DROP) as s:
        s.schedule(0, lambda: gate.wait(10))
        s.schedule(0, print)  # waits in the queue
        wall_task = s.schedule_wall(1_000_000.0, print)  # dropped: no room
        for _ in range(1000):
            if s.stats().dropped:
                break
            threading.Event().wait(0.001)  # (a condition a worker makes true: polled, bounded)
        try:
            assert s.stats().dropped == 1 and s._engine.calendar == 0 and not s.cancel(wall_task)
        finally:
            gate.set()


def test_bad_time_zones_and_datetimes_are_named() -> None:
    from datetime import tzinfo

    class BadTz(tzinfo):
        def utcoffset(self, dt: datetime | None) -> timedelta:
            raise RuntimeError("no offset")

        def dst(self, dt: datetime | None) -> timedelta:
            return timedelta(0)

    with pytest.raises(ValueError, match=r"tz: .* gives no UTC offset"):
        Cron("* * * * *", BadTz())
    s = Scheduler(ManualClock(0.0, wall=1_000_000.0))
    with pytest.raises(ValueError, match="when: its tzinfo gives no UTC offset"):
        s.schedule_wall(datetime(2025, 1, 1, tzinfo=BadTz()), print)
    assert s.stats().pending == 0


# -- the shared plan of plain one-shots ----------------------------------------------------------------


def test_one_shots_share_a_plan_that_no_call_changes(make: Callable[..., Any]) -> None:
    """Plain one-shots share one _Plan (how a task repeats, its wall time). A one-shot made a calendar
    task, or given a mode of its own, gets its own plan first: the others stay plain monotonic tasks, and
    a step of the wall clock moves only the calendar task."""
    clock = ManualClock(0.0, wall=1_000_000.0)
    s = make(clock)
    ran: list[tuple[str, float]] = []
    a = s.schedule(100.0, lambda: ran.append(("a", clock())))
    b = s.schedule(100.0, lambda: ran.append(("b", clock())))
    c = s.schedule(5.0, lambda: ran.append(("c", clock())), mode=RepeatMode.FIXED_DELAY)
    d = s.schedule_wall(1_000_200.0, lambda: ran.append(("d", clock())))
    shared = getattr(s, "_tasks", {}).get(b)  # (HeapScheduler: the same engine, another store)
    plan = shared.plan if shared is not None else None
    before = (
        None
        if plan is None
        else (plan.interval, plan.mode, plan.missed, plan.cron, plan.wall, plan.first_due)
    )
    assert s.reschedule(b, 100.0) and s.reschedule(c, 5.0)  # the grid origin: only an own plan's
    assert s.reschedule_wall(a, 1_000_050.0)
    s.schedule_cron("*/5 * * * *", lambda: None)
    clock.advance(5.0)
    assert s.run_pending() == 1 and ran == [("c", 5.0)]
    assert s.calendar == 3  # a, d and the cron task; not b
    clock.set_wall(clock.wall() + 20.0)  # a step: a and d come 20 s sooner, b stays
    clock.advance(1.0)
    s.run_pending()
    assert s.next_fire_time(a) == 30.0 and s.next_fire_time(b) == 100.0 and s.next_fire_time(d) == 180.0
    for t in (30.0, 100.0):
        clock.set(t)
        s.run_pending()
    assert ran == [("c", 5.0), ("a", 30.0), ("b", 100.0)]
    if plan is not None:
        assert (plan.interval, plan.mode, plan.missed, plan.cron, plan.wall, plan.first_due) == before
        assert (plan.interval, plan.mode, plan.missed, plan.cron, plan.wall, plan.first_due) == (
            None,
            RepeatMode.FIXED_RATE,
            Missed.DELAY,
            None,
            None,
            0.0,
        )
        assert s.schedule(1.0, print) and s._tasks[s.schedule(2.0, print)].plan is plan


# -- the repeated hour: one fixed set of points, whenever one asks ------------------------------------


def test_next_after_in_the_second_copy_of_a_repeated_hour_is_after_it() -> None:
    """02:40 CET is in the second copy of Europe/Berlin's 02:00-03:00 on 2024-10-27. A daily 02:45 had its
    point at the first 02:45 (CEST), an hour before: the next point is the next day's. (It gave that
    first 02:45: a point before dt.)"""
    cron = Cron("45 2 * * *", "Europe/Berlin")
    dt = utc(2024, 10, 27, 1, 40)
    nxt = cron.next_after(dt)
    assert nxt is not None and nxt > dt
    assert nxt == utc(2024, 10, 28, 1, 45) and nxt.strftime("%H:%M%z") == "02:45+0100"
    in_zone = dt.astimezone(cron.tz)  # the same instant in the Cron's own zone (fold=1)
    assert in_zone.fold == 1 and cron.next_after(in_zone) == nxt
    # a schedule that follows elapsed time goes on in the second copy
    quarter = Cron("*/15 * * * *", "Europe/Berlin").next_after(dt)
    assert quarter is not None and quarter.astimezone(UTC) == utc(2024, 10, 27, 1, 45)
    assert quarter.strftime("%H:%M%z") == "02:45+0100"


def test_next_after_is_after_dt_with_a_tzinfo_that_ignores_fold() -> None:
    """A tzinfo from before PEP 495 reads a repeated local time as one offset only: from dt in the second
    copy the first point found maps back before dt; next_after steps past it."""

    class NoFold(tzinfo):
        """Europe/Berlin around its 2024 autumn change; 02:00-03:00 local is always the first copy."""

        def utcoffset(self, dt: datetime | None) -> timedelta:
            summer = dt is None or dt.replace(tzinfo=None) < datetime(2024, 10, 27, 3)
            return timedelta(hours=2 if summer else 1)

        def dst(self, dt: datetime | None) -> timedelta:
            return self.utcoffset(dt) - timedelta(hours=1)

        def fromutc(self, dt: datetime) -> datetime:
            at = dt.replace(tzinfo=None)
            return (at + timedelta(hours=2 if at < datetime(2024, 10, 27, 1) else 1)).replace(tzinfo=self)

    cron = Cron("45 2 * * *", NoFold())
    nxt = cron.next_after(utc(2024, 10, 27, 1, 40))  # 02:40, the second copy; 02:45 reads as 00:45 UTC
    assert nxt is not None and nxt.astimezone(UTC) == utc(2024, 10, 28, 1, 45)


def test_next_after_within_a_day_of_the_ends_of_datetimes_range() -> None:
    for zone in ("UTC", "Europe/Berlin"):
        cron = Cron("30 2 * * *", zone)
        late = cron.next_after(utc(9999, 12, 30, 12))
        assert late is not None and late.isoformat()[:16] == "9999-12-31T02:30"
        early = cron.next_after(utc(1, 1, 1))
        assert early is not None and early.isoformat()[:16] == "0001-01-01T02:30"


# Zones whose clocks change, 2020-2030, in the ways there are: by an hour at 01:00, 02:00 or 03:00, north
# and south; at midnight (Santiago, Asuncion, Havana, Beirut, Cairo); by 30 or 45 minutes (Lord_Howe,
# Chatham); by two hours (Troll); with negative DST (Dublin); in a half-hour zone (St_Johns); and changes
# that stopped (Tehran after 2022, Asuncion after 2024).
CHANGING_ZONES = [
    "Europe/Berlin",
    "Europe/London",
    "Europe/Dublin",
    "America/New_York",
    "America/St_Johns",
    "America/Havana",
    "America/Santiago",
    "America/Asuncion",
    "Asia/Beirut",
    "Africa/Cairo",
    "Asia/Tehran",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Pacific/Chatham",
    "Antarctica/Troll",
]

# (expression, fixed-time, whether a local (hour, minute) matches): every zone's changed hour has points
QUARTERS_FIXED = ("0,15,30,45 0-23 * * *", True, lambda hour, minute: minute % 15 == 0)
QUARTERS_ELAPSED = ("*/15 * * * *", False, lambda hour, minute: minute % 15 == 0)
EVEN_HOURS_ELAPSED = ("*/20 */2 * * *", False, lambda hour, minute: hour % 2 == 0 and minute % 20 == 0)


def offset_changes(zone: str, first_year: int, last_year: int) -> list[tuple[datetime, timedelta]]:
    """Every change of the zone's UTC offset in those years: (its instant, the new offset minus the old)."""
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(zone)
    changes: list[tuple[datetime, timedelta]] = []
    at, end = utc(first_year, 1, 1), utc(last_year + 1, 1, 1)
    before = at.astimezone(tz).utcoffset()
    while at < end:  # (in 6 hours there is at most one change, in any zone)
        after = (at + timedelta(hours=6)).astimezone(tz).utcoffset()
        if after != before:
            lo, hi = 0, 6 * 3600  # seconds after `at`: the offset is `before` at lo, `after` at hi
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (
                    (mid, hi)
                    if (at + timedelta(seconds=mid)).astimezone(tz).utcoffset() == before
                    else (lo, mid)
                )
            changes.append((at + timedelta(seconds=hi), after - before))  # type: ignore[operator]
            before = after
        at += timedelta(hours=6)
    return changes


def documented_points(
    tz: Any, fixed: bool, matches: Callable[[int, int], bool], start: datetime, end: datetime
) -> list[datetime]:
    """The points in [start, end] by the documented rules, worked out minute by minute (not by Cron).

    Elapsed time: every instant whose local time matches. Fixed-time: every matching local time once, at
    its first occurrence; one that does not exist at the first whole minute after it that does."""
    minute = timedelta(minutes=1)
    if not fixed:
        return [
            t
            for t in (start + i * minute for i in range(int((end - start) / minute) + 1))
            if matches(t.astimezone(tz).hour, t.astimezone(tz).minute)
        ]

    def exists(wall: datetime) -> bool:
        aware = wall.replace(tzinfo=tz)
        return aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall

    points = set()
    wall = start.astimezone(tz).replace(tzinfo=None)
    while wall <= end.astimezone(tz).replace(tzinfo=None):
        if matches(wall.hour, wall.minute):
            at = wall
            while not exists(at):
                at += minute
            point = at.replace(tzinfo=tz).astimezone(UTC)  # fold=0: the first occurrence
            if start <= point <= end:
                points.add(point)
        wall += minute
    return sorted(points)


@pytest.mark.parametrize("zone", CHANGING_ZONES)
def test_next_after_is_the_least_of_one_fixed_set_of_points_at_every_dst_change(zone: str) -> None:
    """At every change of the zone's offset, 2020-2030, both directions: the points iterated from well
    before the change are the documented ones, and next_after(dt) for dt anywhere near it (every 10
    minutes for 2 hours either side; each copy of a repeated hour at its start, middle and end, to the
    second, given in UTC and in the Cron's own zone) is the least of them after dt."""
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(zone)
    changes = offset_changes(zone, 2020, 2030)
    assert changes  # (each of these zones changes in those years)
    second = timedelta(seconds=1)
    for expr, fixed, matches in (QUARTERS_FIXED, QUARTERS_ELAPSED, EVEN_HOURS_ELAPSED):
        cron = Cron(expr, zone)
        for change, shift in changes:
            start, end = change - timedelta(hours=4), change + timedelta(hours=4)
            points = documented_points(tz, fixed, matches, start, end)
            iterated: list[datetime] = []
            at: datetime = start - second  # (a point exactly at `start` counts)
            while True:
                nxt = cron.next_after(at)
                assert nxt is not None
                if nxt > end:
                    break
                iterated.append(nxt.astimezone(UTC))
                at = nxt
            assert iterated == points, (expr, zone, change)
            span = abs(shift)  # each copy of a repeated hour (or the skipped one) is this long
            edges = {change - span / 2, change + span / 2}
            for edge in (change - span, change, change + span):
                edges |= {edge - second, edge, edge + second, edge + second / 4}
            grid = {change + timedelta(minutes=m) for m in range(-120, 121, 10)} - edges
            for dt in sorted(grid | edges):
                want = next(p for p in points if p > dt)
                for given in (dt, dt.astimezone(tz)) if dt in edges else (dt,):
                    got = cron.next_after(given)
                    assert got is not None and got > dt, (expr, zone, given, got)
                    # (as instants: an aware time in a repeated hour never == one in another zone)
                    assert got.astimezone(UTC) == want, (expr, zone, given, got, want)
                    # and as the local time of that instant, with the fold it has there
                    assert got.isoformat() == got.astimezone(UTC).astimezone(tz).isoformat()


@pytest.mark.parametrize(
    ("mode", "late"),
    [
        (RepeatMode.FIXED_RATE, True),
        (RepeatMode.FIXED_DELAY, True),
        (RepeatMode.FIXED_DELAY, False),
        (RepeatMode.FIXED_RATE, False),  # (FIXED_RATE takes the point after the one due: it held already)
    ],
    ids=["fixed-rate-late", "fixed-delay-late", "fixed-delay-long-run", "fixed-rate-long-run"],
)
def test_a_cron_run_that_ends_in_the_second_copy_does_not_run_that_point_again(
    make: Callable[..., Any], mode: RepeatMode, late: bool
) -> None:
    """A daily 02:45 Europe/Berlin task whose run, on the fall-back day, starts late (a stall) or runs long
    and ends at 02:40 CET, in the second copy of 02:00-03:00: it ran again at every run_pending (the
    next point it was given was the 02:45 CEST that had just run). It runs once; next, the next day."""
    clock = ManualClock(0.0, wall=utc(2024, 10, 26, 12).timestamp())
    s = make(clock)
    ran: list[float] = []

    def job() -> None:
        ran.append(clock.wall())
        if not late:
            clock.advance(55 * 60)  # 02:45 CEST to 02:40 CET

    tid = s.schedule_cron("45 2 * * *", job, tz="Europe/Berlin", mode=mode)
    if late:
        clock.advance(utc(2024, 10, 27, 1, 40).timestamp() - clock.wall())  # past 02:45 CEST, to 02:40 CET
        assert s.run_pending() == 1
    else:
        drive(s, clock, until=utc(2024, 10, 27, 0, 45).timestamp())
    assert len(ran) == 1 and abs(clock.wall() - utc(2024, 10, 27, 1, 40).timestamp()) < EPSILON
    for _ in range(6):  # six minutes of run_pending in the second copy
        clock.advance(60)
        assert s.run_pending() == 0
    due = s.next_fire_time(tid)
    assert due is not None and due - clock() == pytest.approx(
        utc(2024, 10, 28, 1, 45).timestamp() - clock.wall()
    )
    drive(s, clock, until=utc(2024, 10, 29, 2).timestamp())
    assert len(ran) == 3
    for got, want in zip(ran[1:], (utc(2024, 10, 28, 1, 45), utc(2024, 10, 29, 1, 45)), strict=True):
        assert 0 <= got - want.timestamp() < EPSILON


def test_schedule_cron_made_in_the_second_copy_does_not_run_that_days_point(make: Callable[..., Any]) -> None:
    """A daily 01:30 America/New_York task scheduled at 01:10 EST on 2024-11-03, in the second copy of
    01:00-02:00: that day's 01:30 was at 01:30 EDT, 40 minutes before. It ran at once, and again at every
    run_pending; its first run is the next day's 01:30 EST."""
    clock = ManualClock(0.0, wall=utc(2024, 11, 3, 6, 10).timestamp())
    s = make(clock)
    ran: list[float] = []
    tid = s.schedule_cron("30 1 * * *", lambda: ran.append(clock.wall()), tz="America/New_York")
    for _ in range(60):  # the hour after 01:30 EDT, run_pending every minute
        assert s.run_pending() == 0
        clock.advance(60)
    assert ran == [] and s.next_fire_time(tid) is not None
    drive(s, clock, until=utc(2024, 11, 5, 7).timestamp())
    assert len(ran) == 2
    for got, want in zip(ran, (utc(2024, 11, 4, 6, 30), utc(2024, 11, 5, 6, 30)), strict=True):
        assert 0 <= got - want.timestamp() < EPSILON


def test_threaded_a_stall_that_ends_in_the_second_copy_runs_the_point_once() -> None:
    """Under ThreadedScheduler a stall that ended at 02:40 CET (the second copy) made the driver fire the
    daily 02:45 in a tight loop (tens of thousands of runs in seconds). It runs once. (The job cancels
    its task at its fifth run, so that the test ends where it would loop.)"""
    clock = ManualClock(10.0, wall=utc(2024, 10, 27, 0).timestamp())
    ran: list[float] = []
    task: list[int] = []
    with ThreadedScheduler(clock=clock) as s:

        def job() -> None:
            ran.append(clock.wall())
            if len(ran) >= 5:
                s.cancel(task[0])

        task.append(s.schedule_cron("45 2 * * *", job, tz="Europe/Berlin"))
        clock.advance(100 * 60)  # 02:00 CEST to 02:40 CET, 02:45 CEST passed
        wait_until_idle(s)
        assert ran == [utc(2024, 10, 27, 1, 40).timestamp()]
        due = s.next_fire_time(task[0])
        assert due is not None and due == pytest.approx(10 + 25 * 3600 + 45 * 60)  # 2024-10-28 01:45 UTC
        clock.set(due)
        wait_until_idle(s)
        assert len(ran) == 2 and ran[1] == pytest.approx(utc(2024, 10, 28, 1, 45).timestamp())
        assert s.stats().executed == 2


def test_a_keyed_cron_whose_run_ends_in_the_second_copy_stays_pending(make: Callable[..., Any]) -> None:
    """AFTER_FINISH, a daily 01:30 America/New_York key whose run takes 40 minutes: on 2024-11-03 the run
    of 01:30 EDT ends at 01:10 EST, in the second copy. next_run(now=that end) gave the fire that had just
    run, so the key became INVALID and the daily job stopped for good. It stays PENDING, at the next day's
    01:30, and runs once a day."""
    from timerwheel import KeyedScheduler, KeyState

    clock = ManualClock(100.0, wall=utc(2024, 11, 2, 12).timestamp())
    sched = make(clock)
    ran: list[float] = []

    def run(key: str, data: Any) -> None:
        ran.append(clock.wall())
        clock.advance(40 * 60)

    k = KeyedScheduler(sched, Cron("30 1 * * *", "America/New_York"), run)
    k.start()
    k.upsert("nightly")
    drive(sched, clock, until=utc(2024, 11, 3, 7).timestamp())
    info = k.get("nightly")
    assert info is not None and info.state is KeyState.PENDING, info
    assert info.next_run_at == utc(2024, 11, 4, 6, 30) and info.last_error is None
    drive(sched, clock, until=utc(2024, 11, 6, 7).timestamp())
    days = (
        utc(2024, 11, 3, 5, 30),
        utc(2024, 11, 4, 6, 30),
        utc(2024, 11, 5, 6, 30),
        utc(2024, 11, 6, 6, 30),
    )
    assert len(ran) == len(days)
    for got, want in zip(ran, days, strict=True):
        assert 0 <= got - want.timestamp() < EPSILON
    info = k.get("nightly")
    assert info is not None and info.state is KeyState.PENDING
    k.close()


# -- macros ------------------------------------------------------------------------------------------

MACROS = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
]


@pytest.mark.parametrize(("macro", "fields"), MACROS, ids=[macro for macro, _ in MACROS])
def test_a_macro_has_the_points_of_its_five_fields(macro: str, fields: str) -> None:
    for zone in ("UTC", "America/Santiago"):  # (Santiago's clocks change at midnight)
        a, b = Cron(macro, zone), Cron(fields, zone)
        at_a = at_b = utc(2024, 3, 30)
        for _ in range(30):
            at_a, at_b = a.next_after(at_a), b.next_after(at_b)  # type: ignore[assignment]
            assert at_a is not None and at_b is not None
            assert at_a.isoformat() == at_b.isoformat()
    assert repr(Cron(macro.upper(), "UTC")) == f"Cron({macro.upper()!r}, 'UTC')"  # any case, kept as given


def test_schedule_cron_takes_a_macro(make: Callable[..., Any]) -> None:
    clock = ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp())
    s = make(clock)
    ran: list[float] = []
    s.schedule_cron("@daily", lambda: ran.append(clock.wall()), tz="Europe/Berlin")
    drive(s, clock, until=utc(2025, 6, 3, 12).timestamp())
    assert len(ran) == 2
    for got, want in zip(ran, (utc(2025, 6, 1, 22), utc(2025, 6, 2, 22)), strict=True):  # 00:00 CEST
        assert 0 <= got - want.timestamp() < EPSILON


def test_reboot_and_unknown_macros_are_refused_naming_the_macros(make: Callable[..., Any]) -> None:
    known = "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
    with pytest.raises(ValueError, match=f"'@reboot' is not a schedule .*; the macros are {known}$"):
        Cron("@reboot")
    with pytest.raises(ValueError, match=f"unknown macro '@fortnightly'; the macros are {known}$"):
        Cron("@fortnightly")
    s = make(ManualClock(0.0, wall=utc(2025, 6, 1, 12).timestamp()))
    with pytest.raises(ValueError, match="'@reboot' is not a schedule"):
        s.schedule_cron("@reboot", print)
    assert s.stats().pending == 0


def test_a_cron_whose_next_point_does_not_advance_ends_its_task_with_an_error(
    make: Callable[..., Any],
) -> None:
    """The engine's own guard, whatever a calendar gives: a next point not after the one due would fire
    the task again at once, for ever; it ends the task instead, saying why."""
    clock = ManualClock(0.0, wall=utc(2025, 1, 6, 12).timestamp())
    s = make(clock)
    runs: list[float] = []

    calls = [0]

    class Stuck(Cron):
        __slots__ = ()

        def next_after(self, dt: datetime) -> datetime | None:
            calls[0] += 1
            point = super().next_after(dt)
            return point if calls[0] == 1 else dt  # from its second point on: never after dt

    tid = s.schedule_cron(Stuck("* * * * *"), lambda: runs.append(clock.wall()))
    clock.advance(60)
    s.run_pending()
    s.run_pending()
    assert len(runs) == 1 and s.next_fire_time(tid) is None
    assert any("not after" in e for e in s.errors)


def test_a_cron_task_late_to_just_before_a_point_runs_at_that_point(make: Callable[..., Any]) -> None:
    """The wall time went into the calendar rounded to the microsecond: a task that came to re-arm less
    than 0.5 us before a point was rounded onto it, and skipped it."""
    x = 1_700_000_000.0  # a whole second: a point of "* * * * * *"
    clock = ManualClock(100.0, wall=x - 0.5)
    s = make(clock)
    s.schedule_cron("* * * * * *", print)
    clock.advance(0.5)
    s.run_pending()  # the point x
    clock.advance((x + 2) - 4e-7 - clock.wall())  # late: x + 1 missed; x + 2 is the first point after now
    s.run_pending()
    due = s.next_due()
    assert due is not None and abs(due + (clock.wall() - clock()) - (x + 2)) < 1e-3


def test_a_cron_whose_calendar_fails_ends_its_task_with_the_error(make: Callable[..., Any]) -> None:
    """A zone whose lookup raises (any exception) used to escape from run_pending() and drop the task
    silently; now the task ends and its error is recorded."""
    clock = ManualClock(0.0, wall=utc(2025, 1, 6, 12).timestamp())
    s = make(clock)
    calls = [0]

    class Failing(Cron):
        __slots__ = ()

        def next_after(self, dt: datetime) -> datetime | None:
            calls[0] += 1
            if calls[0] > 1:
                raise KeyError("the zone's data went away")
            return super().next_after(dt)

    tid = s.schedule_cron(Failing("* * * * *"), print)
    clock.advance(60)
    s.run_pending()  # runs, then the re-arm's calendar fails: no exception out of here
    assert s.next_fire_time(tid) is None and any("zone's data" in e for e in s.errors)
