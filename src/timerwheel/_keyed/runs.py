"""A fire on its way to a run: what its take writes (Start), the writer thread that keeps a shared
store's work in order (Writer), and the mark of a superseded run (STALE)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple

from .._stores import StoredKey
from .keys import Key, KeyState

STALE = object()  # what _begin() returns for a run that was superseded


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


class Start(NamedTuple):
    """A fire about to start (KeyedScheduler._prepare_start): what its take writes, and the key's plan
    once it is taken."""

    rec: Key
    generation: int
    scheduled_for: float
    rerun: bool
    wall_now: float
    started_at: int  # what the take records (microseconds): wall_now's, or a retake's first (Key.retake)
    rest: list[tuple[float, bool]]
    state: KeyState
    at: float | None
    last_error: str | None
    error: BaseException | None
    row: StoredKey | None
