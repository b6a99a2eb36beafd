"""ThreadedScheduler: the job engine driven by its own thread, with an optional worker pool.

The driver decides only where a job runs (on the driver thread, on a worker, or not at all under
backpressure) and how its thread is woken; every rule about when and in what order lives in Scheduler.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from .._clock import Clock, as_clock
from .._engine import Run, TimerStore, log_safely
from .._types import DRIVER_MISSED, Backpressure, JobEvent, Lifecycle, Missed, NotStartedError
from .._validate import count, member, seconds
from . import CALENDAR_WAKE, DriverBase, lock_of
from .pools import WorkerPool

__all__ = ["ThreadedScheduler", "wait_until_idle"]


class _ClockFailure(Exception):
    """The driver could not read its clock: `error` says why."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class ThreadedScheduler(DriverBase):
    """Timers that simply fire: the Scheduler on a background thread, usable from any thread.

    The driver thread sleeps until the exact next due (or until a new task makes an earlier due the next
    one), runs what is due, and sleeps again; it never polls at a fixed tick. After a stall (a GC pause, a
    suspended process) it catches up in one pass: one-shots fire once, late; repeating tasks follow
    `missed` (Missed.SKIP by default here: the grid is kept, missed periods are skipped).

    Execution: with workers=0, jobs run on the driver thread (cheapest; a slow job delays the others).
    With workers=N, N threads run them: a due run goes to an idle worker at once, and at most `queue_size`
    runs (0: no bound) wait while every worker is busy; beyond that `backpressure` decides: BLOCK waits for
    room (never past close()), DROP does not run the job (counted in stats().dropped, reported with a
    JobEvent with dropped=True), RUN_INLINE runs it on the driver thread. A dropped or skipped repeating
    task stays armed. FIXED_RATE runs may overlap; FIXED_DELAY runs never do; SKIP_IF_RUNNING skips, and
    counts, a fire while the previous run goes on. A recurring task has at most one run waiting.

    Lifecycle: new -> running -> closed, never back. Also a context manager (start on enter, close on
    exit). Job errors never stop anything: they are recorded in errors, passed to error_handler(task_id,
    exc), and logged on the "timerwheel" logger (or `logger`). A job that raises a BaseException (such as
    SystemExit) is treated the same way, and so is anything an observer, an error handler or a logger
    raises: a scheduler thread never dies. If the clock fails (it raises, returns something that is not
    a time, or reads past the wheel's range), the driver logs it, counts it (stats().clock_errors),
    retries with a back-off of 1 ms doubling to 1 s, and runs what is due once the clock answers again;
    until then schedule() and reschedule() raise ClockError, so that no work is accepted that could not
    run.

    With a ManualClock, the driver sleeps until the clock is moved past the next due: tests need no sleep
    (timerwheel.testing.wait_until_idle waits for the driver to be done).

    Args:
        clock: a Clock, or a callable of monotonic seconds (default time.monotonic); a ManualClock in tests.
        store: the timer store (default: a TimerWheel of this resolution, slots and levels).
        resolution: seconds per tick of the TimerWheel.
        slots: slots per level of the TimerWheel.
        levels: levels of the TimerWheel.
        workers: worker threads; 0 runs jobs on the driver thread.
        queue_size: most due runs waiting while every worker is busy (0: no bound); only with workers.
        backpressure: what to do with a due run when that is reached.
        missed: the default missed-run policy of schedule() and schedule_at().
        observer: called with a JobEvent for every run, drop and skip (on a scheduler thread, quickly).
        error_handler: called with (task_id, exception) when a job raises.
        logger: where errors and warnings go (default: logging.getLogger("timerwheel")).
        wall_clock: POSIX seconds, for calendar tasks (schedule_wall, schedule_cron, KeyedScheduler);
            default: the clock's own wall() (time.time for real clocks, the loop's for VirtualTimeLoop).
    """

    _PROPAGATE = ()  # nothing a user callback raises goes through a scheduler thread: it never dies

    def __init__(
        self,
        *,
        clock: Clock | Callable[[], float] | None = None,
        store: TimerStore | None = None,
        resolution: float | None = None,
        slots: int | None = None,
        levels: int | None = None,
        workers: int = 0,
        queue_size: int = 0,
        backpressure: Backpressure = Backpressure.BLOCK,
        missed: Missed = DRIVER_MISSED,
        observer: Callable[[JobEvent], object] | None = None,
        error_handler: Callable[[int, BaseException], object] | None = None,
        logger: logging.Logger | None = None,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        count(workers, "workers")
        count(queue_size, "queue_size")
        member(backpressure, Backpressure, "backpressure")
        super().__init__(
            store=store,
            resolution=resolution,
            slots=slots,
            levels=levels,
            missed=missed,
            observer=observer,
            error_handler=error_handler,
            logger=logger,
            wall_clock=wall_clock,
        )
        self._clock = as_clock(clock)
        self._make_engine(self._clock)
        self._wake_up = threading.Condition(self._lock)  # the driver sleeps on it
        self._idle_changed = threading.Condition(self._lock)  # notified when the driver or a worker rests
        self._sleep_until = -math.inf  # the clock time the driver sleeps until; -inf while it is awake
        self._woken = False  # a wake-up sent and not yet taken by the driver
        self._live: set[Run] = set()  # started runs with a context, told when we stop
        self._driver = threading.Thread(target=self._drive, name="timerwheel-driver", daemon=True)
        self._pool = (
            WorkerPool(
                self._lock,
                workers,
                queue_size,
                backpressure,
                work=self._run,
                inline=self._run,
                drop=self._not_run,
                on_idle=self._idle_changed.notify_all,
                on_error=self._internal_error,
                waiting=lambda: self._engine.waiting,
            )
            if workers
            else None
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the driver thread (and the workers).

        Raises:
            AlreadyRunningError: it is running. ClosedError: it was stopped or closed.
        """
        with self._lock:
            self._begin()
            try:
                self._clock.subscribe(self._on_clock)  # a clock's own code: if it fails, nothing started
            except BaseException:
                self._set_state(Lifecycle.NEW)
                raise
            self._driver.start()
            if self._pool is not None:
                self._pool.start()

    def stop(self) -> None:
        """Ask the driver and the workers to stop, without waiting; runs in progress are told (context).

        No job starts after stop() returns; runs still queued are dropped (counted). Idempotent once
        started; see close() to also wait and discard the pending tasks.

        Raises:
            NotStartedError: it was never started.
        """
        with self._lock:
            if self._state is Lifecycle.NEW:
                raise NotStartedError("the scheduler was never started")
            if self._state is Lifecycle.CLOSED:
                return
            self._set_state(Lifecycle.CLOSED)
            for run in self._live:
                if run.context is not None:
                    run.context.cancelled.set()
            if self._pool is not None:
                for run in self._pool.close():
                    self._not_run(run)
            self._wake_up.notify_all()
            self._idle_changed.notify_all()
        self._clock.unsubscribe(self._on_clock)

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the driver and worker threads have exited (they do after stop()).

        Called on one of the scheduler's own threads (from a job, an observer or an error handler), or
        from a callback that the scheduler runs while it holds its lock (an observer told of the runs that
        stop() drops), it returns at once: those threads exit once the callback has returned, and waiting
        for them there would wait for itself.
        """
        if self._on_own_thread() or self._holds_lock():
            return
        if self._driver.is_alive():
            self._driver.join(timeout)
        if self._pool is not None:
            self._pool.join(timeout)

    def close(self, *, wait: bool = True) -> None:
        """Stop, wait for the driver and the pool, and discard the tasks still pending. Idempotent.

        Returns with pending() empty and stats().pending == 0. Closing a scheduler that was never started
        just marks it closed. Called from a job, an observer or an error handler, it does not wait for
        the scheduler's threads (see wait()).

        Args:
            wait: False: do not wait for the threads. A run still going is told (its context's
                `cancelled` is set) and finishes on its thread, which then exits; nothing else starts.
        """
        with self._lock:
            if self._state is Lifecycle.NEW:
                self._set_state(Lifecycle.CLOSED)
        self.stop()
        if wait:
            self.wait()
        with self._lock:
            self._engine.discard()

    def _holds_lock(self) -> bool:
        """Whether this thread holds the scheduler's lock (threading.RLock's own bookkeeping)."""
        is_owned = getattr(self._lock, "_is_owned", None)
        return bool(is_owned()) if is_owned is not None else False

    def _on_own_thread(self) -> bool:
        me = threading.current_thread()
        return me is self._driver or (self._pool is not None and me in self._pool.threads)

    def __enter__(self) -> ThreadedScheduler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- where runs execute (the engine's Driver protocol) ------------------------------------------------

    def execute(self, run: Run) -> None:
        """A due run: on the driver thread (workers=0), or handed to the pool."""
        if self._pool is None:
            self._run(run)
        else:
            self._pool.submit(run)

    def wake(self, due: float) -> None:
        """Wake the sleeping driver if `due` comes before the time it sleeps until. O(1), no clock read."""
        if due < self._sleep_until:
            self._woken = True
            # Awake from now on, as far as wake() is concerned: the driver looks at the store once it has
            # the lock, and sees whatever comes meanwhile. So no second notify() (and no call from the
            # engine) until it sleeps again.
            self._sleep_until = self._engine.wake_below = -math.inf
            self._wake_up.notify()

    def _not_run(self, run: Run) -> None:
        """A run that will not execute: forgotten if its task was cancelled meanwhile, else dropped."""
        if run.cancelled:
            run.forget()
        else:
            run.drop()

    def _run(self, run: Run) -> None:
        """Run one job with the lock released, then report it (called with the lock held)."""
        if self._state is not Lifecycle.RUNNING or run.cancelled:
            self._not_run(run)  # no job starts after stop(); a cancelled task's run is forgotten
            return
        run.start()
        if run.context is not None:
            self._live.add(run)
        error: BaseException | None = None
        self._lock.release()
        try:
            run.call()
        except BaseException as exc:  # a scheduler thread never dies of a job
            error = exc
        finally:
            self._lock.acquire()
        self._live.discard(run)
        run.finish(error)

    def _internal_error(self, exc: BaseException) -> None:
        """Something a worker ran raised past every guard (a bug of ours): log it; the worker goes on."""
        log_safely(self._logger, (), logging.ERROR, "timerwheel: a worker failed (%r)", exc, exc_info=exc)

    # -- how the driver waits ------------------------------------------------------------------------------

    def _drive(self) -> None:
        backoff = 0.0
        with self._lock:
            while self._state is Lifecycle.RUNNING:
                self._woken = False
                try:
                    due, sleep = self._pass()
                    if self._fault is not None:
                        self._set_fault(None)
                    backoff = 0.0
                except BaseException as exc:  # the driver never dies: it says why, and tries again soon
                    backoff = min(max(2 * backoff, 0.001), 1.0)
                    self._failed_pass(exc, backoff)
                    if self._state is Lifecycle.RUNNING:
                        self._wake_up.wait(backoff)  # real seconds, whatever the clock says
                    continue
                if self._state is not Lifecycle.RUNNING:
                    break
                if sleep == 0.0:
                    continue  # something became due meanwhile (a job took time, or was moved to now)
                # (the engine's copy: it calls wake() only for a due before it)
                self._sleep_until = self._engine.wake_below = math.inf if due is None else due
                self._idle_changed.notify_all()
                if sleep == math.inf:
                    self._wake_up.wait()
                else:
                    self._wake_up.wait(min(sleep, threading.TIMEOUT_MAX))
                self._sleep_until = self._engine.wake_below = -math.inf
            self._idle_changed.notify_all()

    def _pass(self) -> tuple[float | None, float]:
        """One pass: run (and time out) what is due. Returns the next due (None: nothing armed) and how
        many real seconds the clock says to sleep until it (0: it is due already; inf: until woken), or
        _ClockFailure if the clock could not be read, or reads past the wheel's range."""
        engine = self._engine
        try:
            now = engine.now()
        except BaseException as exc:
            raise _ClockFailure(exc) from exc
        try:
            engine.drain(now)
        except OverflowError as exc:  # only time past the wheel's range overflows here
            raise _ClockFailure(exc) from exc
        try:
            due = engine.next_due()
            if due is None and not engine.calendar:
                return None, math.inf
            if due is not None and due <= engine.now():
                return due, 0.0
            sleep = math.inf if due is None else self._clock.sleep_time(due)
            if not (type(sleep) is float and sleep >= 0.0):  # NaN, negative, not a number: a bad clock
                sleep = _sleep_seconds(sleep)
            if engine.calendar:  # wake now and then: a step of the wall clock moves calendar tasks
                sleep = min(sleep, CALENDAR_WAKE)
            return due, sleep
        except BaseException as exc:
            raise _ClockFailure(exc) from exc

    def _failed_pass(self, exc: BaseException, backoff: float) -> None:
        self._idle_changed.notify_all()  # whoever waits for the driver: it is not idle, and says why
        if isinstance(exc, _ClockFailure):
            self._clock_failed(exc.error, backoff)
        else:
            log_safely(
                self._logger,
                (),
                logging.ERROR,
                "timerwheel: the scheduler's driver failed (%r); retrying in %.3f s",
                exc,
                backoff,
                exc_info=exc,
            )

    def _on_clock(self, now: float) -> None:
        """The clock was moved by hand (a ManualClock): wake the driver if it is now at or past its due."""
        with self._lock:
            awake = self._sleep_until == -math.inf  # awake: it will see the time anyway
            if not awake and (now >= self._sleep_until or self._engine.calendar):  # (the wall may have moved)
                self._woken = True
                self._wake_up.notify()

    def _is_idle(self) -> bool:
        """Nothing to do at the clock's current time: the driver sleeps, no job runs or waits to run.
        (timerwheel.testing.wait_until_idle waits for it on `_idle_changed`.)"""
        if self._state is not Lifecycle.RUNNING:
            return not self._driver.is_alive()
        if self._sleep_until == -math.inf or self._woken or self._fault is not None:
            return False  # the driver is awake, working, backing off, or about to be
        if self._pool is not None and not self._pool.resting:
            return False
        due = self._engine.next_due()
        return due is None or due > self._clock()


def wait_until_idle(scheduler: ThreadedScheduler, timeout: float = 10.0) -> None:
    """Wait until `scheduler` has nothing left to do at its clock's current time (timerwheel.testing's
    wait_until_idle, which documents it): its driver sleeps, no job runs or waits, nothing is due."""
    if not isinstance(scheduler, ThreadedScheduler):
        raise TypeError(f"scheduler must be a ThreadedScheduler, not {type(scheduler).__name__}")
    end = time.monotonic() + seconds(timeout, "timeout")
    with lock_of(scheduler):
        while not scheduler._is_idle():
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{scheduler!r} did not become idle within {timeout} s")
            scheduler._idle_changed.wait(left)


def _sleep_seconds(sleep: Any) -> float:
    """A clock's sleep_time() reading as seconds >= 0 (inf allowed), or the error that says why not."""
    try:
        seconds = float(sleep)
    except (TypeError, ValueError):
        raise TypeError(f"the clock's sleep_time() must return seconds, not {sleep!r}") from None
    if not seconds >= 0.0:
        raise ValueError(f"the clock's sleep_time() must return seconds >= 0, not {sleep!r}")
    return seconds
