"""Cron: a cron expression in a time zone, as a next-run function. The parsing and the calendar are
cronsim's (Debian cron's rules); nothing here parses cron itself. What is here is the zone: cronsim walks
the local calendar (naive datetimes), and this module turns its local times into instants, by the rules
below. A Cron's points are thus one fixed set of instants, whenever one asks: next_after(dt) is the
least point strictly after dt, also when dt is inside a repeated hour.

DST (Debian cron's rules, as cronsim has them; cronsim decides which expressions are fixed-time):

- A fixed-time expression (five fields, neither the minute nor the hour field starting with "*":
  "30 2 * * *", "0,30 1-3 * * *", "@daily"):
  - a local time that the spring change skips runs at the first whole minute that exists after it:
    02:30 on the day Europe/Berlin goes from 02:00 to 03:00 runs at 03:00;
  - a local time in the autumn hour that is repeated is a point once, at its first occurrence. A schedule
    made, or a run that ends, inside the second copy does not run that point again: the next point is
    the first one after the repeated hour.
- Any other expression ("0 * * * *", "*/15 * * * *", "*/30 2 * * *", "0 */2 * * *", six fields) follows
  real elapsed time: its points are the instants whose local time matches, so it runs in both copies of
  the repeated hour and skips nothing but the skipped local times.

Macros: @yearly (@annually), @monthly, @weekly, @daily (@midnight) and @hourly stand for their five
fields ("0 0 1 1 *", "0 0 1 * *", "0 0 * * 0", "0 0 * * *", "0 * * * *"); cronsim has none.
@reboot is refused: it is no point in time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

__all__ = ["Cron"]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_ZERO = timedelta(0)
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
_PROBE_ZONE = timezone(timedelta(hours=1))  # any zone but UTC: cronsim applies its DST rule only there
_GUARD = 8  # steps of next_after's last check (see there); a PEP 495 tzinfo never needs one


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:
        raise ImportError(
            "Cron needs cronsim: install the cron extra, pip install 'timerwheel[cron]'"
        ) from None
    return cronsim


def zone(tz: Any) -> tzinfo:
    """An IANA zone name or a tzinfo as a tzinfo; ValueError (naming the zone) or TypeError otherwise."""
    if tz is None:
        return UTC
    if isinstance(tz, tzinfo):
        try:
            offset = datetime(2000, 1, 1, tzinfo=tz).utcoffset()
        except Exception as exc:
            raise ValueError(f"tz: {tz!r} gives no UTC offset ({exc!r})") from None
        if offset is None:
            raise ValueError(f"tz: {tz!r} gives no UTC offset (utcoffset() returned None)")
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA time zone name or a tzinfo, not {type(tz).__name__}")
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"tz: unknown time zone {tz!r} ({exc})") from None


def _fields(expr: str) -> str:
    """The cron fields of `expr`: a macro as its five fields, anything else as it is (cronsim checks it).

    Raises:
        ValueError: @reboot, or an unknown macro (the message names the macros there are).
    """
    word = expr.strip()
    if not word.startswith("@"):
        return expr
    fields = _MACROS.get(word.lower())
    if fields is not None:
        return fields
    known = ", ".join(_MACROS)
    if word.lower() == "@reboot":
        raise ValueError(
            f"expr: {expr!r} is not a schedule (it means: when cron starts); the macros are {known}"
        )
    raise ValueError(f"expr: unknown macro {expr!r}; the macros are {known}")


class Cron:
    """A cron expression evaluated in a time zone: next_after(dt) gives the next point strictly after dt.

    Five fields (minute hour day month day-of-week), six with seconds first, or a macro (@daily, ...).
    The expression and its calendar are cronsim's (Debian cron's semantics); the points in a DST change
    follow the module docstring's rules. A Cron is also a next_run function for KeyedScheduler (it ignores
    the key and the data), and what schedule_cron() takes.

    Args:
        expr: the cron expression.
        tz: an IANA time zone name ("Europe/Berlin") or a tzinfo; default UTC.

    Raises:
        ValueError: a bad expression, @reboot or an unknown macro, or an unknown zone (the message quotes
            it).
        TypeError: expr is not a str, or tz neither a str nor a tzinfo.
        ImportError: cronsim is not installed (the cron extra).

    Example:
        >>> from datetime import datetime, timezone
        >>> Cron("30 2 * * *", "Europe/Berlin").next_after(datetime(2024, 3, 30, 12, 0, tzinfo=timezone.utc))
        datetime.datetime(2024, 3, 31, 3, 0, tzinfo=zoneinfo.ZoneInfo(key='Europe/Berlin'))
    """

    __slots__ = ("_cronsim", "_fields", "_fixed", "expr", "tz")

    def __init__(self, expr: str, tz: str | tzinfo | None = None) -> None:
        if not isinstance(expr, str):
            raise TypeError(f"expr must be a cron expression (a str), not {type(expr).__name__}")
        self._cronsim = _cronsim()
        self.tz = zone(tz)
        self.expr = expr
        self._fields = _fields(expr)
        try:
            probe = self._cronsim.CronSim(self._fields, datetime(2000, 1, 1, tzinfo=_PROBE_ZONE))
        except self._cronsim.CronSimError as exc:
            raise ValueError(f"expr: bad cron expression {expr!r} ({exc})") from None
        # Which expressions are fixed-time is cronsim's rule (Debian cron's): it marks them with fixup_tz.
        self._fixed = probe.fixup_tz is not None

    def __repr__(self) -> str:
        return f"Cron({self.expr!r}, {str(self.tz)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cron) and (self.expr, str(self.tz)) == (other.expr, str(other.tz))

    def __hash__(self) -> int:
        return hash((self.expr, str(self.tz)))

    def next_after(self, dt: datetime) -> datetime | None:
        """The least point strictly after `dt` (an aware datetime), in the Cron's zone; None if there is
        none (an expression that can never match, or not within cronsim's 50 years).

        O(1) calls into cronsim; in a repeated hour, also O(log(its length)) offset look-ups.

        Raises:
            ValueError: dt is naive. TypeError: dt is not a datetime.
        """
        if not isinstance(dt, datetime):
            raise TypeError(f"dt must be an aware datetime, not {type(dt).__name__}")
        if dt.tzinfo is None or dt.utcoffset() is None:
            raise ValueError(f"dt must be an aware datetime, got the naive {dt!r}")
        instant = dt.astimezone(UTC)
        local = instant.astimezone(self.tz)  # (via UTC: a dt given in the Cron's zone may be imaginary)
        wall = datetime.combine(local.date(), local.time())  # naive (combine: cheaper than replace)
        # In a repeated hour (the offsets of dt's local time differ by fold), which copy dt is in matters
        point = self._in_repeat(wall, local.fold) if _shift(wall, self.tz) else self._first(wall)
        # By construction point > dt. A tzinfo that does not keep PEP 495 (fold) can map a local time
        # back before dt; a point at or before dt would fire again at once, for ever: step past it.
        for _ in range(_GUARD):
            if point is None or point.astimezone(UTC) > instant:
                return point
            later = point.replace(tzinfo=None, fold=0)
            point = self._first(later + (instant - point.astimezone(UTC)))
        raise RuntimeError(f"{self!r}: no point found after {dt!r} (the zone's offsets do not add up)")

    def __call__(self, now: datetime, key: Any = None, data: Any = None) -> datetime | None:
        """As a KeyedScheduler next_run: the first point after `now` (the key and the data are ignored)."""
        return self.next_after(now)

    # -- local times to instants -----------------------------------------------------------------------

    def _match_after(self, wall: datetime) -> datetime | None:
        """The first local time (naive) after `wall` that the expression matches: cronsim's calendar,
        with no zone (its naive arithmetic); None past its 50-year horizon."""
        try:
            return next(self._cronsim.CronSim(self._fields, wall))  # type: ignore[no-any-return]
        except StopIteration:
            return None

    def _first(self, wall: datetime) -> datetime | None:
        """The first point at a local time after `wall` (naive), for a `wall` that is not in a repeated
        hour (or is its end): a matching time that exists is a point at its first occurrence; one that the
        spring change skips moves to the first whole minute after the gap (fixed-time) or is no point."""
        tz = self.tz
        while True:  # once per skipped local time; cronsim's horizon ends it
            match = self._match_after(wall)
            if match is None:
                return None
            shift = _shift(match, tz)
            if shift >= _ZERO:  # it exists: once, or twice (the first copy is the point)
                return datetime.combine(match.date(), match.time(), tz)  # (cronsim's times have fold 0)
            gap_end = _boundary(match, -shift, lambda t: _shift(t, tz) < _ZERO)
            if self._fixed:  # cronsim's rule: the first whole minute after it that exists
                return (match + -((match - gap_end) // _MINUTE) * _MINUTE).replace(tzinfo=tz, fold=0)
            wall = gap_end - _SECOND  # follows elapsed time: the skipped times are no points

    def _in_repeat(self, wall: datetime, fold: int) -> datetime | None:
        """The least point after the local time `wall` in copy `fold` (0, 1) of a repeated hour."""
        tz = self.tz
        size = _shift(wall, tz)
        whole = wall.replace(microsecond=0)
        end = _boundary(whole, size, lambda t: _shift(t, tz) > _ZERO)  # the first local time after it
        if fold == 0:  # the first copy: its later points, then the second copy's
            match = self._match_after(wall)
            if match is not None and match < end:
                return match.replace(tzinfo=tz, fold=0)
            wall = end - size - _SECOND  # the start of the second copy
        if not self._fixed:  # elapsed time: the second copy has points too
            match = self._match_after(wall)
            if match is not None and match < end:
                return match.replace(tzinfo=tz, fold=1)
        # A fixed-time point in the repeated hour was at its first occurrence: before dt
        return self._first(end - _SECOND)


def _shift(wall: datetime, tz: tzinfo) -> timedelta:
    """How the offsets of the local time `wall` (naive) differ by fold: > 0 in a repeated hour (its
    length), < 0 in a skipped one (minus its length), 0 elsewhere (PEP 495).

    First, cheaply: the same offset a day before, at and a day after `wall` means no change near it
    (a change inside the day would show: no repeat or gap is longer than a day, and no zone has had two
    changes that cancel within two days, 1900-2040).
    """
    offset = tz.utcoffset(wall)
    try:
        if tz.utcoffset(wall - _DAY) == offset == tz.utcoffset(wall + _DAY):
            return _ZERO
    except OverflowError:  # within a day of the ends of datetime's range: ask precisely
        pass
    first = wall.replace(tzinfo=tz, fold=0)
    return first.utcoffset() - first.replace(fold=1).utcoffset()  # type: ignore[operator]


def _boundary(wall: datetime, span: timedelta, inside: Callable[[datetime], bool]) -> datetime:
    """The first whole second after `wall` (inside) that is not inside, within `span` of it (where it is
    not): the end of a repeated or a skipped hour. O(log span) by bisection."""
    lo, hi = 0, int(span.total_seconds())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if inside(wall + timedelta(seconds=mid)):
            lo = mid
        else:
            hi = mid
    return wall + timedelta(seconds=hi)
