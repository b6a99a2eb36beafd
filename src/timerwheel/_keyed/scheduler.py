"""KeyedScheduler: jobs managed by business key ("daily-report", "tenant-42-sync"), each with a next run
that one function computes, on any of the three schedulers.

next_run(now, key, data) is the only place that computes a time; everything else is bookkeeping. Each key
has at most one armed timer, a calendar task of the scheduler (a wall-clock due: see
Scheduler.schedule_wall); upserting a key moves that timer in O(1). Generations fence the stale: upsert,
replace and remove bump a key's generation, and a fire or a completion of an older generation changes
nothing of the newer one (on_finish still hears of it).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import inspect
import json
import logging
import math
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from .._clock import utc_not_after
from .._drivers import DriverBase, check_caller, engine_of, lifecycle_of, lock_of
from .._engine import JobContext, Scheduler, log_safely
from .._stores import FinishedFire, KeyStore, MemoryStore, StoredFire, StoredKey, StoreError, encode_key
from .._types import ClosedError, Lifecycle, RunOptions
from .._validate import boolean, callable_or_none, count, function, member, seconds
from .keys import (
    ALWAYS_AWARE,
    MAX_POSIX,
    MIN_POSIX,
    CatchUp,
    Key,
    KeyedStats,
    KeyInfo,
    KeyState,
    Recover,
    Reschedule,
    Stored,
    advancing,
    check_key,
    checked_key,
    describe,
    from_posix,
    iso,
    keep_first,
    latest_started,
    micro,
    outcome_of,
    seconds_of,
    since,
    value_of,
)
from .recovery import Plan, Policy, decide
from .runs import STALE, Start, Writer
from .shared import Change, Fence, LeaseLapsed, Pending

__all__ = ["KeyedScheduler"]

logger = logging.getLogger("timerwheel")


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
        context: pass the run a JobContext first.
        cancel_running_on_remove: remove() sets a running run's ctx.cancelled.
        cancel_running_on_replace: upsert() of a running key sets its run's ctx.cancelled.
        wait_running_on_close: close() waits for the running runs.
        run_timeout: seconds a run may take (None: no limit); past it, ctx.cancelled is set.
        on_state_change: on_state_change(key, old_state, new_state), on every change of state.
        on_finish: on_finish(key, data, error) after every run (error None when it returned).
        on_invalid: on_invalid(key, data, error) when next_run fails for a key.

    Raises:
        TypeError: a scheduler of another type, next_run or run not callable, a non-enum reschedule, a
            callback that is not callable, context not a bool.
        ValueError: a negative run_timeout.
    """

    def __init__(
        self,
        scheduler: Any,
        next_run: Callable[[datetime, Any, Any], datetime | None],
        run: Callable[..., Any],
        *,
        reschedule: Reschedule = Reschedule.AFTER_FINISH,
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
        ):
            callable_or_none(callback, name)
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
        if _user_of(store) is not None:
            raise ValueError(f"store: the {store.name} is in use by another KeyedScheduler already")
        self._sched: Any = scheduler
        self._driver: Any = scheduler if isinstance(scheduler, (ThreadedScheduler, AsyncScheduler)) else None
        self._next_run = next_run
        self._run = run
        self._reschedule = reschedule
        self._context = context
        self._cancel_on_remove = cancel_running_on_remove
        self._cancel_on_replace = cancel_running_on_replace
        self._wait_on_close = wait_running_on_close
        self._on_state_change = on_state_change
        self._on_finish = on_finish
        self._on_invalid = on_invalid
        self._async = isinstance(scheduler, AsyncScheduler)
        # Under an AsyncScheduler a coroutine function's runs are tasks; so are every run's with a shared
        # store, whose take is awaited (never waited for on the loop's thread).
        coroutine = self._async and (
            inspect.iscoroutinefunction(run)
            or inspect.iscoroutinefunction(type(run).__call__)
            or bool(getattr(store, "shared", False))
        )
        self._job = self._run_async if coroutine else self._run_key
        # Every run gets a context (cancellation on remove and replace, the timeout), whatever `context`.
        self._options = RunOptions(
            context=True, timeout=run_timeout, coroutine=coroutine, on_drop=self._dropped
        )
        self._keys: dict[Hashable, Key] = {}
        # One lock: a ThreadedScheduler's own (the engine is touched under it), else one of ours (a run
        # on a worker thread reports under it; callbacks may call back in).
        self._lock: Any = (
            lock_of(scheduler) if isinstance(scheduler, ThreadedScheduler) else threading.RLock()
        )
        self._thread_lock = self._lock if isinstance(scheduler, ThreadedScheduler) else None
        self._wall: Callable[[], float] = scheduler.wall  # until start(): then the engine's wall clock
        self._idle = threading.Condition(self._lock)  # close() waits on it for the running runs
        self._engine: Scheduler | None = None  # once started
        self._started = False
        self._closed = False
        self._owns_scheduler = False
        self._all_done: Any = None  # aclose() waits on it (an asyncio.Event) for the running runs
        self._store = store
        self._durable = bool(store.durable)
        self._shared = bool(getattr(store, "shared", False))
        self._stamps: dict[Hashable, int] = {}  # shared: when each key was taken here (see _shared_*)
        self._stamp = 0
        self._leases_lost = False  # shared: the store could not renew for a whole lease (see _shared_lost)
        self._catch_up = catch_up
        self._max_catch_up = max_catch_up
        self._grace = misfire_grace
        self._recover = recover
        self._policy = Policy(recover, reschedule, catch_up, max_catch_up, misfire_grace)
        self._on_missed = on_missed
        self._counts = dict.fromkeys(
            (
                "started",
                "finished",
                "failed",
                "missed",
                "caught_up",
                "recovered",
                "abandoned",
                "clock_errors",
            ),
            0,
        )
        # Keys removed while a run of theirs goes: the record stays here until the run ends, and an upsert
        # of the key meanwhile takes it back (generation and running runs with it), so that AFTER_FINISH
        # runs never overlap across a removal. _floor is the highest generation of any record dropped: a
        # new record starts above it, so that a key's generation never goes back (a stale end or fire of
        # the old record cannot pass for the new one's).
        self._gone: dict[Hashable, Key] = {}
        self._floor = 0
        self._backoff = 0.0  # seconds: the retry of a fire whose start could not read the wall clock
        # A BaseException (KeyboardInterrupt, SystemExit) from a user callback is held here, per thread,
        # while the operation it interrupted completes, and raised at the operation's end (_raise_held).
        self._held = threading.local()
        self._holding = False  # (a hint: some thread held one once; the hot path checks only this)
        self._loaded: set[Hashable] = set()  # keys loaded from the store and not upserted since
        self._missed_summary = [0, 0]
        self._group: Any = None  # the view of the keys given to the engine's add_calendar()
        self._unfinished: dict[Hashable, list[StoredFire]] = {}
        self._unrecorded: list[FinishedFire] = []  # ends of runs the store failed to record, to retry
        self._unrecorded_lock = threading.Lock()  # (a shared store's writer records them: never held long)
        self._store_released = False
        self._released: Future[Any] | None = None  # a shared store's release, by its writer
        self._recorded_late: set[tuple[Hashable, int, int]] = set()  # shared: see _shared_adopt
        self._applier: queue.SimpleQueue[Callable[[], None]] | None = None  # shared: see _post
        self._store_closing = threading.Event()  # set as the store is closed: the applier ends
        self._pid = os.getpid()
        # (a shared store may say where its database work runs, and on what clock its leases are counted:
        # a simulated one, on its simulated process's loop and clock; by default a thread each, and this
        # machine's monotonic clock)
        make_writer = getattr(store, "writer", None) if self._shared else None
        if self._shared and not callable(make_writer):
            make_writer = Writer
        self._writer_thread: Any = make_writer("store-writer") if make_writer else None  # see Writer
        self._changer_thread: Any = make_writer("store-changes") if make_writer else None  # see _changer
        self._monotonic: Callable[[], float] = getattr(store, "monotonic", None) or time.monotonic
        lease = getattr(store, "lease", None) if self._shared else None
        self._lease: float | None = None if lease is None else float(lease)
        self._seq = 0  # shared: user changes made so far (see _changing)
        self._inflight: dict[Hashable, list[int]] = {}  # shared: key -> [changes in flight, latest applied]
        if self._durable:
            self._load()
            _use(store, self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._started else "new"
        return f"<KeyedScheduler {state} keys={len(self._keys)} on {self._sched!r}>"

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start: evaluate next_run again for every key and arm it. Starts the scheduler if it is new.

        Raises:
            RuntimeError: started already, or closed. ClosedError: its scheduler is closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the KeyedScheduler is closed")
            if self._started:
                raise RuntimeError("the KeyedScheduler is started already")
            _check_scheduler_open(self._sched)
            if self._sched_is_new():
                self._sched.start()
                self._owns_scheduler = True
            self._check_caller()
            engine = self._sched if isinstance(self._sched, Scheduler) else engine_of(self._sched)
            wall_now = engine.wall()
            # The stored keys' plans are decided, then written in one transaction, before anything is
            # armed or any callback runs: a store that fails leaves the KeyedScheduler as it was (start()
            # may be called again); a callback that changes keys meanwhile is not undone.
            plans, rows, finished = self._decide_all(
                [rec for rec in self._keys.values() if rec.key in self._loaded], wall_now
            )
            if rows or finished:
                self._store.save(rows, finished)
            self._engine = engine
            self._wall = engine.wall_clock
            self._started = True
            self._group = self._keys.values()
            engine.add_calendar(self._group)  # a step of the wall clock moves the keys' timers
            for rec in list(self._keys.values()):
                if rec.key not in self._loaded:
                    self._plan(rec, wall_now)
            self._loaded.clear()
            self._apply_all(plans)
            if self._shared:
                self._store.attach(_Holder(self))  # type: ignore[attr-defined]
        self._raise_held()

    def close(self) -> None:
        """Close: every key becomes DISABLED (next_run_at None), their timers are taken back; with
        wait_running_on_close, wait for the running runs. Closes the scheduler if start() started it.
        Under an AsyncScheduler, use `await aclose()`.

        Without wait_running_on_close, close() returns at once: a run still going is told
        (ctx.cancelled is set), goes on to its end on its thread, and its end is recorded in a durable
        store, which is released when the last such run ends; its key is not armed again."""
        if self._async:
            raise RuntimeError("under an AsyncScheduler, use `await keyed.aclose()`")
        if self._shared and self._pid != os.getpid():  # (inherited through fork: the parent's to close)
            self._closed = True
            return
        self._shut()
        if self._wait_on_close and not self._in_a_run():
            with self._lock:
                while self._any_running():
                    self._idle.wait()
        released = self._release_store()
        if released is not None:  # (a shared store: closed by its writer, after what it had to write)
            released.result()
        elif not self._store_released:  # runs go on past close(): at exit, their ends are waited for
            _at_exit.add(self)
        if self._owns_scheduler:
            if self._wait_on_close:
                self._sched.close()
            else:  # (closing a ThreadedScheduler joins its workers: a run that goes on would be waited for)
                self._sched.close(wait=False)
        self._raise_held()

    async def aclose(self) -> None:
        """close(), under an AsyncScheduler: awaits the running runs with wait_running_on_close."""
        import asyncio

        self._shut()
        if self._wait_on_close and not self._in_a_run():
            while self._any_running():
                self._all_done = asyncio.Event()
                await self._all_done.wait()
        released = self._release_store()
        if released is not None:  # (a shared store: awaited, never waited for on the loop)
            await asyncio.wrap_future(released)
        if self._owns_scheduler:
            await self._sched.aclose()
        self._raise_held()

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
        with self._lock:
            if self._closed:
                return
            self._check_caller()
            self._closed = True
            # Every key shows DISABLED from now on (KeyInfo), but keeps its plan: a run that goes on past
            # close() ends by writing the row the key would have had, never DISABLED (see _end).
            for rec in list(self._keys.values()):
                self._disarm(rec)
                if rec.contexts and not self._wait_on_close:  # a run going on: told (ctx.cancelled)
                    for ctx in rec.contexts:
                        ctx.cancelled.set()
                if rec.state is not KeyState.DISABLED:
                    self._call(self._on_state_change, rec.key, rec.state, KeyState.DISABLED)
            if self._engine is not None:
                self._engine.remove_calendar(self._group)
            if self._shared and self._started:
                # Every key not running is given back now; the running ones when their runs end (their
                # leases are renewed meanwhile, so that nobody runs them again while they go), and those
                # whose last end is not recorded yet with close().
                running = [k for k, rec in self._keys.items() if rec.running]
                self._write(self._detach_now, running)

    def _any_running(self) -> bool:
        """Whether a run of any key goes (a key removed meanwhile included). O(keys)."""
        return bool(self._gone) or any(rec.running for rec in self._keys.values())

    def _release_store(self) -> Future[Any] | None:
        """Close the store once no run is going (a run still going releases it when it finishes, so that
        its finish is recorded); closing the KeyedScheduler never writes DISABLED into the store. A
        shared store is closed by the writer, after what it has to write: the Future of that, to wait
        for (close(), aclose()) or not (a run's end)."""
        with self._lock:
            if not self._closed or self._any_running() or self._store_released:
                return None
            self._store_released = True
            if not self._shared:
                self._close_store()
                return None
            writer = self._writer()
            future: Future[Any] = writer.submit(self._close_store)
            self._released = future
            writer.stop(wait=False)
            self._changer().stop(wait=False)
            return future

    def _drain(self, deadline: float) -> None:
        """At the interpreter's exit: wait (until the monotonic `deadline`) for the runs that went on past
        close() to end, and for their ends to be recorded and the store released."""
        with self._lock:
            while self._any_running():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._idle.wait(left)
        released = self._released
        if released is not None:
            with contextlib.suppress(Exception):
                released.result(timeout=max(0.0, deadline - time.monotonic()))

    def _close_store(self) -> None:
        if self._store_open():
            self._record_unrecorded()
        self._store_closing.set()  # (a shared store's changes are applied no more: see _apply_posted)
        self._store.close()
        if _user_of(self._store) is self:
            _IN_USE.pop(id(self._store), None)

    # -- writing to the store: under the lock (a local store), or by the writer (a shared one) ----------

    def _write(self, work: Callable[..., Any], *args: Any) -> None:
        """A write nobody waits for (a run's end, a decision, a release): done now, under the lock, with
        a local store; handed to the writer, in order, with a shared one (see Writer). `work` says
        itself what becomes of an error."""
        if self._shared:
            self._writer().submit(work, *args)
        else:
            work(*args)

    def _finish(self, row: StoredKey | None, fire: FinishedFire) -> None:
        """Record a run's end (and the key's row, unless None): if the store fails, it is recorded with the
        next write (or, if none comes, `recover` decides at the next start)."""
        self._record_unrecorded()
        try:
            self._store.finish_fire(row, *fire)
        except Exception as exc:
            with self._unrecorded_lock:
                self._unrecorded.append(fire)
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the %s failed to record the end of a run of key %r (%r); it is recorded with "
                "the next write",
                self._store.name,
                fire.key,
                exc,
                exc_info=exc,
            )

    def _save(self, rows: list[StoredKey], finished: list[FinishedFire], what: str) -> None:
        """Write keys' rows and mark fires finished; a store that fails is logged (the rows are written
        again at the keys' next fires)."""
        try:
            self._store.save(rows, finished)
        except Exception as exc:
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the %s failed to record %s (%r)",
                self._store.name,
                what,
                exc,
                exc_info=exc,
            )

    def _release_now(self, keys: dict[Hashable, int]) -> None:
        """Give keys back to the store (key: the generation given back), but never one whose last run's
        end is not recorded yet (another process would find that fire unfinished and run it again)."""
        self._record_unrecorded()
        with self._unrecorded_lock:
            pending = {f.key for f in self._unrecorded}
        keys = {k: g for k, g in keys.items() if k not in pending}
        if not keys:
            return
        try:
            self._store.release(keys)  # type: ignore[attr-defined]
        except Exception as exc:  # their leases lapse by themselves
            logger.warning(
                "timerwheel: the %s failed to give %d key(s) back (%r)", self._store.name, len(keys), exc
            )

    def _detach_now(self, running: list[Hashable]) -> None:
        """The KeyedScheduler closed: the store gives back every key but those whose runs go on, and
        those whose last end is not recorded yet."""
        self._record_unrecorded()
        with self._unrecorded_lock:
            keep = {*running, *(f.key for f in self._unrecorded)}
        self._store.detach(list(keep))  # type: ignore[attr-defined]

    def stats(self) -> KeyedStats:
        """A snapshot of the counters (see KeyedStats). O(1)."""
        with self._lock:
            return KeyedStats(keys=len(self._keys), **self._counts)

    def _sched_is_new(self) -> bool:
        return isinstance(self._sched, DriverBase) and lifecycle_of(self._sched) is Lifecycle.NEW

    def _check_caller(self) -> None:
        if self._async:
            check_caller(self._sched)  # an AsyncScheduler is touched on its loop's thread only

    def _in_a_run(self) -> bool:
        return bool(getattr(_running, "depth", 0)) or _in_async_run.get()

    # -- keys -----------------------------------------------------------------------------------------

    def upsert(self, key: Hashable, data: Any = None) -> None:
        """Add a key, or replace its data (a new generation), and (re)compute its next run. A known key's
        armed timer is moved, not removed and added. A next_run that fails makes the key INVALID.

        Raises:
            TypeError: the key is not hashable. RuntimeError: the KeyedScheduler is closed.
            ClosedError: its scheduler is closed. NotStartedError: its scheduler has no clock yet (an
                AsyncScheduler made outside a loop and not started). A wall clock that fails raises what
                it raised. In each case nothing changed.
        """
        lock = self._thread_lock  # a ThreadedScheduler's; None for the others, which are single-threaded
        pending: Pending | None = None
        if lock is not None:
            lock.acquire()
        try:
            try:
                rec = self._keys.get(key)
            except TypeError:
                raise TypeError(f"key must be hashable, not {type(key).__name__}") from None
            engine = self._engine
            driver = self._driver
            if (
                engine is None
                or self._closed
                or self._async
                or self._durable
                or (rec is not None and rec.running)
                or (driver is not None and lifecycle_of(driver) is _CLOSED)
            ):
                pending = self._upsert(rec, key, data)
                return
            # The common cases, inline: a key of a started scheduler, its timer added or moved in place.
            wall = self._wall()  # (first: a clock that fails changes nothing)
            if rec is None:  # (setdefault: a finalizer that the allocation ran may have added the key)
                rec = self._gone.pop(key, None) if self._gone else None  # (_new_record, inline)
                if rec is None:
                    rec = Key(self, key, data)
                    rec.generation = self._floor
                rec = self._keys.setdefault(key, rec)
            rec.data = data
            rec.generation += 1
            rec.catch_up = None
            try:
                when = self._next_run(from_posix(wall, UTC), key, data)
            except BaseException as exc:
                self._invalid(rec, self._guarded(exc))
                return
            if type(when) is datetime and type(when.tzinfo) in ALWAYS_AWARE:
                try:
                    at = when.timestamp()
                except (OverflowError, ValueError):
                    at = math.nan  # (out of range: _checked says so)
                state = rec.state
                if not MIN_POSIX <= at <= MAX_POSIX:
                    pass
                elif state is KeyState.PENDING:
                    if engine.move_wall_timer(rec, at):
                        rec.next_run_at = at
                        return
                elif rec.id is None:
                    engine.add_wall_timer(rec, at)
                    rec.next_run_at = at
                    rec.state = KeyState.PENDING
                    if state is KeyState.INVALID:
                        rec.last_error = None
                    if self._on_state_change is not None:
                        self._call(self._on_state_change, key, state, KeyState.PENDING)
                    return
            self._planned(rec, self._checked(when))
        finally:
            if lock is not None:
                lock.release()
            if pending is not None:  # (a shared store's commit: waited for without the lock)
                self._wait(pending)
            if self._holding:
                self._raise_held()

    async def aupsert(self, key: Hashable, data: Any = None) -> None:
        """upsert(), for a coroutine under an AsyncScheduler: a shared store's commit is awaited, never
        waited for on the loop's thread. With the other stores it is upsert() (no round trip to wait
        for). Raises what upsert() raises, and the store's StoreError."""
        self._check_caller()
        pending = self._upsert(self._keys.get(checked_key(key)), key, data)
        if pending is not None:
            await self._await(pending)

    def _upsert(self, rec: Key | None, key: Hashable, data: Any) -> Pending | None:
        """upsert() of a new key, before start(), under an AsyncScheduler, with a durable store, or while
        the key runs. With a durable store the new row is committed first, then applied: a store that
        fails changes nothing. A shared store's commit is a round trip: what is returned then, for the
        caller to wait for, or await, without the lock (see Pending)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the KeyedScheduler is closed")
            self._check_caller()
            _check_scheduler_open(self._sched)
            if not self._durable:
                # (first: a scheduler without a clock yet, an AsyncScheduler not started, raises and
                # changes nothing)
                wall_now = self._wall_now()
                if rec is None:
                    rec = self._keys.setdefault(key, self._new_record(key, data))
                elif rec.running and self._cancel_on_replace and rec.contexts:
                    for ctx in rec.contexts:
                        ctx.cancelled.set()
                rec.data = data
                rec.generation += 1
                rec.catch_up = None  # (an older generation's catch-up is not this one's)
                self._plan(rec, wall_now)
                return None
            encode_key(key)
            change = self._change(key, self._encode(data), self._wall_now())
            if not self._shared:
                self._changed(change, self._store.put(change.row))
                return None
            seq = self._changing([key])

            def apply(generation: int) -> None:
                if self._applies(key, seq):
                    self._changed(change, generation)

            return Pending([key], seq, self._changer().submit(self._store.put, change.row), apply)

    def _change(self, key: Hashable, encoded: str, wall_now: float) -> Change:
        """A user's change of a key for a durable store: next_run evaluated on what JSON gives back (as
        in every later life), and the row to commit. next_run is user code, and may have changed the
        key: the record is looked up after it."""
        result = self._evaluate(key, Stored(encoded), wall_now)
        rec = self._keys.get(key) or self._gone.get(key)
        if rec is None:
            rec = self._new_record(key, Stored(encoded))
        state, at, last_error = outcome_of(rec, result)
        row = rec.row(encoded, rec.generation + 1, state, at, last_error)
        return Change(rec, encoded, state, at, last_error, result, row)

    def _changed(self, change: Change, generation: int) -> None:
        """A change that the store committed, at `generation` (the store's: one above any generation it
        ever held for the key, or, a shared store, above any other process's): applied."""
        key = change.row.key
        rec = self._keys.get(key)
        if rec is None:  # (new; or removed, or taken over, meanwhile: the commit holds it again)
            rec = self._keys.setdefault(key, self._gone.pop(key, change.rec))
        elif rec.running and self._cancel_on_replace and rec.contexts:
            for ctx in rec.contexts:
                ctx.cancelled.set()
        self._loaded.discard(key)
        if self._shared:
            self._taken(key)
        rec.data = Stored(change.encoded)
        rec.generation = generation
        rec.catch_up = None  # (an older generation's catch-up is not this one's)
        error = change.result if isinstance(change.result, BaseException) else None
        self._apply(rec, change.state, change.at, change.last_error, error)

    # A shared store's user changes are committed by the writer, and applied once committed, without the
    # lock meanwhile: two changes of one key may be waited for by two threads at once. The writer commits
    # them in the order they were made; each is applied only if no later one was applied already.

    def _changing(self, keys: Iterable[Hashable]) -> int:
        """A user's change of `keys` is to be committed: its sequence number (see _applies)."""
        self._seq += 1
        for key in keys:
            entry = self._inflight.get(key)
            if entry is None:
                self._inflight[key] = [1, 0]
            else:
                entry[0] += 1
            if self._shared:
                self._taken(key)  # (what the database said before now does not undo it)
        return self._seq

    def _wait(self, pending: Pending) -> Any:
        """Wait for a change's commit (without the lock, unless a callback holds it), then apply it; if
        it failed, nothing was applied, and the error is raised."""
        try:
            result = pending.future.result()
        except BaseException:
            self._failed(pending)
            raise
        with self._lock:
            applied = pending.apply(result)
        self._raise_held()
        return applied

    async def _await(self, pending: Pending) -> Any:
        """_wait(), awaited on an event loop. A coroutine cancelled meanwhile still applies what the
        store committed (the commit cannot be taken back), then is cancelled."""
        import asyncio

        commit = asyncio.wrap_future(pending.future)
        cancelled: BaseException | None = None
        try:
            try:
                result = await asyncio.shield(commit)
            except asyncio.CancelledError as exc:
                cancelled = exc
                result = await commit
        except BaseException:
            self._failed(pending)
            raise
        with self._lock:
            applied = pending.apply(result)
        if cancelled is not None:
            raise cancelled
        self._raise_held()
        return applied

    def _failed(self, pending: Pending) -> None:
        with self._lock:
            for key in pending.keys:
                self._applies(key, pending.seq, committed=False)

    def _applies(self, key: Hashable, seq: int, committed: bool = True) -> bool:
        """Whether change `seq` of `key`, now committed (or failed), is applied: unless a later change
        of the key was applied already."""
        entry = self._inflight[key]
        entry[0] -= 1
        applies = committed and seq > entry[1]
        if applies:
            entry[1] = seq
        if not entry[0]:
            del self._inflight[key]
        return applies

    def replace_all(self, mapping: Mapping[Hashable, Any]) -> None:
        """Upsert every item of `mapping`, and remove every key that is not in it.

        Raises:
            TypeError: mapping is not a mapping, or one of its keys is not hashable.
            NotStartedError: as upsert(); nothing changed.
        """
        pending = self._replace_all(mapping)
        if pending is not None:  # (a shared store's commit: waited for without the lock)
            self._wait(pending)
        self._raise_held()

    async def areplace_all(self, mapping: Mapping[Hashable, Any]) -> None:
        """replace_all(), for a coroutine: a shared store's commit is awaited (see aupsert())."""
        self._check_caller()
        pending = self._replace_all(mapping)
        if pending is not None:
            await self._await(pending)
        self._raise_held()

    def _replace_all(self, mapping: Mapping[Hashable, Any]) -> Pending | None:
        if not isinstance(mapping, Mapping):
            raise TypeError(f"mapping must be a mapping of key to data, not {type(mapping).__name__}")
        for key in mapping:
            check_key(key)
            if self._durable:
                encode_key(key)
        with self._lock:
            self._check_open()
            self._check_caller()
            _check_scheduler_open(self._sched)
            if not self._durable:
                self._wall_now()  # (a scheduler without a clock yet raises here, before anything is removed)
                # (the internal calls: a callback's BaseException is raised once, at the end, with every
                # key done)
                for key in [k for k in self._keys if k not in mapping]:
                    self._forget(key)
                for key, data in mapping.items():
                    self._upsert(self._keys.get(key), key, data)
                return None
            # Durable: every row computed, then one transaction, then applied.
            wall_now = self._wall_now()
            changes = [self._change(key, self._encode(data), wall_now) for key, data in mapping.items()]
            removed = [k for k in self._keys if k not in mapping]
            rows = [change.row for change in changes]
            if not self._shared:
                self._replaced(changes, removed, self._store.replace(rows, removed))
                return None
            keys = [*mapping, *removed]
            seq = self._changing(keys)
            future = self._changer().submit(self._store.replace, rows, None)
            return Pending(keys, seq, future, lambda gens: self._replaced(changes, removed, gens, seq))

    def _replaced(
        self, changes: list[Change], removed: list[Hashable], generations: list[int], seq: int | None = None
    ) -> None:
        """A replace_all() that the store committed: applied (a shared store's: key by key, see _applies)."""
        for key in removed:
            if (seq is None or self._applies(key, seq)) and key in self._keys:
                self._forget(key)
        for change, generation in zip(changes, generations, strict=True):
            if seq is None or self._applies(change.row.key, seq):
                self._changed(change, generation)

    def remove(self, key: Hashable) -> bool:
        """Forget a key and take back its timer; False (no error) for an unknown key.

        Raises:
            TypeError: the key is not hashable, or (a durable store) not a str or an int. ValueError: a key
                its durable store cannot hold (as upsert() refuses it). RuntimeError: the KeyedScheduler
                is closed (but for a SQLite store that a run going on past close() still holds: a job
                that removes its own key at its end removes it from the file). StoreError: the store
                failed. In each case nothing changed.
        """
        if self._shared:
            return bool(self._wait(self._remove_shared(key)))
        check_key(key)
        if self._durable:
            encode_key(key)
        with self._lock:
            self._check_caller()
            if not (self._durable and self._store_open()):
                self._check_open()
            if key not in self._keys:
                # (not in memory, but maybe in the store: an upsert that raised after its commit)
                return self._durable and bool(self._store.delete(key))
            if self._durable:
                self._store.delete(key)  # committed first: a store that fails changes nothing
            self._forget(key)
            return True

    async def aremove(self, key: Hashable) -> bool:
        """remove(), for a coroutine: a shared store's commit is awaited (see aupsert())."""
        if not self._shared:
            return self.remove(key)
        return bool(await self._await(self._remove_shared(key)))

    def _remove_shared(self, key: Hashable) -> Pending:
        """remove() with a shared store: held here or by another process, the store knows."""
        check_key(key)
        with self._lock:
            self._check_caller()
            self._check_open()
            seq = self._changing([key])

            def apply(existed: bool) -> bool:
                if self._applies(key, seq) and key in self._keys:
                    self._forget(key)
                    return True
                return existed

            return Pending([key], seq, self._changer().submit(self._store.delete, key), apply)

    def _forget(self, key: Hashable, cancel: bool | None = None) -> None:
        """Drop a key from memory and take back its timer; its running runs' ctx.cancelled is set if
        `cancel` (default: cancel_running_on_remove)."""
        rec = self._keys.pop(key)
        self._loaded.discard(key)
        rec.handed = None
        if self._shared:
            self._taken(key)  # (a tombstone: what the database said before now does not bring it back)
        rec.generation += 1
        if rec.generation > self._floor:
            self._floor = rec.generation
        if rec.running:  # (until its runs end: an upsert meanwhile takes the record back, see _new_record)
            self._gone[key] = rec
        rec.catch_up = None
        self._disarm(rec)
        if cancel is None:
            cancel = self._cancel_on_remove
        if rec.running and cancel and rec.contexts:
            for ctx in rec.contexts:
                ctx.cancelled.set()

    def _new_record(self, key: Hashable, data: Any) -> Key:
        """A record for a key not held: the record of its removal if a run of it still goes (it comes
        back with its generation and its runs: a fire of the new data waits for them, as for any upsert
        during a run), else a new one, above every generation dropped."""
        rec = self._gone.pop(key, None)
        if rec is None:
            rec = Key(self, key, data)
            rec.generation = self._floor
        return rec

    def get(self, key: Hashable) -> KeyInfo | None:
        """The key as it stands, or None. TypeError if the key is not hashable."""
        check_key(key)
        with self._lock:
            rec = self._keys.get(key)
            return None if rec is None else rec.info()

    def snapshot(self) -> dict[Hashable, KeyInfo]:
        """Every key as it stands. O(keys); one lock held throughout (a consistent view)."""
        with self._lock:
            return {key: rec.info() for key, rec in self._keys.items()}

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

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the KeyedScheduler is closed")

    # -- computing and arming ---------------------------------------------------------------------------

    def _wall_now(self) -> float:
        return self._engine.wall() if self._engine is not None else self._sched.wall()

    def _checked(self, when: Any) -> float | BaseException | None:
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

    def _encode(self, data: Any) -> str:
        """`data` as the JSON a durable store keeps; TypeError naming data if JSON cannot encode it."""
        if type(data) is Stored:
            return data
        try:
            return json.dumps(data, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"data must be JSON-serializable with a durable store: {exc}") from None

    def _evaluate(self, key: Hashable, data: Any, wall_now: float) -> float | BaseException | None:
        """next_run at the wall time `wall_now`: POSIX seconds, None (disabled), or the error."""
        try:
            when = self._next_run(utc_not_after(wall_now), key, value_of(data))
        except BaseException as exc:
            return self._guarded(exc)
        return self._checked(when)

    def _apply(
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
        engine = self._engine
        if at is None:
            self._disarm(rec)
        elif (
            engine is not None
            and not self._closed
            and (rec.id is None or not engine.move_wall_timer(rec, at))
        ):
            engine.add_wall_timer(rec, at)
        self._set_state(rec, state)
        if error is not None:
            self._call(self._on_invalid, rec.key, value_of(rec.data), error)

    def _plan(self, rec: Key, wall_now: float) -> None:
        """Evaluate a key's next run and arm (or move, or take back) its timer; set its state."""
        self._planned(rec, self._evaluate(rec.key, rec.data, wall_now))

    def _planned(self, rec: Key, result: float | BaseException | None) -> None:
        self._apply(rec, *outcome_of(rec, result), result if isinstance(result, BaseException) else None)

    def _invalid(self, rec: Key, error: BaseException) -> None:
        self._planned(rec, error)

    def _disarm(self, rec: Key) -> None:
        if rec.id is not None and self._engine is not None:
            self._engine.cancel_timer(rec)

    def _set_state(self, rec: Key, state: KeyState) -> None:
        old, rec.state = rec.state, state
        if old is not state:
            self._call(self._on_state_change, rec.key, old, state)

    def _call(self, callback: Callable[..., object] | None, *args: Any) -> None:
        """A user callback, guarded as a job is: an Exception is logged; a BaseException is held and
        raised once the operation it interrupted is complete (see _guarded)."""
        if callback is None:
            return
        try:
            callback(*args)
        except BaseException as exc:
            if isinstance(self._guarded(exc), Exception):
                log_safely(
                    logger,
                    (KeyboardInterrupt, SystemExit),
                    logging.ERROR,
                    "timerwheel: a KeyedScheduler callback raised; ignored",
                    exc_info=exc,
                )

    def _guarded(self, exc: BaseException) -> BaseException:
        """What a user callback raised. A BaseException that is not an Exception (KeyboardInterrupt,
        SystemExit) must not leave a key half-changed (RUNNING for ever, unarmed): it is held, the
        operation goes on to its end, and the operation's entry point raises it then (_raise_held), where
        a job's would go: to the caller of upsert(), out of run_pending() or the asyncio loop, into the
        logs of a scheduler thread. Returns exc."""
        if not isinstance(exc, Exception) and getattr(self._held, "error", None) is None:
            self._held.error = exc
            self._holding = True
        return exc

    def _raise_held(self) -> None:
        """Raise the BaseException a callback raised during this thread's operation, if one did."""
        error = getattr(self._held, "error", None)
        if error is not None:
            self._held.error = None
            raise error

    # -- runs -------------------------------------------------------------------------------------------

    def _fired(self, rec: Key) -> None:
        """A key's timer came due (in drain(), under the driver's serialisation): hand its run over, as a
        one-shot task of the scheduler due at once (it runs in this same drain, where the driver says).
        The fire is the head of the key's catch-up queue if it has one, else its next run."""
        engine = self._engine
        assert engine is not None
        calls = engine.drain_calls
        if rec.last_call == calls:  # fired in this drain() call already (a next_run in the past):
            engine.defer_timer(rec)  # the next pass runs it, never this one again
            return
        rec.last_call = calls
        queue = rec.catch_up
        if queue:  # (it stays at the head until its run begins: a key given away meanwhile keeps it)
            scheduled_for, rerun = queue[0]
        else:
            scheduled_for, rerun = rec.wall, False
        fire = (rec.generation, scheduled_for)
        if rec.handed == fire:
            return  # handed over already, its take not done yet: the take plans the key's next fire
        rec.handed = fire
        engine.schedule_at(
            rec.due, self._job, args=(rec, rec.generation, scheduled_for, rerun), options=self._options
        )

    def _begin(self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> Any:
        """A key's run starts: its data, or STALE if the key was removed, replaced or closed since it
        fired (the run is superseded, and does not run), or if a durable store says the fire was taken.
        With a durable store the fire is committed as started, with the key's row, before the run. A
        shared store's take is a database round trip: it is made without the lock (no other key waits
        for it), by the store's writer (see Writer)."""
        with self._lock:
            start = self._prepare_start(rec, generation, scheduled_for, rerun)
            if start is None:
                return STALE
            if not self._shared:
                return self._take_done(ctx, start, self._take(start))
        taken = self._writer().submit(self._take, start).result()
        with self._lock:
            return self._take_done(ctx, start, taken)

    async def _abegin(
        self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool
    ) -> Any:
        """_begin() on an event loop: a shared store's take is awaited, never waited for on the loop."""
        import asyncio

        with self._lock:
            start = self._prepare_start(rec, generation, scheduled_for, rerun)
            if start is None:
                return STALE
            if not self._shared:
                return self._take_done(ctx, start, self._take(start))
        take = asyncio.wrap_future(self._writer().submit(self._take, start))
        cancelled: BaseException | None = None
        cancels = 0
        while True:  # a cancel (run_timeout, the scheduler closing) waits for the take all the same:
            try:  # the store may have the fire as started, and the key's plan follows from the take
                taken = await asyncio.shield(take)
                break
            except asyncio.CancelledError as exc:
                if take.cancelled():  # (the writer stopped without making it: the key is left as it was)
                    with self._lock:
                        if rec.handed == (generation, scheduled_for):
                            rec.handed = None
                        self._untake(rec, None)
                    raise
                cancelled, cancels = exc, cancels + 1
        with self._lock:
            data = self._take_done(ctx, start, taken)
        if cancelled is None or data is STALE:
            if cancelled is not None:
                raise cancelled
            return data
        if ctx.timed_out:  # the run's timeout passed while its take waited for the store (a backlog of
            # takes, a slow database): the fire is taken, and the job runs all the same, told by
            # ctx.cancelled, as a ThreadedScheduler's job is; a fire is never lost to the wait for its take
            task = asyncio.current_task()
            for _ in range(cancels):
                if task is not None:
                    task.uncancel()
            return data
        # taken, and cancelled by something else before the job began (the scheduler closing under this
        # KeyedScheduler): a run that ended at once, with the cancel as its error (recorded, and the key's
        # next fire planned from it)
        self._end(rec, generation, data, ctx, cancelled, scheduled_for, ended=self._ended())
        self._raise_held()
        raise cancelled

    def _prepare_start(self, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> Start | None:
        """Under the lock: what the start of a fire writes (its key's row), or None if it does not start
        (superseded, waiting for an older generation's run, or the wall clock failing: tried again). The
        run is counted as going from here (rec.running), so that no other fire of the key starts beside
        it while its take is made."""
        start = self._prepare(rec, generation, scheduled_for, rerun)
        if start is None and rec.handed == (generation, scheduled_for):
            rec.handed = None  # (not begun: the fire may be handed over again)
        return start

    def _prepare(self, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> Start | None:
        if self._closed or rec.generation != generation or self._keys.get(rec.key) is not rec:
            return None
        if rec.running and self._reschedule is not Reschedule.BEFORE_RUN:
            # A run of an older generation still goes (the key was upserted meanwhile): this fire waits
            # for its end, so that a key's runs never overlap (_end arms it again).
            keep_first(rec, scheduled_for, rerun)
            return None
        try:
            wall_now = self._wall_now()
        except Exception as exc:  # the fire is not lost: it is tried again after a back-off
            self._clock_failed(rec, scheduled_for, rerun, exc)
            return None
        self._backoff = 0.0
        if wall_now < scheduled_for:  # the wall clock stepped back since the fire came due: never
            keep_first(rec, scheduled_for, rerun)  # before its time (as its timer): armed at it again
            self._apply(rec, rec.state, scheduled_for, rec.last_error)
            return None
        at: float | None
        error: BaseException | None
        queue = rec.catch_up
        rest = queue[1:] if queue and queue[0][0] == scheduled_for else (queue or [])
        if rest:  # more catch-up fires follow this one: the next is the next run
            state, at, last_error, error = KeyState.PENDING, rest[0][0], rec.last_error, None
        elif self._reschedule is Reschedule.BEFORE_RUN:
            # (at the fire's time if the wall clock stepped back behind it: a sound schedule advances)
            result = advancing(
                self._evaluate(rec.key, rec.data, since(rec, wall_now, scheduled_for, rerun)), scheduled_for
            )
            state, at, last_error = outcome_of(rec, result)
            error = result if isinstance(result, BaseException) else None
        else:
            state, at, last_error, error = KeyState.RUNNING, None, rec.last_error, None
        row = None
        if self._durable:
            row = rec.row(
                self._encode(rec.data),
                generation,
                KeyState.RUNNING if state is not KeyState.INVALID else state,
                at,
                last_error,
                latest_started(rec, scheduled_for, rerun),
            )
        rec.running += 1
        retake = rec.retake
        if retake is not None and retake[0] == generation and retake[1] == scheduled_for:
            started_at = retake[2]
        else:
            started_at = micro(wall_now)
        return Start(
            rec,
            generation,
            scheduled_for,
            rerun,
            wall_now,
            started_at,
            rest,
            state,
            at,
            last_error,
            error,
            row,
        )

    def _take(self, start: Start) -> tuple[int | BaseException, float]:
        """Commit a fire as started (a durable store): the attempt it is (1, or more for a rerun), 0 if
        it was taken already (or, a shared store, the key is held elsewhere), or the store's error; and
        the monotonic time the take was asked for (a shared store's lease on the key runs from then)."""
        asked = self._monotonic()
        if start.row is None:
            return 1, asked
        try:
            self._record_unrecorded()
            attempt = self._store.start_fire(
                start.row, micro(start.scheduled_for), start.started_at, start.rerun
            )
        except Exception as exc:
            return exc, asked
        return int(attempt), asked

    def _take_done(self, ctx: JobContext, start: Start, take: tuple[int | BaseException, float]) -> Any:
        """Under the lock, after the take: the run's data, or STALE if it does not run after all.

        A shared store's key is held under a lease: a process that was paused (SIGSTOP, a long GC, a
        laptop lid) since it asked for the take may have lost the key to another process meanwhile, so
        no run starts once the lease may have lapsed, by this process's monotonic clock from the moment
        the take was asked for. The fire is then taken again (a rerun of this process's own unfinished
        fire), which succeeds only while the key is still held here."""
        rec, generation, scheduled_for = start.rec, start.generation, start.scheduled_for
        taken, asked = take
        if rec.handed == (generation, scheduled_for):
            rec.handed = None  # (its take is done: what follows plans the key)
        lapsed = self._lease is not None and self._monotonic() >= asked + self._lease
        if lapsed and isinstance(taken, int) and taken:
            taken = LeaseLapsed(
                f"the lease on key {rec.key!r} may have lapsed between its take and its run (a pause of "
                f"the process longer than the lease, {self._lease} s): taken again before it runs"
            )
        if isinstance(taken, BaseException):
            rec.retake = (generation, scheduled_for, start.started_at)
        elif rec.retake is not None and rec.retake[:2] == (generation, scheduled_for):
            rec.retake = None
        if isinstance(taken, BaseException) or not taken:
            rec.running -= 1
            current = self._keys.get(rec.key) is rec and rec.generation == generation and not self._closed
            if isinstance(taken, BaseException):  # the store failed: the fire is not lost, tried again soon
                if current:  # (a fire of an older generation is superseded: the key is the newer one's)
                    delay = 0.0 if isinstance(taken, LeaseLapsed) else 1.0
                    self._retry(rec, scheduled_for, start.rerun, taken, start.wall_now, delay)
            elif current:
                # taken already (or, a shared store, the key is held elsewhere): the next one
                rec.catch_up = start.rest or None
                if rec.catch_up:
                    self._apply(rec, KeyState.PENDING, rec.catch_up[0][0], rec.last_error)
                else:
                    after = self._evaluate(rec.key, rec.data, max(start.wall_now, scheduled_for))
                    self._planned(rec, advancing(after, scheduled_for))
            self._rearm_waiting(rec)
            self._settle(rec)
            if self._closed:
                self._release_store()
            return STALE
        if rec.generation == generation and self._keys.get(rec.key) is rec:
            # (taken: off the queue. A take of an older generation leaves the key, upserted meanwhile,
            # as the upsert made it: its queue may hold its first fire, waiting for this one to end.)
            rec.catch_up = start.rest or None
            rec.last_scheduled_for = latest_started(rec, scheduled_for, start.rerun)
        ctx.scheduled_for = scheduled_for  # a key's run: the wall-clock time of its fire
        ctx.fence = Fence(generation, micro(scheduled_for), taken)
        if rec.contexts is None:
            rec.contexts = [ctx]
        else:
            rec.contexts.append(ctx)
        if not self._closed and rec.generation == generation and self._keys.get(rec.key) is rec:
            self._apply(rec, start.state, start.at, start.last_error, start.error)
            if rec.state is not KeyState.INVALID:
                self._set_state(rec, KeyState.RUNNING)  # while a run goes (BEFORE_RUN: armed meanwhile)
        if rec.generation != generation or self._keys.get(rec.key) is not rec:
            # A callback just now (on_state_change, on_invalid) removed or replaced the key, or (a shared
            # store) an upsert came while the take was made: superseded before it started.
            self._end(rec, generation, rec.data, ctx, None, scheduled_for, started=False)
            return STALE
        if self._closed:  # (by a callback just now, or while the take was made): the fire is not run,
            self._untake(rec, ctx)  # and not lost: it stays unfinished in the store (see _untake)
            return STALE
        self._counts["started"] += 1
        return value_of(rec.data)

    def _untake(self, rec: Key, ctx: JobContext | None) -> None:
        """A fire taken as the KeyedScheduler closed: it does not run here, and it is not recorded as
        ended, so that it stays unfinished in a durable store, and whoever holds the key next (the next
        life, or the process that takes the key over) runs it again, following `recover`."""
        rec.running -= 1
        contexts = rec.contexts
        if contexts is not None and ctx in contexts:
            contexts.remove(ctx)
            if not contexts:
                rec.contexts = None
        self._rearm_waiting(rec)
        self._settle(rec)
        if self._closed and self._shared and not rec.running and self._store_open():
            self._release({rec.key: rec.generation})  # (the next holder finds its fire unfinished)
        self._release_store()

    def _settle(self, rec: Key) -> None:
        """A run of the key ended (or did not start after all): a removed key's record goes once its last
        run has; whoever waits for the runs to end (close(), aclose()) is told."""
        if not rec.running and self._gone.get(rec.key) is rec:
            del self._gone[rec.key]
        self._idle.notify_all()
        if self._all_done is not None and not self._any_running():
            self._all_done.set()

    def _waited(self, rec: Key) -> bool:
        """Whether a fire of a newer generation waits for the key's runs to end (see _prepare_start),
        and they have: it is to be armed now."""
        return (
            bool(rec.catch_up)
            and rec.id is None
            and not rec.running
            and not self._closed
            and self._keys.get(rec.key) is rec
        )

    def _rearm_waiting(self, rec: Key) -> None:
        """A run of the key did not start after all: a fire that waited for it is armed now."""
        if self._waited(rec):
            self._apply(rec, KeyState.PENDING, rec.catch_up[0][0], rec.last_error)  # type: ignore[index]

    def _clock_failed(self, rec: Key, scheduled_for: float, rerun: bool, error: BaseException) -> None:
        """The wall clock failed as a key's fire was to start: logged, counted, and the fire tried again
        after a back-off (1 ms, doubling to 1 s), as the drivers do; it runs once the clock answers."""
        self._counts["clock_errors"] += 1
        self._backoff = min(max(2 * self._backoff, 0.001), 1.0)
        log_safely(
            logger,
            (KeyboardInterrupt, SystemExit),
            logging.ERROR,
            "timerwheel: the wall clock failed as key %r was to run (%r); retrying in %.3f s",
            rec.key,
            error,
            self._backoff,
            exc_info=error,
        )
        keep_first(rec, scheduled_for, rerun)
        engine = self._engine
        if engine is not None and rec.id is None:
            try:
                now = engine.now()
            except Exception:
                now = rec.due  # (the monotonic clock too: the driver backs off, and sees to it)
            engine.add_timer(rec, now + self._backoff)

    def _wall_or(self, fallback: float) -> float:
        """The wall clock, or (it failed: logged and counted) the latest reading the engine has, but not
        before `fallback`: a run's end is planned from there rather than lost."""
        try:
            return self._wall_now()
        except Exception as exc:
            self._counts["clock_errors"] += 1
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the wall clock failed as a key's run ended (%r); planned from its last reading",
                exc,
                exc_info=exc,
            )
            engine = self._engine
            return max(fallback, engine.last_wall if engine is not None else fallback)

    def _retry(
        self,
        rec: Key,
        scheduled_for: float,
        rerun: bool,
        error: BaseException,
        wall_now: float,
        delay: float = 1.0,
    ) -> None:
        """A fire that the store could not take (it failed, a row lock held it, the lease may have
        lapsed): back at the head of its key's queue, tried again in `delay` s while the others go on.
        Logged once per key and error (DEBUG while the leases are lost), then at DEBUG until it is taken."""
        message = describe(error)
        level = logging.ERROR
        if self._leases_lost or rec.last_error == message:
            level = logging.DEBUG
        elif isinstance(error, LeaseLapsed):
            level = logging.WARNING
        log_safely(
            logger,
            (KeyboardInterrupt, SystemExit),
            level,
            "timerwheel: the %s could not take a fire of key %r (%r); retrying in %.0f s",
            self._store.name,
            rec.key,
            error,
            delay,
            exc_info=error if level == logging.ERROR else None,
        )
        keep_first(rec, scheduled_for, rerun)
        rec.last_error = message
        if self._engine is not None and rec.id is None:
            self._engine.add_wall_timer(rec, wall_now + delay)

    def _end(
        self,
        rec: Key,
        generation: int,
        data: Any,
        ctx: JobContext,
        error: BaseException | None,
        scheduled_for: float,
        started: bool = True,
        ended: float | None = None,
    ) -> None:
        """A run ended at the wall time `ended` (None: now, read under the lock)."""
        with self._lock:
            rec.running -= 1
            contexts = rec.contexts
            if contexts is not None:
                if ctx in contexts:
                    contexts.remove(ctx)
                if not contexts:
                    rec.contexts = None
            if started:
                self._counts["finished"] += 1
                if error is not None:
                    self._counts["failed"] += 1
            wall_now = self._wall_or(scheduled_for) if ended is None else ended
            mine = self._keys.get(rec.key) is rec and rec.generation == generation
            current = mine and not self._closed
            outcome: tuple[KeyState, float | None, str | None] | None = None
            result: Any = None
            # (closed during the run: a durable store still gets the row the key would have had, so that
            # its next life catches up from there; nothing is armed)
            if current or (mine and self._durable and self._store_open()):
                last_error = describe(error) if error is not None else rec.last_error
                if rec.catch_up:
                    outcome = (KeyState.PENDING, rec.catch_up[0][0], last_error)
                elif self._reschedule is Reschedule.AFTER_FINISH:
                    result = advancing(
                        self._evaluate(rec.key, rec.data, since(rec, wall_now, scheduled_for, True)),
                        scheduled_for,
                    )
                    rec.last_error = last_error
                    outcome = outcome_of(rec, result)
                elif self._reschedule is Reschedule.NONE:
                    outcome = (KeyState.DISABLED, None, last_error)
                else:  # BEFORE_RUN: planned already, at its start (armed, or its fire handed over)
                    state = rec.state
                    if state is KeyState.RUNNING and not rec.running:  # (runs may overlap: the last one)
                        state = KeyState.PENDING if rec.next_run_at is not None else KeyState.DISABLED
                    outcome = (state, rec.next_run_at, last_error)
            elif self._waited(rec):  # a fire of the newer generation waited for this run to end: now
                outcome = (KeyState.PENDING, rec.catch_up[0][0], rec.last_error)  # type: ignore[index]
            if self._durable and self._store_open():
                row = None
                if outcome is not None:
                    row = rec.row(self._encode(rec.data), generation, *outcome)
                message = (
                    describe(error)
                    if error is not None
                    else None
                    if started
                    else "superseded before it started"
                )
                fire = FinishedFire(rec.key, generation, micro(scheduled_for), micro(wall_now), message)
                self._write(self._finish, row if mine else None, fire)
            if outcome is not None and not self._closed:
                self._apply(rec, *outcome, result if isinstance(result, BaseException) else None)
            self._settle(rec)
            if self._closed:
                if self._shared and not rec.running and self._store_open():
                    self._release({rec.key: rec.generation})  # (closed: back as soon as its run ended)
                self._release_store()
        if started:
            self._call(self._on_finish, rec.key, data, error)

    def _dropped(self, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> None:
        """A key's run was dropped (the scheduler's backpressure, or its close): the key is not lost, its
        next run is planned afresh (the head of its catch-up queue, if it has one)."""
        with self._lock:
            if rec.handed == (generation, scheduled_for):
                rec.handed = None
            if self._closed or rec.generation != generation or self._keys.get(rec.key) is not rec:
                return
            if rec.id is not None:
                return  # armed meanwhile (an upsert)
            rec.last_error = f"Dropped: the run of {iso(scheduled_for)} was dropped (backpressure)"
            if rerun:  # an interrupted fire to run again: it stays first in line
                keep_first(rec, scheduled_for, rerun)
            elif rec.catch_up and rec.catch_up[0][0] == scheduled_for:  # a dropped catch-up fire: gone
                rec.catch_up = rec.catch_up[1:] or None
            result: Any = None
            if rec.catch_up:
                outcome: tuple[KeyState, float | None, str | None] = (
                    KeyState.PENDING,
                    rec.catch_up[0][0],
                    rec.last_error,
                )
            else:
                result = self._evaluate(rec.key, rec.data, self._wall_or(scheduled_for))
                outcome = outcome_of(rec, result)
            if self._durable:
                row = rec.row(self._encode(rec.data), generation, *outcome)
                # (a store that fails: the key is armed all the same; its row is written at its fire)
                self._write(self._save, [row], [], f"the dropped run of key {rec.key!r}")
            self._apply(rec, *outcome, result if isinstance(result, BaseException) else None)
        self._raise_held()

    def _writer(self) -> Any:
        """The shared store's writer (a Writer, or what the store made: see __init__)."""
        self._check_own()
        writer = self._writer_thread
        assert writer is not None, "only a shared store has a writer"
        return writer

    def _changer(self) -> Any:
        """The shared store's writer of users' changes (upsert, replace_all, remove): a writer of their
        own, on a connection of their own, so that a change that waits for a locked row does not hold up
        the fires; in the order they were made (see _applies)."""
        self._check_own()
        changer = self._changer_thread
        assert changer is not None, "only a shared store has a writer"
        return changer

    def _check_own(self) -> None:
        """StoreError in a child process that inherited this KeyedScheduler through fork (a shared
        store's: its writers are threads of the parent, and its store the parent's)."""
        if self._pid != os.getpid():
            raise StoreError(
                f"this KeyedScheduler and its {self._store.name} were inherited through fork: they belong "
                "to the parent process; make new ones in the child"
            )

    def _store_open(self) -> bool:
        return _user_of(self._store) is self

    def _record_unrecorded(self) -> None:
        """Record the ends of runs that the store failed to record (with the next write, in order). A
        local store's under the lock; a shared store's by the writer."""
        while True:
            with self._unrecorded_lock:
                if not self._unrecorded:
                    return
                fire = self._unrecorded[0]
            try:
                self._store.finish_fire(None, *fire)
            except Exception:
                return  # (still failing: the next write tries again)
            with self._unrecorded_lock:
                self._unrecorded.remove(fire)
                if self._shared:
                    self._recorded_late.add((fire.key, fire.generation, fire.scheduled_for))

    def _run_key(self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> Any:
        """A key's run, as the scheduler's job: begin, run, end. Under an AsyncScheduler, a run that
        returns an awaitable (an async function behind a plain decorator) is awaited: what this returns
        then is a coroutine, which the driver runs as a task, and the run ends when it does."""
        _running.depth = getattr(_running, "depth", 0) + 1  # (a callback of _begin may close: not wait)
        try:
            data = self._begin(ctx, rec, generation, scheduled_for, rerun)
        except BaseException:
            _running.depth -= 1
            raise
        if data is STALE:
            _running.depth -= 1
            self._raise_held()
            return None
        error: BaseException | None = None
        awaiting: Any = None
        try:
            result = self._run(ctx, rec.key, data) if self._context else self._run(rec.key, data)
            if result is not None and inspect.isawaitable(result):
                if self._async:
                    awaiting = result
                else:  # nothing here would ever run its body: that is a failure, not a success
                    _discard(result)
                    error = TypeError(
                        f"run returned {type(result).__name__} {result!r}, which only an AsyncScheduler "
                        "awaits: its body never ran"
                    )
        except BaseException as exc:
            error = exc
        finally:
            _running.depth -= 1
        if awaiting is not None:
            return self._awaited(awaiting, ctx, rec, generation, data, scheduled_for)
        self._end(rec, generation, data, ctx, error, scheduled_for, ended=self._ended())
        self._raise_held()
        if error is not None:
            raise error
        return None

    async def _awaited(
        self, awaitable: Any, ctx: JobContext, rec: Key, generation: int, data: Any, scheduled_for: float
    ) -> None:
        """The rest of a run whose `run` returned an awaitable: await it, then end the run."""
        _in_async_run.set(True)
        error: BaseException | None = None
        try:
            await awaitable
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._end(rec, generation, data, ctx, error, scheduled_for, ended=self._ended())
            self._raise_held()

    async def _run_async(
        self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool
    ) -> None:
        _in_async_run.set(True)  # (this task's own context: aclose() from it does not wait for itself)
        data = await self._abegin(ctx, rec, generation, scheduled_for, rerun)
        if data is STALE:
            self._raise_held()
            return
        error: BaseException | None = None
        try:
            result = self._run(ctx, rec.key, data) if self._context else self._run(rec.key, data)
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._end(rec, generation, data, ctx, error, scheduled_for, ended=self._ended())
            self._raise_held()

    def _ended(self) -> float | None:
        """The wall time a run ended, read as it returns: before _end() waits for the lock, which another
        thread may hold for a database round trip (AFTER_FINISH counts from the end, not from that wait).
        None if the clock fails: _end() reads it again, and says so."""
        try:
            return self._wall_now()
        except Exception:
            return None

    # -- a durable store: loading, recovery and catch-up at start ------------------------------------------

    def _load(self) -> None:
        """Take the stored keys into memory (not armed: start() decides), and the unfinished fires."""
        rows, fires = self._store.load()
        for row in rows:
            try:
                rec = self._record(row)
            except (TypeError, ValueError) as exc:
                raise StoreError(
                    f"the {self._store.name} has a row that this timerwheel cannot read ({exc}): {row!r}"
                ) from None
            self._keys[row.key] = rec
            self._loaded.add(row.key)
        for fire in fires:
            self._unfinished.setdefault(fire.key, []).append(fire)

    def _record(self, row: StoredKey, rec: Key | None = None) -> Key:
        """A key's record as its row says (a new one, or `rec` filled in)."""
        if rec is None:
            rec = Key(self, row.key, Stored(row.data))
        else:
            rec.data = Stored(row.data)
        rec.generation = row.generation
        rec.state = KeyState(row.state)
        rec.next_run_at = seconds_of(row.next_run_at)
        rec.last_scheduled_for = seconds_of(row.last_scheduled_for)
        rec.last_error = row.last_error
        return rec

    def _decide_all(
        self, recs: list[Key], wall_now: float
    ) -> tuple[list[tuple[Key, int, Plan]], list[StoredKey], list[FinishedFire]]:
        """Stored keys (loaded at start, or claimed from a shared store): decide what each does about its
        interrupted fires and the fires it missed (_decide), and the rows and finished fires that record
        it (for the caller to write in one transaction). Nothing is applied yet (see _apply_all)."""
        plans = [
            (
                rec,
                rec.generation,
                decide(rec, self._unfinished.get(rec.key, ()), wall_now, self._policy, self._evaluate),
            )
            for rec in recs
        ]
        # (next_run is user code: it may have removed or replaced a key meanwhile; that one is left be)
        plans = [p for p in plans if self._keys.get(p[0].key) is p[0] and p[0].generation == p[1]]
        rows = [
            rec.row(self._encode(rec.data), generation, plan.state, plan.at, plan.last_error)
            for rec, generation, plan in plans
            if plan.queue
            or (plan.state, plan.at, plan.last_error) != (rec.state, rec.next_run_at, rec.last_error)
        ]
        finished = [f for _, _, plan in plans for f in plan.finished]
        self._unfinished.clear()
        return plans, rows, finished

    def _apply_all(self, plans: list[tuple[Key, int, Plan]]) -> None:
        """Apply what _decide_all decided and wrote: arm the keys, then tell on_missed."""
        summary = [0, 0]  # keys, fires
        for rec, generation, plan in plans:
            if self._closed or self._keys.get(rec.key) is not rec or rec.generation != generation:
                continue  # (a callback of an earlier key removed or replaced it)
            self._counts["recovered"] += plan.recovered
            self._counts["abandoned"] += len(plan.abandoned)
            self._counts["caught_up"] += plan.caught_up
            for message in plan.abandoned:
                logger.warning("timerwheel: key %r: %s", rec.key, message)
            rec.catch_up = plan.queue or None
            self._apply(rec, plan.state, plan.at, plan.last_error, plan.error)
            if plan.skipped:
                count = len(plan.skipped)
                self._counts["missed"] += count
                summary[0] += 1
                summary[1] += count
        if summary[0]:
            logger.warning(
                "timerwheel: %d key(s) of the %s missed %d fire(s) while %s, not run "
                "(catch_up=%s, max_catch_up=%d, misfire_grace=%r): see on_missed and stats()",
                summary[0],
                self._store.name,
                summary[1],
                "no process held them" if self._shared else "the process was down",
                self._catch_up.name,
                self._max_catch_up,
                self._grace,
            )
        for rec, _, plan in plans:  # (after every key is armed: a callback that changes keys is final)
            if plan.skipped:
                self._report_missed(rec, plan.skipped, plan.beyond)

    # -- a shared store (PostgresStore): its threads hand keys over --------------------------------------
    #
    # The store's keeper thread claims keys and renews their leases; its listener thread hears of the
    # other processes' changes. What they find is applied here, under the lock (a ThreadedScheduler) or
    # on the loop (an AsyncScheduler). A stamp per key says when it was taken here: what the database
    # said before that instant does not undo it.

    def _taken(self, key: Hashable) -> None:
        self._stamp += 1
        self._stamps[key] = self._stamp

    def _shared_stamp(self) -> int:
        """The stamp now (read by the store before it asks the database)."""
        return self._stamp

    def _fresh(self, key: Hashable, stamp: int) -> bool:
        """Whether this process changed `key` since `stamp`, or is committing a change of it now: what the
        database said as of `stamp` does not decide about it."""
        return self._stamps.get(key, 0) > stamp or key in self._inflight

    def _post(self, work: Callable[[], None], when_closed: Callable[[], None] | None = None) -> None:
        """Run `work` where the keys may be touched, from a store's thread (`when_closed` instead, if the
        KeyedScheduler is closed by then)."""

        def guarded() -> None:
            try:
                with self._lock:
                    if not self._closed:
                        work()
                    elif when_closed is not None and self._store_open():
                        when_closed()
            except Exception as exc:
                log_safely(
                    logger,
                    (KeyboardInterrupt, SystemExit),
                    logging.ERROR,
                    "timerwheel: applying what the %s found failed; it is tried again at its next round",
                    self._store.name,
                    exc_info=exc,
                )
            held = getattr(self._held, "error", None)
            if held is not None:  # a callback's KeyboardInterrupt or SystemExit, now that the work is done:
                self._held.error = None  # through the event loop, as its own callbacks' go; logged on our
                if self._async:  # thread, which never dies
                    raise held
                log_safely(
                    logger,
                    (),
                    logging.ERROR,
                    "timerwheel: a KeyedScheduler callback raised %r as the %s's keys were applied",
                    held,
                    self._store.name,
                    exc_info=held,
                )

        if self._async:
            from .._drivers.asyncio import loop_of

            with contextlib.suppress(RuntimeError):  # a closed loop: so is this KeyedScheduler, or soon
                loop_of(self._sched).call_soon_threadsafe(guarded)
            return
        # A ThreadedScheduler: a thread of ours applies it, in order, so that the store's threads never
        # wait for the scheduler's lock (a driver that waits for a free worker holds it: the leases would
        # lapse meanwhile).
        if self._applier is None:
            self._applier = queue.SimpleQueue()
            threading.Thread(
                target=self._apply_posted, args=(self._applier,), name="timerwheel-keyed-applier", daemon=True
            ).start()
        self._applier.put(guarded)

    def _apply_posted(self, posted: queue.SimpleQueue[Callable[[], None]]) -> None:
        stop = self._store_closing
        while True:
            try:
                guarded = posted.get(timeout=0.1)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            while not self._lock.acquire(timeout=0.1):  # (close() joins the store's threads, holding it)
                if stop.is_set():
                    return
            try:
                guarded()
            finally:
                self._lock.release()

    def _shared_adopt(self, rows: list[StoredKey], fires: list[StoredFire], stamp: int) -> None:
        """Keys the store claimed for this process (rows read as of `stamp`): recovered, caught up and
        armed here. A key upserted, removed or dropped here since is left as it is now."""

        def work() -> None:
            recs = []
            with self._unrecorded_lock:
                unrecorded = {(f.key, f.generation, f.scheduled_for) for f in self._unrecorded}
                unrecorded |= self._recorded_late  # (recorded since the claim read them: they did end)
                self._recorded_late.clear()
            for row in rows:
                if self._stamps.get(row.key, 0) > stamp:
                    continue
                old = self._keys.get(row.key)
                if old is not None:
                    if old.generation == row.generation:
                        self._taken(row.key)
                        continue
                    self._forget(row.key, cancel=self._cancel_on_replace)
                # (a record whose run still goes here, the key removed or replaced meanwhile, comes back:
                # its new fires wait for that run, as for any upsert during a run)
                rec = self._keys[row.key] = self._record(row, self._gone.pop(row.key, None))
                self._taken(row.key)
                recs.append(rec)
            taken = {rec.key for rec in recs}
            for fire in fires:  # (a run whose end this process failed to record did end: not run again)
                if fire.key in taken and (fire.key, fire.generation, fire.scheduled_for) not in unrecorded:
                    self._unfinished.setdefault(fire.key, []).append(fire)
            try:
                plans, decided, finished = self._decide_all(recs, self._wall_now())
            except BaseException:  # not taken here after all: the next round gives them back
                self._unfinished.clear()
                for rec in recs:
                    if self._keys.get(rec.key) is rec:
                        del self._keys[rec.key]
                        if rec.running:
                            self._gone[rec.key] = rec
                raise
            if decided or finished:  # (written before any take of these keys: the writer keeps the order)
                self._write(self._save, decided, finished, f"what {len(recs)} claimed key(s) do")
            self._apply_all(plans)

        def closed() -> None:  # (claimed as this KeyedScheduler closed: back to the others)
            self._release({row.key: row.generation for row in rows})

        self._post(work, closed)

    def _shared_reconcile(self, held: dict[Hashable, int], stamp: int) -> None:
        """What the database says this process holds (key: generation), as of `stamp`: a key held here
        and not there was taken over (this process's lease lapsed): it is dropped; a key held there and
        not here is given back, for a claim to take it."""

        def work() -> None:
            self._leases_lost = False
            stamps = self._stamps
            for key in [k for k, at in stamps.items() if at <= stamp and k not in self._keys]:
                del stamps[key]  # (tombstones older than this round: no earlier claim is pending now)
            for key in [k for k in self._keys if not self._fresh(k, stamp)]:
                if held.get(key) != self._keys[key].generation:
                    logger.warning("timerwheel: key %r was taken over by another process", key)
                    self._forget(key, cancel=False)
            # (a key whose change this process is committing, or committed and has not applied yet, is
            # held there and not yet here: it is not given back)
            orphans = [k for k in held if k not in self._keys and not self._fresh(k, stamp)]
            if orphans:
                self._release({k: held[k] for k in orphans})

        self._post(work)

    def _shared_changed(
        self, changes: dict[Hashable, int | None], stamp: int, removed: set[Hashable]
    ) -> None:
        """Another process upserted or removed keys: the generation this process holds each at (None: it
        holds it no more), as of `stamp`."""

        def work() -> None:
            for key, generation in changes.items():
                rec = self._keys.get(key)
                if rec is None or self._stamps.get(key, 0) > stamp or generation == rec.generation:
                    continue
                gone = key in removed
                self._forget(key, cancel=self._cancel_on_remove if gone else self._cancel_on_replace)

        self._post(work)

    def _shared_flush(self) -> None:
        """Record the ends of runs the store failed to record (before the keeper claims keys: a claimed
        key's unfinished fire would otherwise be run again)."""
        self._write(self._record_unrecorded)

    def _shared_shed(self, count: int, stamp: int) -> None:
        """This process holds `count` keys more than its share, as counted from `stamp` on: give back that
        many of those not running, the latest due first. A key changed here since `stamp` (see _fresh) is
        not given back, and is taken off the count (the store may have counted the keys before its
        commit): an upsert is not handed to another process by the keeper's round that it overlapped."""

        def work() -> None:
            with self._unrecorded_lock:
                pending = {f.key for f in self._unrecorded}  # (their ends are not in the database yet)
            recent = sum(1 for key in self._keys.keys() | self._inflight.keys() if self._fresh(key, stamp))
            idle = [
                rec
                for rec in self._keys.values()
                if not rec.running
                and not rec.catch_up
                and rec.key not in pending
                and not self._fresh(rec.key, stamp)
            ]
            idle.sort(key=lambda rec: -math.inf if rec.next_run_at is None else -rec.next_run_at)
            keys = {rec.key: rec.generation for rec in idle[: max(0, count - recent)]}
            for key in keys:
                self._forget(key, cancel=False)
            self._release(keys)

        self._post(work)

    def _release(self, keys: dict[Hashable, int]) -> None:
        """Give keys back to the store, each at its generation: one that a change of this process took
        again meanwhile, at a newer generation, stays held (by the writer, see _release_now)."""
        self._write(self._release_now, keys)

    def _shared_lost(self) -> None:
        """The store could not renew its leases for a whole lease. Nothing fires here meanwhile anyway (a
        fire is taken in the database); the keys stay, and the next renewal keeps those nobody took over
        (reconcile drops the others). Until then the retries of their fires are logged at DEBUG only."""
        self._leases_lost = True

    def _report_missed(self, rec: Key, skipped: list[float], beyond: bool) -> None:
        count = len(skipped)
        logger.debug(
            "timerwheel: key %r missed %s%d fire(s) while %s, from %s to %s: not run",
            rec.key,
            "at least " if beyond else "",
            count,
            "no process held it" if self._shared else "the process was down",
            iso(skipped[0]),
            iso(skipped[-1]),
        )
        self._call(
            self._on_missed,
            rec.key,
            value_of(rec.data),
            count,
            from_posix(skipped[0], UTC),
            from_posix(skipped[-1], UTC),
        )


# The KeyedScheduler that uses each durable store (one at a time), by the store's id: the entry goes with
# the KeyedScheduler (closed, or collected), and counts only while that KeyedScheduler's store is this one
# (an id is reused once its object is gone). Nothing is written on the store itself (a store of one's own
# may have __slots__).
_IN_USE: dict[int, weakref.ref[KeyedScheduler]] = {}


def _use(store: KeyStore, keyed: KeyedScheduler) -> None:
    key = id(store)

    def gone(ref: weakref.ref[KeyedScheduler]) -> None:
        if _IN_USE.get(key) is ref:
            del _IN_USE[key]

    _IN_USE[key] = weakref.ref(keyed, gone)


def _user_of(store: KeyStore) -> KeyedScheduler | None:
    """The KeyedScheduler that uses `store`, if any."""
    ref = _IN_USE.get(id(store))
    keyed = None if ref is None else ref()
    return keyed if keyed is not None and keyed._store is store else None


#: Seconds the interpreter's exit waits, at most, for the runs that went on past close() to end and for
#: their ends to be recorded (a run that does not end by then is cut: its fire stays unfinished, and the
#: next start follows `recover`).
EXIT_GRACE = 10.0
_at_exit: weakref.WeakSet[KeyedScheduler] = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    deadline = time.monotonic() + EXIT_GRACE
    for keyed in list(_at_exit):
        keyed._drain(deadline)


_running = threading.local()  # how deep this thread is in a KeyedScheduler run (close() from a run)
_in_async_run: contextvars.ContextVar[bool] = contextvars.ContextVar("timerwheel_in_keyed_run", default=False)


def _discard(awaitable: Any) -> None:
    """An awaitable that will never be awaited: a coroutine is closed (no "never awaited" warning)."""
    close = getattr(awaitable, "close", None)
    if inspect.iscoroutine(awaitable) and close is not None:
        close()


def _check_scheduler_open(scheduler: Any) -> None:
    """ClosedError if `scheduler` is a driver that was closed: nothing would ever run on it."""
    if isinstance(scheduler, DriverBase) and lifecycle_of(scheduler) is _CLOSED:
        raise ClosedError(f"the scheduler is closed: {scheduler!r} runs nothing any more")


_CLOSED = Lifecycle.CLOSED


class _Holder:
    """The KeyedScheduler as its shared store sees it (the SharedHolder protocol): each call goes to its
    _shared_* method."""

    __slots__ = ("_keyed",)

    def __init__(self, keyed: KeyedScheduler) -> None:
        self._keyed = keyed

    def stamp(self) -> int:
        return self._keyed._shared_stamp()

    def adopt(self, rows: list[StoredKey], fires: list[StoredFire], stamp: int) -> None:
        self._keyed._shared_adopt(rows, fires, stamp)

    def reconcile(self, held: dict[Hashable, int], stamp: int) -> None:
        self._keyed._shared_reconcile(held, stamp)

    def changed(self, changes: dict[Hashable, int | None], stamp: int, removed: set[Hashable]) -> None:
        self._keyed._shared_changed(changes, stamp, removed)

    def flush(self) -> None:
        self._keyed._shared_flush()

    def shed(self, count: int, stamp: int) -> None:
        self._keyed._shared_shed(count, stamp)

    def lost(self) -> None:
        self._keyed._shared_lost()
