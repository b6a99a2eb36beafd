"""The key table of a KeyedScheduler: every key's record, and the one set of rules that makes a key so:
next_run evaluated and checked, the key's timer armed, moved or taken back, its state set and the user's
callbacks told. The runs, the store's journal, recovery and the shared-store adapter all change keys
through it, under its lock."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from .._clock import utc_not_after
from .._drivers import check_caller
from .._engine import Scheduler, log_safely
from .._stores import KeyStore, Put, StoredFire, StoredKey
from .keys import (
    LATENESS_BUCKETS,
    MAX_POSIX,
    MIN_POSIX,
    OWN,
    Key,
    KeyState,
    Options,
    Overlap,
    Own,
    Policy,
    Reschedule,
    Stored,
    Trigger,
    delayed,
    effective,
    from_posix,
    iso,
    options_of,
    outcome_of,
    seconds_of,
    trigger_of,
    value_of,
    windowed,
)

logger = logging.getLogger("timerwheel")


class Change(NamedTuple):
    """A user's change of a key for a durable store (KeyTable.change): its row, and what the key becomes
    once the row is committed."""

    rec: Key
    encoded: str
    state: KeyState
    at: float | None
    last_error: str | None
    result: Any
    row: StoredKey
    options: Options | None
    wall_now: float  # (when its plan was made)
    runs: int  # (the key's count of runs its plan was made with)


class KeyTable:
    """The keys of one KeyedScheduler, and what every part of it shares: the scheduler and its engine
    (once started), the lock, the store's kind, the policy and the user's callbacks. The owner of every
    Key record (Key.fire calls `fired`, which the runs set)."""

    def __init__(
        self,
        sched: Any,
        next_run: Callable[[datetime, Any, Any], datetime | None],
        store: KeyStore,
        policy: Policy,
        lock: Any,
        *,
        defaults: Options,
        is_async: bool,
        cancel_on_remove: bool,
        cancel_on_replace: bool,
        on_state_change: Callable[[Any, KeyState, KeyState], object] | None,
        on_finish: Callable[[Any, Any, BaseException | None], object] | None,
        on_invalid: Callable[[Any, Any, BaseException], object] | None,
        on_missed: Callable[[Any, Any, int, datetime, datetime], object] | None,
        on_late: Callable[[Any, datetime, float], object] | None = None,
        late_grace: float | None = None,
        history: int = 0,
    ) -> None:
        self.sched = sched
        self.is_async = is_async
        self.next_run = next_run
        self.policy = policy
        self.reschedule = policy.reschedule
        # The options of a key that has none of its own (every field set: an overlap of None resolves by
        # the reschedule mode); `shaped`: whether any key's plan may be shaped by options (its fires
        # delayed by jitter or spread, a window, a count of runs): KeyTable.evaluate then looks for them
        overlap = defaults.overlap or (
            Overlap.ALLOW if policy.reschedule is Reschedule.BEFORE_RUN else Overlap.QUEUE_ONE
        )
        self.defaults = Options(overlap, defaults.jitter or 0.0, defaults.spread or 0.0, retry=defaults.retry)
        self.shaped = bool(self.defaults.jitter or self.defaults.spread)
        self.cancel_on_remove = cancel_on_remove
        self.cancel_on_replace = cancel_on_replace
        self.on_state_change = on_state_change
        self.on_finish = on_finish
        self.on_invalid = on_invalid
        self.on_missed = on_missed
        # Late checks (Late): on with on_late or late_grace; a fire that has not begun late_grace seconds
        # after it was due is told to on_late (and counted)
        self.on_late = on_late
        self.late_grace = late_grace
        self.store = store
        self.durable = bool(store.durable)
        self.shared = bool(getattr(store, "shared", False))
        # (a shared store may say on what clock its leases are counted: a simulated one, on its simulated
        # process's clock; by default this machine's monotonic clock)
        self.monotonic: Callable[[], float] = getattr(store, "monotonic", None) or time.monotonic
        lease = getattr(store, "lease", None) if self.shared else None
        self.lease: float | None = None if lease is None else float(lease)
        self.leases_lost = False  # shared: the store could not renew for a whole lease (SharedKeys.lost)
        self.keys: dict[Hashable, Key] = {}
        # Keys removed while a run of theirs goes: the record stays here until the run ends, and an upsert
        # of the key meanwhile takes it back (generation and running runs with it), so that AFTER_FINISH
        # runs never overlap across a removal. `floor` is the highest generation of any record dropped: a
        # new record starts above it, so that a key's generation never goes back (a stale end or fire of
        # the old record cannot pass for the new one's).
        self.gone: dict[Hashable, Key] = {}
        self.floor = 0
        self.loaded: set[Hashable] = set()  # keys loaded from the store and not upserted since
        self.unfinished: dict[Hashable, list[StoredFire]] = {}  # their fires that never ended
        # A paused key's fires that never ended (found as it was loaded or claimed): decided about when
        # it is resumed, with the fires it missed meanwhile (see recovery.resume)
        self.paused_fires: dict[Hashable, list[StoredFire]] = {}
        # shared: when each key was taken here (a stamp), so that what the database said before that
        # instant does not undo it (see SharedKeys)
        self.stamps: dict[Hashable, int] = {}
        self.stamp = 0
        # One lock: a ThreadedScheduler's own (the engine is touched under it), else one of the
        # KeyedScheduler's (a run on a worker thread reports under it; callbacks may call back in).
        self.lock = lock
        self.idle = threading.Condition(lock)  # close() waits on it for the running runs
        self.all_done: Any = None  # aclose() waits on it (an asyncio.Event) for the running runs
        self.wall: Callable[[], float] = sched.wall  # until start(): then the engine's wall clock
        self.engine: Scheduler | None = None  # once started
        self.group: Any = None  # the view of the keys given to the engine's add_calendar()
        self.started = False
        self.closed = False
        self.counts = dict.fromkeys(
            (
                "started",
                "finished",
                "failed",
                "missed",
                "caught_up",
                "recovered",
                "abandoned",
                "clock_errors",
                "skipped",
                "late",
                "retried",
                "store_errors",
                "claimed",
            ),
            0,
        )
        # How late the runs began (the wall clock at their take, less the fire's time): counts per
        # LATENESS_BUCKETS bound, and their sum (KeyedStats.lateness)
        self.lateness = [0] * len(LATENESS_BUCKETS)
        self.lateness_sum = 0.0
        # A BaseException (KeyboardInterrupt, SystemExit) from a user callback is held here, per thread,
        # while the operation it interrupted completes, and raised at the operation's end (raise_held).
        self.held = threading.local()
        self.holding = False  # (a hint: some thread held one once; the hot path checks only this)
        self.fired: Callable[[Key], None] = _not_yet  # a key's timer came due: set by Runs
        # Every key's history: its `history_keep` newest entries (0: none), added by `note` (the
        # Journal's: see Journal.note)
        self.history_keep = history
        self.note: Callable[..., None] = _no_note

    # -- records --------------------------------------------------------------------------------------

    def new_record(self, key: Hashable, data: Any) -> Key:
        """A record for a key not held: the record of its removal if a run of it still goes (it comes
        back with its generation and its runs: a fire of the new data waits for them, as for any upsert
        during a run), else a new one, above every generation dropped."""
        rec = self.gone.pop(key, None)
        if rec is None:
            rec = Key(self, key, data)
            rec.generation = self.floor
        return rec

    def record(self, row: StoredKey, rec: Key | None = None) -> Key:
        """A key's record as its row says (a new one, or `rec` filled in)."""
        if rec is None:
            rec = Key(self, row.key, Stored(row.data))
        else:
            rec.data = Stored(row.data)
        rec.generation = row.generation
        rec.state = KeyState(row.state)
        rec.next_run_at = seconds_of(row.next_run_at)
        rec.last_scheduled_for = seconds_of(row.last_scheduled_for)
        rec.started_in = None if row.last_scheduled_for is None else row.generation  # (at most)
        rec.last_error = row.last_error
        rec.paused = bool(row.paused)
        rec.options = options_of(row.options)
        if rec.options is not None and rec.options.shaped:
            self.shaped = True
        rec.triggered = None if row.triggered is None else trigger_of(row.triggered, row.generation)
        rec.runs = row.runs
        return rec

    def forget(self, key: Hashable, cancel: bool | None = None) -> None:
        """Drop a key from memory and take back its timer; its running runs' ctx.cancelled is set if
        `cancel` (default: cancel_running_on_remove)."""
        rec = self.keys.pop(key)
        if not self.durable:  # (a memory store forgets what it kept of the key: its history)
            self.store.delete(key)
        self.loaded.discard(key)
        self.paused_fires.pop(key, None)
        rec.paused = False  # (its pause goes with it: a key added again is not paused)
        rec.runs = 0  # (and its count of runs: a key added again starts from none)
        rec.handed = None
        if self.shared:
            self.taken(key)  # (a tombstone: what the database said before now does not bring it back)
        rec.generation += 1
        if rec.generation > self.floor:
            self.floor = rec.generation
        if rec.running:  # (until its runs end: an upsert meanwhile takes the record back, see new_record)
            self.gone[key] = rec
        rec.catch_up = None
        self.disarm(rec)
        self.unwatch(rec)
        if cancel is None:
            cancel = self.cancel_on_remove
        if rec.running and cancel and rec.contexts:
            for ctx in rec.contexts:
                ctx.cancelled.set()

    def taken(self, key: Hashable) -> None:
        self.stamp += 1
        self.stamps[key] = self.stamp

    # -- computing and arming -------------------------------------------------------------------------

    def wall_now(self) -> float:
        return self.engine.wall() if self.engine is not None else self.sched.wall()

    def checked(self, when: Any) -> float | BaseException | None:
        """What next_run returned: POSIX seconds, None (disabled), or the error that makes it INVALID."""
        if when is None:
            return None
        if not isinstance(when, datetime):
            return TypeError(f"next_run must return an aware datetime or None, not {type(when).__name__}")
        try:
            offset = when.utcoffset()
        except Exception as exc:
            return exc
        if offset is None:
            return ValueError(f"next_run must return an aware datetime, not the naive {when!r}")
        try:
            at = when.timestamp()
        except Exception as exc:  # a tzinfo that fails here only
            return exc
        if not MIN_POSIX <= at <= MAX_POSIX:
            return ValueError(f"next_run returned {when!r}: out of the range of UTC datetimes")
        return at

    def encode(self, data: Any) -> str:
        """`data` as the JSON a durable store keeps; TypeError naming data if JSON cannot encode it."""
        if type(data) is Stored:
            return data
        try:
            return json.dumps(data, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"data must be JSON-serializable with a durable store: {exc}") from None

    def evaluate(
        self,
        key: Hashable,
        data: Any,
        wall_now: float,
        own: Options | Own | None = OWN,
        runs: int | None = None,
    ) -> float | BaseException | None:
        """next_run at the wall time `wall_now`: POSIX seconds, None (disabled), or the error. A key's own
        options (`own`, or the record's) shape it: a key that has run `max_runs` times (`runs`, or the
        record's count) has no next fire; a window (start, end) keeps the points in it; a key whose fires
        are delayed (jitter, spread: its own, else the KeyedScheduler's) gets the first of its delayed
        fires after `wall_now` (see delayed)."""
        if self.shaped:
            rec = self.keys.get(key) or self.gone.get(key)
            if own is OWN:
                own = None if rec is None else rec.options
            force = effective(own, self.defaults)
            if force.max_runs is not None:
                if runs is None:
                    runs = 0 if rec is None else rec.runs
                if runs >= force.max_runs:
                    return None

            def schedule(t: float) -> float | BaseException | None:
                return self._next(key, data, t)

            next_after: Callable[[float], float | BaseException | None] = schedule

            if force.start is not None or force.end is not None:
                next_after = windowed(next_after, force.start, force.end)
            jitter, spread = force.jitter or 0.0, force.spread or 0.0
            if jitter or spread:
                started = None if rec is None else rec.last_scheduled_for
                return delayed(next_after, key, wall_now, jitter, spread, started)
            return next_after(wall_now)
        return self._next(key, data, wall_now)

    def _next(self, key: Hashable, data: Any, wall_now: float) -> float | BaseException | None:
        try:
            when = self.next_run(utc_not_after(wall_now), key, value_of(data))
        except BaseException as exc:
            return self.guarded(exc)
        return self.checked(when)

    def overlap_of(self, rec: Key, trigger: Trigger | None = None) -> Overlap:
        """What a fire of the key does when it comes while a run of it goes: the trigger's overlap (if
        the fire is a trigger's and it has one), the key's own, or the KeyedScheduler's."""
        if trigger is not None and trigger.overlap is not None:
            return trigger.overlap
        own = rec.options
        if own is not None and own.overlap is not None:
            return own.overlap
        return self.defaults.overlap  # type: ignore[return-value]

    def apply(
        self,
        rec: Key,
        state: KeyState,
        at: float | None,
        last_error: str | None,
        error: BaseException | None = None,
    ) -> None:
        """Make a key so: arm (or move, or take back) its timer, set its state; tell on_invalid."""
        rec.next_run_at = at
        rec.last_error = last_error
        engine = self.engine
        if at is None or rec.paused:  # (a paused key keeps its plan, unarmed: see Key.paused)
            self.disarm(rec)
        elif (
            engine is not None and not self.closed and (rec.id is None or not engine.move_wall_timer(rec, at))
        ):
            engine.add_wall_timer(rec, at)
        self.set_state(rec, state)
        if error is not None:
            self.call(self.on_invalid, rec.key, value_of(rec.data), error)

    def plan(self, rec: Key, wall_now: float) -> None:
        """Evaluate a key's next run and arm (or move, or take back) its timer; set its state."""
        self.planned(rec, self.evaluate(rec.key, rec.data, wall_now))

    def planned(self, rec: Key, result: float | BaseException | None) -> None:
        self.apply(rec, *outcome_of(rec, result), result if isinstance(result, BaseException) else None)

    def invalid(self, rec: Key, error: BaseException) -> None:
        self.planned(rec, error)

    def pause(self, rec: Key) -> None:
        """Pause a key (see KeyedScheduler.pause): its timer taken back, its plan kept; a run going on
        goes on. The user is told of the change to PAUSED."""
        if rec.paused:
            return
        old = rec.state
        rec.paused = True
        held = rec.catch_up[0][0] if rec.catch_up else rec.next_run_at
        self.noted(rec, held, "paused", flush=True)
        self.untrigger(rec)  # (a pause drops a trigger not run yet)
        rec.voided = rec.hand  # (the jobs handed over so far do not start their fires: see Key.hand)
        retrying = rec.retrying
        if retrying is not None and retrying.fire_of is not None and retrying.handed:
            retrying.held, retrying.handed = True, False  # (a retry handed over, voided: held till resume)
        rec.handed = None
        rec.resumed = False  # (a resume waiting for a take to be done: this pause is what counts now)
        self.disarm(rec)
        self.call(self.on_state_change, rec.key, old, KeyState.PAUSED)

    def trigger(self, rec: Key, trigger: Trigger, write: Callable[[Trigger], object] | None = None) -> float:
        """Apply a trigger of the key (under the lock; a durable store has it already): its fire, at
        `trigger.at`, joins the key's queue of fires to run at once (a catch-up, a rerun, a fire waiting
        for a run's end), in the order of their times, and the key is armed at the queue's head. The plan the
        key goes back to after it is read now (`kept`), unless the trigger restarts it, or the key has
        none of its own now (a queue, or a run going under AFTER_FINISH: the plan comes after them).
        Returns the time of the fire that runs for it: a trigger of the key not run yet is that one
        (none is added); a fire at or after `at` that started already, and a fire of the key that is due
        (handed over to run, or about to be), run for it. `write` (a
        durable store's) is given the trigger before anything changes: if it raises, nothing did."""
        pending = rec.triggered
        queue = rec.catch_up or []
        if pending is not None and pending.generation == rec.generation and (pending.at, False) in queue:
            return pending.at
        started = rec.last_scheduled_for
        if started is not None and started >= trigger.at:
            rec.triggered = None
            return started
        if (trigger.at, False) in queue:  # (a fire of its time is queued: it runs for it)
            rec.triggered = None
            return trigger.at
        handed = rec.handed
        due = rec.next_run_at
        if handed is not None and handed[0] == rec.generation:  # (its fire, handed over, runs now: for it)
            coalesced: float | None = handed[1]
        elif not queue and due is not None and due <= trigger.at and rec.state is not KeyState.RUNNING:
            coalesced = due  # (its next fire is due, about to run: for it)
        else:
            coalesced = None
        if coalesced is not None:
            if write is not None:  # (kept until that fire is taken: a crash before does not lose it)
                write(Trigger(rec.generation, coalesced, trigger.restart, trigger.overlap))
            rec.triggered = None
            return coalesced
        own = not (trigger.restart or queue or (rec.state is KeyState.RUNNING and rec.next_run_at is None))
        # (the plan it found: none of its own behind a queue, whose head is the key's next run)
        before = None if queue else (rec.state, rec.next_run_at)
        applied = Trigger(rec.generation, trigger.at, trigger.restart, trigger.overlap, before, own)
        if write is not None:
            write(applied)
        rec.triggered = applied
        # (in the queue in the order of time: a fire of the queue later than it is taken after it; none is
        # handed over now, see above)
        place = next((i for i, (when, _) in enumerate(queue) if when > trigger.at), len(queue))
        rec.catch_up = [*queue[:place], (trigger.at, False), *queue[place:]]
        if place == 0:  # (else armed at its queue's head already, or waiting for a run's end)
            state = KeyState.RUNNING if rec.state is KeyState.RUNNING else KeyState.PENDING
            self.apply(rec, state, trigger.at, rec.last_error)
            engine = self.engine
            if engine is not None and rec.id is not None and trigger.at > engine.last_wall:
                engine.move_wall_timer(rec, engine.last_wall)  # (at once: a clock that stepped back, too)
        return trigger.at

    def untrigger(self, rec: Key) -> None:
        """Drop the key's trigger not run yet (a pause): off its queue, and the key's plan the one it had
        (not armed: the caller arms it, or not)."""
        pending, rec.triggered = rec.triggered, None
        if pending is None or not rec.catch_up or (pending.at, False) not in rec.catch_up:
            return
        rec.catch_up.remove((pending.at, False))
        rec.catch_up = rec.catch_up or None
        if rec.catch_up is None and pending.before is not None:
            state, rec.next_run_at = pending.before
            if rec.state is not KeyState.RUNNING:
                rec.state = state

    def disarm(self, rec: Key) -> None:
        if rec.id is not None and self.engine is not None:
            self.engine.cancel_timer(rec)

    def unwatch(self, rec: Key) -> None:
        """Take back the key's late check and its retry (a key removed or given away, a KeyedScheduler
        closed): nothing of it waits. A retry's fire is left as it is: a removed key's goes with it; a
        key given away or closed leaves it unfinished, to the next holder's `recover`."""
        engine = self.engine
        if engine is None:
            return
        late = rec.late
        if late is not None and late.id is not None:
            engine.cancel_timer(late)
        retrying = rec.retrying
        if retrying is not None:
            retrying.fire_of, retrying.held = None, False
            if retrying.id is not None:
                engine.cancel_timer(retrying)

    def set_state(self, rec: Key, state: KeyState) -> None:
        old, rec.state = rec.state, state
        if old is not state and not rec.paused:  # (paused: the user sees PAUSED until resume)
            self.call(self.on_state_change, rec.key, old, state)

    # -- a user's change, committed by a durable store ------------------------------------------------

    def change(self, key: Hashable, encoded: str, wall_now: float, own: Options | None) -> Change:
        """A user's change of a key for a durable store: next_run evaluated on what JSON gives back (as
        in every later life), and the row to commit (with the key's own options). next_run is user
        code, and may have changed the key: the record is looked up after it."""
        result = self.evaluate(key, Stored(encoded), wall_now, own)
        rec = self.keys.get(key) or self.gone.get(key)
        if rec is None:
            rec = self.new_record(key, Stored(encoded))
        state, at, last_error = outcome_of(rec, result)
        row = rec.row(encoded, rec.generation + 1, state, at, last_error, options=own)
        return Change(rec, encoded, state, at, last_error, result, row, own, wall_now, rec.runs)

    def changed(self, change: Change, stored: int | Put) -> StoredKey | None:
        """A change that the store committed, at the generation it answered (the store's: one above any
        generation it ever held for the key, or, a shared store, above any other process's), with the
        key's count of runs if it answered one (Put: a shared store counts them): applied. A count other
        than the one the plan was made with plans the key again, if its max_runs makes it matter: the
        row to write then (the store has the plan made with the other count), else None."""
        generation, runs = int(stored), stored.runs if isinstance(stored, Put) else None
        key = change.row.key
        rec = self.keys.get(key)
        if rec is None:  # (new; or removed, or taken over, meanwhile: the commit holds it again)
            rec = self.keys.setdefault(key, self.gone.pop(key, change.rec))
        elif rec.running and self.cancel_on_replace and rec.contexts:
            for ctx in rec.contexts:
                ctx.cancelled.set()
        self.loaded.discard(key)
        if self.shared:
            self.taken(key)
        rec.data = Stored(change.encoded)
        rec.generation = generation
        rec.options = change.options
        rec.catch_up = None  # (an older generation's catch-up is not this one's)
        if runs is not None:
            rec.runs = runs
        if runs is not None and runs != change.runs and change.options and change.options.max_runs:
            self.plan(rec, change.wall_now)
            return rec.row(change.encoded, generation, rec.state, rec.next_run_at, rec.last_error)
        error = change.result if isinstance(change.result, BaseException) else None
        self.apply(rec, change.state, change.at, change.last_error, error)
        return None

    def replaced(
        self,
        changes: list[Change],
        removed: list[Hashable],
        generations: Sequence[int | Put],
        applies: Callable[[Hashable], bool] | None = None,
    ) -> list[StoredKey]:
        """A replace_all() that the store committed, at `generations` (one per change): the removed keys
        forgotten, the changes applied; with `applies` (a shared store's), only the keys it says (see
        SharedKeys.applies: asked once for every key, in this order). Returns the rows to write (see
        changed)."""
        for key in removed:
            if (applies is None or applies(key)) and key in self.keys:
                self.forget(key)
        rows = []
        for change, generation in zip(changes, generations, strict=True):
            if applies is None or applies(change.row.key):
                row = self.changed(change, generation)
                if row is not None:
                    rows.append(row)
        return rows

    # -- runs ending ----------------------------------------------------------------------------------

    def settle(self, rec: Key) -> None:
        """A run of the key ended (or did not start after all): a removed key's record goes once its last
        run has; whoever waits for the runs to end (close(), aclose()) is told."""
        if not rec.running and self.gone.get(rec.key) is rec:
            del self.gone[rec.key]
        self.idle.notify_all()
        if self.all_done is not None and not self.any_running():
            self.all_done.set()

    def waited(self, rec: Key) -> bool:
        """Whether a fire of a newer generation waits for the key's runs to end (see Runs._prepare_start),
        and they have: it is to be armed now."""
        return (
            bool(rec.catch_up)
            and rec.id is None
            and not rec.running
            and not self.closed
            and self.keys.get(rec.key) is rec
        )

    def rearm_waiting(self, rec: Key) -> None:
        """A run of the key did not start after all: a fire that waited for it is armed now."""
        if self.waited(rec):
            self.apply(rec, KeyState.PENDING, rec.catch_up[0][0], rec.last_error)  # type: ignore[index]

    def any_running(self) -> bool:
        """Whether a run of any key goes (a key removed meanwhile included). O(keys)."""
        return bool(self.gone) or any(rec.running for rec in self.keys.values())

    # -- user callbacks -------------------------------------------------------------------------------

    def call(self, callback: Callable[..., object] | None, *args: Any) -> None:
        """A user callback, guarded as a job is: an Exception is logged; a BaseException is held and
        raised once the operation it interrupted is complete (see guarded)."""
        if callback is None:
            return
        try:
            callback(*args)
        except BaseException as exc:
            if isinstance(self.guarded(exc), Exception):
                log_safely(
                    logger,
                    (KeyboardInterrupt, SystemExit),
                    logging.ERROR,
                    "timerwheel: a KeyedScheduler callback raised; ignored",
                    exc_info=exc,
                )

    def guarded(self, exc: BaseException) -> BaseException:
        """What a user callback raised. A BaseException that is not an Exception (KeyboardInterrupt,
        SystemExit) must not leave a key half-changed (RUNNING for ever, unarmed): it is held, the
        operation goes on to its end, and the operation's entry point raises it then (raise_held), where
        a job's would go: to the caller of upsert(), out of run_pending() or the asyncio loop, into the
        logs of a scheduler thread. Returns exc."""
        if not isinstance(exc, Exception) and getattr(self.held, "error", None) is None:
            self.held.error = exc
            self.holding = True
        return exc

    def raise_held(self) -> None:
        """Raise the BaseException a callback raised during this thread's operation, if one did."""
        error = getattr(self.held, "error", None)
        if error is not None:
            self.held.error = None
            raise error

    def noted(
        self,
        rec: Key,
        scheduled_for: float | None,
        outcome: str,
        attempt: int = 0,
        at: float | None = None,
        duration: float | None = None,
        error: str | None = None,
        flush: bool = False,
    ) -> None:
        """Add an entry to the key's history (see HistoryEntry), decided at `at` (None: now, by the wall
        clock; one that fails: the engine's latest reading). `flush`: a decision committed already (or
        with nothing to commit): the entry is committed now, not with the next write."""
        if not self.history_keep:
            return
        if at is None:
            try:
                at = self.wall_now()
            except Exception:
                at = self.engine.last_wall if self.engine is not None else scheduled_for or 0.0
        self.note(rec.key, scheduled_for, outcome, attempt, at, duration, error, flush)

    def report_missed(self, rec: Key, skipped: list[float], beyond: bool, why: str) -> None:
        for point in skipped[-self.history_keep :] if self.history_keep else ():
            self.noted(rec, point, "missed", error=f"missed while {why}", flush=point == skipped[-1])
        count = len(skipped)
        logger.debug(
            "timerwheel: key %r missed %s%d fire(s) while %s, from %s to %s: not run",
            rec.key,
            "at least " if beyond else "",
            count,
            why,
            iso(skipped[0]),
            iso(skipped[-1]),
        )
        self.call(
            self.on_missed,
            rec.key,
            value_of(rec.data),
            count,
            from_posix(skipped[0], UTC),
            from_posix(skipped[-1], UTC),
        )

    # -- checks ---------------------------------------------------------------------------------------

    def check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the KeyedScheduler is closed")

    def check_caller(self) -> None:
        if self.is_async:
            check_caller(self.sched)  # an AsyncScheduler is touched on its loop's thread only


def _no_note(*args: Any, **kwargs: Any) -> None:
    """(No history until the Journal is made.)"""


def _not_yet(rec: Key) -> None:
    raise AssertionError("a key fired before its KeyedScheduler's runs were set up")
