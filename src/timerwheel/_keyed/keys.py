"""The keys of a KeyedScheduler: the public values (KeyState, Reschedule, Overlap, CatchUp, Recover,
KeyInfo, KeyedStats), a key's record (Key: its timer, data, generation, state and catch-up queue), and
the small rules about a key's times that every part of the keyed layer shares."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from zoneinfo import ZoneInfo

from .._engine import WallTimer
from .._stores import StoredEntry, StoredKey

if TYPE_CHECKING:
    from .._engine import JobContext


class KeyState(enum.Enum):
    """Where a key stands: PENDING (armed for next_run_at), RUNNING (a run of it is going), DISABLED
    (next_run gave None, Reschedule.NONE after a run, or the scheduler closed), INVALID (next_run raised or
    gave something that is not an aware datetime; see last_error), PAUSED (KeyedScheduler.pause: not
    armed until resume(); a run that was going goes on, and KeyInfo.running says so)."""

    PENDING = "pending"
    RUNNING = "running"
    DISABLED = "disabled"
    INVALID = "invalid"
    PAUSED = "paused"


class Reschedule(enum.Enum):
    """When a key's next run is computed: AFTER_FINISH (when a run finishes: runs never overlap),
    BEFORE_RUN (when a run starts: a fixed cadence, runs may overlap), NONE (never: after a run the key is
    DISABLED until it is upserted again)."""

    AFTER_FINISH = "after_finish"
    BEFORE_RUN = "before_run"
    NONE = "none"


class Overlap(enum.Enum):
    """What a key's fire does when it comes while a run of the key goes (a run of the same key, of this
    generation or an older one, started and not ended):

    - SKIP: it does not run; it is counted (KeyedStats.skipped) and the key's next fire is planned after it.
    - QUEUE_ONE: it waits, and runs as soon as the running runs have ended; while it waits the key is not
      armed, so the fires that fall due meanwhile do not come (at most one waits: the first).
    - ALLOW: it runs beside the running ones.
    - REPLACE: the running runs are told to stop (their ctx.cancelled is set), and it runs at once.

    A fire that a catch-up decided to run (a rerun, a missed fire run at start, at a takeover or at a
    resume) is never skipped and never replaces a run: under SKIP, QUEUE_ONE and REPLACE it waits for the
    runs going, under ALLOW it runs beside them.

    A KeyedScheduler's `overlap=None` (the default) is ALLOW under Reschedule.BEFORE_RUN and QUEUE_ONE
    otherwise (under AFTER_FINISH and NONE a key's own fires never come during its run: only the fire of
    a newer generation, after an upsert during a run, does)."""

    SKIP = "skip"
    QUEUE_ONE = "queue_one"
    ALLOW = "allow"
    REPLACE = "replace"


class CatchUp(enum.Enum):
    """What start() does with the fires of a stored key that fell due while the process was down:
    ONCE (one run now, then on schedule: systemd's Persistent=true, Kubernetes CronJob), SKIP (none: go on
    at the next fire after now), ALL (each missed fire, in order, at most max_catch_up: Quartz's
    ignore-misfire policy; then on schedule). Every missed fire that does not run is reported."""

    ONCE = "once"
    SKIP = "skip"
    ALL = "all"


class Recover(enum.Enum):
    """What start() does with a fire that started and never finished (the process died during its run):
    RERUN it (at-least-once execution), or SKIP it (at-most-once: recorded as failed)."""

    RERUN = "rerun"
    SKIP = "skip"


class Policy(NamedTuple):
    """A KeyedScheduler's rules for what happened while nothing ran its keys."""

    recover: Recover
    reschedule: Reschedule
    catch_up: CatchUp
    max_catch_up: int
    grace: float | None  # misfire_grace


#: The upper bounds (seconds) of KeyedStats.lateness's buckets: a millisecond to five minutes, then the rest.
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, math.inf)


@dataclasses.dataclass(frozen=True)
class KeyedStats:
    """A snapshot of a KeyedScheduler's counters (since it was made).

    Attributes:
        keys: keys held.
        started: runs started. finished: runs finished. failed: runs that raised.
        missed: fires that fell due while the process was down (a durable store) and were not run
            (CatchUp.SKIP, beyond max_catch_up, past misfire_grace), all reported through on_missed.
        caught_up: missed fires run at start (CatchUp.ONCE or ALL).
        recovered: interrupted fires run again at start (Recover.RERUN).
        abandoned: interrupted fires recorded as failed (Recover.SKIP).
        clock_errors: times the wall clock could not be read as a key's run started or ended (logged;
            the run is tried again after a back-off, or its end planned from the last reading).
        skipped: fires not run because a run of their key was going (Overlap.SKIP).
        late: fires that had not started late_grace seconds after they were due (each told to on_late
            once).
        retried: failed runs tried again (retry=).
        store_errors: writes and takes the store failed (each logged; the fire or the row is tried
            again, or written at the key's next fire).
        claimed: keys this process took up from a shared store (at its start, and from processes that
            left or whose lease lapsed); 0 with a local store.
        lateness: how late runs began (the wall clock as the fire was taken, less the fire's time): the
            count of runs in each bucket of LATENESS_BUCKETS (upper bounds in seconds, the last
            infinite), one per started run.
        lateness_sum: the sum of those lateness figures, in seconds.
    """

    keys: int = 0
    started: int = 0
    finished: int = 0
    failed: int = 0
    missed: int = 0
    caught_up: int = 0
    recovered: int = 0
    abandoned: int = 0
    clock_errors: int = 0
    skipped: int = 0
    late: int = 0
    retried: int = 0
    store_errors: int = 0
    claimed: int = 0
    lateness: tuple[int, ...] = ()
    lateness_sum: float = 0.0


class KeyInfo(NamedTuple):
    """A key as it stands, from get() and snapshot() (a named tuple: cheap to make by the million).
    A paused key shows PAUSED, with next_run_at None (it runs nothing until resumed).

    Attributes:
        key: the key.
        data: its data, as last upserted.
        state: its KeyState.
        next_run_at: when it runs next (an aware UTC datetime), or None.
        running: whether a run of it is going (of this generation or an older one).
        last_error: the most recent error of next_run or of a run ("Type: message"), or None.
        generation: bumped by every upsert, replace and remove.
        overlap: what a fire of the key does when it comes while a run of it goes (Overlap): the key's
            own (upsert's `overlap=`), else the KeyedScheduler's.
        jitter: the most its fires are delayed by, each by an amount of its own (seconds; upsert's
            `jitter=`, else the KeyedScheduler's).
        spread: the most its fires are delayed by, all by one amount, the key's own (seconds; upsert's
            `spread=`, else the KeyedScheduler's).
        start: the key's window opens (an aware UTC datetime, upsert's `start=`): no fire of a point of
            its schedule before it; or None.
        end: the key's window closes (upsert's `end=`): no fire of a point after it; or None.
        max_runs: the key's runs at most (upsert's `max_runs=`), or None: no limit.
        runs: the key's fires taken to run so far (a rerun of an interrupted fire is the same run), kept
            across upserts and restarts; remove() forgets it.
        retry: how its failed runs are tried again (Retry: upsert's `retry=`, else the
            KeyedScheduler's), or None.
        retry_at: when its failed fire is tried again (a retry waits: `next_run_at` is its schedule's
            next fire, which the retry gives way to), or None.
        last_run: the latest run of the key this KeyedScheduler ended (a HistoryEntry: ran or failed),
            or None (KeyedScheduler.last_run() reads the store: every process's, across restarts).
    """

    key: Hashable
    data: Any
    state: KeyState
    next_run_at: datetime | None
    running: bool
    last_error: str | None
    generation: int
    overlap: Overlap = Overlap.QUEUE_ONE
    jitter: float = 0.0
    spread: float = 0.0
    start: datetime | None = None
    end: datetime | None = None
    max_runs: int | None = None
    runs: int = 0
    retry: Retry | None = None
    retry_at: datetime | None = None
    last_run: HistoryEntry | None = None


class HistoryEntry(NamedTuple):
    """One entry of a key's history (KeyedScheduler.history): a decision about one of its fires, and
    why. `outcome` is one of:

    - "ran": a run ended (`duration`); "failed": a run raised (`error`, `duration`);
    - "retried": a failed fire was handed over again (`attempt`: the retry's; see Retry);
    - "skipped": a fire came while a run of its key went (Overlap.SKIP);
    - "missed": a fire fell due while the key was not held (a restart, a pause, a takeover) and the
      catch-up rules did not run it (catch_up, max_catch_up, misfire_grace);
    - "dropped": the scheduler's backpressure dropped the fire's run;
    - "paused": the key was paused (`scheduled_for`: the fire the pause holds back, or None);
    - "superseded": an upsert or replace made the fire's key a new generation before it began;
    - "lease_lost": the lease on the key may have lapsed before the fire began (a shared store): taken
      again, or by the process that holds the key now;
    - "late": the fire had not begun late_grace seconds after it was due (on_late).

    Attributes:
        scheduled_for: the fire's time (an aware UTC datetime), or None.
        at: when it was decided (the wall clock of the process that decided, an aware UTC datetime).
        outcome: what became of it (above).
        attempt: the run's attempt (1, more for a rerun or a retry); 0 for a fire that did not run.
        duration: the run's, in seconds (ran, failed), else None.
        error: what the run raised ("Type: message"), or why the fire did not run, or None.
    """

    scheduled_for: datetime | None
    at: datetime
    outcome: str
    attempt: int
    duration: float | None = None
    error: str | None = None


MAX_DELAY = 1e9  # seconds a fire may be delayed by, at most (jitter, spread, a retry: about 31 years)


@dataclasses.dataclass(frozen=True)
class Retry:
    """A failed run tried again (KeyedScheduler's and upsert()'s `retry=`): a fire runs `attempts` times
    at most in all, the first run included; its n-th retry comes min(cap, backoff x 2^(n-1)) seconds after
    the failed run ended. A retry gives way to every other fire of its key: it is not made (the fire ends
    failed) if it would come at or after the key's next fire, or if, when its time comes, another fire
    of the key began, runs, waits or is due. A run failed when it raised an Exception (a
    KeyboardInterrupt or a SystemExit is not retried). Each retry is an attempt of the same fire
    (`ctx.fence.attempt`, the fire log's attempts); while it waits the fire stays unfinished in a durable
    store, so that a process that dies meanwhile leaves it to `recover` (Recover.RERUN runs it again at
    the next start, or in the process that takes the key over).

    Args:
        attempts: the most runs of a fire, >= 1 (1: no retry).
        backoff: seconds before the first retry, > 0; doubled for each one after.
        cap: the most seconds between two attempts (>= backoff is not required: the delay is the lesser).

    Raises:
        TypeError: attempts not an int; backoff or cap not a number. ValueError: attempts < 1, backoff
            or cap not > 0, or above 1e9 s.
    """

    attempts: int
    backoff: float = 1.0
    cap: float = 60.0

    def __post_init__(self) -> None:
        if type(self.attempts) is not int:
            raise TypeError(f"attempts must be an int, not {type(self.attempts).__name__}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        for name in ("backoff", "cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
            if not 0 < value <= MAX_DELAY:
                raise ValueError(f"{name} must be > 0 seconds and at most {MAX_DELAY:.0f}, got {value!r}")
            object.__setattr__(self, name, float(value))

    def delay(self, attempt: int) -> float:
        """Seconds before the retry that follows the failed run of attempt `attempt` (1: the first)."""
        return min(self.cap, self.backoff * 2.0 ** min(attempt - 1, 1000))


class Options(NamedTuple):
    """A key's own options (upsert's overlap=, jitter=, spread=, start=, end=, max_runs=, retry=); None in
    a field: the KeyedScheduler's (for the window and the count, which are a key's only: none). `start`
    and `end` are POSIX seconds, whole microseconds."""

    overlap: Overlap | None = None
    jitter: float | None = None
    spread: float | None = None
    start: float | None = None
    end: float | None = None
    max_runs: int | None = None
    retry: Retry | None = None

    @property
    def shaped(self) -> bool:
        """Whether these options change the key's plan (its delays, its window, its count): it is then
        made by KeyTable.evaluate, not inline."""
        return bool(self.jitter or self.spread) or (
            self.start is not None or self.end is not None or self.max_runs is not None
        )


class Trigger(NamedTuple):
    """A key's trigger not run yet (KeyedScheduler.trigger): the fire at `at` (POSIX seconds) of
    `generation`, run at once under `overlap` (None: the key's); after it the key goes back to the plan
    it had (`before`: state and next run, read as the trigger was applied), or, `restart` (or no plan of
    its own then: a queue, a run going under AFTER_FINISH), plans from it as from any fire."""

    generation: int
    at: float
    restart: bool
    overlap: Overlap | None
    before: tuple[KeyState, float | None] | None = None  # (the key's plan as it was applied)
    keeps: bool = False  # (the key goes back to it after the run)

    @property
    def kept(self) -> tuple[KeyState, float | None] | None:
        """The plan the key goes back to after the triggered run (None: it plans from the run)."""
        return self.before if self.keeps else None


class KeyOwner(Protocol):
    """What a key's record needs of the key table that holds it: whether its KeyedScheduler is closed (a
    closed one shows every key DISABLED), where a fire goes (the engine calls Key.fire at the key's
    next run), and what a callback of the fire held (a KeyboardInterrupt, a SystemExit: raised then)."""

    closed: bool
    defaults: Options  # (the KeyedScheduler's, every field set: a key's own, where it has one, go first)
    holding: bool

    def fired(self, rec: Key) -> None: ...

    def raise_held(self) -> None: ...


class Own(enum.Enum):
    OWN = "own"  # (Key.row: the key's own options)


OWN = Own.OWN


_new_info = tuple.__new__  # KeyInfo's own __new__, without its Python-level call


class Key(WallTimer):
    """A key's record, and its one timer: a WallTimer of the engine armed at its next run (`wall`)."""

    kind = "keys"  # what the engine's stats() counts it as
    __slots__ = (
        "catch_up",
        "contexts",
        "data",
        "decided",
        "generation",
        "hand",
        "handed",
        "key",
        "last_call",
        "last_error",
        "last_run",
        "last_scheduled_for",
        "late",
        "next_run_at",
        "options",
        "owner",
        "paused",
        "resumed",
        "retake",
        "retrying",
        "running",
        "runs",
        "started_in",
        "state",
        "taken_up",
        "taking",
        "took",
        "triggered",
        "voided",
    )

    def __init__(self, owner: KeyOwner, key: Hashable, data: Any) -> None:
        self.id: int | None = None  # (WallTimer's: its entry in the store while armed)
        self.due = 0.0
        self.wall = 0.0
        self.owner = owner
        self.key = key
        self.data = data
        self.generation = 0
        self.state = KeyState.DISABLED
        self.next_run_at: float | None = None  # POSIX seconds
        self.running = 0
        self.runs = 0  # (its fires taken to run, across generations: see KeyInfo.runs)
        # Paused (KeyedScheduler.pause): never armed until resumed. `state` and `next_run_at` go on saying
        # what the key would do (its plan: the fire the pause holds back), and KeyInfo shows PAUSED.
        self.paused = False
        self.options: Options | None = None  # its own (upsert's), or None: the KeyedScheduler's
        self.last_error: str | None = None
        self.contexts: list[JobContext] | None = None  # of its runs going on (a list only while some are)
        self.last_scheduled_for: float | None = None  # of its latest fire (kept by a durable store)
        # the generation of that fire (a row read: the row's, at most); None: none started
        self.started_in: int | None = None
        self.catch_up: list[tuple[float, bool]] | None = None  # fires to run at once: (when, a rerun)
        # (generation, wall time) of the catch-up a start or a claim decided (its queue): every fire up
        # to then was decided (queued, or reported missed): none of them is run by a later plan
        self.decided: tuple[int, float] | None = None
        self.last_call = 0  # the engine's drain() call that last fired it: once per call at most
        # The fire handed to the scheduler whose take is not done yet, (generation, scheduled_for), or
        # None: it is not handed over again meanwhile (the key armed again at it, by the end of another run or
        # a catch-up step, while its take is on its way to a shared store, would take it twice).
        self.handed: tuple[int, float] | None = None
        # A take whose answer did not come (the store raised: it may have committed) or whose lease may
        # have lapsed since, (generation, scheduled_for, started_at): the fire's next take is the same
        # take again, with the same started_at, which a store takes at the same attempt.
        self.retake: tuple[int, float, int] | None = None
        # Every hand-over of a fire to the scheduler has a token (`hand`: the latest one's); a pause voids
        # those made before it (`voided`: the latest void token): such a job, when it comes, does not
        # start its fire (it stays the key's plan, which resume decides about), not even after a resume.
        self.hand = 0
        self.voided = 0
        # A shared store's takes of its fires on their way (`taking`); a key resumed meanwhile is decided
        # about once they are done (`resumed`: see Runs._take_done), from what they made of it.
        self.taking = 0
        self.resumed = False
        self.triggered: Trigger | None = None  # (a trigger not run yet; of its generation only)
        self.late: Late | None = None  # (its late check, with on_late or late_grace: see Late)
        # The wall time this process took the key up (a start, a claim, a resume: their decision): a fire
        # due before it was missed meanwhile, and counts its lateness from then (see Runs._watch)
        self.taken_up: float | None = None
        self.retrying: Retrying | None = None  # (its failed fire's retry, with retry=: see Retrying)
        # (generation, scheduled_for, started_at) of its latest take: a retry of that fire is a take of
        # its own, with a later started_at (a store takes a rerun with the same one as the same take)
        self.took: tuple[int, float, int] | None = None
        # (its latest run's end, KeyInfo.last_run: (scheduled_for, at, outcome, attempt, duration, error),
        # times in microseconds, made a HistoryEntry when it is asked for)
        self.last_run: tuple[int, int, str, int, float | None, str | None] | None = None

    def row(
        self,
        data: str,
        generation: int,
        state: KeyState,
        at: float | None,
        last_error: str | None,
        started: float | None = None,
        options: Options | Own | None = OWN,
        triggered: Trigger | Own | None = OWN,
        runs: int | None = None,
        paused: bool | None = None,
    ) -> StoredKey:
        """Its row for a durable store: `data` its JSON, the plan given (generation, state, next run, last
        error), its latest started fire (`started`, or its own), its options (or its own) and its
        trigger not run yet (`triggered`, or its own, if of that generation), its count of runs (`runs`,
        or its own), and whether it is paused (`paused`, or its own). The one place a row is made."""
        latest = self.last_scheduled_for if started is None else started
        text = options_text(self.options if options is OWN else options)
        trigger = self.triggered if triggered is OWN else triggered
        pending = None if trigger is None or trigger.generation != generation else trigger_text(trigger)
        return StoredKey(
            self.key,
            data,
            generation,
            state.value,
            us(at),
            us(latest),
            last_error,
            self.paused if paused is None else paused,
            text,
            pending,
            self.runs if runs is None else runs,
        )

    def fire(self) -> None:
        """Its next run came (drain() calls it): hand the run to the scheduler. A KeyboardInterrupt or a
        SystemExit from a callback meanwhile (on_state_change, on_late) is raised then, where a job's
        would go."""
        owner = self.owner
        owner.fired(self)
        if owner.holding:
            owner.raise_held()

    def info(self) -> KeyInfo:
        # (closed: every key shows DISABLED, with no next run; the record keeps its plan, which a durable
        # store still gets when a run that goes on past close() ends)
        closed = self.owner.closed
        at = None if closed or self.paused else self.next_run_at
        own = self.options
        force = effective(own, self.owner.defaults)
        retrying = self.retrying
        return _new_info(
            KeyInfo,
            (
                self.key,
                value_of(self.data),
                KeyState.DISABLED if closed else KeyState.PAUSED if self.paused else self.state,
                None if at is None else from_posix(at, UTC),
                self.running > 0,
                self.last_error,
                self.generation,
                force.overlap,
                force.jitter,
                force.spread,
                None if own is None or own.start is None else from_posix(own.start, UTC),
                None if own is None or own.end is None else from_posix(own.end, UTC),
                None if own is None else own.max_runs,
                self.runs,
                force.retry,
                None
                if closed
                or retrying is None
                or retrying.id is None
                or retrying.fire_of is None
                or retrying.fire_of[0] != self.generation
                else from_posix(retrying.wall, UTC),
                None if self.last_run is None else last_run_of(self.last_run),
            ),
        )


class Late(WallTimer):
    """A key's late check (KeyedScheduler's on_late, late_grace): a timer of the engine armed, as a fire
    of the key comes, at its due time + late_grace; when it fires, the fire is told late if it still
    waits (handed over and not begun: a worker, a slot, a store's take; or first in the key's queue:
    behind a run of the key, a failing clock). One per key, moved from fire to fire; `fire_of` is the
    (generation, scheduled_for) it watches, `deadline` when it is told, `told` whether it was."""

    __slots__ = ("deadline", "fire_of", "owner", "rec", "told")

    def __init__(self, owner: Any, rec: Key) -> None:
        super().__init__()
        self.owner = owner
        self.rec = rec
        self.fire_of: tuple[int, float] | None = None
        self.deadline = 0.0
        self.told = False

    def fire(self) -> None:
        """Its time came (drain() calls it): tell the fire late if it still waits."""
        self.owner.late_due(self)


class Retrying(WallTimer):
    """A key's retry (retry=): a timer of the engine armed, as a run of the key fails with attempts
    left, at the retry's time; when it fires, the failed fire is handed over again (a rerun: an attempt
    more), unless it gives way to another fire of the key (see Retry), in which case the fire ends failed.
    One per key; `fire_of` is the (generation, scheduled_for) of the fire it tries again, None once that
    fire ended; `attempt` the attempt that failed, `ended` when (POSIX seconds), `error` what it raised
    (described), `took` its take's started_at (microseconds); `handed` whether it was handed over and
    has not begun yet; `held` whether its time came while its key was paused (a resume
    arms it again: the pause held it)."""

    __slots__ = ("attempt", "ended", "error", "fire_of", "handed", "held", "owner", "rec", "took")

    def __init__(self, owner: Any, rec: Key) -> None:
        super().__init__()
        self.owner = owner
        self.rec = rec
        self.fire_of: tuple[int, float] | None = None
        self.attempt = 0
        self.ended = 0.0
        self.error = ""
        self.handed = False
        self.held = False
        self.took = 0  # (the started_at of the failed attempt's take: the retry's is later)

    def fire(self) -> None:
        """Its time came (drain() calls it): the fire is tried again, or it gives way."""
        self.owner.retry_due(self)


from_posix = datetime.fromtimestamp


def delayed(
    next_after: Callable[[float], float | BaseException | None],
    key: Hashable,
    wall_now: float,
    jitter: float,
    spread: float,
    started: float | None = None,
) -> float | BaseException | None:
    """A key's next fire after `wall_now`, delayed (next_after(t): next_run's point after t, or None, or
    the error). A point P is delayed, forward only, by spread x u(key) + jitter x u(key, P), where u is a
    fraction of [0, 1) drawn from a hash (BLAKE2b) of the key and P: the same in every process and every
    life, so that a shared store's processes and a restart agree on it. The delay never reaches the point
    after P: past it, it is scaled down into the room there is.

    The fire is next_run's point's, delayed (None: the schedule has no point after now, and its last
    point's delayed fire, if any, came); or an earlier point's whose delayed fire is still to come:
    the points within the reach (jitter + spread) before now, if the schedule's points do not depend on
    now (the points from now - reach on lead to next_run's point: a calendar, not a cadence counted from
    now), and there are at most DELAY_POINTS of them; and none at or before the key's latest started fire
    (`started`: its point ran, whatever its delay is now)."""
    point = next_after(wall_now)
    if isinstance(point, BaseException):
        return point
    earlier: list[float] = []
    reach = jitter + spread
    walked = next_after(wall_now - reach if started is None else max(wall_now - reach, started))
    while isinstance(walked, float) and (point is None or walked < point) and len(earlier) <= DELAY_POINTS:
        earlier.append(walked)
        walked = next_after(walked)
    # (the walk leads to next_run's point, or, a schedule that ends, to its end: None)
    if walked == point and len(earlier) <= DELAY_POINTS:
        for i, p in enumerate(earlier):
            at = _delayed_point(key, p, earlier[i + 1] if i + 1 < len(earlier) else point, jitter, spread)
            if at > wall_now:
                return at
    return None if point is None else _delayed_point(key, point, next_after(point), jitter, spread)


def windowed(
    next_after: Callable[[float], float | BaseException | None], start: float | None, end: float | None
) -> Callable[[float], float | BaseException | None]:
    """A key's schedule in its window (upsert's start=, end=: POSIX seconds, or None): next_after(t) is
    the first point after t, as `next_after` gives it, that is in [start, end]; None past the end. Before
    the window, the schedule's first point at or after `start`: the point at `start` if there is one (its
    first point after start - 1 µs is start), else its first point after start (asked at start itself, so
    that a schedule counted from now, now + an interval, counts from start). A point before `start` that
    the schedule gives (a one-off that is overdue) counts at `start`: due then, or now if the window is
    open. From `end` on there is no next point (not even an overdue one)."""

    def inside(t: float) -> float | BaseException | None:
        if end is not None and t >= end:
            return None
        if start is not None and t < start:
            point = next_after(start - 1e-6)
            if isinstance(point, float) and point != start:
                point = next_after(start)
        else:
            point = next_after(t)
        if isinstance(point, float) and start is not None and point < start:
            point = start
        if isinstance(point, float) and end is not None and point > end:
            return None
        return point

    return inside


DELAY_POINTS = 64  # (points before now that delayed() looks at, at most)


def _delayed_point(key: Hashable, point: float, after: Any, jitter: float, spread: float) -> float:
    room = after - point if isinstance(after, float) and after > point else math.inf
    delay = spread * _unit(_ident(key)) + jitter * _unit(f"{_ident(key)}@{micro(point)}")
    if delay >= room:
        delay = room * delay / (jitter + spread)
    at = micro(point + delay) / 1_000_000  # (in the microseconds a store keeps: exact everywhere)
    return point if at >= point + room or at > MAX_POSIX else at


def _ident(key: Hashable) -> str:
    """A key as its hash reads it: as a store keeps it (a str or an int), else its repr."""
    return json.dumps(key) if type(key) is str or type(key) is int else repr(key)


def _unit(text: str) -> float:
    """A fraction of [0, 1), the same for the same text in every process."""
    return (
        int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()) / 2**64
    )


def options(
    overlap: Overlap | None,
    jitter: float | None,
    spread: float | None,
    start: float | None = None,
    end: float | None = None,
    max_runs: int | None = None,
    retry: Retry | None = None,
) -> Options | None:
    """A key's own options, or None: none. Those without a window or a count are one object for each
    distinct set (many keys share it); a window and a count are a key's own, each object its key's (none
    is kept once its key has gone)."""
    made = Options(overlap, jitter, spread, start, end, max_runs, retry)
    if made == _NONE:
        return None
    if start is not None or end is not None or max_runs is not None:
        return made
    return _INTERNED.setdefault(made, made)


_INTERNED: dict[Options, Options] = {}
_NONE = Options()


def effective(own: Options | None, defaults: Options) -> Options:
    """A key's options in force: its own where it has them, else the KeyedScheduler's."""
    if own is None:
        return defaults
    return Options(
        defaults.overlap if own.overlap is None else own.overlap,
        defaults.jitter if own.jitter is None else own.jitter,
        defaults.spread if own.spread is None else own.spread,
        own.start,
        own.end,
        own.max_runs,
        defaults.retry if own.retry is None else own.retry,
    )


def options_text(own: Options | None) -> str | None:
    """A key's own options as a durable store keeps them (StoredKey.options): JSON text of those it has,
    or None when it has none (the KeyedScheduler's apply)."""
    if own is None:
        return None
    text = _TEXTS.get(own)
    if text is None:
        fields = {"overlap": None if own.overlap is None else own.overlap.value}
        fields.update(jitter=own.jitter, spread=own.spread)  # type: ignore[arg-type]
        fields.update(start=us(own.start), end=us(own.end), max_runs=own.max_runs)  # type: ignore[arg-type]
        if own.retry is not None:
            fields["retry"] = [own.retry.attempts, own.retry.backoff, own.retry.cap]  # type: ignore[assignment]
        kept = {k: v for k, v in fields.items() if v is not None}
        text = json.dumps(kept, separators=(",", ":"))
        if own.start is None and own.end is None and own.max_runs is None:  # (interned: see options)
            _TEXTS[own] = text
    return text


_TEXTS: dict[Options, str] = {}


def trigger_text(trigger: Trigger) -> str:
    """A key's trigger as a store keeps it (StoredKey.triggered)."""
    overlap = None if trigger.overlap is None else trigger.overlap.value
    return json.dumps({"at": micro(trigger.at), "restart": trigger.restart, "overlap": overlap})


def trigger_of(text: str, generation: int) -> Trigger:
    """A key's trigger, from its stored form (checked as the store read it: see key_row)."""
    stored = json.loads(text)
    overlap = stored["overlap"]
    return Trigger(
        generation, stored["at"] / 1_000_000, stored["restart"], None if overlap is None else Overlap(overlap)
    )


def options_of(text: str | None) -> Options | None:
    """A key's own options, from their stored form (checked as the store read them: see key_row)."""
    if text is None:
        return None
    stored = json.loads(text)
    overlap = stored.get("overlap")
    return options(
        None if overlap is None else Overlap(overlap),
        stored.get("jitter"),
        stored.get("spread"),
        seconds_of(stored.get("start")),
        seconds_of(stored.get("end")),
        stored.get("max_runs"),
        None if stored.get("retry") is None else Retry(*stored["retry"]),
    )


class Stored(str):
    """A key's data as the JSON a durable store keeps: decoded at each use (what run, next_run and
    KeyInfo get: a fresh object each time), and far smaller in memory than the object."""

    __slots__ = ()


def value_of(data: Any) -> Any:
    return json.loads(data) if type(data) is Stored else data


def micro(t: float) -> int:
    """POSIX seconds as the integer microseconds a store keeps (exact keys for scheduled times)."""
    return round(t * 1_000_000)


def us(t: float | None) -> int | None:
    return None if t is None else micro(t)


def seconds_of(us: int | None) -> float | None:
    return None if us is None else us / 1_000_000


def last_run_of(ran: tuple[int, int, str, int, float | None, str | None]) -> HistoryEntry:
    """A key's latest run's end (Key.last_run) as a HistoryEntry."""
    scheduled_for, at, outcome, attempt, duration, error = ran
    when = from_posix(scheduled_for / 1_000_000, UTC)
    return HistoryEntry(when, from_posix(at / 1_000_000, UTC), outcome, attempt, duration, error)


def entry_of(stored: StoredEntry) -> HistoryEntry:
    """A stored history entry as the user sees it."""
    return HistoryEntry(
        None if stored.scheduled_for is None else from_posix(stored.scheduled_for / 1_000_000, UTC),
        from_posix(stored.at / 1_000_000, UTC),
        stored.outcome,
        stored.attempt,
        seconds_of(stored.duration),
        stored.error,
    )


ALWAYS_AWARE = (timezone, ZoneInfo)  # tzinfos whose utcoffset() is never None: timestamp() is exact
# The next runs a key may have: what a UTC datetime can show (KeyInfo.next_run_at), a day inside the limits.
MIN_POSIX = (datetime.min.replace(tzinfo=UTC) + timedelta(days=1)).timestamp()
MAX_POSIX = (datetime.max.replace(tzinfo=UTC) - timedelta(days=1)).timestamp()


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def outcome_of(rec: Key, result: float | BaseException | None) -> tuple[KeyState, float | None, str | None]:
    """What an evaluation makes of a key: (state, next_run_at, last_error)."""
    if isinstance(result, BaseException):
        return KeyState.INVALID, None, describe(result)
    last_error = None if rec.state is KeyState.INVALID else rec.last_error
    return (KeyState.DISABLED if result is None else KeyState.PENDING), result, last_error


def advancing(result: Any, scheduled_for: float) -> Any:
    """What next_run gave after a run: a time at or before the fire that ran would run the key again at
    once, without end (a one-off job that keeps its date): that is an error, which makes the key INVALID."""
    if isinstance(result, float) and result <= scheduled_for:
        return ValueError(
            f"next_run returned {iso(result)}, not after the fire it follows ({iso(scheduled_for)}): the "
            "key would run again at once, without end (return None to stop it)"
        )
    return result


def latest_started(rec: Key, scheduled_for: float, generation: int | None = None) -> float:
    """The key's latest started fire once this one starts: this one, unless it is older than the latest
    (a rerun after a life whose wall clock ran ahead; a fire that waited behind a run while a trigger
    began beside it). It never moves back within a generation: no fire at or before it runs again, and a
    retry of an older fire gives way to it. A fire of a newer generation (`generation`) than the latest
    started one's is not held back by it (the stores take it: their fire log is a generation's)."""
    latest = rec.last_scheduled_for
    if latest is None or latest < scheduled_for:
        return scheduled_for
    if generation is not None and rec.started_in is not None and generation > rec.started_in:
        return scheduled_for
    return latest


def behind(rec: Key, generation: int, scheduled_for: float) -> bool:
    """Whether a fire of the key is older than its latest started fire of this generation (or of an older
    one, where the generation of the latest is not known: a row read): such a fire does not begin (see
    Runs._passed). A newer generation's fire is not held back by an older generation's latest."""
    latest = rec.last_scheduled_for
    if latest is None or scheduled_for >= latest:
        return False
    return rec.started_in is None or generation <= rec.started_in


def since(rec: Key, wall_now: float, scheduled_for: float, generation: int | None = None) -> float:
    """The time next_run is asked from after a fire: now, never before the fire (a wall clock that
    stepped back), nor before the key's latest started fire of its generation (a rerun of an older one),
    so that no fire at or before one that started runs again; nor before its catch-up's decision
    (Key.decided), so that no fire it reported missed runs after all."""
    after = max(wall_now, latest_started(rec, scheduled_for, generation))
    decided = rec.decided
    if decided is not None and decided[0] == rec.generation and decided[1] > after:
        return decided[1]
    return after


def decided(rec: Key, generation: int, scheduled_for: float, rerun: bool) -> bool:
    """Whether a fire at the head of its key's queue is one a catch-up decided to run: a rerun, or a
    missed fire at or before the decision (Key.decided); not a fire put back there (the clock or the
    store failed as it was to start, or it waits for a run's end)."""
    queue = rec.catch_up
    if not queue or queue[0][0] != scheduled_for:
        return False
    if rerun:
        return True
    decision = rec.decided
    return decision is not None and decision[0] == generation and scheduled_for <= decision[1]


def spent(rec: Key, runs: int | None = None) -> bool:
    """Whether the key has run its max_runs (with `runs` runs, or its own count)."""
    own = rec.options
    if own is None or own.max_runs is None:
        return False
    return (rec.runs if runs is None else runs) >= own.max_runs


def keep_first(rec: Key, scheduled_for: float, rerun: bool) -> None:
    """Put a fire first in its key's catch-up queue (unless it is there: a fire stays at the head until
    its run begins)."""
    queue = rec.catch_up
    if not queue or queue[0][0] != scheduled_for:
        rec.catch_up = [(scheduled_for, rerun), *(queue or ())]


def iso(t: float) -> str:
    return from_posix(t, UTC).isoformat()


def check_key(key: Any) -> None:
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable, not {type(key).__name__}") from None


def checked_key(key: Any) -> Any:
    check_key(key)
    return key
