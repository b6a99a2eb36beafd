"""Schedules built from others: Every (a grid of instants), AnyOf (a union: cron OR interval) and
Excluding (a holiday calendar), as next-run functions of their own and under a KeyedScheduler on a
ManualClock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from timerwheel import AnyOf, Cron, Every, Excluding, KeyedScheduler, KeyState, Scheduler
from timerwheel._schedules import EXCLUDED_IN_A_ROW
from timerwheel.testing import ManualClock

pytest.importorskip("cronsim")

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[arg-type,misc]


# -- Every ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (utc(2024, 1, 1, 10, 7), utc(2024, 1, 1, 10, 15)),
        (utc(2024, 1, 1, 10, 15), utc(2024, 1, 1, 10, 30)),  # strictly after: a point is not its own next
        (utc(2024, 1, 1, 10, 14, 59, 999999), utc(2024, 1, 1, 10, 15)),
        (utc(1969, 12, 31, 23, 59), utc(1970, 1, 1)),  # before the anchor too
    ],
)
def test_every_gives_the_next_point_of_its_grid_strictly_after_now(now: datetime, expected: datetime) -> None:
    assert Every(900).next_after(now) == expected
    assert Every(timedelta(minutes=15))(now, "key", "data") == expected


def test_every_counts_from_its_anchor_in_its_zone_and_in_real_time_across_dst() -> None:
    anchor = datetime(2024, 3, 30, 9, 0, tzinfo=BERLIN)  # 09:00 CET
    daily = Every(timedelta(days=1), anchor)
    point = daily.next_after(anchor)
    assert point == datetime(2024, 3, 31, 10, 0, tzinfo=BERLIN)  # 24 real hours: 10:00 CEST
    assert point is not None and point.tzinfo is BERLIN


def test_every_is_exact_to_the_microsecond_far_from_the_epoch() -> None:
    third = Every(timedelta(microseconds=333_333))
    now = utc(2400, 1, 1)
    point = third.next_after(now)
    assert point is not None and ((point - utc(1970, 1, 1)) // timedelta(microseconds=1)) % 333_333 == 0
    assert timedelta(0) < point - now <= timedelta(microseconds=333_333)
    assert Every(1).next_after(datetime.max.replace(tzinfo=UTC) - timedelta(microseconds=1)) is None


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0,), ValueError, "interval must be > 0"),
        ((timedelta(0),), ValueError, "interval must be > 0"),
        ((-5,), ValueError, "interval must be > 0"),
        ((1e-9,), ValueError, "interval must be > 0"),
        ((float("inf"),), ValueError, "interval must be a finite"),
        ((float("nan"),), ValueError, "interval must be a finite"),
        (("60",), TypeError, "interval must be a timedelta"),
        ((True,), TypeError, "interval must be a timedelta"),
        ((60, datetime(2024, 1, 1)), ValueError, "anchor must be an aware"),
        ((60, "2024"), TypeError, "anchor must be an aware"),
    ],
)
def test_every_refuses_bad_arguments_naming_them(args: tuple[Any, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Every(*args)


def test_every_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError, match="dt must be an aware"):
        Every(60).next_after(datetime(2024, 1, 1))


def test_every_is_equal_by_its_grid_and_has_a_repr() -> None:
    assert Every(60) == Every(timedelta(seconds=60)) and hash(Every(60)) == hash(Every(60.0))
    assert Every(60) != Every(60, utc(2024, 1, 1, 0, 0, 30))
    assert "Every(" in repr(Every(60))


# -- AnyOf ----------------------------------------------------------------------------------------------


def test_any_of_runs_at_the_earliest_point_of_its_parts() -> None:
    union = AnyOf(Cron("0 9 * * *"), Every(4 * 3600))
    now = utc(2024, 1, 1, 7, 30)
    points = []
    for _ in range(8):
        point = union(now)
        assert point is not None
        points.append(point.astimezone(UTC).hour)
        now = point
    assert points == [8, 9, 12, 16, 20, 0, 4, 8]


def test_any_of_runs_a_point_two_parts_share_once() -> None:
    union = AnyOf(Cron("0 */2 * * *"), Every(3600))
    now = utc(2024, 1, 1, 0, 0)
    seen = []
    for _ in range(4):
        now = union(now)  # type: ignore[assignment]
        seen.append(now.astimezone(UTC).hour)
    assert seen == [1, 2, 3, 4]  # 02:00 once


def test_any_of_passes_the_key_and_data_and_ends_when_every_part_ends() -> None:
    calls: list[tuple[Any, Any]] = []

    def once(now: datetime, key: Any, data: Any) -> datetime | None:
        calls.append((key, data))
        return None if now >= utc(2024, 1, 2) else utc(2024, 1, 2)

    union = AnyOf(once, lambda now, key, data: None)
    assert union(utc(2024, 1, 1), "k", {"v": 1}) == utc(2024, 1, 2)
    assert calls == [("k", {"v": 1})]
    assert union(utc(2024, 1, 2), "k", None) is None


def test_any_of_names_the_part_whose_answer_is_not_an_aware_datetime() -> None:
    union = AnyOf(Every(60), lambda now, key, data: datetime(2030, 1, 1))
    with pytest.raises(ValueError, match=r"schedules\[1\]"):
        union(utc(2024, 1, 1))
    with pytest.raises(TypeError, match=r"schedules\[0\]"):
        AnyOf(lambda now, key, data: "tomorrow")(utc(2024, 1, 1))


def test_any_of_refuses_no_part_or_one_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="at least one"):
        AnyOf()
    with pytest.raises(TypeError, match=r"schedules\[1\]"):
        AnyOf(Every(60), "0 9 * * *")  # type: ignore[arg-type]


# -- Excluding ------------------------------------------------------------------------------------------


HOLIDAYS = {date(2024, 12, 24), date(2024, 12, 25), date(2024, 12, 26)}


def test_excluding_skips_the_points_on_excluded_dates_in_the_schedules_zone() -> None:
    weekdays_9 = Excluding(Cron("0 9 * * 1-5", "Europe/Berlin"), HOLIDAYS)
    assert weekdays_9.tz is BERLIN
    now = utc(2024, 12, 20, 12)
    seen = []
    for _ in range(4):
        now = weekdays_9(now)  # type: ignore[assignment]
        seen.append(now.date())
    assert seen == [date(2024, 12, 23), date(2024, 12, 27), date(2024, 12, 30), date(2024, 12, 31)]
    assert now.hour == 9 and now.tzinfo is BERLIN


def test_excluding_judges_a_date_in_its_zone_not_in_utc() -> None:
    """00:30 in Berlin on the 25th is 23:30 UTC on the 24th: excluded as the 25th in Berlin's calendar,
    not in UTC's."""
    nightly = Cron("30 0 * * *", "Europe/Berlin")
    assert Excluding(nightly, {date(2024, 12, 25)})(utc(2024, 12, 24, 12)) == datetime(
        2024, 12, 26, 0, 30, tzinfo=BERLIN
    )
    assert Excluding(nightly, {date(2024, 12, 25)}, tz="UTC")(utc(2024, 12, 24, 12)) == datetime(
        2024, 12, 25, 0, 30, tzinfo=BERLIN
    )


def test_excluding_keeps_a_point_at_midnight_after_an_excluded_date() -> None:
    midnight = Excluding(Cron("0 0,12 * * *"), {date(2024, 1, 1)})
    assert midnight(utc(2023, 12, 31, 23)) == utc(2024, 1, 2, 0, 0)


def test_excluding_steps_over_a_long_closure_one_call_per_date_not_per_point() -> None:
    calls = 0
    minutely = Cron("* * * * *")

    def counted(now: datetime, key: Any, data: Any) -> datetime | None:
        nonlocal calls
        calls += 1
        return minutely(now)

    august = {date(2024, 8, d) for d in range(1, 32)}
    assert Excluding(counted, august)(utc(2024, 7, 31, 23, 59)) == utc(2024, 9, 1, 0, 0)
    assert calls == 32


def test_excluding_takes_a_callable_calendar() -> None:
    def weekend(day: date) -> bool:
        return day.weekday() >= 5

    hourly = Excluding(Every(3600), weekend)
    assert hourly(utc(2024, 1, 5, 23, 30)) == utc(2024, 1, 8, 0, 0)  # Friday night to Monday


def test_excluding_every_date_is_an_error_not_a_loop() -> None:
    with pytest.raises(ValueError, match=f"{EXCLUDED_IN_A_ROW} dates in a row are excluded"):
        Excluding(Every(3600), lambda day: True)(utc(2024, 1, 1))


def test_excluding_ends_when_its_schedule_ends() -> None:
    assert Excluding(lambda now, key, data: None, HOLIDAYS)(utc(2024, 1, 1)) is None


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("0 9 * * *", HOLIDAYS), TypeError, "schedule must be a next-run function"),
        ((Every(60), 5), TypeError, "dates must be dates or a callable"),
        ((Every(60), [datetime(2024, 1, 1)]), TypeError, "dates must hold datetime.date"),
        ((Every(60), ["2024-01-01"]), TypeError, "dates must hold datetime.date"),
        ((Every(60), HOLIDAYS, "Mars/Olympus"), ValueError, "unknown time zone"),
        ((Every(60), HOLIDAYS, 5), TypeError, "tz must be"),
    ],
)
def test_excluding_refuses_bad_arguments_naming_them(args: tuple[Any, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Excluding(*args)


def test_schedules_compose_and_compare() -> None:
    a = Excluding(AnyOf(Cron("0 9 * * *"), Every(7200)), HOLIDAYS)
    b = Excluding(AnyOf(Cron("0 9 * * *"), Every(7200)), set(HOLIDAYS))
    assert a == b and hash(a) == hash(b)
    assert "AnyOf(Cron(" in repr(a) and "Excluding(" in repr(a)
    assert a(utc(2024, 12, 24, 1)) == utc(2024, 12, 27, 0, 0)


# -- under a KeyedScheduler -----------------------------------------------------------------------------


def test_a_keyed_scheduler_runs_a_union_with_a_holiday_calendar() -> None:
    start = utc(2024, 12, 23, 6).timestamp()
    clock = ManualClock(0.0, wall=start)
    ran: list[str] = []
    schedule = Excluding(AnyOf(Cron("0 9 * * *", "Europe/Berlin"), Every(timedelta(hours=12))), HOLIDAYS)

    def run(key: Any, data: Any) -> None:
        ran.append(datetime.fromtimestamp(clock.wall(), BERLIN).strftime("%d %H:%M"))

    sched = Scheduler(clock=clock)
    keyed = KeyedScheduler(sched, schedule, run)
    keyed.upsert("report")
    keyed.start()
    for _ in range(5 * 24):
        clock.advance(3600)
        sched.run_pending()
    # 09:00 Berlin (the Cron) or 00:00 and 12:00 UTC (01:00 and 13:00 Berlin), none on the 24th to 26th
    assert ran == ["23 09:00", "23 13:00", "27 01:00", "27 09:00", "27 13:00", "28 01:00"]
    info = keyed.get("report")
    assert info is not None and info.state is KeyState.PENDING
    keyed.close()


def test_a_keyed_scheduler_makes_a_key_invalid_when_its_calendar_excludes_every_date() -> None:
    clock = ManualClock(0.0, wall=utc(2024, 1, 1).timestamp())
    errors: list[BaseException] = []
    keyed = KeyedScheduler(
        Scheduler(clock=clock),
        Excluding(Every(3600), lambda day: True),
        lambda key, data: None,
        on_invalid=lambda key, data, error: errors.append(error),
    )
    keyed.upsert("k")
    info = keyed.get("k")
    assert info is not None and info.state is KeyState.INVALID
    assert info.last_error is not None and "dates in a row are excluded" in info.last_error
    assert len(errors) == 1
    keyed.close()


def test_timezone_objects_work_as_the_calendars_zone() -> None:
    east = timezone(timedelta(hours=14))  # Kiribati: its date is a day ahead of most
    late = Excluding(Cron("0 12 * * *"), {date(2024, 1, 2)}, tz=east)
    assert late(utc(2024, 1, 1, 0)) == utc(2024, 1, 2, 12)  # 12:00 UTC on the 1st is the 2nd there


def test_any_of_picks_the_earliest_instant_across_a_dst_fall_back() -> None:
    """New York, 2024-11-03: 01:00-02:00 happens twice. At 05:35 UTC (01:35 EDT) the hourly cron's next
    point is 01:30 EST (06:30 UTC, fold=1) and the other's is 01:45 EDT (05:45 UTC). The union must
    answer 05:45 UTC (it answered 06:30 UTC: datetimes of one tzinfo compare by their wall times)."""
    hourly = Cron("30 * * * *", "America/New_York")
    at_1_45 = Cron("45 1 * * *", "America/New_York")
    now = datetime(2024, 11, 3, 5, 35, tzinfo=UTC)
    assert hourly(now).astimezone(UTC) == datetime(2024, 11, 3, 6, 30, tzinfo=UTC)
    assert at_1_45(now).astimezone(UTC) == datetime(2024, 11, 3, 5, 45, tzinfo=UTC)
    assert AnyOf(hourly, at_1_45)(now).astimezone(UTC) == datetime(2024, 11, 3, 5, 45, tzinfo=UTC)


def test_a_keyed_scheduler_on_a_union_runs_every_fire_across_a_dst_fall_back() -> None:
    """Berlin, 2024-10-27 (02:00-03:00 twice): a key on AnyOf(every hour at :30, daily 02:45) must run
    at 00:45, 01:30, 02:30 UTC (the 02:45 CEST fire, 00:45 UTC, was lost)."""
    wall0 = datetime(2024, 10, 27, 0, 35, tzinfo=UTC).timestamp()
    clock = ManualClock(0.0, wall=wall0)
    ran: list[datetime] = []
    schedule = AnyOf(Cron("30 * * * *", "Europe/Berlin"), Cron("45 2 * * *", "Europe/Berlin"))
    sched = Scheduler(clock)
    keyed = KeyedScheduler(
        sched, schedule, lambda key, data: ran.append(datetime.fromtimestamp(clock.wall(), UTC))
    )
    keyed.upsert("k")
    keyed.start()
    for _ in range(2 * 3600):
        clock.advance(1.0)
        sched.run_pending()
    keyed.close()
    assert [t.strftime("%H:%M") for t in ran[:3]] == ["00:45", "01:30", "02:30"]


@pytest.mark.parametrize(
    ("zone", "now", "day", "expected"),
    [
        # Santiago falls back at 24:00 on 2024-04-06: 23:00-24:00 of April 6 happens twice
        ("America/Santiago", datetime(2024, 4, 6, 16, 0, tzinfo=UTC), date(2024, 4, 6), "2024-04-07T04:00"),
        # Beirut falls back at 24:00 on 2024-10-26 (23:00-24:00 twice)
        ("Asia/Beirut", datetime(2024, 10, 26, 9, 0, tzinfo=UTC), date(2024, 10, 26), "2024-10-26T22:00"),
    ],
)
def test_excluding_a_day_that_falls_back_at_midnight_finds_the_next_days_first_point(
    zone: str, now: datetime, day: date, expected: str
) -> None:
    """The first point not on the excluded day is the next day's 00:00 (the step back from midnight, in
    the zone's wall time, landed in the first copy of the repeated hour: the calendar was said to
    exclude every point, and the key went INVALID)."""
    schedule = Excluding(Cron("*/15 * * * *", zone), {day})
    got = schedule(now)
    assert got is not None and got.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") == expected


@pytest.mark.parametrize("interval", [1e20, 10**15])
def test_every_refuses_a_huge_interval_naming_it(interval: Any) -> None:
    with pytest.raises(ValueError, match="interval must be at most"):  # (it was an OverflowError)
        Every(interval)
