"""Cron schedules and the wall clock: the DST table, a simulated year fired exactly at cronsim's points on
every store, wall-clock steps either way, late points, and the three schedulers' schedule_cron().

Time comes from a ManualClock (its wall() moves with it; set_wall() steps it alone) or a VirtualTimeLoop.
The expected points of the DST table are written out by hand (local time and UTC), not taken from
cronsim: they are the documented rule, and cronsim is checked against them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
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


# -- the DST table (docs/cron.md shows the same rows) ---------------------------------------------------

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
]


@pytest.mark.parametrize(
    ("zone", "expr", "after", "points"),
    DST_TABLE,
    ids=[f"{zone}-{expr}-{after:%Y-%m-%d}" for zone, expr, after, _ in DST_TABLE],
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


# -- found by the review of issue 14 -------------------------------------------------------------------


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


# -- the shared plan of plain one-shots (issue 13) ------------------------------------------------------


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
