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
from typing import Any

from .._engine import log_safely
from .._stores import FinishedFire, KeyStore, StoredKey, StoreError
from .table import KeyTable

logger = logging.getLogger("timerwheel")


class Writer:
    """A shared store's database work, done by one thread of the KeyedScheduler in the order it was
    decided (under the KeyedScheduler's lock, which is a ThreadedScheduler's own): nothing waits on the
    database with that lock held or on an event loop's thread, and a key's writes (its fire's take, its
    run's end, its release) reach the database in the order they were made. Whoever needs a result (a
    take, an upsert) waits for its Future without the lock."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._work, name=f"timerwheel-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """fn(*args) on the writer's thread, after everything submitted before. O(1)."""
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # (the writer never dies: its caller hears of it)
                future.set_exception(exc)
            else:
                future.set_result(result)

    def stop(self, wait: bool = True) -> None:
        """Do what was submitted, then stop; with `wait`, wait for that (not on the writer's own thread)."""
        self._queue.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()


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
        """Record a run's end (and the key's row, unless None): if the store fails, it is recorded with the
        next write (or, if none comes, `recover` decides at the next start)."""
        self.record_unrecorded()
        try:
            self.store.finish_fire(row, *fire)
        except Exception as exc:
            with self.unrecorded_lock:
                self.unrecorded.append(fire)
            log_safely(
                logger,
                (KeyboardInterrupt, SystemExit),
                logging.ERROR,
                "timerwheel: the %s failed to record the end of a run of key %r (%r); it is recorded with "
                "the next write",
                self.store.name,
                fire.key,
                exc,
                exc_info=exc,
            )

    def save(self, rows: list[StoredKey], finished: list[FinishedFire], what: str) -> None:
        """Write keys' rows and mark fires finished; a store that fails is logged (the rows are written
        again at the keys' next fires)."""
        try:
            self.store.save(rows, finished)
        except Exception as exc:
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
