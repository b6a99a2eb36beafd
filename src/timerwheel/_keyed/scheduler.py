"""KeyedScheduler: jobs managed by business key ("daily-report", "tenant-42-sync"), each with a next run
that one function computes, on any of the three schedulers.

This module is the public face: the options, the lifecycle and the user's operations on keys. What it
does is done by its parts: the key table (table.py: the records and the rules that arm them), the runs
(runs.py: a fire's run and end), the journal (journal.py: what is written to the store, and when),
recovery (recovery.py: what a stored key does when it is taken up) and, with a shared store, SharedKeys
(shared.py: what the store's threads hand over, and the users' changes on their way to the database).

next_run(now, key, data) is the only place that computes a time; everything else is bookkeeping. Each key
has at most one armed timer, a calendar task of the scheduler (a wall-clock due: see
Scheduler.schedule_wall); upserting a key moves that timer in O(1). Generations fence the stale: upsert,
replace and remove bump a key's generation, and a fire or a completion of an older generation changes
nothing of the newer one (on_finish still hears of it).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .._clock import utc_not_after
from .._drivers import DriverBase, engine_of, lifecycle_of, lock_of
from .._engine import Scheduler
from .._stores import KeyStore, MemoryStore, StoredEntry, encode_key
from .._types import ClosedError, Lifecycle
from .._validate import boolean, callable_or_none, count, function, member, seconds
from .journal import Journal, in_use
from .keys import (
    ALWAYS_AWARE,
    MAX_DELAY,
    MAX_POSIX,
    MIN_POSIX,
    CatchUp,
    HistoryEntry,
    Key,
    KeyedStats,
    KeyInfo,
    KeyState,
    Options,
    Overlap,
    Policy,
    Recover,
    Reschedule,
    Retry,
    check_key,
    checked_key,
    entry_of,
    from_posix,
    last_run_of,
    micro,
    options,
    value_of,
)
from .recovery import apply_all, decide_all, load, set_paused, trigger
from .runs import Runs, in_a_run
from .shared import Pending, SharedKeys
from .table import KeyTable

__all__ = ["KeyedScheduler"]

DEFAULT_HISTORY = 10  # entries of each key's history a store keeps, by default (as Temporal's recent actions)


class KeyedScheduler:
    """Jobs by business key, on a Scheduler, a ThreadedScheduler or an AsyncScheduler.

    The rules:

    - next_run(now, key, data) is the only place that computes a key's next run: `now` is an aware UTC
      datetime read from the scheduler's wall clock; it returns an aware datetime (a past one: run now) or
      None (the key is DISABLED). If it raises, or returns a naive datetime or anything else, the key is
      INVALID: the error is kept as last_error and passed to on_invalid(key, data, error) before upsert()
      returns (upsert does not raise it).
    - upsert() before start() records the key as PENDING with next_run evaluated; nothing runs before
      start(), which evaluates next_run again for every key and arms it.
    - A key has at most one armed timer; upserting a known key moves it (O(1)), it does not remove and add.
    - upsert, replace and remove bump the key's generation. A fire or a completion of an older generation
      never reschedules anything nor changes the newer generation's state; on_finish still hears of it.
    - Reschedule.AFTER_FINISH (the default): next_run is evaluated when a run finishes (no self-overlap).
      BEFORE_RUN: when a run starts (a fixed cadence; while it runs the key shows RUNNING with next_run_at
      set). NONE: after a run the key is DISABLED until it is upserted again.
    - `overlap` says what a fire does when it comes while a run of its key goes (Overlap: SKIP, QUEUE_ONE,
      ALLOW, REPLACE); `jitter` and `spread` delay the keys' fires (forward, deterministically, never as
      far as the next fire); upsert(key, data, overlap=..., jitter=..., spread=...) sets one key's own.
    - cancel_running_on_remove / cancel_running_on_replace set the running run's ctx.cancelled;
      run_timeout sets it when the run overruns (the JobEvent says timed_out); wait_running_on_close makes
      close() return only after the running runs finished.
    - close(): every key becomes DISABLED with next_run_at None; the snapshot keeps them.

    Args:
        scheduler: where runs execute (a Scheduler, ThreadedScheduler or AsyncScheduler); its clocks are
            used. If it was never started, start() starts it and close() closes it.
        next_run: next_run(now, key, data) -> datetime | None; a Cron is one.
        run: run(key, data), or run(ctx, key, data) with context=True (ctx a JobContext); a coroutine
            function under an AsyncScheduler.
        reschedule: when next_run is evaluated (Reschedule).
        overlap: what a fire does when it comes while a run of its key goes (Overlap), for every key
            that has no overlap of its own; None (the default): ALLOW under Reschedule.BEFORE_RUN,
            QUEUE_ONE otherwise.
        jitter: seconds, at most, each fire of a key is delayed by, by an amount drawn from a hash of the
            key and the fire's time (the same in every process and every life); None or 0: none.
        spread: seconds, at most, every fire of a key is delayed by, by one amount drawn from a hash of
            the key (a stable phase: keys on one schedule spread over it); None or 0: none.
        retry: how a failed run is tried again (Retry: attempts, backoff, cap), for every key that has
            no retry of its own; None: never.
        context: pass the run a JobContext first.
        cancel_running_on_remove: remove() sets a running run's ctx.cancelled.
        cancel_running_on_replace: upsert() of a running key sets its run's ctx.cancelled.
        wait_running_on_close: close() waits for the running runs.
        run_timeout: seconds a run may take (None: no limit); past it, ctx.cancelled is set.
        on_state_change: on_state_change(key, old_state, new_state), on every change of state.
        on_finish: on_finish(key, data, error) after every run (error None when it returned).
        on_invalid: on_invalid(key, data, error) when next_run fails for a key.
        store: where keys are kept (MemoryStore by default; SQLiteStore, PostgresStore).
        catch_up: what a start (or a resume) does with the fires missed meanwhile (see start()).
        max_catch_up: the most missed fires a start counts and runs per key (see start()).
        misfire_grace: seconds past which a missed fire is not run (None: no limit; see start()).
        recover: what a start does with a fire interrupted by the process's end (see start()).
        on_missed: on_missed(key, data, count, first, last) for the fires missed and not run.
        on_late: on_late(key, due, late_by) when a fire of a key has not begun late_grace seconds after
            it was due (`due` its time, an aware UTC datetime; `late_by` seconds since then): a worker
            pool or a slot that stays busy, a run of the key that goes on, a loop that was stuck, a store
            that does not answer. Once per fire; also counted (KeyedStats.late).
        late_grace: seconds a fire may wait to begin (> 0); None: 60 s with on_late, else no late checks
            (given alone: they are counted, and nobody is called).
        history: how many entries of each key's history the store keeps (its newest; see history());
            0: none.

    Raises:
        TypeError: a scheduler of another type, next_run or run not callable, a non-enum reschedule or
            overlap, a callback that is not callable, context not a bool.
        ValueError: a negative run_timeout; a jitter or spread not from 0 to 1e9 seconds; a late_grace
            that is not > 0.
    """

    def __init__(
        self,
        scheduler: Any,
        next_run: Callable[[datetime, Any, Any], datetime | None],
        run: Callable[..., Any],
        *,
        reschedule: Reschedule = Reschedule.AFTER_FINISH,
        overlap: Overlap | None = None,
        jitter: float | None = None,
        spread: float | None = None,
        retry: Retry | None = None,
        context: bool = False,
        cancel_running_on_remove: bool = False,
        cancel_running_on_replace: bool = False,
        wait_running_on_close: bool = False,
        run_timeout: float | None = None,
        on_state_change: Callable[[Any, KeyState, KeyState], object] | None = None,
        on_finish: Callable[[Any, Any, BaseException | None], object] | None = None,
        on_invalid: Callable[[Any, Any, BaseException], object] | None = None,
        store: KeyStore | None = None,
        catch_up: CatchUp = CatchUp.ONCE,
        max_catch_up: int = 100,
        misfire_grace: float | None = None,
        recover: Recover = Recover.RERUN,
        on_missed: Callable[[Any, Any, int, datetime, datetime], object] | None = None,
        on_late: Callable[[Any, datetime, float], object] | None = None,
        late_grace: float | None = None,
        history: int = DEFAULT_HISTORY,
    ) -> None:
        from .._drivers.asyncio import AsyncScheduler
        from .._drivers.threaded import ThreadedScheduler

        if not isinstance(scheduler, (Scheduler, ThreadedScheduler, AsyncScheduler)):
            raise TypeError(
                "scheduler must be a Scheduler, ThreadedScheduler or AsyncScheduler, "
                f"not {type(scheduler).__name__}"
            )
        _check_scheduler_open(scheduler)
        function(next_run, "next_run")
        function(run, "run")
        member(reschedule, Reschedule, "reschedule")
        defaults = _options(overlap, jitter, spread, retry=retry) or Options()
        for name, flag in (
            ("context", context),
            ("cancel_running_on_remove", cancel_running_on_remove),
            ("cancel_running_on_replace", cancel_running_on_replace),
            ("wait_running_on_close", wait_running_on_close),
        ):
            boolean(flag, name)
        if run_timeout is not None:
            run_timeout = seconds(run_timeout, "run_timeout")
            if run_timeout <= 0:
                raise ValueError(f"run_timeout must be > 0 (or None: no limit), got {run_timeout!r}")
        for name, callback in (
            ("on_state_change", on_state_change),
            ("on_finish", on_finish),
            ("on_invalid", on_invalid),
            ("on_missed", on_missed),
            ("on_late", on_late),
        ):
            callable_or_none(callback, name)
        if late_grace is not None:
            late_grace = seconds(late_grace, "late_grace")
            if not 0 < late_grace <= MAX_DELAY:
                raise ValueError(
                    f"late_grace must be > 0 seconds and at most {MAX_DELAY:.0f} (or None), "
                    f"got {late_grace!r}"
                )
        elif on_late is not None:
            late_grace = DEFAULT_LATE_GRACE
        if store is None:
            store = MemoryStore()
        elif not all(callable(getattr(store, m, None)) for m in ("load", "put", "start_fire", "close")):
            raise TypeError(f"store must be a MemoryStore, a SQLiteStore or a PostgresStore, not {store!r}")
        elif getattr(store, "shared", False) and not isinstance(
            scheduler, (ThreadedScheduler, AsyncScheduler)
        ):
            raise TypeError(
                "store: a shared store (PostgresStore) needs a ThreadedScheduler or an AsyncScheduler (its "
                f"threads hand the keys they claim over to the scheduler), not a {type(scheduler).__name__}"
            )
        member(catch_up, CatchUp, "catch_up")
        member(recover, Recover, "recover")
        count(max_catch_up, "max_catch_up", 0)
        if misfire_grace is not None:
            misfire_grace = seconds(misfire_grace, "misfire_grace")
            if misfire_grace < 0:
                raise ValueError(f"misfire_grace must be >= 0, got {misfire_grace!r}")
        if in_use(store):
            raise ValueError(f"store: the {store.name} is in use by another KeyedScheduler already")
        threaded = isinstance(scheduler, ThreadedScheduler)
        self._sched: Any = scheduler
        self._driver: Any = scheduler if isinstance(scheduler, (ThreadedScheduler, AsyncScheduler)) else None
        self._wait_on_close = wait_running_on_close
        self._owns_scheduler = False
        # One lock: a ThreadedScheduler's own (the engine is touched under it), else one of ours (a run
        # on a worker thread reports under it; callbacks may call back in).
        self._lock: Any = (
            lock_of(scheduler) if isinstance(scheduler, ThreadedScheduler) else threading.RLock()
        )
        self._thread_lock = self._lock if threaded else None  # (upsert's: the others are single-threaded)
        policy = Policy(recover, reschedule, catch_up, max_catch_up, misfire_grace)
        table = self._table = KeyTable(
            scheduler,
            next_run,
            store,
            policy,
            self._lock,
            defaults=defaults,
            is_async=isinstance(scheduler, AsyncScheduler),
            cancel_on_remove=cancel_running_on_remove,
            cancel_on_replace=cancel_running_on_replace,
            on_state_change=on_state_change,
            on_finish=on_finish,
            on_invalid=on_invalid,
            on_missed=on_missed,
            on_late=on_late,
            late_grace=late_grace,
            history=count(history, "history"),
        )
        self._keys = table.keys  # (the same dict, for the hot paths)
        # upsert() takes its common case inline, but never under an AsyncScheduler nor with a durable
        # store (they go through _upsert(): its checks, and the store's commit first), nor once a key's
        # plan may be shaped by its options (jitter, spread, a window, a count: KeyTable.evaluate plans it)
        self._inline = not table.is_async and not table.durable and not table.shaped
        self._journal = Journal(table)
        self._runs = Runs(table, self._journal, run, context=context, run_timeout=run_timeout)
        self._shared_keys = SharedKeys(table, self._journal)
        if table.durable:
            load(table)
            self._journal.use()

    def __repr__(self) -> str:
        t = self._table
        state = "closed" if t.closed else "running" if t.started else "new"
        return f"<KeyedScheduler {state} keys={len(self._keys)} on {self._sched!r}>"

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start: evaluate next_run again for every key and arm it. Starts the scheduler if it is new.

        Raises:
            RuntimeError: started already, or closed. ClosedError: its scheduler is closed.
        """
        t = self._table
        with self._lock:
            if t.closed:
                raise RuntimeError("the KeyedScheduler is closed")
            if t.started:
                raise RuntimeError("the KeyedScheduler is started already")
            _check_scheduler_open(self._sched)
            if self._sched_is_new():
                self._sched.start()
                self._owns_scheduler = True
            t.check_caller()
            engine = self._sched if isinstance(self._sched, Scheduler) else engine_of(self._sched)
            wall_now = engine.wall()
            # The stored keys' plans are decided, then written in one transaction, before anything is
            # armed or any callback runs: a store that fails leaves the KeyedScheduler as it was (start()
            # may be called again); a callback that changes keys meanwhile is not undone.
            plans, rows, finished = decide_all(
                t, [rec for rec in self._keys.values() if rec.key in t.loaded], wall_now
            )
            if rows or finished:
                t.store.save(rows, finished)
            t.engine = engine
            t.wall = engine.wall_clock
            t.started = True
            t.group = self._keys.values()
            engine.add_calendar(t.group)  # a step of the wall clock moves the keys' timers
            for rec in list(self._keys.values()):
                if rec.key not in t.loaded:
                    t.plan(rec, wall_now)
            t.loaded.clear()
            apply_all(t, plans)
            if t.shared:
                t.store.attach(self._shared_keys)  # type: ignore[attr-defined]
        t.raise_held()

    def close(self) -> None:
        """Close: every key becomes DISABLED (next_run_at None), their timers are taken back; with
        wait_running_on_close, wait for the running runs. Closes the scheduler if start() started it.
        Under an AsyncScheduler, use `await aclose()`.

        Without wait_running_on_close, close() returns at once: a run still going is told
        (ctx.cancelled is set), goes on to its end on its thread, and its end is recorded in a durable
        store, which is released when the last such run ends; its key is not armed again."""
        t = self._table
        if t.is_async:
            raise RuntimeError("under an AsyncScheduler, use `await keyed.aclose()`")
        if t.shared and self._journal.inherited():  # (through fork: the parent's to close)
            t.closed = True
            return
        self._shut()
        if self._wait_on_close and not in_a_run():
            with self._lock:
                while t.any_running():
                    t.idle.wait()
        released = self._journal.release_store()
        if released is not None:  # (a shared store: closed by its writer, after what it had to write)
            released.result()
        else:  # runs may go on past close(): at exit, their ends are waited for
            self._journal.drain_at_exit()
        if self._owns_scheduler:
            if self._wait_on_close:
                self._sched.close()
            else:  # (closing a ThreadedScheduler joins its workers: a run that goes on would be waited for)
                self._sched.close(wait=False)
        t.raise_held()

    async def aclose(self) -> None:
        """close(), under an AsyncScheduler: awaits the running runs with wait_running_on_close."""
        t = self._table
        import asyncio

        self._shut()
        if self._wait_on_close and not in_a_run():
            while t.any_running():
                t.all_done = asyncio.Event()
                await t.all_done.wait()
        released = self._journal.release_store()
        if released is not None:  # (a shared store: awaited, never waited for on the loop)
            await asyncio.wrap_future(released)
        if self._owns_scheduler:
            await self._sched.aclose()
        t.raise_held()

    def __enter__(self) -> KeyedScheduler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> KeyedScheduler:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _shut(self) -> None:
        t = self._table
        with self._lock:
            if t.closed:
                return
            t.check_caller()
            t.closed = True
            # Every key shows DISABLED from now on (KeyInfo), but keeps its plan: a run that goes on past
            # close() ends by writing the row the key would have had, never DISABLED (see Runs.end).
            for rec in list(self._keys.values()):
                t.disarm(rec)
                t.unwatch(rec)
                if rec.contexts and not self._wait_on_close:  # a run going on: told (ctx.cancelled)
                    for ctx in rec.contexts:
                        ctx.cancelled.set()
                shown = KeyState.PAUSED if rec.paused else rec.state  # (what the user was told last)
                if shown is not KeyState.DISABLED:
                    t.call(t.on_state_change, rec.key, shown, KeyState.DISABLED)
            if t.engine is not None:
                t.engine.remove_calendar(t.group)
            if t.shared and t.started:
                # Every key not running is given back now; the running ones when their runs end (their
                # leases are renewed meanwhile, so that nobody runs them again while they go), and those
                # whose last end is not recorded yet with close().
                running = [k for k, rec in self._keys.items() if rec.running]
                self._journal.write(self._journal.detach_now, running)

    def _sched_is_new(self) -> bool:
        return isinstance(self._sched, DriverBase) and lifecycle_of(self._sched) is Lifecycle.NEW

    # -- changing keys --------------------------------------------------------------------------------

    def upsert(
        self,
        key: Hashable,
        data: Any = None,
        *,
        overlap: Overlap | None = None,
        jitter: float | None = None,
        spread: float | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        max_runs: int | None = None,
        retry: Retry | None = None,
    ) -> None:
        """Add a key, or replace its data (a new generation), and (re)compute its next run. A known key's
        armed timer is moved, not removed and added. A next_run that fails makes the key INVALID.

        The key's own options, each None for the KeyedScheduler's: `overlap` (what its fire does when it
        comes while a run of it goes: an Overlap), `jitter` and `spread` (seconds its fires are delayed
        by, at most: each by its own amount, or all by one; see KeyedScheduler). The key's window and
        count, a key's only: `start` and `end` (aware datetimes: no fire of a point of its schedule
        before start or after end; its first fire is its schedule's first point at or after start) and
        `max_runs` (once the key has run so many times, counted across upserts by KeyInfo.runs, it plans
        no more fires: DISABLED; a trigger still runs it). `retry`: how its failed runs are tried again
        (a Retry; None: the KeyedScheduler's). Like the data, they are what this upsert says: an upsert
        without them gives the key the KeyedScheduler's again (no window, no limit). A durable store
        keeps them with the key.

        Raises:
            TypeError: the key is not hashable; overlap not an Overlap; jitter or spread not a number;
                start or end not a datetime; max_runs not an int; retry not a Retry. ValueError: a
                negative or infinite jitter or spread; a naive start or end, or an end before the start;
                max_runs < 1. RuntimeError: the KeyedScheduler is closed.
            ClosedError: its scheduler is closed. NotStartedError: its scheduler has no clock yet (an
                AsyncScheduler made outside a loop and not started). A wall clock that fails raises what
                it raised. In each case nothing changed.
        """
        t = self._table
        own = None
        if (
            overlap is not None
            or jitter is not None
            or spread is not None
            or start is not None
            or end is not None
            or max_runs is not None
            or retry is not None
        ):
            own = _options(overlap, jitter, spread, start, end, max_runs, retry)
        lock = self._thread_lock  # a ThreadedScheduler's; None for the others, which are single-threaded
        pending: Pending | None = None
        if lock is not None:
            lock.acquire()
        try:
            try:
                rec = self._keys.get(key)
            except TypeError:
                raise TypeError(f"key must be hashable, not {type(key).__name__}") from None
            engine = t.engine
            driver = self._driver
            if (
                engine is None
                or not self._inline
                or t.closed
                or (rec is not None and (rec.running or rec.paused))
                or (own is not None and own.shaped)
                or (driver is not None and lifecycle_of(driver) is _CLOSED)
            ):
                pending = self._upsert(rec, key, data, own)
                return
            # The common cases, inline: a key of a started scheduler, its timer added or moved in place.
            wall = t.wall()  # (first: a clock that fails changes nothing)
            if rec is None:  # (setdefault: a finalizer that the allocation ran may have added the key)
                rec = t.gone.pop(key, None) if t.gone else None  # (KeyTable.new_record, inline)
                if rec is None:
                    rec = Key(t, key, data)
                    rec.generation = t.floor
                rec = self._keys.setdefault(key, rec)
            rec.data = data
            rec.generation += 1
            rec.options = own
            rec.catch_up = None
            try:
                when = t.next_run(utc_not_after(wall), key, data)  # (as KeyTable.evaluate: never after)
            except BaseException as exc:
                t.invalid(rec, t.guarded(exc))
                return
            if type(when) is datetime and type(when.tzinfo) in ALWAYS_AWARE:
                try:
                    at = when.timestamp()
                except (OverflowError, ValueError):
                    at = math.nan  # (out of range: _checked says so)
                state = rec.state
                if not MIN_POSIX <= at <= MAX_POSIX:
                    pass
                elif state is _PENDING:
                    if engine.move_wall_timer(rec, at):
                        rec.next_run_at = at
                        return
                elif rec.id is None:
                    engine.add_wall_timer(rec, at)
                    rec.next_run_at = at
                    rec.state = _PENDING
                    if state is _INVALID:
                        rec.last_error = None
                    if t.on_state_change is not None:
                        t.call(t.on_state_change, key, state, _PENDING)
                    return
            t.planned(rec, t.checked(when))
        finally:
            if lock is not None:
                lock.release()
            if pending is not None:  # (a shared store's commit: waited for without the lock)
                self._shared_keys.wait(pending)
            if t.holding:
                t.raise_held()

    async def aupsert(
        self,
        key: Hashable,
        data: Any = None,
        *,
        overlap: Overlap | None = None,
        jitter: float | None = None,
        spread: float | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        max_runs: int | None = None,
        retry: Retry | None = None,
    ) -> None:
        """upsert(), for a coroutine under an AsyncScheduler: a shared store's commit is awaited, never
        waited for on the loop's thread. With the other stores it is upsert() (no round trip to wait
        for). Raises what upsert() raises, and the store's StoreError."""
        t = self._table
        t.check_caller()
        own = _options(overlap, jitter, spread, start, end, max_runs, retry)
        pending = self._upsert(self._keys.get(checked_key(key)), key, data, own)
        if pending is not None:
            await self._shared_keys.wait_async(pending)

    def _upsert(
        self, rec: Key | None, key: Hashable, data: Any, own: Options | None = None
    ) -> Pending | None:
        """upsert() of a new key, before start(), under an AsyncScheduler, with a durable store, or while
        the key runs. With a durable store the new row is committed first, then applied: a store that
        fails changes nothing. A shared store's commit is a round trip: what is returned then, for the
        caller to wait for, or await, without the lock (see Pending)."""
        t = self._table
        with self._lock:
            if t.closed:
                raise RuntimeError("the KeyedScheduler is closed")
            t.check_caller()
            _check_scheduler_open(self._sched)
            if own is not None and own.shaped:  # (from now on every plan is made by KeyTable.evaluate,
                t.shaped = True  # which looks for the keys' options; a switch of speed only, never back)
                self._inline = False
            if not t.durable:
                # (first: a scheduler without a clock yet, an AsyncScheduler not started, raises and
                # changes nothing)
                wall_now = t.wall_now()
                if rec is None:
                    rec = self._keys.setdefault(key, t.new_record(key, data))
                elif rec.running and t.cancel_on_replace and rec.contexts:
                    for ctx in rec.contexts:
                        ctx.cancelled.set()
                rec.data = data
                rec.generation += 1
                rec.options = own
                rec.catch_up = None  # (an older generation's catch-up is not this one's)
                t.plan(rec, wall_now)
                return None
            encode_key(key)
            change = t.change(key, t.encode(data), t.wall_now(), own)
            if not t.shared:
                t.changed(change, t.store.put(change.row))
                return None
            return self._shared_keys.put(change)

    def replace_all(self, mapping: Mapping[Hashable, Any]) -> None:
        """Upsert every item of `mapping`, and remove every key that is not in it.

        Raises:
            TypeError: mapping is not a mapping, or one of its keys is not hashable.
            NotStartedError: as upsert(); nothing changed.
        """
        t = self._table
        pending = self._replace_all(mapping)
        if pending is not None:  # (a shared store's commit: waited for without the lock)
            self._shared_keys.wait(pending)
        t.raise_held()

    async def areplace_all(self, mapping: Mapping[Hashable, Any]) -> None:
        """replace_all(), for a coroutine: a shared store's commit is awaited (see aupsert())."""
        t = self._table
        t.check_caller()
        pending = self._replace_all(mapping)
        if pending is not None:
            await self._shared_keys.wait_async(pending)
        t.raise_held()

    def _replace_all(self, mapping: Mapping[Hashable, Any]) -> Pending | None:
        t = self._table
        if not isinstance(mapping, Mapping):
            raise TypeError(f"mapping must be a mapping of key to data, not {type(mapping).__name__}")
        for key in mapping:
            check_key(key)
            if t.durable:
                encode_key(key)
        with self._lock:
            t.check_open()
            t.check_caller()
            _check_scheduler_open(self._sched)
            if not t.durable:
                t.wall_now()  # (a scheduler without a clock yet raises here, before anything is removed)
                # (the internal calls: a callback's BaseException is raised once, at the end, with every
                # key done)
                for key in [k for k in self._keys if k not in mapping]:
                    t.forget(key)
                for key, data in mapping.items():
                    self._upsert(self._keys.get(key), key, data)
                return None
            # Durable: every row computed, then one transaction, then applied.
            wall_now = t.wall_now()
            changes = [t.change(key, t.encode(data), wall_now, None) for key, data in mapping.items()]
            removed = [k for k in self._keys if k not in mapping]
            if t.shared:
                return self._shared_keys.replace(changes, removed)
            t.replaced(changes, removed, t.store.replace([change.row for change in changes], removed))
            return None

    def remove(self, key: Hashable) -> bool:
        """Forget a key and take back its timer; False (no error) for an unknown key.

        Raises:
            TypeError: the key is not hashable, or (a durable store) not a str or an int. ValueError: a key
                its durable store cannot hold (as upsert() refuses it). RuntimeError: the KeyedScheduler
                is closed (but for a SQLite store that a run going on past close() still holds: a job
                that removes its own key at its end removes it from the file). StoreError: the store
                failed. In each case nothing changed.
        """
        t = self._table
        if t.shared:
            return bool(self._shared_keys.wait(self._shared_keys.delete(key)))
        check_key(key)
        if t.durable:
            encode_key(key)
        with self._lock:
            t.check_caller()
            if not (t.durable and self._journal.store_open()):
                t.check_open()
            if key not in self._keys:
                # (not in memory, but maybe in the store: an upsert that raised after its commit)
                return t.durable and bool(t.store.delete(key))
            if t.durable:
                t.store.delete(key)  # committed first: a store that fails changes nothing
            t.forget(key)
            return True

    async def aremove(self, key: Hashable) -> bool:
        """remove(), for a coroutine: a shared store's commit is awaited (see aupsert())."""
        t = self._table
        if not t.shared:
            return self.remove(key)
        return bool(await self._shared_keys.wait_async(self._shared_keys.delete(key)))

    # -- pausing them ---------------------------------------------------------------------------------

    def pause(self, key: Hashable) -> bool:
        """Pause a key: it is not armed, and no fire of it starts, until resume(); it keeps its data,
        generation and plan (the fire the pause holds back), and shows KeyState.PAUSED. A run going on
        goes on to its end. An upsert() meanwhile changes its data and plan and leaves it paused. The
        pause is stored: it holds across restarts, and with a shared store every process sees it (the
        database refuses to take the key's fires from the moment pause() returns). Pausing a paused
        key does nothing. O(1) (a commit with a durable store).

        Returns:
            False (no error) for a key it does not have (a shared store: that the database does not
            have), else True.

        Raises:
            TypeError: the key is not hashable. RuntimeError: the KeyedScheduler is closed. StoreError:
                the store failed (nothing changed).
        """
        return bool(self._set_paused([checked_key(key)], True))

    def resume(self, key: Hashable) -> bool:
        """Resume a paused key. The pause counts as downtime: the fire it held back and those that fell
        due meanwhile are decided by the same rules as after a restart (catch_up, max_catch_up,
        misfire_grace; those not run are reported to on_missed and counted in stats().missed), then the
        key goes on on its schedule. A key whose run goes on is planned when the run ends. Resuming a
        key that is not paused does nothing.

        Returns and raises as pause()."""
        return bool(self._set_paused([checked_key(key)], False))

    def pause_all(self) -> int:
        """Pause every key (with a shared store: every key in the database, whichever process holds
        it), as pause() does one. A key added later is not paused. Returns how many keys were paused by
        this call (those paused already are not counted). Raises as pause()."""
        return int(self._set_paused(None, True))

    def resume_all(self) -> int:
        """Resume every paused key (with a shared store: every one in the database), as resume() does
        one. Returns how many were resumed. Raises as pause()."""
        return int(self._set_paused(None, False))

    async def apause(self, key: Hashable) -> bool:
        """pause(), for a coroutine under an AsyncScheduler: a shared store's commit is awaited."""
        return bool(await self._aset_paused([checked_key(key)], True))

    async def aresume(self, key: Hashable) -> bool:
        """resume(), for a coroutine under an AsyncScheduler: a shared store's commit is awaited."""
        return bool(await self._aset_paused([checked_key(key)], False))

    async def apause_all(self) -> int:
        """pause_all(), for a coroutine under an AsyncScheduler: a shared store's commit is awaited."""
        return int(await self._aset_paused(None, True))

    async def aresume_all(self) -> int:
        """resume_all(), for a coroutine under an AsyncScheduler: a shared store's commit is awaited."""
        return int(await self._aset_paused(None, False))

    def _set_paused(self, keys: list[Hashable] | None, paused: bool) -> int:
        t = self._table
        if t.shared:
            return int(self._shared_keys.wait(self._shared_keys.set_paused(keys, paused)))
        with self._lock:
            t.check_open()
            t.check_caller()
            done = set_paused(t, keys, paused)
        t.raise_held()
        return done

    async def _aset_paused(self, keys: list[Hashable] | None, paused: bool) -> int:
        t = self._table
        if not t.shared:
            return self._set_paused(keys, paused)
        t.check_caller()
        return int(await self._shared_keys.wait_async(self._shared_keys.set_paused(keys, paused)))

    # -- running one now -------------------------------------------------------------------------------

    def trigger(
        self, key: Hashable, *, restart: bool = False, overlap: Overlap | None = None
    ) -> datetime | None:
        """Run a key now, outside its schedule: a fire of the key at the wall clock's now (a shared
        store's: the database's), run at once, after the fires queued to run at once (a catch-up, a
        rerun), under the key's overlap policy, or `overlap` for this fire alone. The key's plan does not
        move: after the run it goes on with the next run it had (`restart=True`: it plans from the
        triggered run as from any fire). A trigger not run yet is that key's trigger: another returns
        its time and adds none. The trigger is stored (a restart runs it; with a shared store the process
        that holds the key runs it, and whoever takes the key over if that process dies) and runs once;
        an upsert, replace_all, remove or pause of the key drops it.

        Returns:
            The scheduled time of the fire that runs for it (its run's ctx.scheduled_for), or None: the
            key is unknown (a shared store: the database does not have it) or paused.

        Raises:
            TypeError: the key is not hashable; restart not a bool; overlap not an Overlap. RuntimeError:
                the KeyedScheduler is closed, or not started. StoreError: the store failed (nothing
                changed).
        """
        t = self._table
        boolean(restart, "restart")
        if overlap is not None:
            member(overlap, Overlap, "overlap")
        check_key(key)
        if t.shared:
            return _when(self._shared_keys.wait(self._shared_keys.trigger(key, restart, overlap)))
        with self._lock:
            t.check_open()
            t.check_caller()
            at = trigger(t, key, restart, overlap)
        t.raise_held()
        return _when(at)

    async def atrigger(
        self, key: Hashable, *, restart: bool = False, overlap: Overlap | None = None
    ) -> datetime | None:
        """trigger(), for a coroutine: a shared store's commit is awaited (see aupsert())."""
        t = self._table
        if not t.shared:
            return self.trigger(key, restart=restart, overlap=overlap)
        boolean(restart, "restart")
        if overlap is not None:
            member(overlap, Overlap, "overlap")
        check_key(key)
        t.check_caller()
        return _when(await self._shared_keys.wait_async(self._shared_keys.trigger(key, restart, overlap)))

    # -- reading them ---------------------------------------------------------------------------------

    def get(self, key: Hashable) -> KeyInfo | None:
        """The key as it stands, or None. TypeError if the key is not hashable."""
        check_key(key)
        with self._lock:
            rec = self._keys.get(key)
            return None if rec is None else rec.info()

    def history(self, key: Hashable) -> list[HistoryEntry]:
        """The key's history, newest first: what became of its fires, and why (HistoryEntry: ran, failed,
        retried, skipped, missed, dropped, paused, superseded, lease_lost, late), as its store keeps it
        (its newest `history` entries; a durable store keeps them across restarts, a shared one every
        process's). remove() forgets it. [] for a key never seen, or with history=0.

        Raises:
            TypeError: the key is not hashable. StoreError: the store failed, or has an entry this
                timerwheel cannot read (naming the file and the key). RuntimeError: a shared store's,
                called on the event loop's thread of an AsyncScheduler (use ahistory()).
        """
        check_key(key)
        if self._table.shared:
            if self._table.is_async:
                raise RuntimeError(
                    "history() of a shared store waits for a database read: under an AsyncScheduler, "
                    "await ahistory()"
                )
            return [entry_of(e) for e in self._journal.history(key)]
        with self._lock:
            return [entry_of(e) for e in self._journal.history(key)]

    async def ahistory(self, key: Hashable) -> list[HistoryEntry]:
        """history(), for a coroutine under an AsyncScheduler: a shared store's read is awaited, never
        waited for on the loop's thread. With the other stores it is history()."""
        import asyncio

        check_key(key)
        self._table.check_caller()
        if not self._table.shared:
            return self.history(key)
        read = getattr(self._table.store, "history", None)
        if read is None or not self._table.history_keep:
            return []
        found = await asyncio.wrap_future(self._journal.writer().submit(read, key))
        return [entry_of(e) for e in found]

    def last_run(self, key: Hashable) -> HistoryEntry | None:
        """The key's latest run (ran, or failed with its error), as its history keeps it (see history();
        a store that keeps none: the latest this KeyedScheduler ended), or None. Raises what history()
        raises."""
        for entry in self.history(key):
            if entry.outcome in ("ran", "failed"):
                return entry
        with self._lock:
            rec = self._keys.get(key)
            return None if rec is None or rec.last_run is None else last_run_of(rec.last_run)

    def preview(
        self,
        key: Hashable,
        start: datetime,
        end: datetime,
        *,
        duration: float = 0.0,
        outage: float = 0.0,
        limit: int = 1000,
    ) -> list[HistoryEntry]:
        """What the key would do from `start` to `end`, oldest first, as its history would tell it
        (HistoryEntry: ran, skipped, missed, with the times they would run at): this KeyedScheduler's
        rules (next_run, reschedule, overlap, catch_up, max_catch_up, misfire_grace, jitter, spread) and
        the key's own (its data, overlap, jitter, spread, window, max_runs and runs so far), run by the
        real KeyedScheduler on virtual time, in memory; the key and its store are not touched. Each run
        takes `duration` seconds and returns (none fails: no retry); one that begins by `end` is in the
        list, ended. `outage` seconds from `start`, nobody
        holds the key (a process down, the key paused): then the catch-up rules decide what runs of the
        fires that fell due, as at a restart (an outage past `end`: nothing runs). A paused, DISABLED or
        INVALID key runs nothing: []. At most `limit` entries. next_run is called on the virtual
        times: it must not depend on the real clock.

        Raises:
            TypeError: the key is not hashable; start or end not a datetime; duration or outage not a
                number; limit not an int. ValueError: a naive start or end, or an end not after the
                start; a duration or outage not from 0 to 1e9 s, or runs that would end past what a
                datetime shows; limit < 1. KeyError: the key is not here.
        """
        check_key(key)
        opens, closes = _instant(start, "start"), _instant(end, "end")
        if closes <= opens:
            raise ValueError(f"end must be after start, got start={start!r}, end={end!r}")
        duration = seconds(duration, "duration")
        outage = seconds(outage, "outage")
        for name, value in (("duration", duration), ("outage", outage)):
            if not 0 <= value <= MAX_DELAY:
                raise ValueError(f"{name} must be from 0 to {MAX_DELAY:.0f} seconds, got {value!r}")
        if closes + duration + 1.0 > MAX_POSIX:
            raise ValueError(
                f"duration: runs of {duration!r} s from the end would end past what a UTC datetime can show"
            )
        limit = count(limit, "limit", 1)
        t = self._table
        with self._lock:
            rec = self._keys.get(key)
            if rec is None:
                raise KeyError(key)
            data, own, runs = value_of(rec.data), rec.options, rec.runs
            if rec.paused or rec.state in (KeyState.DISABLED, KeyState.INVALID):
                return []  # (it runs nothing: paused until resumed, disabled or invalid until upserted)

        def work() -> list[HistoryEntry]:
            return _previewed(t, key, data, own, runs, opens, closes, duration, outage, limit)

        if _loop_running():  # (a loop runs on this thread: the preview's own runs on another)
            done: list[list[HistoryEntry] | BaseException] = []

            def thread() -> None:
                try:
                    done.append(work())
                except BaseException as exc:
                    done.append(exc)

            worker = threading.Thread(target=thread, name="timerwheel-preview")
            worker.start()
            worker.join()
            if isinstance(done[0], BaseException):
                raise done[0]
            return done[0]
        return work()

    def snapshot(self) -> dict[Hashable, KeyInfo]:
        """Every key as it stands. O(keys); one lock held throughout (a consistent view)."""
        with self._lock:
            return {key: rec.info() for key, rec in self._keys.items()}

    def states(self) -> dict[KeyState, int]:
        """How many keys are in each KeyState (every state, 0 for none), as get() shows them (a paused
        key: PAUSED). O(keys), with no KeyInfo made: about a tenth of snapshot()'s cost."""
        counts = dict.fromkeys(KeyState, 0)
        with self._lock:
            if self._table.closed:
                counts[KeyState.DISABLED] = len(self._keys)
                return counts
            for rec in self._keys.values():
                counts[KeyState.PAUSED if rec.paused else rec.state] += 1
        return counts

    def __len__(self) -> int:
        """How many keys there are."""
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        """Whether `key` is a key here."""
        return key in self._keys

    def __iter__(self) -> Iterator[Hashable]:
        """The keys (a copy)."""
        with self._lock:
            return iter(list(self._keys))

    def stats(self) -> KeyedStats:
        """A snapshot of the counters (see KeyedStats). O(1)."""
        t = self._table
        with self._lock:
            return KeyedStats(
                keys=len(self._keys), **t.counts, lateness=tuple(t.lateness), lateness_sum=t.lateness_sum
            )


def _options(
    overlap: Any,
    jitter: Any,
    spread: Any,
    start: Any = None,
    end: Any = None,
    max_runs: Any = None,
    retry: Any = None,
) -> Options | None:
    """A key's own options (or the KeyedScheduler's), checked: TypeError or ValueError naming the one."""
    if overlap is not None:
        member(overlap, Overlap, "overlap")
    if jitter is not None:
        jitter = _delay(jitter, "jitter")
    if spread is not None:
        spread = _delay(spread, "spread")
    opens = None if start is None else _instant(start, "start")
    closes = None if end is None else _instant(end, "end")
    if opens is not None and closes is not None and closes < opens:
        raise ValueError(f"end ({end.isoformat()}) must not be before start ({start.isoformat()})")
    if max_runs is not None:
        if type(max_runs) is not int:
            raise TypeError(f"max_runs must be an int (or None), not {type(max_runs).__name__}")
        if max_runs < 1:
            raise ValueError(f"max_runs must be >= 1 (or None), got {max_runs}")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"retry must be a Retry (or None), not {type(retry).__name__}")
    return options(overlap, jitter, spread, opens, closes, max_runs, retry)


class _Recorder(MemoryStore):
    """A preview's store: every history entry, in order, up to the limit (then the preview stops)."""

    def __init__(self, key: Hashable, limit: int, stop: Callable[[], object]) -> None:
        super().__init__()
        self.key = key
        self.limit = limit
        self.stop = stop
        self.entries: list[StoredEntry] = []

    def add_history(self, entries: Sequence[StoredEntry], keep: int) -> None:
        """Keep the key's entries; stop the preview at the limit (once: runs that end as it closes add
        theirs, unheard)."""
        self.entries.extend(e for e in entries if e.key == self.key)
        if len(self.entries) >= self.limit:
            stop, self.stop = self.stop, _nothing
            stop()


def _previewed(
    t: KeyTable,
    key: Hashable,
    data: Any,
    own: Options | None,
    runs: int,
    opens: float,
    closes: float,
    duration: float,
    outage: float,
    limit: int,
) -> list[HistoryEntry]:
    """KeyedScheduler.preview's work: a KeyedScheduler of the same rules on an AsyncScheduler over a
    VirtualTimeLoop whose wall clock starts at `opens`, the key upserted with its data and options (and
    paused for the outage), run until `closes` (or the limit)."""
    import asyncio

    from .._drivers.asyncio import AsyncScheduler
    from .._virtual import VirtualTimeLoop

    loop = VirtualTimeLoop(0.0, wall=opens)
    try:
        sched = AsyncScheduler(loop=loop)
        store = _Recorder(key, limit, loop.stop)

        async def run(key: Hashable, data: Any) -> None:
            if duration:
                await asyncio.sleep(duration)

        defaults, policy = t.defaults, t.policy
        keyed = KeyedScheduler(
            sched,
            t.next_run,
            run,
            reschedule=policy.reschedule,
            overlap=defaults.overlap,
            jitter=defaults.jitter or None,
            spread=defaults.spread or None,
            catch_up=policy.catch_up,
            max_catch_up=policy.max_catch_up,
            misfire_grace=policy.grace,
            store=store,
            history=limit,
        )
        own = own or Options()
        keyed.upsert(
            key,
            data,
            overlap=own.overlap,
            jitter=own.jitter,
            spread=own.spread,
            start=None if own.start is None else from_posix(own.start, UTC),
            end=None if own.end is None else from_posix(own.end, UTC),
            max_runs=own.max_runs,
        )
        keyed._keys[key].runs = runs
        if outage:
            keyed.pause(key)
            store.entries.clear()  # (the pause is the preview's own: not an entry)
            if outage <= closes - opens:  # (an outage past the end: nothing runs in the span)
                loop.call_at(outage, keyed.resume, key)
        keyed.start()
        # (a run begun by the end, ended; and what the end's instant decided, begun: a moment after)
        loop.call_at(closes - opens + duration + _MOMENT, loop.stop)
        loop.run_forever()
        loop.run_until_complete(keyed.aclose())
        loop.run_until_complete(sched.close())
    finally:
        loop.close()
    last = micro(closes)
    entries = [entry_of(e) for e in store.entries if e.at - (e.duration or 0) <= last][:limit]
    if outage:  # (the preview's pause: an outage)
        entries = [
            HistoryEntry(e.scheduled_for, e.at, e.outcome, e.attempt, e.duration, "missed during the outage")
            if e.outcome == "missed"
            else e
            for e in entries
        ]
    return entries


_MOMENT = 0.001  # seconds a preview runs past its end (and its runs' duration): the end's own fires begin


def _nothing() -> None:
    """(Nothing to do.)"""


def _loop_running() -> bool:
    """Whether an asyncio event loop runs on this thread."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _instant(value: Any, name: str) -> float:
    """An aware datetime as POSIX seconds, whole microseconds (what a store keeps): TypeError or
    ValueError naming it."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be an aware datetime (or None), not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got the naive {value!r}")
    try:
        at = micro(value.timestamp()) / 1_000_000
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"{name} is out of range ({exc})") from None
    if not MIN_POSIX <= at <= MAX_POSIX:
        raise ValueError(f"{name} must be a time a UTC datetime can show, got {value!r}")
    return at


def _delay(value: Any, name: str) -> float:
    value = seconds(value, name)
    if not 0 <= value <= MAX_DELAY:
        raise ValueError(f"{name} must be from 0 to {MAX_DELAY:.0f} seconds (or None), got {value!r}")
    return float(value) + 0.0  # (-0.0 is 0.0)


DEFAULT_LATE_GRACE = 60.0  # seconds a fire may wait to begin before on_late hears of it (on_late alone)


def _when(at: float | None) -> datetime | None:
    return None if at is None else datetime.fromtimestamp(at, UTC)


def _check_scheduler_open(scheduler: Any) -> None:
    """ClosedError if `scheduler` is a driver that was closed: nothing would ever run on it."""
    if isinstance(scheduler, DriverBase) and lifecycle_of(scheduler) is _CLOSED:
        raise ClosedError(f"the scheduler is closed: {scheduler!r} runs nothing any more")


_CLOSED = Lifecycle.CLOSED
_PENDING = KeyState.PENDING  # (a module constant: an enum member read through its class is a slow lookup)
_INVALID = KeyState.INVALID
