"""KeyedScheduler: jobs managed by business key ("daily-report", "tenant-42-sync"), each with a next run
that one function computes, on any of the three schedulers.

next_run(now, key, data) is the only place that computes a time; everything else is bookkeeping. Each key
has at most one armed timer, a calendar task of the scheduler (a wall-clock due: see
Scheduler.schedule_wall); upserting a key moves that timer in O(1). Generations fence the stale: upsert,
replace and remove bump a key's generation, and a fire or a completion of an older generation changes
nothing of the newer one (on_finish still hears of it).
"""

from __future__ import annotations

import enum
import inspect
import logging
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from datetime import UTC, datetime, timezone
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from ._scheduler import JobContext, Scheduler, WallTimer, log_safely
from ._types import RunOptions
from ._validate import boolean, callable_or_none, function, member, seconds

__all__ = ["KeyInfo", "KeyState", "KeyedScheduler", "Reschedule"]

logger = logging.getLogger("timerwheel")


class KeyState(enum.Enum):
    """Where a key stands: PENDING (armed for next_run_at), RUNNING (a run of it is going), DISABLED
    (next_run gave None, Reschedule.NONE after a run, or the scheduler closed), INVALID (next_run raised or
    gave something that is not an aware datetime; see last_error)."""

    PENDING = "pending"
    RUNNING = "running"
    DISABLED = "disabled"
    INVALID = "invalid"


class Reschedule(enum.Enum):
    """When a key's next run is computed: AFTER_FINISH (when a run finishes: runs never overlap),
    BEFORE_RUN (when a run starts: a fixed cadence, runs may overlap), NONE (never: after a run the key is
    DISABLED until it is upserted again)."""

    AFTER_FINISH = "after_finish"
    BEFORE_RUN = "before_run"
    NONE = "none"


class KeyInfo(NamedTuple):
    """A key as it stands, from get() and snapshot() (a named tuple: cheap to make by the million).

    Attributes:
        key: the key.
        data: its data, as last upserted.
        state: its KeyState.
        next_run_at: when it runs next (an aware UTC datetime), or None.
        running: whether a run of it is going (of this generation or an older one).
        last_error: the most recent error of next_run or of a run ("Type: message"), or None.
        generation: bumped by every upsert, replace and remove.
    """

    key: Hashable
    data: Any
    state: KeyState
    next_run_at: datetime | None
    running: bool
    last_error: str | None
    generation: int


_new_info = tuple.__new__  # KeyInfo's own __new__, without its Python-level call


class _Key(WallTimer):
    """A key's record, and its one timer: a WallTimer of the engine armed at its next run (`wall`)."""

    __slots__ = (
        "contexts",
        "data",
        "generation",
        "key",
        "last_error",
        "next_run_at",
        "owner",
        "running",
        "state",
    )

    def __init__(self, owner: KeyedScheduler, key: Hashable, data: Any) -> None:
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
        self.last_error: str | None = None
        self.contexts: list[JobContext] | None = None  # of its runs going on (a list only while some are)

    def fire(self) -> None:
        """Its next run came (drain() calls it): hand the run to the scheduler."""
        self.owner._fired(self)

    def info(self) -> KeyInfo:
        at = self.next_run_at
        return _new_info(
            KeyInfo,
            (
                self.key,
                self.data,
                self.state,
                None if at is None else _from_posix(at, UTC),
                self.running > 0,
                self.last_error,
                self.generation,
            ),
        )


_from_posix = datetime.fromtimestamp
_ALWAYS_AWARE = (timezone, ZoneInfo)  # tzinfos whose utcoffset() is never None: timestamp() is exact


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


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
    ) -> None:
        from ._asyncio import AsyncScheduler
        from ._threaded import ThreadedScheduler

        if not isinstance(scheduler, (Scheduler, ThreadedScheduler, AsyncScheduler)):
            raise TypeError(
                "scheduler must be a Scheduler, ThreadedScheduler or AsyncScheduler, "
                f"not {type(scheduler).__name__}"
            )
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
            if run_timeout < 0:
                raise ValueError(f"run_timeout must be >= 0, got {run_timeout!r}")
        for name, callback in (
            ("on_state_change", on_state_change),
            ("on_finish", on_finish),
            ("on_invalid", on_invalid),
        ):
            callable_or_none(callback, name)
        self._sched: Any = scheduler
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
        coroutine = self._async and (
            inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(type(run).__call__)
        )
        self._job = self._run_async if coroutine else self._run_key
        # Every run gets a context (cancellation on remove and replace, the timeout), whatever `context`.
        self._options = RunOptions(context=True, timeout=run_timeout or None, coroutine=coroutine)
        self._keys: dict[Hashable, _Key] = {}
        # One lock: a ThreadedScheduler's own (the engine is touched under it), else one of ours (a run
        # on a worker thread reports under it; callbacks may call back in).
        self._lock: Any = scheduler._lock if isinstance(scheduler, ThreadedScheduler) else threading.RLock()
        self._thread_lock = self._lock if isinstance(scheduler, ThreadedScheduler) else None
        self._wall: Callable[[], float] = scheduler.wall  # until start(): then the engine's wall clock
        self._idle = threading.Condition(self._lock)  # close() waits on it for the running runs
        self._engine: Scheduler | None = None  # once started
        self._started = False
        self._closed = False
        self._owns_scheduler = False
        self._all_done: Any = None  # aclose() waits on it (an asyncio.Event) for the running runs

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._started else "new"
        return f"<KeyedScheduler {state} keys={len(self._keys)} on {self._sched!r}>"

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start: evaluate next_run again for every key and arm it. Starts the scheduler if it is new.

        Raises:
            RuntimeError: started already, or closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the KeyedScheduler is closed")
            if self._started:
                raise RuntimeError("the KeyedScheduler is started already")
            if self._sched_is_new():
                self._sched.start()
                self._owns_scheduler = True
            self._check_caller()
            engine = self._sched if isinstance(self._sched, Scheduler) else self._sched._engine
            self._engine = engine
            self._wall = engine._cal.clock
            self._started = True
            engine.add_calendar(self._keys.values())  # a step of the wall clock moves the keys' timers
            wall_now = engine.wall()
            for rec in list(self._keys.values()):
                self._plan(rec, wall_now)

    def close(self) -> None:
        """Close: every key becomes DISABLED (next_run_at None), their timers are taken back; with
        wait_running_on_close, wait for the running runs. Closes the scheduler if start() started it.
        Under an AsyncScheduler, use `await aclose()`."""
        if self._async:
            raise RuntimeError("under an AsyncScheduler, use `await keyed.aclose()`")
        self._shut()
        if self._wait_on_close and not self._in_a_run():
            with self._lock:
                while any(rec.running for rec in self._keys.values()):
                    self._idle.wait()
        if self._owns_scheduler:
            self._sched.close()

    async def aclose(self) -> None:
        """close(), under an AsyncScheduler: awaits the running runs with wait_running_on_close."""
        import asyncio

        self._shut()
        if self._wait_on_close:
            while any(rec.running for rec in self._keys.values()):
                self._all_done = asyncio.Event()
                await self._all_done.wait()
        if self._owns_scheduler:
            await self._sched.aclose()

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
            for rec in self._keys.values():
                self._disarm(rec)
                rec.next_run_at = None
                self._set_state(rec, KeyState.DISABLED)
            if self._engine is not None:
                self._engine.remove_calendar(self._keys.values())

    def _sched_is_new(self) -> bool:
        from ._driver import DriverBase, Lifecycle

        return isinstance(self._sched, DriverBase) and self._sched._state is Lifecycle.NEW

    def _check_caller(self) -> None:
        if self._async:
            self._sched._check_caller()  # an AsyncScheduler is touched on its loop's thread only

    def _in_a_run(self) -> bool:
        return bool(getattr(_running, "depth", 0))

    # -- keys -----------------------------------------------------------------------------------------

    def upsert(self, key: Hashable, data: Any = None) -> None:
        """Add a key, or replace its data (a new generation), and (re)compute its next run. A known key's
        armed timer is moved, not removed and added. A next_run that fails makes the key INVALID.

        Raises:
            TypeError: the key is not hashable. RuntimeError: the KeyedScheduler is closed.
        """
        lock = self._thread_lock  # a ThreadedScheduler's; None for the others, which are single-threaded
        if lock is not None:
            lock.acquire()
        try:
            try:
                rec = self._keys.get(key)
            except TypeError:
                raise TypeError(f"key must be hashable, not {type(key).__name__}") from None
            engine = self._engine
            if engine is None or self._closed or self._async or (rec is not None and rec.running):
                self._upsert(rec, key, data)
                return
            # The common cases, inline: a key of a started scheduler, its timer added or moved in place.
            if rec is None:
                rec = self._keys[key] = _Key(self, key, data)
            else:
                rec.data = data
            rec.generation += 1
            try:
                when = self._next_run(_from_posix(self._wall(), UTC), key, data)
            except Exception as exc:
                self._invalid(rec, exc)
                return
            if type(when) is datetime and type(when.tzinfo) in _ALWAYS_AWARE:
                at = when.timestamp()
                state = rec.state
                if state is KeyState.PENDING:
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

    def _upsert(self, rec: _Key | None, key: Hashable, data: Any) -> None:
        """upsert() of a new key, before start(), under an AsyncScheduler, or while the key runs."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the KeyedScheduler is closed")
            self._check_caller()
            if rec is None:
                rec = self._keys[key] = _Key(self, key, data)
            else:
                rec.data = data
                if rec.running and self._cancel_on_replace and rec.contexts:
                    for ctx in rec.contexts:
                        ctx.cancelled.set()
            rec.generation += 1
            self._plan(rec, self._wall_now())

    def replace_all(self, mapping: Mapping[Hashable, Any]) -> None:
        """Upsert every item of `mapping`, and remove every key that is not in it.

        Raises:
            TypeError: mapping is not a mapping, or one of its keys is not hashable.
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(f"mapping must be a mapping of key to data, not {type(mapping).__name__}")
        for key in mapping:
            _check_key(key)
        with self._lock:
            self._check_open()
            for key in [k for k in self._keys if k not in mapping]:
                self.remove(key)
            for key, data in mapping.items():
                self.upsert(key, data)

    def remove(self, key: Hashable) -> bool:
        """Forget a key and take back its timer; False (no error) for an unknown key.

        Raises:
            TypeError: the key is not hashable.
        """
        _check_key(key)
        with self._lock:
            self._check_caller()
            rec = self._keys.pop(key, None)
            if rec is None:
                return False
            rec.generation += 1
            self._disarm(rec)
            if rec.running and self._cancel_on_remove and rec.contexts:
                for ctx in rec.contexts:
                    ctx.cancelled.set()
            return True

    def get(self, key: Hashable) -> KeyInfo | None:
        """The key as it stands, or None. TypeError if the key is not hashable."""
        _check_key(key)
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
        return when.timestamp()

    def _plan(self, rec: _Key, wall_now: float) -> None:
        """Evaluate a key's next run and arm (or move, or take back) its timer; set its state."""
        try:
            when = self._next_run(_from_posix(wall_now, UTC), rec.key, rec.data)
        except Exception as exc:
            self._invalid(rec, exc)
            return
        self._planned(rec, self._checked(when))

    def _planned(self, rec: _Key, result: float | BaseException | None) -> None:
        if isinstance(result, BaseException):
            self._invalid(rec, result)
            return
        if rec.state is KeyState.INVALID:
            rec.last_error = None
        rec.next_run_at = result
        if result is None:
            self._disarm(rec)
            self._set_state(rec, KeyState.DISABLED)
            return
        engine = self._engine
        if (
            engine is not None
            and not self._closed
            and (rec.id is None or not engine.move_wall_timer(rec, result))
        ):
            engine.add_wall_timer(rec, result)
        self._set_state(rec, KeyState.PENDING)

    def _invalid(self, rec: _Key, error: BaseException) -> None:
        self._disarm(rec)
        rec.next_run_at = None
        rec.last_error = _describe(error)
        self._set_state(rec, KeyState.INVALID)
        self._call(self._on_invalid, rec.key, rec.data, error)

    def _disarm(self, rec: _Key) -> None:
        if rec.id is not None and self._engine is not None:
            self._engine.cancel_timer(rec)

    def _set_state(self, rec: _Key, state: KeyState) -> None:
        old, rec.state = rec.state, state
        if old is not state:
            self._call(self._on_state_change, rec.key, old, state)

    def _call(self, callback: Callable[..., object] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception as exc:
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: a KeyedScheduler callback raised; ignored",
                exc_info=exc,
            )

    # -- runs -------------------------------------------------------------------------------------------

    def _fired(self, rec: _Key) -> None:
        """A key's timer came due (in drain(), under the driver's serialisation): hand its run over, as a
        one-shot task of the scheduler due at once (it runs in this same drain, where the driver says)."""
        engine = self._engine
        assert engine is not None
        engine.schedule_at(rec.due, self._job, args=(rec, rec.generation), options=self._options)

    def _begin(self, ctx: JobContext, rec: _Key, generation: int) -> Any:
        """A key's run starts: its data, or _STALE if the key was removed, replaced or closed since it
        fired (the run is superseded, and does not run)."""
        with self._lock:
            if self._closed or rec.generation != generation or self._keys.get(rec.key) is not rec:
                return _STALE
            rec.running += 1
            if rec.contexts is None:
                rec.contexts = [ctx]
            else:
                rec.contexts.append(ctx)
            if self._reschedule is Reschedule.BEFORE_RUN:
                self._plan(rec, self._wall_now())
                if rec.state is KeyState.PENDING:
                    self._set_state(rec, KeyState.RUNNING)
            else:
                rec.next_run_at = None
                self._set_state(rec, KeyState.RUNNING)
            return rec.data

    def _end(
        self, rec: _Key, generation: int, data: Any, ctx: JobContext, error: BaseException | None
    ) -> None:
        with self._lock:
            rec.running -= 1
            contexts = rec.contexts
            if contexts is not None:
                if ctx in contexts:
                    contexts.remove(ctx)
                if not contexts:
                    rec.contexts = None
            current = self._keys.get(rec.key) is rec and rec.generation == generation and not self._closed
            if current:
                if error is not None:
                    rec.last_error = _describe(error)
                if self._reschedule is Reschedule.AFTER_FINISH:
                    self._plan(rec, self._wall_now())
                elif self._reschedule is Reschedule.NONE:
                    rec.next_run_at = None
                    self._set_state(rec, KeyState.DISABLED)
                elif rec.state is KeyState.RUNNING:
                    self._set_state(rec, KeyState.PENDING if rec.id is not None else KeyState.DISABLED)
            self._idle.notify_all()
            if self._all_done is not None and not any(r.running for r in self._keys.values()):
                self._all_done.set()
        self._call(self._on_finish, rec.key, data, error)

    def _run_key(self, ctx: JobContext, rec: _Key, generation: int) -> None:
        data = self._begin(ctx, rec, generation)
        if data is _STALE:
            return
        error: BaseException | None = None
        _running.depth = getattr(_running, "depth", 0) + 1
        try:
            if self._context:
                self._run(ctx, rec.key, data)
            else:
                self._run(rec.key, data)
        except BaseException as exc:
            error = exc
            raise
        finally:
            _running.depth -= 1
            self._end(rec, generation, data, ctx, error)

    async def _run_async(self, ctx: JobContext, rec: _Key, generation: int) -> None:
        data = self._begin(ctx, rec, generation)
        if data is _STALE:
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
            self._end(rec, generation, data, ctx, error)


_STALE = object()  # what _begin() returns for a run that was superseded
_running = threading.local()  # how deep this thread is in a KeyedScheduler run (close() from a run)


def _check_key(key: Any) -> None:
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable, not {type(key).__name__}") from None
