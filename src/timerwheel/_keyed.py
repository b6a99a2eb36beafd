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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._scheduler import JobContext, Scheduler, log_safely
from ._types import RunOptions
from ._validate import boolean, callable_or_none, function, member, seconds

__all__ = ["KeyInfo", "KeyState", "KeyedScheduler", "Reschedule"]

UTC = UTC
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


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A key as it stands, from get() and snapshot().

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


class _Key:
    """A key's record: what KeyInfo shows, plus its armed task and its runs."""

    __slots__ = (
        "contexts",
        "data",
        "generation",
        "key",
        "last_error",
        "next_run_at",
        "running",
        "state",
        "task_id",
    )

    def __init__(self, key: Hashable, data: Any) -> None:
        self.key = key
        self.data = data
        self.generation = 0
        self.state = KeyState.DISABLED
        self.next_run_at: float | None = None  # POSIX seconds
        self.task_id: int | None = None  # its armed task, or None
        self.running = 0
        self.last_error: str | None = None
        self.contexts: list[JobContext] = []  # of its runs going on

    def info(self) -> KeyInfo:
        at = None if self.next_run_at is None else datetime.fromtimestamp(self.next_run_at, tz=UTC)
        return KeyInfo(
            self.key, self.data, self.state, at, self.running > 0, self.last_error, self.generation
        )


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
        self._timeout = run_timeout or None
        self._on_state_change = on_state_change
        self._on_finish = on_finish
        self._on_invalid = on_invalid
        self._async = isinstance(scheduler, AsyncScheduler)
        self._coroutine = self._async and (
            inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(type(run).__call__)
        )
        # every run gets a context (cancellation on remove and replace, the timeout), whatever `context`
        self._arm_options: dict[str, Any] = (
            {"options": RunOptions(context=True, timeout=self._timeout)}
            if isinstance(scheduler, Scheduler)
            else {"context": True, "timeout": self._timeout}
        )
        self._keys: dict[Hashable, _Key] = {}
        self._lock = threading.RLock()  # a run on a worker thread reports under it; callbacks may call in
        self._idle = threading.Condition(self._lock)  # close() waits on it for the running runs
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
            self._started = True
            for rec in list(self._keys.values()):
                self._plan(rec, self._wall_now())

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
            self._closed = True
            for rec in self._keys.values():
                self._disarm(rec)
                rec.next_run_at = None
                self._set_state(rec, KeyState.DISABLED)

    def _sched_is_new(self) -> bool:
        from ._driver import DriverBase, Lifecycle

        return isinstance(self._sched, DriverBase) and self._sched._state is Lifecycle.NEW

    def _in_a_run(self) -> bool:
        return bool(getattr(_running, "depth", 0))

    # -- keys -----------------------------------------------------------------------------------------

    def upsert(self, key: Hashable, data: Any = None) -> None:
        """Add a key, or replace its data (a new generation), and (re)compute its next run. A known key's
        armed timer is moved, not removed and added. A next_run that fails makes the key INVALID.

        Raises:
            TypeError: the key is not hashable. RuntimeError: the KeyedScheduler is closed.
        """
        _check_key(key)
        with self._lock:
            self._check_open()
            rec = self._keys.get(key)
            if rec is None:
                rec = self._keys[key] = _Key(key, data)
            else:
                rec.data = data
                if rec.running and self._cancel_on_replace:
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
            rec = self._keys.pop(key, None)
            if rec is None:
                return False
            rec.generation += 1
            self._disarm(rec)
            if rec.running and self._cancel_on_remove:
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
        """Every key as it stands. O(keys)."""
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
        return self._sched.wall()  # type: ignore[no-any-return]

    def _evaluate(self, rec: _Key, wall_now: float) -> float | BaseException | None:
        """next_run for a key: POSIX seconds, None (disabled), or the error that makes it INVALID."""
        now = datetime.fromtimestamp(wall_now, tz=UTC)
        try:
            when = self._next_run(now, rec.key, rec.data)
        except Exception as exc:
            return exc
        if when is None:
            return None
        if not isinstance(when, datetime):
            return TypeError(f"next_run must return an aware datetime or None, not {type(when).__name__}")
        if when.tzinfo is None or when.utcoffset() is None:
            return ValueError(f"next_run must return an aware datetime, not the naive {when!r}")
        return when.timestamp()

    def _plan(self, rec: _Key, wall_now: float) -> None:
        """Evaluate a key's next run and arm (or move, or take back) its timer; set its state."""
        result = self._evaluate(rec, wall_now)
        if isinstance(result, BaseException):
            self._disarm(rec)
            rec.next_run_at = None
            rec.last_error = _describe(result)
            self._set_state(rec, KeyState.INVALID)
            self._call(self._on_invalid, rec.key, rec.data, result)
            return
        if rec.state is KeyState.INVALID:
            rec.last_error = None
        rec.next_run_at = result
        if result is None:
            self._disarm(rec)
            self._set_state(rec, KeyState.DISABLED)
            return
        if self._started and not self._closed:
            self._arm(rec, result)
        self._set_state(rec, KeyState.PENDING)

    def _arm(self, rec: _Key, when: float) -> None:
        sched = self._sched
        if rec.task_id is not None and sched.reschedule_wall(rec.task_id, when):
            return  # moved in place: the O(1) upsert
        rec.task_id = sched.schedule_wall(
            when, self._fire_async if self._coroutine else self._fire, args=(rec.key,), **self._arm_options
        )

    def _disarm(self, rec: _Key) -> None:
        if rec.task_id is not None:
            self._sched.cancel(rec.task_id)
            rec.task_id = None

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

    def _begin(self, ctx: JobContext, key: Hashable) -> tuple[_Key, int] | None:
        """A key's timer fired: its record and generation, or None if the key is gone or moved on."""
        with self._lock:
            rec = self._keys.get(key)
            if rec is None or self._closed or rec.task_id != ctx.task_id:
                return None  # removed, closed, or replaced by a newer timer: a stale fire
            rec.task_id = None
            rec.running += 1
            rec.contexts.append(ctx)
            generation = rec.generation
            if self._reschedule is Reschedule.BEFORE_RUN:
                self._plan(rec, self._wall_now())
                if rec.state is KeyState.PENDING:
                    self._set_state(rec, KeyState.RUNNING)
            else:
                rec.next_run_at = None
                self._set_state(rec, KeyState.RUNNING)
            return rec, generation

    def _end(self, rec: _Key, generation: int, ctx: JobContext, error: BaseException | None) -> None:
        with self._lock:
            rec.running -= 1
            if ctx in rec.contexts:
                rec.contexts.remove(ctx)
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
                    self._set_state(rec, KeyState.PENDING if rec.task_id is not None else KeyState.DISABLED)
            self._idle.notify_all()
            if self._all_done is not None and not any(r.running for r in self._keys.values()):
                self._all_done.set()
            data = rec.data
        self._call(self._on_finish, rec.key, data, error)

    def _fire(self, ctx: JobContext, key: Hashable) -> None:
        begun = self._begin(ctx, key)
        if begun is None:
            return
        rec, generation = begun
        error: BaseException | None = None
        _running.depth = getattr(_running, "depth", 0) + 1
        try:
            if self._context:
                self._run(ctx, key, rec.data)
            else:
                self._run(key, rec.data)
        except BaseException as exc:
            error = exc
            raise
        finally:
            _running.depth -= 1
            self._end(rec, generation, ctx, error)

    async def _fire_async(self, ctx: JobContext, key: Hashable) -> None:
        begun = self._begin(ctx, key)
        if begun is None:
            return
        rec, generation = begun
        error: BaseException | None = None
        try:
            result = self._run(ctx, key, rec.data) if self._context else self._run(key, rec.data)
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._end(rec, generation, ctx, error)


_running = threading.local()  # how deep this thread is in a KeyedScheduler run (close() from a run)


def _check_key(key: Any) -> None:
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable, not {type(key).__name__}") from None
