"""What a KeyedScheduler writes to its store, and when: a run's end, a decision, a release; the ends the
store failed to record, written again with the next write; a shared store's writer threads, which keep its
database work in order and off the lock; and the store's release once the last run has ended (at close, or
at the interpreter's exit)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, NamedTuple

from .._engine import log_safely
from .._stores import FinishedFire, KeyStore, StoredEntry, StoredKey, StoreError
from .keys import micro, us
from .table import KeyTable

logger = logging.getLogger("timerwheel")


MAX_BATCH = 500  # items of one batch (a batch's round trip grows with it: the first item waits for all)


class Work(NamedTuple):
    """An item of a writer's queue: fn(*args), or, a batch item (`key` not None: the key it writes), one
    item of fn's list (see next_work)."""

    future: Future[Any]
    fn: Callable[..., Any] | None  # (None: the writer stops)
    args: tuple[Any, ...]
    key: Hashable | None = None


def next_work(pending: list[Work]) -> list[Work]:
    """What a writer does next, taken out of `pending` (its queue, in order): the first item alone if it
    is not a batch item; else with it every batch item of the same kind that comes before the next other
    work, but for those of a key with an item of another kind before them (a key's writes reach the
    database in the order they were made), up to MAX_BATCH, in their order."""
    first = pending[0]
    if first.key is None:
        del pending[0]
        return [first]
    chosen = [0]
    held_back: set[Hashable] = set()  # keys with an item of another kind ahead
    for i in range(1, len(pending)):
        work = pending[i]
        if work.key is None:
            break
        if work.fn == first.fn and work.key not in held_back:
            chosen.append(i)
            if len(chosen) == MAX_BATCH:
                break
        else:
            held_back.add(work.key)
    taken = set(chosen)
    batch = [pending[i] for i in chosen]
    pending[:] = [work for i, work in enumerate(pending) if i not in taken]
    return batch


class Writer:
    """A shared store's database work, done by one thread of the KeyedScheduler in the order it was
    decided (under the KeyedScheduler's lock, which is a ThreadedScheduler's own): nothing waits on the
    database with that lock held or on an event loop's thread, and a key's writes (its fire's take, its
    run's end, its release) reach the database in the order they were made. Whoever needs a result (a
    take, an upsert) waits for its Future without the lock.

    Work submitted as a batch item (submit_batched: fires' takes, runs' ends) is done together with the
    items of the same kind queued with it (up to MAX_BATCH): `fn(items)` once, one round trip (see
    next_work: other work is not jumped over, nor a key's earlier item). Nothing waits to fill a batch:
    it holds what was queued when the writer came to it."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[Work] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=f"timerwheel-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """fn(*args) on the writer's thread, after everything submitted before. O(1)."""
        future: Future[Any] = Future()
        self._queue.put(Work(future, fn, args))
        return future

    def submit_batched(self, fn: Callable[[list[Any]], list[Any]], item: Any, key: Hashable) -> Future[Any]:
        """fn([item, ...])'s result for `item` (`fn` takes a list of items and returns one result for each,
        in order), on the writer's thread, after everything submitted before that it may not overtake (see
        next_work): `key` is the key it writes. O(1)."""
        future: Future[Any] = Future()
        self._queue.put(Work(future, fn, (item,), key))
        return future

    def _work(self) -> None:
        pending: list[Work] = []
        while True:
            if not pending:
                pending.append(self._queue.get())
            while True:  # (what was queued meanwhile joins: nothing waits to fill a batch)
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batch = next_work(pending)
            first = batch[0]
            if first.fn is None:
                return
            if first.key is None:
                if first.future.set_running_or_notify_cancel():
                    _settle([first.future], _one, first.fn, first.args)
                continue
            batch = [work for work in batch if work.future.set_running_or_notify_cancel()]
            if batch:
                _settle([work.future for work in batch], first.fn, [work.args[0] for work in batch])

    def stop(self, wait: bool = True) -> None:
        """Do what was submitted, then stop; with `wait`, wait for that (not on the writer's own thread)."""
        self._queue.put(Work(Future(), None, ()))
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()


def _one(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[Any]:
    return [fn(*args)]


def _settle(futures: list[Future[Any]], work: Callable[..., list[Any]], *args: Any) -> None:
    """Each future gets its result of work(*args) (a list, in order), or, if it raises, its exception (the
    writer never dies: its callers hear of it)."""
    try:
        results = work(*args)
    except BaseException as exc:
        for future in futures:
            future.set_exception(exc)
    else:
        for future, result in zip(futures, results, strict=True):
            future.set_result(result)


class Journal:
    """A KeyedScheduler's writes to its store. A local store's are made at once, under the table's lock; a
    shared store's by its writer (see Writer), in the order they were decided."""

    def __init__(self, table: KeyTable) -> None:
        self.table = table
        self.store = table.store
        self.shared = table.shared
        self.unrecorded: list[FinishedFire] = []  # ends of runs the store failed to record, to retry
        self.unrecorded_lock = threading.Lock()  # (a shared store's writer records them: never held long)
        self.recorded_late: set[tuple[Hashable, int, int]] = set()  # shared: see SharedKeys.adopt
        self.store_closing = threading.Event()  # set as the store is closed: SharedKeys' applier ends
        self._store_released = False
        self._released: Future[Any] | None = None  # a shared store's release, by its writer
        self._pid = os.getpid()
        # (a shared store may say where its database work runs: a simulated one, on its simulated
        # process's loop; by default a thread each)
        make_writer = getattr(self.store, "writer", None) if self.shared else None
        if self.shared and not callable(make_writer):
            make_writer = Writer
        self._writer_thread: Any = make_writer("store-writer") if make_writer else None
        self._changer_thread: Any = make_writer("store-changes") if make_writer else None
        # (a store without add_history and history keeps no history)
        self._add_history: Callable[[list[StoredEntry], int], object] | None = getattr(
            self.store, "add_history", None
        )
        table.note = self.note

    def use(self) -> None:
        """Mark the store as in use by this KeyedScheduler (see in_use)."""
        _use(self.store, self)

    def inherited(self) -> bool:
        """Whether this process inherited the KeyedScheduler through fork (its store is the parent's)."""
        return self._pid != os.getpid()

    def drain_at_exit(self) -> None:
        """The KeyedScheduler closed while runs go on: the interpreter's exit waits for their ends to be
        recorded and the store released (at most EXIT_GRACE seconds)."""
        if not self._store_released:
            _at_exit.add(self)

    # -- writing --------------------------------------------------------------------------------------

    def write(self, work: Callable[..., Any], *args: Any) -> None:
        """A write nobody waits for (a run's end, a decision, a release): done now, under the lock, with
        a local store; handed to the writer, in order, with a shared one (see Writer). `work` says
        itself what becomes of an error."""
        if self.shared:
            self.writer().submit(work, *args)
        else:
            work(*args)

    def finish(self, row: StoredKey | None, fire: FinishedFire) -> None:
        """Record a run's end (and the key's row, unless None): now, under the lock, with a local store; by
        the writer with a shared one, together with the other ends queued there (see Writer)."""
        if self.shared:
            self.writer().submit_batched(self.finish_now, (row, fire), fire.key)
        else:
            self.finish_now([(row, fire)])

    def finish_now(self, ends: list[tuple[StoredKey | None, FinishedFire]]) -> list[None]:
        """Record runs' ends (each with its key's row, unless None), in one call of the store where it
        takes many (`finish_fires`): if the store fails, they are recorded with the next write (or, if
        none comes, `recover` decides at the next start)."""
        self.record_unrecorded()
        many = getattr(self.store, "finish_fires", None)
        try:
            if many is not None:
                many(ends)
            else:
                for row, fire in ends:
                    self.store.finish_fire(row, *fire)
        except Exception as exc:
            self.table.counts["store_errors"] += 1
            with self.unrecorded_lock:
                self.unrecorded.extend(fire for _, fire in ends)
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the %s failed to record the end of a run of key %r%s (%r); it is recorded "
                "with the next write",
                self.store.name,
                ends[0][1].key,
                f" and {len(ends) - 1} more" if len(ends) > 1 else "",
                exc,
                exc_info=exc,
            )
        return [None] * len(ends)

    def note(
        self,
        key: Hashable,
        scheduled_for: float | None,
        outcome: str,
        attempt: int,
        at: float,
        duration: float | None = None,
        error: str | None = None,
        flush: bool = False,
    ) -> None:
        """Add an entry to the key's history (see HistoryEntry), unless the KeyedScheduler keeps none
        (history=0): at once with a local store (SQLite writes it with its next transaction, or now if
        `flush`), by the writer with a shared one. A store that fails is logged: a history is not worth a
        lost fire."""
        keep = self.table.history_keep
        if not keep or self._add_history is None:
            return
        length = None if duration is None else max(0, micro(duration))
        entry = StoredEntry(key, micro(at), us(scheduled_for), outcome, attempt, length, error)
        if self.shared:
            self.writer().submit_batched(self._record_history, entry, key)
        else:
            self._record_history([entry], flush)

    def _record_history(self, entries: list[StoredEntry], flush: bool = False) -> list[None]:
        add = self._add_history
        assert add is not None
        try:
            add(entries, self.table.history_keep)
            write = getattr(self.store, "flush_history", None) if flush else None
            if write is not None:
                write()
        except Exception as exc:
            self.table.counts["store_errors"] += 1
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.WARNING,
                "timerwheel: the %s failed to record %d history entr%s (%r)",
                self.store.name,
                len(entries),
                "y" if len(entries) == 1 else "ies",
                exc,
            )
        return [None] * len(entries)

    def history(self, key: Hashable) -> list[StoredEntry]:
        """The key's history, newest first, as the store has it (a shared store's: read by the writer,
        after the entries queued before; not under the lock)."""
        read = getattr(self.store, "history", None)
        if read is None or not self.table.history_keep:
            return []
        if self.shared:
            return list(self.writer().submit(read, key).result())
        return list(read(key))

    def save(self, rows: list[StoredKey], finished: list[FinishedFire], what: str) -> None:
        """Write keys' rows and mark fires finished; a store that fails is logged (the rows are written
        again at the keys' next fires)."""
        try:
            self.store.save(rows, finished)
        except Exception as exc:
            self.table.counts["store_errors"] += 1
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the %s failed to record %s (%r)",
                self.store.name,
                what,
                exc,
                exc_info=exc,
            )

    def record_unrecorded(self) -> None:
        """Record the ends of runs that the store failed to record (with the next write, in order). A
        local store's under the lock; a shared store's by the writer."""
        while True:
            with self.unrecorded_lock:
                if not self.unrecorded:
                    return
                fire = self.unrecorded[0]
            try:
                self.store.finish_fire(None, *fire)
            except Exception:
                return  # (still failing: the next write tries again)
            with self.unrecorded_lock:
                self.unrecorded.remove(fire)
                if self.shared:
                    self.recorded_late.add((fire.key, fire.generation, fire.scheduled_for))

    # -- a shared store: giving keys back, and its writers --------------------------------------------

    def release(self, keys: dict[Hashable, int]) -> None:
        """Give keys back to the store, each at its generation: one that a change of this process took
        again meanwhile, at a newer generation, stays held (by the writer, see release_now)."""
        self.write(self.release_now, keys)

    def release_now(self, keys: dict[Hashable, int]) -> None:
        """Give keys back to the store (key: the generation given back), but never one whose last run's
        end is not recorded yet (another process would find that fire unfinished and run it again)."""
        self.record_unrecorded()
        with self.unrecorded_lock:
            pending = {f.key for f in self.unrecorded}
        keys = {k: g for k, g in keys.items() if k not in pending}
        if not keys:
            return
        try:
            self.store.release(keys)  # type: ignore[attr-defined]
        except Exception as exc:  # their leases lapse by themselves
            logger.warning(
                "timerwheel: the %s failed to give %d key(s) back (%r)", self.store.name, len(keys), exc
            )

    def detach_now(self, running: list[Hashable]) -> None:
        """The KeyedScheduler closed: the store gives back every key but those whose runs go on, and
        those whose last end is not recorded yet."""
        self.record_unrecorded()
        with self.unrecorded_lock:
            keep = {*running, *(f.key for f in self.unrecorded)}
        self.store.detach(list(keep))  # type: ignore[attr-defined]

    def writer(self) -> Any:
        """The shared store's writer (a Writer, or what the store made: see __init__)."""
        self.check_own()
        writer = self._writer_thread
        assert writer is not None, "only a shared store has a writer"
        return writer

    def changer(self) -> Any:
        """The shared store's writer of users' changes (upsert, replace_all, remove): a writer of their
        own, on a connection of their own, so that a change that waits for a locked row does not hold up
        the fires; in the order they were made (see SharedKeys.applies)."""
        self.check_own()
        changer = self._changer_thread
        assert changer is not None, "only a shared store has a writer"
        return changer

    def check_own(self) -> None:
        """StoreError in a child process that inherited this KeyedScheduler through fork (a shared
        store's: its writers are threads of the parent, and its store the parent's)."""
        if self._pid != os.getpid():
            raise StoreError(
                f"this KeyedScheduler and its {self.store.name} were inherited through fork: they belong "
                "to the parent process; make new ones in the child"
            )

    # -- the store's release --------------------------------------------------------------------------

    def store_open(self) -> bool:
        return _user_of(self.store) is self

    def release_store(self) -> Future[Any] | None:
        """Close the store once no run is going (a run still going releases it when it finishes, so that
        its finish is recorded); closing the KeyedScheduler never writes DISABLED into the store. A
        shared store is closed by the writer, after what it has to write: the Future of that, to wait
        for (close(), aclose()) or not (a run's end)."""
        with self.table.lock:
            if not self.table.closed or self.table.any_running() or self._store_released:
                return None
            self._store_released = True
            if not self.shared:
                self.close_store()
                return None
            writer = self.writer()
            future: Future[Any] = writer.submit(self.close_store)
            self._released = future
            writer.stop(wait=False)
            self.changer().stop(wait=False)
            return future

    def close_store(self) -> None:
        if self.store_open():
            self.record_unrecorded()
        self.store_closing.set()  # (a shared store's changes are applied no more: see SharedKeys)
        self.store.close()
        if _user_of(self.store) is self:
            _IN_USE.pop(id(self.store), None)

    def drain(self, deadline: float) -> None:
        """At the interpreter's exit: wait (until the monotonic `deadline`) for the runs that went on past
        close() to end, and for their ends to be recorded and the store released."""
        with self.table.lock:
            while self.table.any_running():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.table.idle.wait(left)
        released = self._released
        if released is not None:
            with contextlib.suppress(Exception):
                released.result(timeout=max(0.0, deadline - time.monotonic()))


# The Journal (so, the KeyedScheduler) that uses each durable store, one at a time, by the store's id: the
# entry goes with the KeyedScheduler (closed, or collected), and counts only while its store is this one
# (an id is reused once its object is gone). Nothing is written on the store itself (a store of one's own
# may have __slots__).
_IN_USE: dict[int, weakref.ref[Journal]] = {}


def _use(store: KeyStore, journal: Journal) -> None:
    key = id(store)

    def gone(ref: weakref.ref[Journal]) -> None:
        if _IN_USE.get(key) is ref:
            del _IN_USE[key]

    _IN_USE[key] = weakref.ref(journal, gone)


def _user_of(store: KeyStore) -> Journal | None:
    """The Journal that uses `store`, if any."""
    ref = _IN_USE.get(id(store))
    journal = None if ref is None else ref()
    return journal if journal is not None and journal.store is store else None


def in_use(store: KeyStore) -> bool:
    """Whether a KeyedScheduler uses `store` (a durable store serves one at a time)."""
    return _user_of(store) is not None


#: Seconds the interpreter's exit waits, at most, for the runs that went on past close() to end and for
#: their ends to be recorded (a run that does not end by then is cut: its fire stays unfinished, and the
#: next start follows `recover`).
EXIT_GRACE = 10.0
_at_exit: weakref.WeakSet[Journal] = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    deadline = time.monotonic() + EXIT_GRACE
    for journal in list(_at_exit):
        journal.drain(deadline)
