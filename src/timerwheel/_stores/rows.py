"""The rows a store holds and their checks: a key's row (StoredKey), an unfinished fire (StoredFire), a
fire to mark finished (FinishedFire), the key's stored form (JSON of a str or an int), and StoreError.

Times are integers of microseconds since the epoch (UTC), so that a scheduled time is an exact key.
key_row and fire_row build a row from what a store read, and raise ValueError saying what is wrong with
it; the store turns that into a StoreError naming its file and the row.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple


class StoreError(RuntimeError):
    """A store that cannot be used: another owner has it, it is not a timerwheel store, it has content
    this timerwheel cannot read, it is read-only, or it failed (its message names the file)."""


class StoredKey(NamedTuple):
    """A key's row. Times in microseconds since the epoch (UTC), or None."""

    key: Hashable
    data: str  # JSON
    generation: int
    state: str  # a KeyState's value
    next_run_at: int | None
    last_scheduled_for: int | None
    last_error: str | None
    # Paused by the user (KeyedScheduler.pause): the key is not armed until resumed. Only pause() and
    # resume() set it (KeyStore.set_paused): the other writes of a row leave what the store has.
    paused: bool = False
    # The key's own options (upsert's overlap=), as JSON text of an object, or None: the KeyedScheduler's
    # apply. Written by a user's change (put, replace); the other writes carry what the key has.
    options: str | None = None
    # A trigger of the key not run yet (KeyedScheduler.trigger), as JSON text {"at": microseconds,
    # "restart": bool, "overlap": an Overlap's value or null}, or None. A user's change (put, replace)
    # clears it; the take of a fire of the key at or after `at` clears it (a shared store's take does,
    # in the database); a local store keeps what every write gives.
    triggered: str | None = None
    # The key's fires taken to run (KeyInfo.runs), across its generations: a take of a new fire counts one
    # (a local store keeps what the take's row gives; a shared store counts it in the database, and put
    # and replace leave it); delete() forgets it.
    runs: int = 0


class Put(int):
    """What a store that counts a key's runs itself (a shared store: StoredKey.runs) answers for a put
    (and for each row of a replace): the generation stored, an int, with the count of runs the key has
    there (`runs`)."""

    runs: int

    def __new__(cls, generation: int, runs: int) -> Put:
        made = int.__new__(cls, generation)
        made.runs = runs
        return made

    def __repr__(self) -> str:
        return f"Put({int(self)}, runs={self.runs})"

    __str__ = int.__repr__  # (str() of an int subclass would be its repr: as a number, like an int's)


#: What a shared store's take answers for a fire of a paused key (KeyStore.start_fire): not taken, and
#: the key is paused (by another process, maybe): the taker pauses it too.
TAKE_PAUSED = -3


class StoredFire(NamedTuple):
    """A fire that started and never finished (the process stopped during its run)."""

    key: Hashable
    generation: int
    scheduled_for: int
    attempts: int


class FinishedFire(NamedTuple):
    """A fire to mark finished (with its error: why it did not run)."""

    key: Hashable
    generation: int
    scheduled_for: int
    finished_at: int
    error: str | None


class StoredEntry(NamedTuple):
    """An entry of a key's history (KeyedScheduler.history): a decision about one of its fires. Times in
    microseconds since the epoch (UTC); `scheduled_for` None for a decision of no fire; `duration` (the
    run's, in microseconds) for a run that ended, else None."""

    key: Hashable
    at: int
    scheduled_for: int | None
    outcome: str
    attempt: int
    duration: int | None = None
    error: str | None = None


def encode_key(key: Any) -> str:
    """A key as stored: JSON of a str or an int (so that "1" and 1 stay two keys). TypeError otherwise,
    ValueError for an int too long to write."""
    if type(key) is str or (type(key) is int):
        try:
            return json.dumps(key)
        except ValueError as exc:  # an int of more digits than int->str converts
            raise ValueError(f"key: an int too long for a durable store ({exc})") from None
    raise TypeError(f"key must be a str or an int with a durable store, not {type(key).__name__}")


def decode_key(text: str) -> Hashable:
    return json.loads(text)  # type: ignore[no-any-return]


# -- reading a file's rows: every value checked as it is loaded --------------------------------------------

_STATES = frozenset(("pending", "running", "disabled", "invalid"))  # KeyState's values (tests pin them)
_OVERLAPS = frozenset(("skip", "queue_one", "allow", "replace"))  # Overlap's values (tests pin them)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The times a stored key may have: what a UTC datetime can show, a day inside its limits (the keyed
# layer's _MIN_POSIX and _MAX_POSIX), in the microseconds a store keeps: exact integers.
_MIN_US = (datetime.min.replace(tzinfo=UTC) + timedelta(days=1) - _EPOCH) // timedelta(microseconds=1)
_MAX_US = (datetime.max.replace(tzinfo=UTC) - timedelta(days=1) - _EPOCH) // timedelta(microseconds=1)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(parse_constant=_no_constant)  # strict: what the keyed layer writes (allow_nan=False)


def stored_key(text: Any) -> Hashable:
    """A stored key decoded. ValueError unless it is the JSON that encode_key writes for a str or an int
    (so that no two rows are one key)."""
    if type(text) is not str:
        raise ValueError(f"the key is {type(text).__name__}, not text")
    try:
        key = _JSON.raw_decode(text)[0]
        if encode_key(key) == text:  # (which also refuses anything after the JSON)
            return key  # type: ignore[no-any-return]
    except (TypeError, ValueError, RecursionError):
        pass
    raise ValueError("the key is not the JSON of a str or an int as timerwheel writes it")


def _check_int(what: str, value: Any, low: int, high: int | None = None) -> None:
    if type(value) is not int or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high} (a time a UTC datetime can show)"
        raise ValueError(f"its {what} is {value!r}, not an int {bounds}")


def _check_time(what: str, value: Any) -> None:
    if value is not None and not (type(value) is int and _MIN_US <= value <= _MAX_US):
        _check_int(what, value, _MIN_US, _MAX_US)


def _json_object(what: str, text: Any) -> dict[str, Any] | None:
    """A column of JSON text that holds an object, or NULL (None), as the keyed layer writes it: the
    object, or ValueError naming the column (`what`)."""
    if text is None:
        return None
    is_ = "are" if what.endswith("s") else "is"
    if type(text) is not str:
        raise ValueError(f"its {what} {is_} {type(text).__name__}, not JSON text or NULL")
    try:
        value = _JSON.decode(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"its {what} {is_} not JSON ({exc})") from None
    if type(value) is not dict:
        raise ValueError(f"its {what} {is_} {text!r}, not a JSON object")
    return value


def _check_overlap(what: str, overlap: Any) -> None:
    if overlap is not None and (type(overlap) is not str or overlap not in _OVERLAPS):
        raise ValueError(f"its {what} is {overlap!r}, not one of {', '.join(sorted(_OVERLAPS))}")


def _check_options(o: Any) -> None:
    """A key's options as the keyed layer writes them: NULL, or a JSON object of known members."""
    options = _json_object("options", o)
    if options is None:
        return
    unknown = sorted(set(options) - {"overlap", "jitter", "spread", "start", "end", "max_runs", "retry"})
    if unknown:
        raise ValueError(
            f"its options have {', '.join(map(repr, unknown))}, which this timerwheel does not know"
        )
    _check_overlap("overlap", options.get("overlap"))
    for name in ("jitter", "spread"):
        value = options.get(name)
        if value is not None and not (type(value) in (int, float) and 0 <= value <= 1e9):
            raise ValueError(f"its {name} is {value!r}, not a number of seconds from 0 to 1e9")
    for name in ("start", "end"):
        _check_time(name, options.get(name))
    start, end = options.get("start"), options.get("end")
    if start is not None and end is not None and end < start:
        raise ValueError(f"its end ({end}) is before its start ({start})")
    max_runs = options.get("max_runs")
    if max_runs is not None:
        _check_int("max_runs", max_runs, 1)
    retry = options.get("retry")
    if retry is not None and not (
        type(retry) is list
        and len(retry) == 3
        and type(retry[0]) is int
        and retry[0] >= 1
        and all(type(v) in (int, float) and 0 < v <= 1e9 for v in retry[1:])
    ):
        raise ValueError(
            f"its retry is {retry!r}, not [attempts >= 1, backoff > 0, cap > 0] (seconds, <= 1e9)"
        )


def check_triggered(t: Any) -> None:
    """A key's pending trigger as the keyed layer writes it: NULL, or {"at", "restart", "overlap"}."""
    trigger = _json_object("triggered", t)
    if trigger is None:
        return
    if set(trigger) != {"at", "restart", "overlap"}:
        raise ValueError(f"its triggered is {t!r}, not an object of at, restart and overlap")
    _check_int("triggered at", trigger["at"], _MIN_US, _MAX_US)
    if type(trigger["restart"]) is not bool:
        raise ValueError(f"its triggered restart is {trigger['restart']!r}, not a boolean")
    _check_overlap("triggered overlap", trigger["overlap"])


def key_row(
    k: Any,
    d: Any,
    g: Any,
    s: Any,
    n: Any,
    last: Any,
    e: Any,
    p: Any = False,
    o: Any = None,
    t: Any = None,
    r: Any = 0,
) -> StoredKey:
    """A row of timerwheel_keys, checked: ValueError saying what this timerwheel cannot read in it."""
    key = stored_key(k)
    if type(d) is not str:
        raise ValueError(f"its data is {type(d).__name__}, not JSON text")
    try:
        whole = _JSON.raw_decode(d)[1] == len(d)  # (what the keyed layer writes: JSON, no whitespace)
    except (ValueError, RecursionError):
        whole = False
    if not whole:
        try:
            _JSON.decode(d)  # (JSON with whitespace around it; or the error that says what is wrong)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"its data is not JSON ({exc})") from None
    if type(g) is not int or g < 0:
        _check_int("generation", g, 0)
    if s not in _STATES:
        raise ValueError(f"its state is {s!r}, not one of {', '.join(sorted(_STATES))}")
    _check_time("next_run_at", n)
    _check_time("last_scheduled_for", last)
    if e is not None and type(e) is not str:
        raise ValueError(f"its last_error is {type(e).__name__}, not text or NULL")
    if p not in (0, 1) or type(p) not in (bool, int):  # (SQLite keeps a boolean as 0 or 1)
        raise ValueError(f"its paused is {p!r}, not a boolean")
    _check_options(o)
    check_triggered(t)
    _check_int("runs", r, 0)
    return StoredKey(key, d, g, s, n, last, e, bool(p), o, t, r)


OUTCOMES = frozenset(
    ("ran", "failed", "retried", "skipped", "missed", "dropped", "paused", "superseded", "lease_lost", "late")
)


def entry_row(key: Hashable, at: Any, s: Any, outcome: Any, attempt: Any, d: Any, e: Any) -> StoredEntry:
    """A row of timerwheel_history, checked as key_row checks a key's."""
    _check_int("at", at, _MIN_US, _MAX_US)
    if s is not None:
        _check_int("scheduled_for", s, _MIN_US, _MAX_US)
    if outcome not in OUTCOMES:
        raise ValueError(f"its outcome is {outcome!r}, not one of {', '.join(sorted(OUTCOMES))}")
    _check_int("attempt", attempt, 0)
    if d is not None:
        _check_int("duration", d, 0)
    if e is not None and type(e) is not str:
        raise ValueError(f"its error is {type(e).__name__}, not text or NULL")
    return StoredEntry(key, at, s, outcome, attempt, d, e)


def fire_row(k: Any, g: Any, at: Any, attempts: Any) -> StoredFire:
    """A row of timerwheel_fires (unfinished), checked as key_row checks a key's."""
    key = stored_key(k)
    _check_int("generation", g, 0)
    _check_int("scheduled_for", at, _MIN_US, _MAX_US)
    _check_int("attempts", attempts, 1)
    return StoredFire(key, g, at, attempts)
