"""Where runs execute beyond the driver's own thread: ThreadedScheduler's WorkerPool (N threads, a bounded
queue of due runs, a backpressure policy) and AsyncScheduler's TaskPool (coroutine jobs as tasks, within
max_concurrency).

The WorkerPool shares its owner's lock: every method of it is called with that lock held, and the workers
take it to pick up a run and to report it. Jobs themselves run with the lock released.

A due run goes to an idle worker without taking a place in the queue: the pool holds at most
(idle workers + queue_size) runs that no worker has picked up yet: queue_size bounds only those beyond
the idle workers, the runs that wait because every worker is busy. (The driver hands runs over with the
lock held, so a worker it wakes picks its run up only when the driver lets go of the lock: counting idle
workers as room is what keeps a batch of due runs from being dropped while workers sit idle.)
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # asyncio is imported by TaskPool itself, on first use: `import timerwheel` stays light
    import asyncio

from .._engine import Run
from .._types import Backpressure

__all__ = ["TaskPool", "WorkerPool"]


class WorkerPool:
    """Worker threads fed from a queue of at most `queue_size` runs beyond the idle workers (0: no bound).

    Args:
        lock: the owner's lock, held by every caller of submit() and close().
        workers: number of threads, >= 1.
        queue_size: most runs waiting while every worker is busy; 0 for no bound.
        backpressure: what submit() does when that is reached.
        work: called (lock held) with a run a worker picked up; runs the job, releasing the lock meanwhile.
        inline: called (lock held) to run a run on the submitting thread (Backpressure.RUN_INLINE).
        drop: called (lock held) for a run that is not executed (Backpressure.DROP, or the pool closed).
        on_idle: called (lock held) whenever a worker finished a run.
        on_error: called (lock held) with whatever `work` raised: a worker thread never dies of it.
        waiting: the engine's count of runs taken and not started (the one being submitted included).
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
        on_error: Callable[[BaseException], None],
        waiting: Callable[[], int],
    ) -> None:
        self._queue: deque[Run] = deque()
        self._queue_size = queue_size
        self._backpressure = backpressure
        self._work, self._inline, self._drop, self._on_idle = work, inline, drop, on_idle
        self._on_error = on_error
        self._waiting = waiting
        self._holding: list[Run] = []  # runs in submit(), not in the queue yet
        self._has_work = threading.Condition(lock)
        self._has_room = threading.Condition(lock)
        self._closing = False
        self._idle = 0  # workers waiting for a run (some may have been handed one they have not picked up)
        self.active = 0  # runs being executed by workers
        self._threads = [
            threading.Thread(target=self._worker, name=f"timerwheel-worker-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> None:
        """Start the worker threads, and wait until each waits for work (lock held; released meanwhile):
        from then on a due run finds every worker idle, and none is dropped because one was still
        starting."""
        for thread in self._threads:
            thread.start()
        while self._idle < len(self._threads):
            self._has_room.wait()

    def _in_queue(self, waiting: int) -> int:
        """How many runs of the queue are live: the waiting ones, less those held by a blocked submit()."""
        return waiting - sum(1 for run in self._holding if not run.cancelled)

    @property
    def resting(self) -> bool:
        """Every worker waits for work, and no run waits for a worker (a pool that just started is not
        resting until all its threads got there)."""
        return not self._queue and self.active == 0 and self._idle == len(self._threads)

    @property
    def threads(self) -> list[threading.Thread]:
        """The worker threads."""
        return list(self._threads)

    def _full(self) -> bool:
        if not self._queue_size or len(self._queue) < self._idle + self._queue_size:
            return False
        if self._in_queue(self._waiting()) < len(self._queue):  # runs of cancelled tasks take no room
            self._queue = deque(run for run in self._queue if not run.cancelled)
        return len(self._queue) >= self._idle + self._queue_size

    def submit(self, run: Run) -> None:
        """Hand a run to an idle worker or queue it; when there is no room, apply the policy (lock held)."""
        self._holding.append(run)  # (while it is, the queue's live runs are counted without it)
        try:
            while self._full():
                if self._closing or self._backpressure in (Backpressure.DROP, Backpressure.RUN_INLINE):
                    break
                self._has_room.wait()  # Backpressure.BLOCK: until a worker comes free, or close()
            else:
                if run.cancelled:  # its task was cancelled while we waited for room: forgotten already
                    return
                if not self._closing:
                    self._queue.append(run)
                    self._has_work.notify()
                    return
        finally:
            self._holding.remove(run)
        if self._backpressure is Backpressure.RUN_INLINE and not self._closing:
            self._inline(run)
        else:
            self._drop(run)

    def close(self) -> list[Run]:
        """Stop taking runs, wake everyone, return the runs no worker picked up (lock held)."""
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
                self._idle += 1
                self._has_room.notify()  # an idle worker is room for one more run
                while not self._queue and not self._closing:
                    self._has_work.wait()
                self._idle -= 1
                if not self._queue:
                    return  # closing, and nothing left
                run = self._queue.popleft()
                self.active += 1
                try:
                    self._work(run)
                except BaseException as exc:  # a worker thread never dies
                    self._on_error(exc)
                finally:
                    self.active -= 1
                    self._on_idle()


class TaskPool:
    """AsyncScheduler's coroutine jobs: each run an asyncio task, at most `limit` at once (None: no bound).

    The asyncio peer of WorkerPool. A due run beyond the bound waits for a free slot, in the order it was
    handed over (Backpressure.BLOCK; the engine keeps at most one waiting run per recurring task), or is
    dropped (Backpressure.DROP). A waiting run whose task was cancelled is skipped. Whatever a run's
    finish() lets through (an observer's KeyboardInterrupt), the runs waiting behind it still start, at
    the loop's next iteration.

    Args:
        loop: the event loop.
        limit: most coroutine jobs running at once; None for no bound.
        backpressure: BLOCK or DROP.
        running: whether the scheduler still runs (once not, cancelled jobs are not failures and no
            waiting run starts).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limit: int | None,
        backpressure: Backpressure,
        running: Callable[[], bool],
    ) -> None:
        import asyncio

        self._asyncio = asyncio
        self._loop = loop
        self._limit = limit
        self._backpressure = backpressure
        self._running = running
        self._active = 0  # jobs running
        self._waiting: deque[Run] = deque()  # runs waiting for a slot
        self._jobs: dict[Run, asyncio.Future[Any]] = {}  # runs of coroutine jobs -> their tasks

    @property
    def jobs(self) -> list[asyncio.Future[Any]]:
        """The tasks of the jobs running now."""
        return list(self._jobs.values())

    def submit(self, run: Run) -> None:
        """Start a due coroutine job's run as a task, or make it wait for a slot, or drop it."""
        if self._limit is not None and self._active >= self._limit:
            if self._backpressure is Backpressure.DROP:
                run.drop()
            else:
                self._waiting.append(run)
        else:
            self._start(run)

    def adopt(self, run: Run, awaitable: Any) -> None:
        """A started run whose job returned an awaitable: it ends when that does (not bounded: it is
        known to be one only after the call)."""
        job = self._asyncio.ensure_future(awaitable, loop=self._loop)
        self._active += 1
        self._jobs[run] = job
        job.add_done_callback(partial(self._done, run))

    def cancel(self, run: Run) -> None:
        """Cancel the task of a running run (its timeout passed)."""
        job = self._jobs.get(run)
        if job is not None:
            job.cancel()

    def close(self) -> list[asyncio.Future[Any]]:
        """Drop the waiting runs (forget those of cancelled tasks), cancel the running jobs, and return
        their tasks to wait for."""
        while self._waiting:
            run = self._waiting.popleft()
            if run.cancelled:
                run.forget()
            else:
                run.drop()
        me = self._asyncio.current_task()
        jobs = [job for job in self._jobs.values() if job is not me]
        for job in jobs:
            job.cancel()
        return jobs

    def _start(self, run: Run) -> None:
        run.start()
        try:
            coro = run.call()
        except BaseException as exc:  # the coroutine function raised before making a coroutine
            run.finish(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return
        self.adopt(run, coro)

    def _done(self, run: Run, job: asyncio.Future[Any]) -> None:
        del self._jobs[run]
        self._active -= 1
        error: BaseException | None
        if not job.cancelled():
            error = job.exception()
        elif run.timed_out:
            error = TimeoutError(f"task {run.task_id} ran past its timeout of {run.options.timeout} s")
        else:  # cancelled by close(): not a failure; cancelled by anyone else: the run failed with it
            error = self._asyncio.CancelledError() if self._running() else None
        try:
            run.finish(error)
        finally:  # even when an observer's KeyboardInterrupt goes through: the waiting runs start
            self._start_waiting()

    def _start_waiting(self) -> None:
        while self._waiting and self._active < (self._limit or 0) and self._running():
            run = self._waiting.popleft()
            if run.cancelled:
                run.forget()  # its task was cancelled while it waited
                continue
            try:
                self._start(run)
            except BaseException:  # through, to the loop; the runs behind it start at its next iteration
                if self._waiting:
                    self._loop.call_soon(self._start_waiting)
                raise
