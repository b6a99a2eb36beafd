"""A key's fire on its way to a run and back (Runs): handed to the scheduler when the key's timer comes
due, begun (a durable store's take, under the lease of a shared one), run, and ended (the key's next run
planned, the end recorded); dropped by the scheduler's backpressure, retried when the store or the clock
fails. STALE marks a run superseded before it began; Start is what a fire's take writes."""

from __future__ import annotations

import bisect
import contextvars
import inspect
import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC
from typing import Any, NamedTuple

from .._engine import JobContext, log_safely
from .._stores import TAKE_PAUSED, FinishedFire, StoredKey, StoreError
from .._types import RunOptions
from .journal import Journal
from .keys import (
    LATENESS_BUCKETS,
    OWN,
    Key,
    KeyState,
    Late,
    Overlap,
    Reschedule,
    Retrying,
    Trigger,
    advancing,
    behind,
    decided,
    describe,
    from_posix,
    iso,
    keep_first,
    latest_started,
    micro,
    outcome_of,
    since,
    spent,
    value_of,
)
from .recovery import resume
from .shared import Fence, LeaseLapsed
from .table import KeyTable

logger = logging.getLogger("timerwheel")

STALE = object()  # what a run's beginning returns for a run that was superseded


class Start(NamedTuple):
    """A fire about to start (Runs._prepare_start): what its take writes, and the key's plan once it is
    taken."""

    rec: Key
    generation: int
    scheduled_for: float
    rerun: bool
    hand: int  # (the hand-over's token: see Key.hand)
    wall_now: float
    started_at: int  # what the take records (microseconds): wall_now's, or a retake's first (Key.retake)
    rest: list[tuple[float, bool]]
    state: KeyState
    at: float | None
    last_error: str | None
    error: BaseException | None
    row: StoredKey | None
    trigger: Trigger | None  # (the key's trigger, if this fire is its)
    runs: int  # (the key's count of runs once it is taken: one more, but for a rerun)
    kept: bool  # (a trigger's that keeps the key's plan, or a retry: its end plans nothing)


class Runs:
    """The runs of a KeyedScheduler's keys. `job` is what the scheduler runs for a fire (with `options`:
    every run gets a context, for cancellation on remove and replace and for its timeout); under an
    AsyncScheduler a coroutine function's runs are tasks, and so are every run's with a shared store,
    whose take is awaited (never waited for on the loop's thread)."""

    def __init__(
        self,
        table: KeyTable,
        journal: Journal,
        run: Callable[..., Any],
        *,
        context: bool,
        run_timeout: float | None,
    ) -> None:
        self.table = table
        self.journal = journal
        self._run = run
        self._context = context
        self._backoff = 0.0  # seconds: the retry of a fire whose start could not read the wall clock
        # The runs of triggers that keep their key's plan (Trigger.kept): their end plans nothing
        self._kept: set[JobContext] = set()
        self._began: dict[JobContext, float] = {}  # the runs going: when each began (monotonic)
        coroutine = table.is_async and (
            inspect.iscoroutinefunction(run)
            or inspect.iscoroutinefunction(type(run).__call__)
            or table.shared
        )
        self.job: Callable[..., Any] = self.run_async if coroutine else self.run_key
        self.options = RunOptions(
            context=True, timeout=run_timeout, coroutine=coroutine, on_drop=self.dropped
        )
        table.fired = self.fired

    # -- a fire, handed over --------------------------------------------------------------------------

    def fired(self, rec: Key) -> None:
        """A key's timer came due (in drain(), under the driver's serialisation): hand its run over, as a
        one-shot task of the scheduler due at once (it runs in this same drain, where the driver says).
        The fire is the head of the key's catch-up queue if it has one, else its next run."""
        engine = self.table.engine
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
        if rec.running and self._overlapping(rec, rec.generation, scheduled_for, rerun):
            if self.table.late_grace is not None and rec.catch_up and rec.catch_up[0][0] == scheduled_for:
                self._watch(rec, scheduled_for, rerun)  # (it waits for the run)
            return  # (it came while a run of its key goes: it waits for the run, or it was skipped)
        rec.handed = fire
        rec.hand += 1
        if self.table.late_grace is not None:
            self._watch(rec, scheduled_for, rerun)
        engine.schedule_at(
            rec.due,
            self.job,
            args=(rec, rec.generation, scheduled_for, rerun, rec.hand),
            options=self.options,
        )

    # -- late checks (on_late) -------------------------------------------------------------------------

    def _watch(self, rec: Key, scheduled_for: float, rerun: bool, due: float | None = None) -> None:
        """Under the lock: a fire of the key came (handed over, or waiting for a run of its key): its
        late check is armed at its due time + late_grace. Its due time is its time, or, for a fire due
        before this process took the key up (a start, a claim, a resume: a catch-up's fire, a rerun, a
        stored trigger), the taking up's: those were missed meanwhile (on_missed tells of them), and are
        told late only if they then wait past the grace. A fire that comes already past it (the loop was
        stuck) is told at once. Once per fire: a fire that comes again (after a pause, a failed take) is
        watched from its due time as it is then, unless it was told. A retry's due time (`due`) is its
        own."""
        t = self.table
        fire = (rec.generation, scheduled_for)
        late = rec.late
        if late is None:
            late = rec.late = Late(self, rec)
        elif late.fire_of == fire and late.told:
            return
        if due is None:
            due = scheduled_for
        if rec.taken_up is not None and due < rec.taken_up:
            due = rec.taken_up
        grace = t.late_grace
        assert grace is not None and t.engine is not None
        if late.fire_of == fire and late.id is not None and late.deadline == due + grace:
            return  # (watched already)
        late.fire_of, late.told, late.deadline = fire, False, due + grace
        try:
            wall_now = t.wall_now()
        except Exception:  # (the check is armed all the same: it reads the clock again then)
            wall_now = due
        if wall_now >= late.deadline:
            self._tell_late(late, wall_now)
        elif late.id is None or not t.engine.move_wall_timer(late, late.deadline):
            t.engine.add_wall_timer(late, late.deadline)

    def late_due(self, late: Late) -> None:
        """A late check's time came (in drain(), under the driver's serialisation, as a key's fire):
        its fire is told late if it still waits to begin."""
        try:
            wall_now = self.table.wall_now()
        except Exception:
            wall_now = late.wall
        self._tell_late(late, wall_now)
        if self.table.holding:  # (a KeyboardInterrupt, a SystemExit from on_late: raised where a job's is)
            self.table.raise_held()

    def _tell_late(self, late: Late, wall_now: float) -> None:
        rec, t = late.rec, self.table
        if late.told or late.fire_of is None or t.closed or rec.paused or t.keys.get(rec.key) is not rec:
            return
        generation, scheduled_for = late.fire_of
        queue = rec.catch_up
        waits = rec.handed == late.fire_of or bool(queue and queue[0][0] == scheduled_for)
        if rec.generation != generation or not waits:
            return  # (it began, or it was skipped, dropped, superseded)
        late.told = True
        t.counts["late"] += 1
        late_by = max(0.0, wall_now - scheduled_for)
        t.noted(
            rec,
            scheduled_for,
            "late",
            at=wall_now,
            error=f"not begun {late_by:.3f} s after it was due",
            flush=True,
        )
        t.call(t.on_late, rec.key, from_posix(scheduled_for, UTC), max(0.0, wall_now - scheduled_for))

    # -- retries (retry=) ------------------------------------------------------------------------------

    def _retry_at(
        self,
        rec: Key,
        ctx: JobContext,
        scheduled_for: float,
        wall_now: float,
        outcome: tuple[KeyState, float | None, str | None],
    ) -> float | None:
        """Under the lock, as a run of the key that failed ends (its key's plan made: `outcome`): when its
        fire is tried again, or None: no retry (none, or no attempts left), or it gives way to another
        fire of its key (one runs, waits or is handed over; a newer one began; the key's next fire comes
        at or before the retry's time)."""
        own = rec.options
        retry = self.table.defaults.retry if own is None or own.retry is None else own.retry
        if retry is None or rec.running or rec.catch_up or rec.handed is not None:
            return None
        attempt = 1 if ctx.fence is None else ctx.fence.attempt
        latest = rec.last_scheduled_for
        if attempt >= retry.attempts or (latest is not None and latest > scheduled_for):
            return None
        # (from the fire's time at least: a wall clock that stepped back during the run does not bring
        # the retry before it)
        at = max(wall_now, scheduled_for) + retry.delay(attempt)
        following = outcome[1]
        return None if following is not None and at >= following else at

    def _retry_later(
        self, rec: Key, fire: tuple[int, float], ctx: JobContext, at: float, wall_now: float, error: str
    ) -> None:
        """Under the lock: a failed run's fire is tried again at `at` (its key's Retrying armed there). A
        retry of another fire of the key waiting still gives way to it."""
        retrying = rec.retrying
        if retrying is None:
            retrying = rec.retrying = Retrying(self, rec)
        elif retrying.fire_of is not None and retrying.fire_of != fire and retrying.id is not None:
            self._give_up(retrying)
        retrying.fire_of, retrying.ended, retrying.error, retrying.handed = fire, wall_now, error, False
        retrying.held = False
        retrying.attempt = 1 if ctx.fence is None else ctx.fence.attempt
        took = rec.took
        retrying.took = took[2] if took is not None and took[:2] == fire else 0
        engine = self.table.engine
        assert engine is not None
        if retrying.id is None or not engine.move_wall_timer(retrying, at):
            engine.add_wall_timer(retrying, at)

    def retry_due(self, retrying: Retrying) -> None:
        """A retry's time came (in drain(), under the driver's serialisation, as a key's fire): its fire
        is handed over again, as a rerun (an attempt more), unless it gives way (see Retry): the key
        changed (removed, upserted), or another fire of it runs, waits, is handed over, began since, or
        is due. Then the fire ends failed, with the failure it had. A paused key's retry is held: its
        resume arms it again (see recovery.resume)."""
        t, rec = self.table, retrying.rec
        fire = retrying.fire_of
        if fire is None or t.closed:
            return
        generation, scheduled_for = fire
        try:
            wall_now = t.wall_now()
        except Exception:  # (the engine's reading: a clock that fails once does not lose the retry)
            wall_now = retrying.wall
        latest, following = rec.last_scheduled_for, rec.next_run_at
        current = t.keys.get(rec.key) is rec and rec.generation == generation
        if current and rec.paused:
            retrying.held = True
        elif (
            not current
            or rec.running
            or rec.catch_up
            or rec.handed is not None
            or (latest is not None and latest > scheduled_for)
            or (following is not None and following <= wall_now)
        ):
            self._give_up(retrying)
        else:
            rec.hand += 1
            rec.handed = fire
            retrying.handed = True
            if t.late_grace is not None:
                self._watch(rec, scheduled_for, True, due=retrying.wall)
            assert t.engine is not None
            t.engine.schedule_at(
                retrying.due,
                self.job,
                args=(rec, generation, scheduled_for, True, rec.hand),
                options=self.options,
            )
        if t.holding:
            t.raise_held()

    def _give_up(self, retrying: Retrying) -> None:
        """Under the lock: a retry is not made: its fire ends failed (a durable store records it, with the
        failure it had), unless the KeyedScheduler closed (it stays unfinished: `recover` decides)."""
        fire, retrying.fire_of, retrying.held = retrying.fire_of, None, False
        t = self.table
        if retrying.id is not None and t.engine is not None:
            t.engine.cancel_timer(retrying)
        if fire is None or t.closed or not t.durable or not self.journal.store_open():
            return
        generation, scheduled_for = fire
        ended = FinishedFire(
            retrying.rec.key, generation, micro(scheduled_for), micro(retrying.ended), retrying.error
        )
        self.journal.finish(None, ended)

    def _gives_way(self, rec: Key, generation: int, scheduled_for: float) -> bool:
        """Whether a rerun of the fire is a retry of a fire older than one of its key that began since."""
        latest = rec.last_scheduled_for
        if latest is None or latest <= scheduled_for:
            return False
        return self._retry_of(rec, generation, scheduled_for) is not None

    def _retry_of(self, rec: Key, generation: int, scheduled_for: float) -> Retrying | None:
        """The key's Retrying if a rerun of the fire is its retry: handed over (or put back first in line
        since, its start failed), neither waiting for its time nor held by a pause."""
        retrying = rec.retrying
        if retrying is None or retrying.fire_of != (generation, scheduled_for):
            return None
        return None if retrying.id is not None or retrying.held else retrying

    # -- the run, as the scheduler's job --------------------------------------------------------------

    def run_key(
        self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int
    ) -> Any:
        """A key's run, as the scheduler's job: begin, run, end. Under an AsyncScheduler, a run that
        returns an awaitable (an async function behind a plain decorator) is awaited: what this returns
        then is a coroutine, which the driver runs as a task, and the run ends when it does."""
        _running.depth = getattr(_running, "depth", 0) + 1  # (a callback of _begin may close: not wait)
        try:
            data = self._begin(ctx, rec, generation, scheduled_for, rerun, hand)
        except BaseException:
            _running.depth -= 1
            raise
        if data is STALE:
            _running.depth -= 1
            self.table.raise_held()
            return None
        error: BaseException | None = None
        awaiting: Any = None
        try:
            result = self._run(ctx, rec.key, data) if self._context else self._run(rec.key, data)
            if result is not None and inspect.isawaitable(result):
                if self.table.is_async:
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
        self.end(rec, generation, data, ctx, error, scheduled_for, ended=self._ended())
        self.table.raise_held()
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
            self.end(rec, generation, data, ctx, error, scheduled_for, ended=self._ended())
            self.table.raise_held()

    async def run_async(
        self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int
    ) -> None:
        _in_async_run.set(True)  # (this task's own context: aclose() from it does not wait for itself)
        data = await self._abegin(ctx, rec, generation, scheduled_for, rerun, hand)
        if data is STALE:
            self.table.raise_held()
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
            self.end(rec, generation, data, ctx, error, scheduled_for, ended=self._ended())
            self.table.raise_held()

    def _ended(self) -> float | None:
        """The wall time a run ended, read as it returns: before end() waits for the lock, which another
        thread may hold for a database round trip (AFTER_FINISH counts from the end, not from that wait).
        None if the clock fails: end() reads it again, and says so."""
        try:
            return self.table.wall_now()
        except Exception:
            return None

    # -- beginning: the take --------------------------------------------------------------------------

    def _begin(
        self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int
    ) -> Any:
        """A key's run starts: its data, or STALE if the key was removed, replaced or closed since it
        fired (the run is superseded, and does not run), or if a durable store says the fire was taken.
        With a durable store the fire is committed as started, with the key's row, before the run. A
        shared store's take is a database round trip: it is made without the lock (no other key waits
        for it), by the store's writer (see Writer)."""
        with self.table.lock:
            start = self._prepare_start(rec, generation, scheduled_for, rerun, hand)
            if start is None:
                return STALE
            if not self.table.shared:
                return self._take_done(ctx, start, self._take(start))
            rec.taking += 1
        taken = self.journal.writer().submit_batched(self._takes, start, rec.key).result()
        with self.table.lock:
            return self._take_done(ctx, start, taken)

    async def _abegin(
        self, ctx: JobContext, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int
    ) -> Any:
        """_begin() on an event loop: a shared store's take is awaited, never waited for on the loop."""
        import asyncio

        with self.table.lock:
            start = self._prepare_start(rec, generation, scheduled_for, rerun, hand)
            if start is None:
                return STALE
            if not self.table.shared:
                return self._take_done(ctx, start, self._take(start))
            rec.taking += 1
        take = asyncio.wrap_future(self.journal.writer().submit_batched(self._takes, start, rec.key))
        cancelled: BaseException | None = None
        cancels = 0
        while True:  # a cancel (run_timeout, the scheduler closing) waits for the take all the same:
            try:  # the store may have the fire as started, and the key's plan follows from the take
                taken = await asyncio.shield(take)
                break
            except asyncio.CancelledError as exc:
                if take.cancelled():  # (the writer stopped without making it: the key is left as it was)
                    with self.table.lock:
                        if rec.handed == (generation, scheduled_for) and rec.hand == hand:
                            rec.handed = None
                        rec.taking -= 1
                        self._untake(rec, None)
                    raise
                cancelled, cancels = exc, cancels + 1
        with self.table.lock:
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
        self.end(rec, generation, data, ctx, cancelled, scheduled_for, ended=self._ended())
        self.table.raise_held()
        raise cancelled

    def _prepare_start(
        self, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int
    ) -> Start | None:
        """Under the lock: what the start of a fire writes (its key's row), or None if it does not start
        (superseded, waiting for an older generation's run, or the wall clock failing: tried again). The
        run is counted as going from here (rec.running), so that no other fire of the key starts beside
        it while its take is made."""
        start = self._prepare(rec, generation, scheduled_for, rerun, hand)
        if start is None:
            if rec.handed == (generation, scheduled_for) and rec.hand == hand:
                rec.handed = None  # (not begun: the fire may be handed over again)
            retrying = self._retry_of(rec, generation, scheduled_for) if rerun else None
            queue = rec.catch_up
            if retrying is None or (queue and queue[0] == (scheduled_for, True)):
                pass  # (not a retry, or one put back first in line: it runs from there)
            elif rec.paused and self.table.keys.get(rec.key) is rec and rec.generation == generation:
                retrying.held, retrying.handed = True, False  # (paused since it was handed over: held)
            else:
                self._give_up(retrying)  # (a retry not begun: it gave way)
        return start

    def _prepare(
        self, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int
    ) -> Start | None:
        if self.table.closed or rec.generation != generation or self.table.keys.get(rec.key) is not rec:
            current = self.table.keys.get(rec.key) is rec
            if current and not self.table.closed and rec.generation != generation:
                self.table.noted(rec, scheduled_for, "superseded", error="upserted before it began")
            return None
        if hand <= rec.voided:  # (handed over before a pause: see Key.hand)
            return None
        if rec.paused:  # (paused since it fired: the fire stays its plan, next_run_at or its queue's head)
            return None
        if self._spent(rec, generation, scheduled_for, rerun):
            return None
        if rerun and self._gives_way(rec, generation, scheduled_for):
            return None  # (a retry of a fire older than one that began since)
        if not rerun and self._passed(rec, generation, scheduled_for):
            return None  # (older than one of its key that began since it was planned: skipped)
        if rec.running and self._overlapping(rec, generation, scheduled_for, rerun):
            return None  # (a run of its key goes: it waits for the run, or it was skipped)
        try:
            wall_now = self.table.wall_now()
        except Exception as exc:  # the fire is not lost: it is tried again after a back-off
            self._clock_failed(rec, scheduled_for, rerun, exc)
            return None
        self._backoff = 0.0
        trigger = self._trigger_of(rec, generation, scheduled_for, rerun)
        retry = self._retry_of(rec, generation, scheduled_for) if rerun else None
        if wall_now < scheduled_for and trigger is None:  # the wall clock stepped back since the fire came
            keep_first(rec, scheduled_for, rerun)  # due: never before its time (as its timer): armed at it
            self.table.apply(rec, rec.state, scheduled_for, rec.last_error)  # again (a trigger runs now)
            return None
        at: float | None
        error: BaseException | None
        runs = rec.runs if rerun else rec.runs + 1  # (a rerun is the run it was, counted then)
        queue = rec.catch_up
        rest = queue[1:] if queue and queue[0][0] == scheduled_for else (queue or [])
        if rest:  # more catch-up fires follow this one: the next is the next run
            state, at, last_error, error = KeyState.PENDING, rest[0][0], rec.last_error, None
        elif trigger is not None and trigger.kept is not None:  # (a trigger: the plan it found, kept,
            state, at = trigger.kept  # unless this run is the key's last: its max_runs)
            if spent(rec, runs):
                state, at = KeyState.DISABLED, None
            last_error, error = rec.last_error, None
        elif retry is not None:  # (a retry: an attempt of the fire that failed, whose plan stands)
            state, at, last_error, error = rec.state, rec.next_run_at, rec.last_error, None
        elif self.table.reschedule is Reschedule.BEFORE_RUN:
            # (at the fire's time if the wall clock stepped back behind it: a sound schedule advances)
            result = advancing(
                self.table.evaluate(
                    rec.key, rec.data, since(rec, wall_now, scheduled_for, generation), runs=runs
                ),
                scheduled_for,
            )
            state, at, last_error = outcome_of(rec, result)
            error = result if isinstance(result, BaseException) else None
        else:
            state, at, last_error, error = KeyState.RUNNING, None, rec.last_error, None
        row = None
        if self.table.durable:
            row = rec.row(
                self.table.encode(rec.data),
                generation,
                KeyState.RUNNING if state is not KeyState.INVALID else state,
                at,
                last_error,
                latest_started(rec, scheduled_for, generation),
                triggered=None if trigger is not None else OWN,  # (its take clears it)
                runs=runs,
            )
        waiting = rec.retrying
        if waiting is not None and waiting.fire_of not in (None, (generation, scheduled_for)):
            self._give_up(waiting)  # (another fire of the key begins: the retry gives way to it)
        rec.running += 1
        retake = rec.retake
        if retake is not None and retake[0] == generation and retake[1] == scheduled_for:
            started_at = retake[2]
        else:
            started_at = micro(wall_now)
            if retry is not None and started_at <= retry.took:  # (a wall clock that stepped back)
                started_at = retry.took + 1  # (a take of its own: never the failed one's again)
        return Start(
            rec,
            generation,
            scheduled_for,
            rerun,
            hand,
            wall_now,
            started_at,
            rest,
            state,
            at,
            last_error,
            error,
            row,
            trigger,
            runs,
            retry is not None or (trigger is not None and trigger.kept is not None),
        )

    def _spent(self, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> bool:
        """Under the lock: whether the fire is one of a key that has run its max_runs already (a plan
        made before the count was known): it does not run, and the key plans no more (its queue's next
        fire, a rerun or a trigger, else DISABLED; a durable store gets the row). A rerun is the run it
        was, and a trigger's fire runs all the same: neither is spent."""
        if rerun or not spent(rec):
            return False
        if self._trigger_of(rec, generation, scheduled_for, rerun) is not None:
            return False
        t = self.table
        queue = rec.catch_up
        if queue and queue[0][0] == scheduled_for:
            rec.catch_up = queue[1:] or None
        at = rec.catch_up[0][0] if rec.catch_up else None
        state = KeyState.PENDING if at is not None else KeyState.DISABLED
        if rec.state is KeyState.RUNNING:
            state = KeyState.RUNNING  # (a run of it goes on)
        if t.durable:  # (a store that fails: written at the key's next write)
            row = rec.row(t.encode(rec.data), generation, state, at, rec.last_error)
            self.journal.write(self.journal.save, [row], [], f"key {rec.key!r}, which ran its max_runs")
        t.apply(rec, state, at, rec.last_error)
        return True

    def _trigger_of(self, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> Trigger | None:
        """The key's trigger, if this fire is its."""
        trigger = rec.triggered
        if trigger is None or rerun or trigger.generation != generation or trigger.at != scheduled_for:
            return None
        return trigger

    def _overlapping(self, rec: Key, generation: int, scheduled_for: float, rerun: bool) -> bool:
        """Under the lock: a fire that comes while a run of its key goes (rec.running), as it comes (it
        is handed over) and as its run is to begin (a run may have begun meanwhile): what the key's
        overlap policy (a trigger's own, if it has one) makes of it. True if it does not start now: it
        waits for the runs to end (QUEUE_ONE; a fire a catch-up decided to run, under SKIP and REPLACE
        too: end() arms it again, and the key is not armed meanwhile), or it is skipped (SKIP). REPLACE
        tells the runs going to stop (their ctx.cancelled), and the fire goes on."""
        if not rerun and behind(rec, generation, scheduled_for):
            return False  # (skipped as it is to begin, by _passed: it waits for no run, and replaces none)
        trigger = self._trigger_of(rec, generation, scheduled_for, rerun)
        overlap = self.table.overlap_of(rec, trigger)
        if overlap is Overlap.ALLOW:
            return False
        waits = trigger is None and decided(rec, generation, scheduled_for, rerun)
        if overlap is Overlap.QUEUE_ONE or waits:
            keep_first(rec, scheduled_for, rerun)
            return True
        if overlap is Overlap.REPLACE:
            for ctx in rec.contexts or ():
                ctx.cancelled.set()
            return False
        try:
            wall_now = self.table.wall_now()
        except Exception as exc:  # (tried again after a back-off, as at a start: SKIP decides it then)
            self._clock_failed(rec, scheduled_for, rerun, exc)
            return True
        if wall_now < scheduled_for and trigger is None:  # (the wall clock stepped back: its start arms it
            return False  # again at its time; a trigger runs now)
        self._skip(rec, generation, scheduled_for, rerun, wall_now, trigger, "a run of the key was going")
        return True

    def _passed(self, rec: Key, generation: int, scheduled_for: float) -> bool:
        """Under the lock, as a fire (not a rerun) is to begin: True if it is older than the key's latest
        started fire, and so skipped: a newer fire began after it was planned (a trigger that ran beside
        the key's run, under Overlap.ALLOW, while this one waited). No fire of a key begins after a newer
        one; every store agrees (a durable one would refuse its take)."""
        if not behind(rec, generation, scheduled_for):
            return False
        try:
            wall_now = self.table.wall_now()
        except Exception as exc:  # (tried again after a back-off: decided then)
            self._clock_failed(rec, scheduled_for, False, exc)
            return True
        trigger = self._trigger_of(rec, generation, scheduled_for, False)
        self._skip(rec, generation, scheduled_for, False, wall_now, trigger, "a newer fire of the key began")
        return True

    def _skip(
        self,
        rec: Key,
        generation: int,
        scheduled_for: float,
        rerun: bool,
        wall_now: float,
        trigger: Trigger | None,
        why: str,
    ) -> None:
        """Under the lock: a fire that does not run (`why`): one that came while a run of its key goes,
        under Overlap.SKIP, or one older than a fire of its key that began (_passed). It is counted, and
        the key's next fire planned after it, as a run's start plans it (a trigger's: the plan it kept); a
        durable store gets the key's row (a restart does not find the skipped fire its plan)."""
        t = self.table
        t.counts["skipped"] += 1
        t.noted(rec, scheduled_for, "skipped", at=wall_now, error=why)
        queue = rec.catch_up
        if queue and queue[0][0] == scheduled_for:  # (a trigger waits there)
            rec.catch_up = queue[1:] or None
        if trigger is not None:
            rec.triggered = None
        result: Any = None
        at: float | None
        if rec.catch_up:
            state, at, last_error = KeyState.PENDING, rec.catch_up[0][0], rec.last_error
        elif trigger is not None and trigger.before is not None:  # (nothing ran: the plan it found)
            (state, at), last_error = trigger.before, rec.last_error
        else:
            result = advancing(
                t.evaluate(rec.key, rec.data, since(rec, wall_now, scheduled_for, generation)), scheduled_for
            )
            state, at, last_error = outcome_of(rec, result)
        if rec.state is KeyState.RUNNING and state is not KeyState.INVALID:
            state = KeyState.RUNNING  # (a run of it goes on: armed all the same, as at a run's start)
        if t.durable:  # (a store that fails: the key is armed all the same; its row is written at its fire)
            row = rec.row(t.encode(rec.data), generation, state, at, last_error)
            self.journal.write(self.journal.save, [row], [], f"the skipped fire of key {rec.key!r}")
        t.apply(rec, state, at, last_error, result if isinstance(result, BaseException) else None)

    def _take(self, start: Start) -> tuple[int | BaseException, float]:
        """Commit a fire as started (a durable store): the attempt it is (1, or more for a rerun), 0 if
        it was taken already (or, a shared store, the key is held elsewhere), or the store's error; and
        the monotonic time the take was asked for (a shared store's lease on the key runs from then)."""
        if start.row is None:
            return 1, self.table.monotonic()
        return self._takes([start])[0]

    def _takes(self, starts: list[Start]) -> list[tuple[int | BaseException, float]]:
        """_take() for many fires (a shared store's writer, for every take queued together: one round trip
        where the store takes many, `start_fires`)."""
        asked = self.table.monotonic()
        store = self.table.store
        takes = []
        for s in starts:
            assert s.row is not None  # (a durable store's start: see _prepare)
            takes.append((s.row, micro(s.scheduled_for), s.started_at, s.rerun))
        try:
            self.journal.record_unrecorded()
            many = getattr(store, "start_fires", None)
            if many is not None:
                results = many(takes)
            else:
                results = []
                for take in takes:
                    try:
                        results.append(store.start_fire(*take))
                    except Exception as exc:
                        results.append(exc)
        except Exception as exc:
            return [(exc, asked)] * len(starts)
        return [(r if isinstance(r, BaseException) else int(r), asked) for r in results]

    def _take_done(self, ctx: JobContext, start: Start, take: tuple[int | BaseException, float]) -> Any:
        """Under the lock, after the take: the run's data, or STALE if it does not run after all (see
        _taken). A key resumed while its take was on its way is decided about now (recovery.resume),
        from what the take made of it: a run going on, or its fire still its plan."""
        rec = start.rec
        if self.table.shared:
            rec.taking -= 1
        try:
            return self._taken(ctx, start, take)
        finally:
            if rec.resumed and not rec.taking:
                rec.resumed = False
                if self.table.keys.get(rec.key) is rec and not rec.paused and not self.table.closed:
                    rec.paused = True  # (what resume() takes up: its pause ends now)
                    resume(self.table, [rec], self._wall_or(start.scheduled_for), self._write_resumed)

    def _write_resumed(self, rows: list[StoredKey], finished: list[FinishedFire]) -> None:
        self.journal.write(self.journal.save, rows, finished, f"what {len(rows)} resumed key(s) do")

    def _taken(self, ctx: JobContext, start: Start, take: tuple[int | BaseException, float]) -> Any:
        """Under the lock, after the take: the run's data, or STALE if it does not run after all.

        A shared store's key is held under a lease: a process that was paused (SIGSTOP, a long GC, a
        laptop lid) since it asked for the take may have lost the key to another process meanwhile, so
        no run starts once the lease may have lapsed, by this process's monotonic clock from the moment
        the take was asked for. The fire is then taken again (a rerun of this process's own unfinished
        fire), which succeeds only while the key is still held here."""
        rec, generation, scheduled_for = start.rec, start.generation, start.scheduled_for
        taken, asked = take
        if rec.handed == (generation, scheduled_for) and rec.hand == start.hand:
            rec.handed = None  # (its take is done: what follows plans the key)
        lapsed = self.table.lease is not None and self.table.monotonic() >= asked + self.table.lease
        if lapsed and isinstance(taken, int) and taken:
            self.table.noted(
                rec, scheduled_for, "lease_lost", taken, error="the lease may have lapsed", flush=True
            )
            taken = LeaseLapsed(
                f"the lease on key {rec.key!r} may have lapsed between its take and its run (a pause of "
                f"the process longer than the lease, {self.table.lease} s): taken again before it runs"
            )
        if isinstance(taken, BaseException):
            rec.retake = (generation, scheduled_for, start.started_at)
        elif rec.retake is not None and rec.retake[:2] == (generation, scheduled_for):
            rec.retake = None
        if taken == TAKE_PAUSED and not isinstance(taken, BaseException):
            # Paused by another process (the store refuses its fires): paused here too, the fire kept as
            # the key's plan (run, or missed, when it is resumed). Unless it was resumed here since the
            # take was asked (the refusal is older than the resume): the fire stays its plan, which the
            # resume decides about (see _take_done).
            rec.running -= 1
            current = self.table.keys.get(rec.key) is rec and rec.generation == generation
            if current and not rec.resumed:
                self.table.pause(rec)  # (the fire is still next_run_at, or its queue's head)
                # (what the store's threads read of the key before now does not undo it; the store's
                # keeper reads the keys' flags again at its next round: a resume since is found then)
                self.table.taken(rec.key)
            self.table.settle(rec)
            if self.table.closed:
                self.journal.release_store()
            return STALE
        if isinstance(taken, BaseException) or not taken:
            rec.running -= 1
            current = (
                self.table.keys.get(rec.key) is rec and rec.generation == generation and not self.table.closed
            )
            if isinstance(taken, BaseException):  # the store failed: the fire is not lost, tried again soon
                if current:  # (a fire of an older generation is superseded: the key is the newer one's)
                    delay = 0.0 if isinstance(taken, LeaseLapsed) else 1.0
                    self._retry(rec, scheduled_for, start.rerun, taken, start.wall_now, delay)
            elif current:
                # taken already (or, a shared store, the key is held elsewhere): the next one
                if start.trigger is not None and rec.triggered is start.trigger:
                    rec.triggered = None
                rec.catch_up = start.rest or None
                if rec.catch_up:
                    self.table.apply(rec, KeyState.PENDING, rec.catch_up[0][0], rec.last_error)
                elif start.trigger is not None and start.trigger.before is not None:
                    self.table.apply(rec, *start.trigger.before, rec.last_error)  # (nothing ran for it)
                else:
                    after = self.table.evaluate(rec.key, rec.data, max(start.wall_now, scheduled_for))
                    self.table.planned(rec, advancing(after, scheduled_for))
            self.table.rearm_waiting(rec)
            self.table.settle(rec)
            if self.table.closed:
                self.journal.release_store()
            return STALE
        rec.took = (generation, scheduled_for, start.started_at)
        self._began[ctx] = self._now()  # (a run's duration: see _ran)
        if rec.generation == generation and self.table.keys.get(rec.key) is rec:
            # (taken: off the queue. A take of an older generation leaves the key, upserted meanwhile,
            # as the upsert made it: its queue may hold its first fire, waiting for this one to end.)
            rec.catch_up = start.rest or None
            rec.last_scheduled_for = latest_started(rec, scheduled_for, generation)
            if rec.last_scheduled_for == scheduled_for:
                rec.started_in = generation
            rec.runs = max(rec.runs, start.runs)  # (counted: its take wrote the count, or made it)
            if start.trigger is not None and rec.triggered is start.trigger:
                rec.triggered = None  # (run: its take cleared it in the store)
        if start.kept:
            self._kept.add(ctx)  # (its end plans nothing: the key goes on with the plan it had)
        retrying = rec.retrying
        if start.rerun and retrying is not None and retrying.fire_of == (generation, scheduled_for):
            if not self.table.durable:  # (a memory store counts no attempts: a retry's are here)
                taken = retrying.attempt + 1
            if retrying.handed:  # (a retry, begun)
                retrying.handed = False
                self.table.counts["retried"] += 1
                self.table.noted(
                    rec, scheduled_for, "retried", taken, start.wall_now, error=retrying.error, flush=True
                )
        ctx.scheduled_for = scheduled_for  # a key's run: the wall-clock time of its fire
        ctx.fence = Fence(generation, micro(scheduled_for), taken)
        if rec.contexts is None:
            rec.contexts = [ctx]
        else:
            trigger = start.trigger
            overlap = self.table.overlap_of(rec, trigger)
            if overlap is Overlap.REPLACE:
                # This run replaces the runs going: they are told to stop (told as it came, too, those
                # going then). One of a fire older than a run going, its take answered late, is told at
                # once: the later fire replaced it.
                for other in rec.contexts:
                    (other if other.scheduled_for <= scheduled_for else ctx).cancelled.set()
            rec.contexts.append(ctx)
        if not self.table.closed and rec.generation == generation and self.table.keys.get(rec.key) is rec:
            self.table.apply(rec, start.state, start.at, start.last_error, start.error)
            if rec.state is not KeyState.INVALID:
                self.table.set_state(rec, KeyState.RUNNING)  # while a run goes (BEFORE_RUN: armed meanwhile)
        if rec.generation != generation or self.table.keys.get(rec.key) is not rec:
            # A callback just now (on_state_change, on_invalid) removed or replaced the key, or (a shared
            # store) an upsert came while the take was made: superseded before it started.
            self.end(rec, generation, rec.data, ctx, None, scheduled_for, started=False)
            return STALE
        if self.table.closed:  # (by a callback just now, or while the take was made): the fire is not run,
            self._untake(rec, ctx)  # and not lost: it stays unfinished in the store (see _untake)
            return STALE
        t = self.table
        t.counts["started"] += 1
        late = max(0.0, start.wall_now - scheduled_for)
        t.lateness[bisect.bisect_left(LATENESS_BUCKETS, late)] += 1
        t.lateness_sum += late
        return value_of(rec.data)

    def _untake(self, rec: Key, ctx: JobContext | None) -> None:
        """A fire taken as the KeyedScheduler closed: it does not run here, and it is not recorded as
        ended, so that it stays unfinished in a durable store, and whoever holds the key next (the next
        life, or the process that takes the key over) runs it again, following `recover`."""
        rec.running -= 1
        if ctx is not None:
            self._kept.discard(ctx)
        contexts = rec.contexts
        if contexts is not None and ctx in contexts:
            contexts.remove(ctx)
            if not contexts:
                rec.contexts = None
        self.table.rearm_waiting(rec)
        self.table.settle(rec)
        if self.table.closed and self.table.shared and not rec.running and self.journal.store_open():
            self.journal.release({rec.key: rec.generation})  # (the next holder finds its fire unfinished)
        self.journal.release_store()

    # -- the end --------------------------------------------------------------------------------------

    def end(
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
        with self.table.lock:
            rec.running -= 1
            kept = ctx in self._kept  # (a trigger's run that keeps the key's plan: it plans nothing)
            if kept:
                self._kept.discard(ctx)
            contexts = rec.contexts
            if contexts is not None:
                if ctx in contexts:
                    contexts.remove(ctx)
                if not contexts:
                    rec.contexts = None
            if started:
                self.table.counts["finished"] += 1
                if error is not None:
                    self.table.counts["failed"] += 1
            wall_now = self._wall_or(scheduled_for) if ended is None else ended
            mine = self.table.keys.get(rec.key) is rec and rec.generation == generation
            current = mine and not self.table.closed
            outcome: tuple[KeyState, float | None, str | None] | None = None
            result: Any = None
            # (closed during the run: a durable store still gets the row the key would have had, so that
            # its next life catches up from there; nothing is armed)
            if current or (mine and self.table.durable and self.journal.store_open()):
                last_error = describe(error) if error is not None else rec.last_error
                if rec.catch_up:
                    outcome = (KeyState.PENDING, rec.catch_up[0][0], last_error)
                elif kept or self.table.reschedule is Reschedule.BEFORE_RUN:
                    # (planned already, at its start: armed, or its fire handed over)
                    state = rec.state
                    if state is KeyState.RUNNING and not rec.running:  # (runs may overlap: the last one)
                        state = KeyState.PENDING if rec.next_run_at is not None else KeyState.DISABLED
                    outcome = (state, rec.next_run_at, last_error)
                elif self.table.reschedule is Reschedule.AFTER_FINISH:
                    result = advancing(
                        self.table.evaluate(
                            rec.key, rec.data, since(rec, wall_now, scheduled_for, generation)
                        ),
                        scheduled_for,
                    )
                    rec.last_error = last_error
                    outcome = outcome_of(rec, result)
                else:  # NONE
                    outcome = (KeyState.DISABLED, None, last_error)
            elif self.table.waited(rec):  # a fire of the newer generation waited for this run to end: now
                outcome = (KeyState.PENDING, rec.catch_up[0][0], rec.last_error)  # type: ignore[index]
            fire_of = (generation, scheduled_for)
            retry_at = None
            if started and current and isinstance(error, Exception) and outcome is not None:
                retry_at = self._retry_at(rec, ctx, scheduled_for, wall_now, outcome)
            if started or self.table.history_keep:
                self._ran(rec, ctx, generation, scheduled_for, wall_now, error, started)
            retrying = rec.retrying
            if retry_at is not None:
                assert error is not None
                self._retry_later(rec, fire_of, ctx, retry_at, wall_now, describe(error))
            elif retrying is not None and retrying.fire_of == fire_of and retrying.id is None:
                retrying.fire_of = None  # (its fire ended)
            if self.table.durable and self.journal.store_open():
                row = None
                if outcome is not None:
                    row = rec.row(self.table.encode(rec.data), generation, *outcome)
                if retry_at is not None and row is not None:  # (its fire stays unfinished: tried again)
                    self.journal.write(self.journal.save, [row], [], f"the failed run of key {rec.key!r}")
                else:
                    mine_row = row if mine else None
                    self._finished(rec, generation, scheduled_for, wall_now, error, started, mine_row)
            if outcome is not None and not self.table.closed:
                self.table.apply(rec, *outcome, result if isinstance(result, BaseException) else None)
            self.table.settle(rec)
            if self.table.closed:
                if self.table.shared and not rec.running and self.journal.store_open():
                    self.journal.release({rec.key: rec.generation})  # (closed: back as soon as its run ended)
                self.journal.release_store()
        if started:
            self.table.call(self.table.on_finish, rec.key, data, error)

    def _ran(
        self,
        rec: Key,
        ctx: JobContext,
        generation: int,
        scheduled_for: float,
        wall_now: float,
        error: BaseException | None,
        started: bool,
    ) -> None:
        """Under the lock: a run ended (KeyInfo.last_run, and the key's history: ran, failed), or a fire
        taken did not start (superseded)."""
        if self.table.keys.get(rec.key) is not rec:
            self._began.pop(ctx, None)
            return  # (removed meanwhile: its history went with it)
        if not started:
            self.table.noted(rec, scheduled_for, "superseded", 0, wall_now, error="upserted before it began")
            return
        began = self._began.pop(ctx, math.nan)
        now = self._now()
        duration = None
        if now == now and began == began:  # (by the scheduler's monotonic clock; NaN: it failed)
            duration = micro(max(0.0, now - began)) / 1_000_000
        attempt = 1 if ctx.fence is None else ctx.fence.attempt
        message = None if error is None else describe(error)
        outcome = "ran" if error is None else "failed"
        # (as the store keeps it, in whole microseconds: KeyInfo.last_run is the entry last_run() reads)
        rec.last_run = (micro(scheduled_for), micro(wall_now), outcome, attempt, duration, message)
        self.table.noted(rec, scheduled_for, outcome, attempt, wall_now, duration, message)

    def _now(self) -> float:
        """The scheduler's monotonic clock, or NaN if it fails (a run's duration is then not known)."""
        engine = self.table.engine
        try:
            return engine.now() if engine is not None else math.nan
        except Exception:
            return math.nan

    def _finished(
        self,
        rec: Key,
        generation: int,
        scheduled_for: float,
        wall_now: float,
        error: BaseException | None,
        started: bool,
        row: StoredKey | None,
    ) -> None:
        """Under the lock: a durable store records the fire ended at `wall_now` (with the key's row,
        unless None)."""
        if error is not None:
            message: str | None = describe(error)
        else:
            message = None if started else "superseded before it started"
        fire = FinishedFire(rec.key, generation, micro(scheduled_for), micro(wall_now), message)
        self.journal.finish(row, fire)

    def dropped(self, rec: Key, generation: int, scheduled_for: float, rerun: bool, hand: int) -> None:
        """A key's run was dropped (the scheduler's backpressure, or its close): the key is not lost, its
        next run is planned afresh (the head of its catch-up queue, if it has one)."""
        with self.table.lock:
            if rec.handed == (generation, scheduled_for) and rec.hand == hand:
                rec.handed = None
            if hand <= rec.voided:  # (handed over before a pause: resume decides its fire)
                return
            if self.table.closed or rec.generation != generation or self.table.keys.get(rec.key) is not rec:
                return
            retrying = self._retry_of(rec, generation, scheduled_for) if rerun else None
            if retrying is not None:  # (a retry dropped: the fire ends failed, and the key goes on)
                self.table.noted(rec, scheduled_for, "dropped", error="its retry was dropped (backpressure)")
                self._give_up(retrying)
                return
            if rec.paused:  # (its fire stays the key's plan: resume decides it)
                return
            if rec.id is not None:
                return  # armed meanwhile (an upsert)
            rec.last_error = f"Dropped: the run of {iso(scheduled_for)} was dropped (backpressure)"
            self.table.noted(rec, scheduled_for, "dropped", error=rec.last_error)
            trigger = rec.triggered
            if trigger is not None and (rerun or trigger.at != scheduled_for):
                trigger = None
            if rerun:  # an interrupted fire to run again: it stays first in line
                keep_first(rec, scheduled_for, rerun)
            elif rec.catch_up and rec.catch_up[0][0] == scheduled_for:  # a dropped catch-up fire: gone
                rec.catch_up = rec.catch_up[1:] or None
            if trigger is not None:  # (a dropped trigger: gone)
                rec.triggered = None
            result: Any = None
            outcome: tuple[KeyState, float | None, str | None]
            if rec.catch_up:
                outcome = (KeyState.PENDING, rec.catch_up[0][0], rec.last_error)
            elif trigger is not None and trigger.before is not None:  # (nothing ran: the plan it found)
                outcome = (*trigger.before, rec.last_error)
            else:
                result = self.table.evaluate(rec.key, rec.data, self._wall_or(scheduled_for))
                outcome = outcome_of(rec, result)
            if self.table.durable:
                row = rec.row(self.table.encode(rec.data), generation, *outcome)
                # (a store that fails: the key is armed all the same; its row is written at its fire)
                self.journal.write(self.journal.save, [row], [], f"the dropped run of key {rec.key!r}")
            self.table.apply(rec, *outcome, result if isinstance(result, BaseException) else None)
        self.table.raise_held()

    # -- when the clock or the store fails ------------------------------------------------------------

    def _clock_failed(self, rec: Key, scheduled_for: float, rerun: bool, error: BaseException) -> None:
        """The wall clock failed as a key's fire was to start: logged, counted, and the fire tried again
        after a back-off (1 ms, doubling to 1 s), as the drivers do; it runs once the clock answers."""
        self.table.counts["clock_errors"] += 1
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
        engine = self.table.engine
        if engine is not None and not rec.paused:
            try:
                now = engine.now()
            except Exception:
                now = rec.due  # (the monotonic clock too: the driver backs off, and sees to it)
            # (a key armed at a later fire, a retry's: the fire put first in line comes first)
            if rec.id is None:
                engine.add_timer(rec, now + self._backoff)
            elif rec.due > now + self._backoff:  # (moved by the latest wall reading: it is a wall timer)
                engine.move_wall_timer(rec, engine.last_wall + self._backoff)

    def _wall_or(self, fallback: float) -> float:
        """The wall clock, or (it failed: logged and counted) the latest reading the engine has, but not
        before `fallback`: a run's end is planned from there rather than lost."""
        try:
            return self.table.wall_now()
        except Exception as exc:
            self.table.counts["clock_errors"] += 1
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the wall clock failed as a key's run ended (%r); planned from its last reading",
                exc,
                exc_info=exc,
            )
            engine = self.table.engine
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
        if isinstance(error, StoreError):
            self.table.counts["store_errors"] += 1
        if self.table.leases_lost or rec.last_error == message:
            level = logging.DEBUG
        elif isinstance(error, LeaseLapsed):
            level = logging.WARNING
        log_safely(
            logger,
            (KeyboardInterrupt, SystemExit),
            level,
            "timerwheel: the %s could not take a fire of key %r (%r); retrying in %.0f s",
            self.table.store.name,
            rec.key,
            error,
            delay,
            exc_info=error if level == logging.ERROR else None,
        )
        keep_first(rec, scheduled_for, rerun)
        rec.last_error = message
        engine = self.table.engine
        if engine is not None and not rec.paused:
            # (a key armed at a later fire, a retry's: the fire put first in line comes first)
            if rec.id is None:
                engine.add_wall_timer(rec, wall_now + delay)
            elif rec.wall > wall_now + delay:
                engine.move_wall_timer(rec, wall_now + delay)


_running = threading.local()  # how deep this thread is in a KeyedScheduler run (close() from a run)
_in_async_run: contextvars.ContextVar[bool] = contextvars.ContextVar("timerwheel_in_keyed_run", default=False)


def in_a_run() -> bool:
    """Whether the caller is inside a key's run (close() from a run does not wait for itself)."""
    return bool(getattr(_running, "depth", 0)) or _in_async_run.get()


def _discard(awaitable: Any) -> None:
    """An awaitable that will never be awaited: a coroutine is closed (no "never awaited" warning)."""
    close = getattr(awaitable, "close", None)
    if inspect.iscoroutine(awaitable) and close is not None:
        close()
