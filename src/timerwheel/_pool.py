"""The worker pool of ThreadedScheduler: N threads, a bounded queue of due runs, and a backpressure policy.

The pool shares its owner's lock: every method here is called with that lock held, and the workers take it
to pick up a run and to report it. Jobs themselves run with the lock released.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ._scheduler import Run
from ._types import Backpressure

__all__ = ["WorkerPool"]


class WorkerPool:
    """Worker threads fed from a queue of at most `queue_size` runs (0: no bound).

    Args:
        lock: the owner's lock, held by every caller of submit() and close().
        workers: number of threads, >= 1.
        queue_size: most runs waiting for a worker; 0 for no bound.
        backpressure: what submit() does when the queue is full.
        work: called (lock held) with a run a worker picked up; runs the job, releasing the lock meanwhile.
        inline: called (lock held) to run a run on the submitting thread (Backpressure.RUN_INLINE).
        drop: called (lock held) for a run that is not executed (Backpressure.DROP, or the pool closed).
        on_idle: called (lock held) whenever a worker finished a run.
    """

    def __init__(
        self,
        lock: Any,
        workers: int,
        queue_size: int,
        backpressure: Backpressure,
        work: Callable[[Run], None],
        inline: Callable[[Run], None],
        drop: Callable[[Run], None],
        on_idle: Callable[[], None],
    ) -> None:
        self._queue: deque[Run] = deque()
        self._queue_size = queue_size
        self._backpressure = backpressure
        self._work, self._inline, self._drop, self._on_idle = work, inline, drop, on_idle
        self._has_work = threading.Condition(lock)
        self._has_room = threading.Condition(lock)
        self._closing = False
        self.active = 0  # runs being executed by workers
        self._threads = [
            threading.Thread(target=self._worker, name=f"timerwheel-worker-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> None:
        """Start the worker threads."""
        for thread in self._threads:
            thread.start()

    @property
    def queued(self) -> int:
        """Runs waiting for a worker."""
        return len(self._queue)

    def submit(self, run: Run) -> None:
        """Queue a run; when the queue is full, apply the backpressure policy (lock held)."""
        while self._queue_size and len(self._queue) >= self._queue_size:
            if self._closing:
                self._drop(run)
                return
            if self._backpressure is Backpressure.DROP:
                self._drop(run)
                return
            if self._backpressure is Backpressure.RUN_INLINE:
                self._inline(run)
                return
            self._has_room.wait()  # Backpressure.BLOCK: until a worker takes a run, or close()
        if self._closing:
            self._drop(run)
            return
        self._queue.append(run)
        self._has_work.notify()

    def close(self) -> list[Run]:
        """Stop taking runs, wake everyone, return the runs still queued (lock held)."""
        self._closing = True
        left = list(self._queue)
        self._queue.clear()
        self._has_work.notify_all()
        self._has_room.notify_all()
        return left

    def join(self, timeout: float | None = None) -> None:
        """Wait for the worker threads to exit (lock NOT held)."""
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout)

    def _worker(self) -> None:
        with self._has_work:
            while True:
                while not self._queue and not self._closing:
                    self._has_work.wait()
                if not self._queue:
                    return  # closing, and nothing left
                run = self._queue.popleft()
                self._has_room.notify()
                self.active += 1
                try:
                    self._work(run)
                finally:
                    self.active -= 1
                    self._on_idle()
