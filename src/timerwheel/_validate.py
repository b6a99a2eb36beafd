"""Validation of what users pass in: seconds, counts, ids, callables, enum members. One rule and one
message for each, used by every public entry point (the Cython core's slow path included).

The rules:

- A number of seconds is an int, a float, or another real number (fractions.Fraction, decimal.Decimal,
  NumPy scalars): anything that is a numbers.Real, or a Decimal. It is converted with float(). A bool is
  refused (True is almost always a mistake for a delay), and so are strings, containers and arrays. A
  conversion that fails (Decimal('sNaN'), a __float__ that raises or returns something else) is reported
  as a ValueError or TypeError that names the argument, never as the converter's own error.
- An id (a task id, a timer id) and a count are ints, never bools.
- Enum arguments must be members of their enum, not their values.
"""

from __future__ import annotations

import decimal
import enum
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "arguments",
    "boolean",
    "callable_or_none",
    "count",
    "deadline",
    "exception_types",
    "function",
    "identifier",
    "keywords",
    "member",
    "seconds",
    "timer_store",
]

E = TypeVar("E", bound=enum.Enum)


def _as_float(value: Any, name: str) -> float:
    """float(value) for a real number, with errors that name `name`; no finiteness check."""
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise OverflowError(f"{name} is too large to be a number of seconds: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise OverflowError(f"{name} is too large to be a number of seconds: {value!r}") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ValueError(f"{name} could not be read as a number: {value!r} ({exc})") from None


def seconds(value: Any, name: str) -> float:
    """`value` as a finite float; TypeError, ValueError or OverflowError naming `name` otherwise."""
    result = _as_float(value, name)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def deadline(value: Any, name: str) -> float:
    """A time as asyncio takes it: any real number, infinities included (an int beyond the floats is as
    far as infinity); NaN is refused. TypeError or ValueError naming `name` otherwise."""
    try:
        result = _as_float(value, name)
    except OverflowError:  # an int (or another real) beyond the floats: as far as infinity, for a timer
        return math.inf if value > 0 else -math.inf
    if result != result:
        raise ValueError(f"{name} must not be NaN")
    return result


def identifier(value: Any, name: str) -> int:
    """An id: an int, not a bool. TypeError naming `name` otherwise."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return int(value)


def count(value: Any, name: str, minimum: int = 0) -> int:
    """An int >= `minimum`, not a bool. TypeError or ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def boolean(value: Any, name: str) -> bool:
    """A bool. TypeError naming `name` otherwise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def function(value: Any, name: str) -> Callable[..., Any]:
    """A callable. TypeError naming `name` otherwise."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {type(value).__name__}")
    return value  # type: ignore[no-any-return]


def callable_or_none(value: Any, name: str) -> Any:
    """A callable or None. TypeError naming `name` otherwise."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, not {type(value).__name__}")
    return value


def member(value: Any, kind: type[E], name: str) -> E:
    """A member of the enum `kind`. TypeError naming `name` otherwise."""
    if not isinstance(value, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"{name} must be {article} {kind.__name__}, not {value!r}")
    return value


def exception_types(value: Any, name: str) -> tuple[type[BaseException], ...]:
    """A tuple of exception classes. TypeError naming `name` otherwise."""
    if not isinstance(value, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in value
    ):
        raise TypeError(f"{name} must be a tuple of exception classes, not {value!r}")
    return value


_STORE_METHODS = ("add_at", "cancel", "reschedule_at", "advance", "next_due", "__len__")


def timer_store(store: Any, resolution: Any, slots: Any, levels: Any) -> None:
    """`store` is None or has a TimerStore's methods and properties; the wheel's own settings come only
    without it. TypeError naming the argument otherwise."""
    if store is None:
        return
    missing = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
    missing += [name for name in ("now", "horizon") if not hasattr(store, name)]
    if missing:
        raise TypeError(
            f"store must be a timer store (a TimerWheel, a HeapQueue, or one with their methods), not "
            f"{type(store).__name__}: it has no {', '.join(missing)}"
        )
    if resolution is not None or slots is not None or levels is not None:
        raise TypeError("resolution, slots and levels are the default TimerWheel's: not with store")


def arguments(value: Any) -> tuple[Any, ...]:
    """A job's positional arguments, as a tuple. TypeError naming `args` for a string or a non-iterable."""
    if isinstance(value, (str, bytes)):
        raise TypeError("args must be an iterable of arguments, not a string")
    try:
        return tuple(value)
    except TypeError:
        raise TypeError(f"args must be an iterable of arguments, not {type(value).__name__}") from None


def keywords(value: Any) -> dict[str, Any]:
    """A job's keyword arguments, as a new dict. TypeError naming `kwargs` for a non-mapping, or a key
    that is not a string."""
    if not isinstance(value, Mapping):
        raise TypeError(f"kwargs must be a mapping of names to arguments, not {type(value).__name__}")
    result = dict(value)
    for key in result:
        if type(key) is not str:
            raise TypeError(f"kwargs keys must be strings, not {key!r}")
    return result
