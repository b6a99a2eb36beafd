"""What the keyed layer adds for a shared store (PostgresStore): a run's fencing token (Fence), the error
of a lease that lapsed (LeaseLapsed), a user's change on its way to the database (Pending), and SharedKeys,
the KeyedScheduler as the store's threads see it (the SharedHolder protocol)."""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from .._engine import log_safely
from .._stores import FinishedFire, StoredFire, StoredKey, StoreError
from .journal import Journal
from .keys import Key, Overlap, check_key, trigger_of
from .recovery import apply_all, decide_all, resume, unpause
from .table import Change, KeyTable

logger = logging.getLogger("timerwheel")


class Fence(NamedTuple):
    """A run's fencing token (`ctx.fence`): it grows with every run of a key that may have overlapped an
    earlier one in another process, so that the job's own writes can refuse the older run's.

    Compared as a tuple: a newer generation (an upsert) is greater; within a generation, a later fire;
    within a fire, a later attempt (a rerun after a crash or a takeover). A job that writes somewhere
    else stores the fence it ran with beside what it wrote and writes only over a smaller one.

    Attributes:
        generation: the key's generation.
        scheduled_for: the fire's time, in integer microseconds since the epoch (UTC).
        attempt: 1 for a fire's first run, 2 and more for its reruns (recover=Recover.RERUN).
    """

    generation: int
    scheduled_for: int
    attempt: int


class LeaseLapsed(StoreError):
    """A shared store's lease on a key may have lapsed before its run could start (the process was
    paused longer than the lease): the run did not start; its fire is taken again, if the key is still
    held here."""


class Pending(NamedTuple):
    """A user's change of a shared store, handed to the writer: the caller waits for (or awaits) its
    commit without the lock, then applies it under the lock (SharedKeys.wait, wait_async)."""

    keys: list[Hashable]
    seq: int
    future: Future[Any]
    apply: Callable[[Any], Any]


class SharedKeys:
    """A KeyedScheduler on a shared store: the SharedHolder that the store's threads call, and the users'
    changes on their way to the database.

    The store's keeper thread claims keys and renews their leases; its listener thread hears of the
    other processes' changes. What they find is applied where the keys may be touched (post): under the
    lock, by a thread of ours (a ThreadedScheduler), or on the loop (an AsyncScheduler). A stamp per key
    (KeyTable.taken) says when it was taken here: what the database said before that instant does not
    undo it.

    A user's change is committed by the journal's changer, and applied once committed, without the lock
    meanwhile: two changes of one key may be waited for by two threads at once. The changer commits them
    in the order they were made; each is applied only if no later one was applied already (applies)."""

    def __init__(self, table: KeyTable, journal: Journal) -> None:
        self.table = table
        self.journal = journal
        self._seq = 0  # user changes made so far (see changing)
        self.inflight: dict[Hashable, list[int]] = {}  # key -> [changes in flight, latest applied]
        self._applier: queue.SimpleQueue[Callable[[], None]] | None = None  # see post
        self._shed_written = threading.Event()  # (clear while a shed is on its way: see shedding)
        self._shed_written.set()

    # -- a user's change ------------------------------------------------------------------------------

    def put(self, change: Change) -> Pending:
        """upsert() with a shared store: the row, committed by the changer, then applied (see applies)."""
        key = change.row.key
        seq = self.changing([key])

        def apply(generation: int) -> None:
            if self.applies(key, seq):
                self._replanned([self.table.changed(change, generation)])

        return Pending([key], seq, self.journal.changer().submit(self.table.store.put, change.row), apply)

    def replace(self, changes: list[Change], removed: list[Hashable]) -> Pending:
        """replace_all() with a shared store: committed by the changer, then applied key by key (see
        applies)."""
        keys = [*(change.row.key for change in changes), *removed]
        seq = self.changing(keys)

        def apply(generations: list[int]) -> None:
            self._replanned(
                self.table.replaced(changes, removed, generations, lambda key: self.applies(key, seq))
            )

        rows = [change.row for change in changes]
        return Pending(keys, seq, self.journal.changer().submit(self.table.store.replace, rows, None), apply)

    def _replanned(self, rows: Sequence[StoredKey | None]) -> None:
        """The rows of keys planned again once a change was committed (the database's count of runs was
        not the one their plan was made with: see KeyTable.changed): written, as a decision is."""
        written = [row for row in rows if row is not None]
        if written:
            self.journal.write(self.journal.save, written, [], f"the plan of {len(written)} changed key(s)")

    def delete(self, key: Hashable) -> Pending:
        """remove() with a shared store: held here or by another process, the store knows."""
        check_key(key)
        with self.table.lock:
            self.table.check_caller()
            self.table.check_open()
            seq = self.changing([key])

            def apply(existed: bool) -> bool:
                if self.applies(key, seq) and key in self.table.keys:
                    self.table.forget(key)
                    return True
                return existed

            return Pending([key], seq, self.journal.changer().submit(self.table.store.delete, key), apply)

    def set_paused(self, keys: list[Hashable] | None, paused: bool) -> Pending:
        """pause() and resume() with a shared store: the flag committed by the changer for `keys` (None:
        every key in the database), then applied to the keys held here (the holders elsewhere hear of
        it). Its result: how many of `keys` the database has, or (None) how many it changed."""
        with self.table.lock:
            self.table.check_caller()
            self.table.check_open()
            targets = list(self.table.keys) if keys is None else keys
            seq = self.changing(targets)

            def apply(found: list[Hashable]) -> int:
                known = set(found)
                recs = []
                for key in targets:
                    rec = self.table.keys.get(key)
                    applies = self.applies(key, seq)  # (asked of every key: see applies)
                    named = keys is None or key in known
                    if applies and named and rec is not None:
                        self.table.taken(key)  # (what the store's threads read before now does not undo it)
                        if rec.paused != paused:
                            recs.append(rec)
                if paused:
                    for rec in recs:
                        self.table.pause(rec)
                elif self.table.started:
                    self.resume(recs)
                else:  # (keys it upserted before start(): start() plans them)
                    unpause(self.table, recs)
                return len(found)

            work = self.journal.changer().submit(self.table.store.set_paused, keys, paused)  # type: ignore[attr-defined]
            return Pending(targets, seq, work, apply)

    def trigger(self, key: Hashable, restart: bool, overlap: Overlap | None) -> Pending:
        """trigger() with a shared store: committed by the changer (at the database's clock, unless a
        trigger of the key not run yet is there: that one), then applied here if this process holds the
        key (its holder elsewhere hears of it). Its result: the time of the fire that runs for it, or
        None (the database does not have the key, or it is paused)."""
        with self.table.lock:
            self.table.check_caller()
            self.table.check_open()
            if not self.table.started:
                raise RuntimeError("trigger() runs a key now: start() the KeyedScheduler first")
            seq = self.changing([key])

            def apply(found: tuple[str, bool] | None) -> float | None:
                applies = self.applies(key, seq)
                if found is None:
                    return None
                text, mine = found
                rec = self.table.keys.get(key)
                if applies and mine and rec is not None and not rec.paused:
                    return self.table.trigger(rec, trigger_of(text, rec.generation))
                return trigger_of(text, 0).at

            value = None if overlap is None else overlap.value
            work = self.journal.changer().submit(self.table.store.trigger, key, restart, value)  # type: ignore[attr-defined]
            return Pending([key], seq, work, apply)

    def resume(self, recs: list[Key]) -> None:
        """Keys held here resumed (see recovery.resume): what was decided is written by the writer,
        before any take of theirs (it writes in order)."""
        if not recs:
            return

        def write(rows: list[StoredKey], finished: list[FinishedFire]) -> None:
            self.journal.write(self.journal.save, rows, finished, f"what {len(rows)} resumed key(s) do")

        resume(self.table, recs, self.table.wall_now(), write)

    def changing(self, keys: Iterable[Hashable]) -> int:
        """A user's change of `keys` is to be committed: its sequence number (see applies)."""
        self._seq += 1
        for key in keys:
            entry = self.inflight.get(key)
            if entry is None:
                self.inflight[key] = [1, 0]
            else:
                entry[0] += 1
            self.table.taken(key)  # (what the database said before now does not undo it)
        return self._seq

    def wait(self, pending: Pending) -> Any:
        """Wait for a change's commit (without the lock, unless a callback holds it), then apply it; if
        it failed, nothing was applied, and the error is raised."""
        try:
            result = pending.future.result()
        except BaseException:
            self._failed(pending)
            raise
        with self.table.lock:
            applied = pending.apply(result)
        self.table.raise_held()
        return applied

    async def wait_async(self, pending: Pending) -> Any:
        """wait(), awaited on an event loop. A coroutine cancelled meanwhile still applies what the
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
        with self.table.lock:
            applied = pending.apply(result)
        if cancelled is not None:
            raise cancelled
        self.table.raise_held()
        return applied

    def _failed(self, pending: Pending) -> None:
        with self.table.lock:
            for key in pending.keys:
                self.applies(key, pending.seq, committed=False)

    def applies(self, key: Hashable, seq: int, committed: bool = True) -> bool:
        """Whether change `seq` of `key`, now committed (or failed), is applied: unless a later change
        of the key was applied already."""
        entry = self.inflight[key]
        entry[0] -= 1
        applies = committed and seq > entry[1]
        if applies:
            entry[1] = seq
        if not entry[0]:
            del self.inflight[key]
        return applies

    # -- the store's threads (SharedHolder) -----------------------------------------------------------

    def stamp(self) -> int:
        """The stamp now (read by the store before it asks the database)."""
        return self.table.stamp

    def adopt(self, rows: list[StoredKey], fires: list[StoredFire], stamp: int) -> None:
        """Keys the store claimed for this process (rows read as of `stamp`): recovered, caught up and
        armed here. A key upserted, removed or dropped here since is left as it is now."""

        def work() -> None:
            recs = []
            with self.journal.unrecorded_lock:
                unrecorded = {(f.key, f.generation, f.scheduled_for) for f in self.journal.unrecorded}
                unrecorded |= self.journal.recorded_late  # (recorded since the claim read them: they did end)
                self.journal.recorded_late.clear()
            for row in rows:
                if self.table.stamps.get(row.key, 0) > stamp:
                    continue
                old = self.table.keys.get(row.key)
                if old is not None:
                    if old.generation == row.generation:
                        old.runs = max(old.runs, row.runs)  # (another holder's runs meanwhile count)
                        self.table.taken(row.key)
                        continue
                    self.table.forget(row.key, cancel=self.table.cancel_on_replace)
                # (a record whose run still goes here, the key removed or replaced meanwhile, comes back:
                # its new fires wait for that run, as for any upsert during a run)
                rec = self.table.keys[row.key] = self.table.record(row, self.table.gone.pop(row.key, None))
                self.table.taken(row.key)
                recs.append(rec)
            taken = {rec.key for rec in recs}
            for fire in fires:  # (a run whose end this process failed to record did end: not run again)
                if fire.key in taken and (fire.key, fire.generation, fire.scheduled_for) not in unrecorded:
                    self.table.unfinished.setdefault(fire.key, []).append(fire)
            try:
                plans, decided, finished = decide_all(self.table, recs, self.table.wall_now())
            except BaseException:  # not taken here after all: the next round gives them back
                self.table.unfinished.clear()
                for rec in recs:
                    if self.table.keys.get(rec.key) is rec:
                        del self.table.keys[rec.key]
                        if rec.running:
                            self.table.gone[rec.key] = rec
                raise
            self.table.counts["claimed"] += len(recs)
            if decided or finished:  # (written before any take of these keys: the writer keeps the order)
                self.journal.write(
                    self.journal.save, decided, finished, f"what {len(recs)} claimed key(s) do"
                )
            apply_all(self.table, plans)

        def closed() -> None:  # (claimed as this KeyedScheduler closed: back to the others)
            self.journal.release({row.key: row.generation for row in rows})

        self.post(work, closed)

    def reconcile(self, held: dict[Hashable, int], stamp: int) -> None:
        """What the database says this process holds (key: generation), as of `stamp`: a key held here
        and not there was taken over (this process's lease lapsed): it is dropped; a key held there and
        not here is given back, for a claim to take it."""

        def work() -> None:
            self.table.leases_lost = False
            stamps = self.table.stamps
            for key in [k for k, at in stamps.items() if at <= stamp and k not in self.table.keys]:
                del stamps[key]  # (tombstones older than this round: no earlier claim is pending now)
            for key in [k for k in self.table.keys if not self._fresh(k, stamp)]:
                if held.get(key) != self.table.keys[key].generation:
                    logger.warning("timerwheel: key %r was taken over by another process", key)
                    self.table.forget(key, cancel=False)
            # (a key whose change this process is committing, or committed and has not applied yet, is
            # held there and not yet here: it is not given back)
            orphans = [k for k in held if k not in self.table.keys and not self._fresh(k, stamp)]
            if orphans:
                self.journal.release({k: held[k] for k in orphans})

        self.post(work)

    def changed(self, changes: dict[Hashable, int | None], stamp: int, removed: set[Hashable]) -> None:
        """Another process upserted or removed keys: the generation this process holds each at (None: it
        holds it no more), as of `stamp`."""

        def work() -> None:
            for key, generation in changes.items():
                rec = self.table.keys.get(key)
                if rec is None or self.table.stamps.get(key, 0) > stamp or generation == rec.generation:
                    continue
                gone = key in removed
                self.table.forget(
                    key, cancel=self.table.cancel_on_remove if gone else self.table.cancel_on_replace
                )

        self.post(work)

    def paused(self, flags: dict[Hashable, bool], stamp: int) -> None:
        """Whether keys held here are paused, as the database says as of `stamp` (another process
        paused or resumed them): paused, or resumed, here too."""

        def work() -> None:
            pause: list[Key] = []
            unpause: list[Key] = []
            for key, flag in flags.items():
                rec = self.table.keys.get(key)
                if rec is None or rec.paused == flag or self._fresh(key, stamp):
                    continue
                (pause if flag else unpause).append(rec)
            for rec in pause:
                self.table.pause(rec)
            if unpause:
                self.resume(unpause)

        self.post(work)

    def triggered(self, triggers: dict[Hashable, str], stamp: int) -> None:
        """Triggers not run yet of keys held here, as the database says as of `stamp` (another process
        triggered them): applied (KeyTable.trigger: one applied already, or one a fire at or after it
        ran for, is not applied again)."""
        if not triggers:
            return

        def work() -> None:
            for key, text in triggers.items():
                rec = self.table.keys.get(key)
                if rec is None or rec.paused or self._fresh(key, stamp):
                    continue
                self.table.trigger(rec, trigger_of(text, rec.generation))

        self.post(work)

    def flush(self) -> None:
        """Record the ends of runs the store failed to record (before the keeper claims keys: a claimed
        key's unfinished fire would otherwise be run again)."""
        self.journal.write(self.journal.record_unrecorded)

    def shedding(self) -> bool:
        """Whether keys given back by shed() are on their way to the store (applied here, not written yet):
        a count of the keys held read meanwhile does not show them (the keeper sheds nothing on it)."""
        return not self._shed_written.is_set()

    def shed(self, count: int, stamp: int) -> None:
        """This process holds `count` keys more than its share, as counted from `stamp` on: give back that
        many of those not running, the latest due first. A key changed here since `stamp` (see _fresh) is
        not given back, and is taken off the count (the store may have counted the keys before its
        commit): an upsert is not handed to another process by the keeper's round that it overlapped."""
        self._shed_written.clear()
        done = self._shed_written.set

        def work() -> None:
            try:
                with self.journal.unrecorded_lock:
                    pending = {f.key for f in self.journal.unrecorded}  # (their ends: not in the store yet)
                recent = sum(
                    1 for key in self.table.keys.keys() | self.inflight.keys() if self._fresh(key, stamp)
                )
                idle = [
                    rec
                    for rec in self.table.keys.values()
                    if not rec.running
                    and not rec.catch_up
                    and rec.key not in pending
                    and not self._fresh(rec.key, stamp)
                ]
                idle.sort(key=lambda rec: -math.inf if rec.next_run_at is None else -rec.next_run_at)
                keys = {rec.key: rec.generation for rec in idle[: max(0, count - recent)]}
                for key in keys:
                    self.table.forget(key, cancel=False)
                self.journal.release(keys)
            except BaseException:
                done()
                raise
            self.journal.write(done)  # (after the release: the writer writes in order)

        self.post(work, when_closed=done)

    def lost(self) -> None:
        """The store could not renew its leases for a whole lease. Nothing fires here meanwhile anyway (a
        fire is taken in the database); the keys stay, and the next renewal keeps those nobody took over
        (reconcile drops the others). Until then the retries of their fires are logged at DEBUG only."""
        self.table.leases_lost = True

    # -- applying what they found ---------------------------------------------------------------------

    def _fresh(self, key: Hashable, stamp: int) -> bool:
        """Whether this process changed `key` since `stamp`, or is committing a change of it now: what the
        database said as of `stamp` does not decide about it."""
        return self.table.stamps.get(key, 0) > stamp or key in self.inflight

    def post(self, work: Callable[[], None], when_closed: Callable[[], None] | None = None) -> None:
        """Run `work` where the keys may be touched, from a store's thread (`when_closed` instead, if the
        KeyedScheduler is closed by then)."""

        def guarded() -> None:
            try:
                with self.table.lock:
                    if not self.table.closed:
                        work()
                    elif when_closed is not None and self.journal.store_open():
                        when_closed()
            except Exception as exc:
                log_safely(
                    logger,
                    (KeyboardInterrupt, SystemExit),
                    logging.ERROR,
                    "timerwheel: applying what the %s found failed; it is tried again at its next round",
                    self.table.store.name,
                    exc_info=exc,
                )
            held = getattr(self.table.held, "error", None)
            if held is not None:  # a callback's KeyboardInterrupt or SystemExit, now that the work is done:
                self.table.held.error = (
                    None  # through the event loop, as its own callbacks' go; logged on our
                )
                if self.table.is_async:  # thread, which never dies
                    raise held
                log_safely(
                    logger,
                    (),
                    logging.ERROR,
                    "timerwheel: a KeyedScheduler callback raised %r as the %s's keys were applied",
                    held,
                    self.table.store.name,
                    exc_info=held,
                )

        if self.table.is_async:
            from .._drivers.asyncio import loop_of

            with contextlib.suppress(RuntimeError):  # a closed loop: so is this KeyedScheduler, or soon
                loop_of(self.table.sched).call_soon_threadsafe(guarded)
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
        stop = self.journal.store_closing
        while True:
            try:
                guarded = posted.get(timeout=0.1)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            while not self.table.lock.acquire(timeout=0.1):  # (close() joins the store's threads, holding it)
                if stop.is_set():
                    return
            try:
                guarded()
            finally:
                self.table.lock.release()
