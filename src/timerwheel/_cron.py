"""Cron: a cron expression in a time zone, as a next-run function. The parsing and the calendar are
cronsim's (Debian cron's rules, DST included); nothing here parses cron itself.

DST, exactly as cronsim (and Debian cron) do it:

- A job at a fixed local time that the spring change skips runs at the first local time that exists
  after it: 02:30 on the day Europe/Berlin goes from 02:00 to 03:00 runs at 03:00.
- In the autumn hour that is repeated, a job at a fixed local time runs once (at its first occurrence).
- A job that runs more often than hourly ("0 * * * *", "*/15 * * * *") follows real elapsed time through
  both changes: it runs at both 02:00s of the repeated hour, and skips nothing but the skipped hour.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

__all__ = ["Cron"]


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:
        raise ImportError(
            "Cron needs cronsim: install the cron extra, pip install 'timerwheel[cron]'"
        ) from None
    return cronsim


def _zone(tz: Any) -> tzinfo:
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


class Cron:
    """A cron expression evaluated in a time zone: next_after(dt) gives the next point strictly after dt.

    Five fields (minute hour day month day-of-week), or six with seconds first. The expression and its
    calendar are cronsim's (Debian cron's semantics, DST included: see the module docstring). A Cron is
    also a next_run function for KeyedScheduler (it ignores the key and the data), and what
    schedule_cron() takes.

    Args:
        expr: the cron expression.
        tz: an IANA time zone name ("Europe/Berlin") or a tzinfo; default UTC.

    Raises:
        ValueError: a bad expression or an unknown zone (the message quotes it).
        TypeError: expr is not a str, or tz neither a str nor a tzinfo.
        ImportError: cronsim is not installed (the cron extra).

    Example:
        >>> from datetime import datetime, timezone
        >>> Cron("30 2 * * *", "Europe/Berlin").next_after(datetime(2024, 3, 30, 12, 0, tzinfo=timezone.utc))
        datetime.datetime(2024, 3, 31, 3, 0, tzinfo=zoneinfo.ZoneInfo(key='Europe/Berlin'))
    """

    __slots__ = ("_cronsim", "expr", "tz")

    def __init__(self, expr: str, tz: str | tzinfo | None = None) -> None:
        if not isinstance(expr, str):
            raise TypeError(f"expr must be a cron expression (a str), not {type(expr).__name__}")
        self._cronsim = _cronsim()
        self.tz = _zone(tz)
        self.expr = expr
        try:
            self._cronsim.CronSim(expr, datetime(2000, 1, 1, tzinfo=self.tz))
        except self._cronsim.CronSimError as exc:
            raise ValueError(f"expr: bad cron expression {expr!r} ({exc})") from None

    def __repr__(self) -> str:
        return f"Cron({self.expr!r}, {str(self.tz)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cron) and (self.expr, str(self.tz)) == (other.expr, str(other.tz))

    def __hash__(self) -> int:
        return hash((self.expr, str(self.tz)))

    def next_after(self, dt: datetime) -> datetime | None:
        """The first point strictly after `dt` (an aware datetime), in the Cron's zone; None if there is
        none (an expression that can never match).

        Raises:
            ValueError: dt is naive. TypeError: dt is not a datetime.
        """
        if not isinstance(dt, datetime):
            raise TypeError(f"dt must be an aware datetime, not {type(dt).__name__}")
        if dt.tzinfo is None or dt.utcoffset() is None:
            raise ValueError(f"dt must be an aware datetime, got the naive {dt!r}")
        try:
            return next(self._cronsim.CronSim(self.expr, dt.astimezone(self.tz)))  # type: ignore[no-any-return]
        except StopIteration:
            return None

    def __call__(self, now: datetime, key: Any = None, data: Any = None) -> datetime | None:
        """As a KeyedScheduler next_run: the first point after `now` (the key and the data are ignored)."""
        return self.next_after(now)
