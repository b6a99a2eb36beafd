"""Schedules built from others, as next-run functions: Every (a fixed interval on a grid of instants),
AnyOf (the union of several schedules: cron OR interval) and Excluding (a schedule without the points that
fall on excluded dates: a holiday calendar).

Each is a next_run for KeyedScheduler, called as next_run(now, key, data): the parts get the same key and
data. Each part's points are its own (a Cron keeps its DST rules); these only choose among them, so a
union or an exclusion is exact wherever its parts are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from ._cron import zone

__all__ = ["AnyOf", "Every", "Excluding"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_MAX_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _US
_MIN_US = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _US
#: Excluding: how many excluded dates in a row it steps over at most before it says the calendar excludes
#: every point (a callable that excludes every date would otherwise be asked for ever).
EXCLUDED_IN_A_ROW = 3660

NextRun = Callable[..., Any]  # next_run(now, key, data) -> an aware datetime, or None


def _aware(dt: Any, name: str) -> datetime:
    if not isinstance(dt, datetime):
        raise TypeError(f"{name} must be an aware datetime, not {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got the naive {dt!r}")
    return dt


def _micros(dt: datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact: no float on the way)."""
    return (dt - _EPOCH) // _US


class Every:
    """A fixed interval as a schedule: the instants anchor + k x interval, for every integer k (a grid,
    not a delay counted from each run: the points are the same whenever one asks, in every process).

    Args:
        interval: a timedelta, or seconds (int or float), > 0; kept to the microsecond.
        anchor: an aware datetime on the grid; default the epoch (1970-01-01 00:00 UTC): Every(3600) runs
            on the hour (UTC). Points are instants: a day is 24 real hours, DST or not (use Cron for local
            times).

    Raises:
        TypeError: interval not a timedelta or a number; anchor not a datetime. ValueError: an interval
            that is not > 0 (or under a microsecond, or infinite), a naive anchor.

    Example:
        >>> from datetime import datetime, timezone
        >>> Every(900).next_after(datetime(2024, 1, 1, 10, 7, tzinfo=timezone.utc))
        datetime.datetime(2024, 1, 1, 10, 15, tzinfo=datetime.timezone.utc)
    """

    __slots__ = ("_anchor_us", "_interval_us", "anchor", "interval")

    def __init__(self, interval: timedelta | float, anchor: datetime | None = None) -> None:
        if isinstance(interval, timedelta):
            step = interval // _US
        elif isinstance(interval, (int, float)) and not isinstance(interval, bool):
            if interval != interval or interval in (float("inf"), float("-inf")):
                raise ValueError(f"interval must be a finite number of seconds, not {interval!r}")
            step = round(interval * 1_000_000)
        else:
            raise TypeError(f"interval must be a timedelta or seconds, not {type(interval).__name__}")
        if step < 1:
            raise ValueError(f"interval must be > 0 (at least a microsecond), not {interval!r}")
        if step > _MAX_US - _MIN_US:
            raise ValueError(f"interval must be at most the span of datetime's range, not {interval!r}")
        self.interval = timedelta(microseconds=step)
        self.anchor = _EPOCH if anchor is None else _aware(anchor, "anchor")
        self._interval_us = step
        self._anchor_us = _micros(self.anchor)

    def __repr__(self) -> str:
        return f"Every({self.interval!r}, anchor={self.anchor!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Every) and (self._interval_us, self._anchor_us) == (
            other._interval_us,
            other._anchor_us,
        )

    def __hash__(self) -> int:
        return hash((Every, self._interval_us, self._anchor_us))

    def next_after(self, dt: datetime) -> datetime | None:
        """The least point strictly after `dt` (aware), in the anchor's zone; None past datetime's range.
        O(1).

        Raises:
            TypeError, ValueError: dt is not an aware datetime.
        """
        at = _micros(_aware(dt, "dt"))
        step = self._interval_us
        point = self._anchor_us + ((at - self._anchor_us) // step + 1) * step
        if not _MIN_US <= point <= _MAX_US:
            return None
        try:
            return (_EPOCH + timedelta(microseconds=point)).astimezone(self.anchor.tzinfo)
        except OverflowError:  # (in the anchor's zone, past datetime's range)
            return None

    def __call__(self, now: datetime, key: Any = None, data: Any = None) -> datetime | None:
        """As a KeyedScheduler next_run: the first point after `now` (the key and the data are ignored)."""
        return self.next_after(now)


class AnyOf:
    """The union of schedules: its next point is the earliest of its parts' next points (a part that has
    none, None, no longer counts; when none has one, neither has the union). A point that two parts share
    is one point: it runs once.

    Args:
        *schedules: next-run functions, next_run(now, key, data) -> an aware datetime or None (a Cron, an
            Every, an Excluding, another AnyOf, one's own), one at least; each is called with the key and
            the data the union is called with.

    Raises:
        TypeError: no schedule, or one that is not callable. Called: TypeError or ValueError naming the
            part whose answer is not an aware datetime or None (a KeyedScheduler makes the key INVALID,
            with that message), and whatever a part raises.

    Example:
        >>> from datetime import datetime, timezone
        >>> at_9 = Cron("0 9 * * *")
        >>> AnyOf(at_9, Every(4 * 3600))(datetime(2024, 1, 1, 7, 30, tzinfo=timezone.utc))
        datetime.datetime(2024, 1, 1, 8, 0, tzinfo=datetime.timezone.utc)
    """

    __slots__ = ("schedules",)

    def __init__(self, *schedules: NextRun) -> None:
        if not schedules:
            raise TypeError("AnyOf needs at least one schedule")
        for i, part in enumerate(schedules):
            if not callable(part):
                raise TypeError(f"schedules[{i}] must be a next-run function, not {type(part).__name__}")
        self.schedules = schedules

    def __repr__(self) -> str:
        return f"AnyOf({', '.join(map(repr, self.schedules))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyOf) and self.schedules == other.schedules

    def __hash__(self) -> int:
        return hash((AnyOf, self.schedules))

    def __call__(self, now: datetime, key: Any = None, data: Any = None) -> datetime | None:
        """The earliest of the parts' next points after `now`, or None. O(number of parts)."""
        best: datetime | None = None
        for i, part in enumerate(self.schedules):
            point = part(now, key, data)
            if point is None:
                continue
            _aware(point, f"the point of schedules[{i}] ({part!r})")
            # (as instants: two datetimes of one tzinfo compare by their wall times, which a repeated
            # hour's two copies share)
            if best is None or point.astimezone(UTC) < best.astimezone(UTC):
                best = point
        return best


class Excluding:
    """A schedule without its points that fall on excluded dates (a holiday calendar): a point is
    excluded when its date, in `tz`, is one of `dates` (or `dates(day)` is true); the next point is then
    the schedule's first one on a later date that is not excluded.

    Args:
        schedule: a next-run function (a Cron, an Every, an AnyOf, one's own).
        dates: dates (datetime.date; a set, a list, any iterable, read once), or a callable day -> bool
            (true: excluded), e.g. the `holidays` package's calendar's `__contains__`.
        tz: the zone whose calendar the dates are in: an IANA name or a tzinfo; default the schedule's
            own (a Cron's `tz`), else UTC.

    Raises:
        TypeError: schedule not callable; dates neither dates nor a callable (a datetime is not a date
            here: say which day it is with .date()); tz neither a name nor a tzinfo. ValueError: an
            unknown zone. Called: ValueError when more than EXCLUDED_IN_A_ROW dates in a row are excluded
            (a calendar that excludes every date: the key is INVALID, not asked for ever); and what the
            schedule or the callable raises.

    Example:
        >>> from datetime import date, datetime, timezone
        >>> weekdays_9 = Cron("0 9 * * 1-5", "Europe/Berlin")
        >>> closed = Excluding(weekdays_9, {date(2024, 12, 24), date(2024, 12, 25), date(2024, 12, 26)})
        >>> closed(datetime(2024, 12, 23, 12, 0, tzinfo=timezone.utc))
        datetime.datetime(2024, 12, 27, 9, 0, tzinfo=zoneinfo.ZoneInfo(key='Europe/Berlin'))
    """

    __slots__ = ("_excluded", "dates", "schedule", "tz")

    def __init__(
        self,
        schedule: NextRun,
        dates: Iterable[date] | Callable[[date], bool],
        tz: str | tzinfo | None = None,
    ) -> None:
        if not callable(schedule):
            raise TypeError(f"schedule must be a next-run function, not {type(schedule).__name__}")
        own = getattr(schedule, "tz", None)
        self.tz = zone(tz if tz is not None else own if isinstance(own, tzinfo) else None)
        self.schedule = schedule
        excluded: Callable[[date], bool]
        if callable(dates):
            excluded = dates
            self.dates: frozenset[date] | Callable[[date], bool] = dates
        else:
            try:
                days = frozenset(dates)
            except TypeError:
                raise TypeError(
                    f"dates must be dates or a callable day -> bool, not {type(dates).__name__}"
                ) from None
            for day in days:
                if not isinstance(day, date) or isinstance(day, datetime):
                    raise TypeError(f"dates must hold datetime.date objects, not {day!r}")
            excluded = days.__contains__
            self.dates = days
        self._excluded = excluded

    def __repr__(self) -> str:
        return f"Excluding({self.schedule!r}, {self.dates!r}, tz={str(self.tz)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Excluding) and (self.schedule, self.dates, str(self.tz)) == (
            other.schedule,
            other.dates,
            str(other.tz),
        )

    def __hash__(self) -> int:
        return hash((Excluding, self.schedule, str(self.tz)))

    def __call__(self, now: datetime, key: Any = None, data: Any = None) -> datetime | None:
        """The schedule's first point after `now` on a date that is not excluded, or None. One call of
        the schedule per excluded date met (it is asked again from the next date's start, not point by
        point), EXCLUDED_IN_A_ROW at most."""
        tz = self.tz
        point = self.schedule(now, key, data)
        for _ in range(EXCLUDED_IN_A_ROW):
            if point is None:
                return None
            checked = _aware(point, f"the point of {self.schedule!r}")
            day = checked.astimezone(tz).date()
            if not self._excluded(day):
                return checked
            try:
                following = datetime.combine(day + timedelta(days=1), time(), tz).astimezone(UTC)
            except OverflowError:
                return None
            # (the schedule asked for its first point from the next date's start on; a step back of a
            # microsecond keeps a point at midnight itself; never before the excluded point: progress.
            # In UTC: a step back in the zone's wall time may land in the first copy of a repeated hour
            # before midnight, and two datetimes of one tzinfo compare by their wall times)
            point = self.schedule(max(following - _US, checked.astimezone(UTC)), key, data)
        raise ValueError(
            f"{self!r}: {EXCLUDED_IN_A_ROW} dates in a row are excluded after {now.isoformat()}: "
            "the calendar excludes every point"
        )
