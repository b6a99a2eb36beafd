"""ThreadedScheduler: the job engine driven by its own thread, with an optional worker pool.

The driver decides only where a job runs (on the driver thread, on a worker, or not at all under
backpressure) and reports back; every rule about when and in what order lives in Scheduler.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._core import TimerWheel
from ._core_py import _seconds
from ._pool import WorkerPool
from ._scheduler import Run, Scheduler, log_safely, report_run
from ._types import (
    AlreadyRunningError,
    Backpressure,
    ClockError,
    ClosedError,
    JobEvent,
    Missed,
    NotStartedError,
    RepeatMode,
    Stats,
    TimerInfo,
)

__all__ = ["JobContext", "ThreadedScheduler"]


class _ClockFailure(Exception):
    """The driver could not read its clock: `error` says why."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class JobContext:
    """What a job scheduled with `context=True` receives as its first argument.

    Attributes:
        task_id: the task.
        scheduled_for: the due of this run.
        timeout: the run's timeout in seconds, or None.
        cancelled: a threading.Event set when the scheduler stops or closes, and when the run's timeout
            elapses; a long job should check it (or wait on it) and return early.
    """

    __slots__ = ("cancelled", "scheduled_for", "task_id", "timed_out", "timeout")

    def __init__(self, task_id: int, scheduled_for: float, timeout: float | None) -> None:
        self.task_id = task_id
        self.scheduled_for = scheduled_for
        self.timeout = timeout
        self.cancelled = threading.Event()
        self.timed_out = False

    def __repr__(self) -> str:
        return f"JobContext(task_id={self.task_id}, scheduled_for={self.scheduled_for!r})"


class ThreadedScheduler:
    """Timers that simply fire: the Scheduler on a background thread, usable from any thread.

    The driver thread sleeps until the exact next due (or until a new task makes an earlier due the next
    one), runs what is due, and sleeps again; it never polls at a fixed tick. After a stall (a GC pause, a
    suspended process) it catches up in one pass: one-shots fire once, late; repeating tasks follow
    `missed` (Missed.SKIP by default here: the grid is kept, missed periods are skipped).

    Execution: with workers=0, jobs run on the driver thread (cheapest; a slow job delays the others).
    With workers=N, N threads take due runs from a queue of at most `queue_size` runs (0: unbounded);
    when it is full, `backpressure` decides: BLOCK waits for room (never past close()), DROP does not run
    the job (counted in stats().dropped, reported with a JobEvent with dropped=True), RUN_INLINE runs it
    on the driver thread. A dropped or skipped repeating task stays armed. FIXED_RATE runs may overlap;
    FIXED_DELAY runs never do; SKIP_IF_RUNNING skips, and counts, a fire while the previous run goes on.

    Lifecycle: new -> running -> closed, never back. Also a context manager (start on enter, close on
    exit). Job errors never stop anything: they are recorded in errors, passed to error_handler(task_id,
    exc), and logged on the "timerwheel" logger (or `logger`). A job that raises a BaseException (such as
    SystemExit) is treated the same way, and so is anything an observer, an error handler or a logger
    raises: a scheduler thread never dies. If the clock fails (it raises, returns something that is not
    a time, or reads past the wheel's range), the driver logs it, counts it (stats().clock_errors),
    retries with a back-off of 1 ms doubling to 1 s, and runs what is due once the clock answers again;
    until then schedule() and reschedule() raise ClockError, so that no work is accepted that could not
    run.

    With a ManualClock, the driver sleeps until the clock is moved past the next due: tests need no sleep.

    Args:
        clock: monotonic seconds (default time.monotonic); a ManualClock in tests.
        resolution: seconds per tick of the TimerWheel.
        slots: slots per level of the TimerWheel.
        levels: levels of the TimerWheel.
        workers: worker threads; 0 runs jobs on the driver thread.
        queue_size: most due runs waiting for a worker (0: no bound); only with workers.
        backpressure: what to do with a due run when that queue is full.
        missed: the default missed-run policy of schedule() and schedule_at().
        observer: called with a JobEvent for every run, drop and skip (on a scheduler thread, quickly).
        error_handler: called with (task_id, exception) when a job raises.
        logger: where errors and warnings go (default: logging.getLogger("timerwheel")).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        resolution: float = 0.001,
        slots: int = 64,
        levels: int = 4,
        workers: int = 0,
        queue_size: int = 0,
        backpressure: Backpressure = Backpressure.BLOCK,
        missed: Missed = Missed.SKIP,
        observer: Callable[[JobEvent], object] | None = None,
        error_handler: Callable[[int, BaseException], object] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        for name, value in (("workers", workers), ("queue_size", queue_size)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if not isinstance(backpressure, Backpressure):
            raise TypeError(f"backpressure must be a Backpressure, not {backpressure!r}")
        if not isinstance(missed, Missed):
            raise TypeError(f"missed must be a Missed, not {missed!r}")
        if error_handler is not None and not callable(error_handler):
            raise TypeError(f"error_handler must be callable or None, not {type(error_handler).__name__}")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger or None, not {type(logger).__name__}")
        self._clock: Callable[[], float] = time.monotonic if clock is None else clock
        # One reentrant lock guards everything: an observer or error handler may call back into us.
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)  # the driver sleeps on it
        self._settled = threading.Condition(self._lock)  # _settle() waits on it (tests)
        self._sched = Scheduler(
            self._clock, resolution=resolution, slots=slots, levels=levels, observer=observer
        )
        self._logger = logger or logging.getLogger("timerwheel")
        self._sched._logger = self._logger
        self._sched._propagate = ()  # an observer or a logger never kills a scheduler thread
        self._deadlines = TimerWheel(resolution, slots=slots, levels=levels, start=self._clock())  # timeouts
        self._missed = missed
        self._error_handler = error_handler
        self._state = "new"
        self._manual = callable(getattr(self._clock, "subscribe", None))  # ManualClock: woken when it moves
        self._sleep_until = -math.inf  # the due the driver sleeps until; -inf while it is awake
        self._wakeups = 0  # driver loop passes: a test counts them
        self._woken = False  # a wake-up sent and not yet taken by the driver
        self._fault: BaseException | None = None  # why the driver's last pass failed (the clock), or None
        self._clock_errors = 0
        self._live: set[JobContext] = set()  # contexts of runs in progress, told when we stop
        self._driver = threading.Thread(target=self._drive, name="timerwheel-driver", daemon=True)
        self._pool = (
            WorkerPool(
                self._lock,
                workers,
                queue_size,
                backpressure,
                work=self._run,
                inline=self._run,
                drop=self._drop,
                on_idle=self._settled.notify_all,
                on_error=self._internal_error,
            )
            if workers
            else None
        )

    def __repr__(self) -> str:
        fault = f" clock failing: {self._fault!r}" if self._fault is not None else ""
        return f"<ThreadedScheduler {self._state} pending={len(self._sched._store)}{fault}>"

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the driver thread (and the workers).

        Raises:
            AlreadyRunningError: it is running. ClosedError: it was stopped or closed.
        """
        with self._lock:
            if self._state == "running":
                raise AlreadyRunningError("the scheduler is already running")
            if self._state == "closed":
                raise ClosedError("the scheduler is closed: a stopped scheduler cannot be started again")
            self._state = "running"
            if self._manual:
                self._clock.subscribe(self._on_clock)  # type: ignore[attr-defined]
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
            if self._state == "new":
                raise NotStartedError("the scheduler was never started")
            if self._state == "closed":
                return
            self._state = "closed"
            for ctx in self._live:
                ctx.cancelled.set()
            if self._pool is not None:
                for run in self._pool.close():
                    self._drop(run)
            self._wake.notify_all()
            self._settled.notify_all()
        if self._manual:
            self._clock.unsubscribe(self._on_clock)  # type: ignore[attr-defined]

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the driver and worker threads have exited (they do after stop()).

        Called on one of the scheduler's own threads (from a job, an observer or an error handler), it
        returns at once: those threads exit once the callback has returned, and waiting for them there
        would wait for itself.
        """
        if self._on_own_thread():
            return
        if self._driver.is_alive():
            self._driver.join(timeout)
        if self._pool is not None:
            self._pool.join(timeout)

    def close(self) -> None:
        """Stop, wait for the driver and the pool, and discard the tasks still pending. Idempotent.

        Returns with pending() empty and stats().pending == 0. Closing a scheduler that was never started
        just marks it closed. Called from a job, an observer or an error handler, it does not wait for
        the scheduler's threads (see wait()).
        """
        with self._lock:
            if self._state == "new":
                self._state = "closed"
        self.stop()
        self.wait()
        with self._lock:
            self._sched._discard_pending()

    def _on_own_thread(self) -> bool:
        me = threading.current_thread()
        return me is self._driver or (self._pool is not None and me in self._pool.threads)

    def __enter__(self) -> ThreadedScheduler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- scheduling, from any thread ------------------------------------------------------------------

    def schedule(
        self,
        delay: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed | None = None,
        context: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Run fn `delay` seconds from now, as Scheduler.schedule; callable from any thread.

        missed defaults to the scheduler's policy. With context=True the job is called as
        fn(ctx, *args, **kwargs) with a JobContext. With timeout, a run that lasts longer is reported (a
        JobEvent with timed_out=True and a logged warning) and its context's `cancelled` event is set (with
        workers; with workers=0 the driver is busy running it, so the overrun is reported afterwards).

        Raises:
            NotStartedError / ClosedError: before start() / after stop() or close().
            ValueError, TypeError: as Scheduler.schedule; timeout not > 0; context not a bool.
        """
        return self._schedule(
            self._sched.schedule, delay, fn, interval, args, kwargs, mode, missed, context, timeout
        )

    def schedule_at(
        self,
        when: float,
        fn: Callable[..., Any],
        interval: float | None = None,
        *,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        mode: RepeatMode = RepeatMode.FIXED_RATE,
        missed: Missed | None = None,
        context: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Run fn at the clock time `when`, as Scheduler.schedule_at; otherwise as schedule()."""
        return self._schedule(
            self._sched.schedule_at, when, fn, interval, args, kwargs, mode, missed, context, timeout
        )

    def _schedule(
        self,
        method: Callable[..., int],
        time_arg: float,
        fn: Callable[..., Any],
        interval: float | None,
        args: Iterable[Any],
        kwargs: Mapping[str, Any] | None,
        mode: RepeatMode,
        missed: Missed | None,
        context: bool,
        timeout: float | None,
    ) -> int:
        if not isinstance(context, bool):
            raise TypeError(f"context must be a bool, not {type(context).__name__}")
        if timeout is not None:
            timeout = _seconds(timeout, "timeout")
            if timeout <= 0:
                raise ValueError(f"timeout must be > 0, got {timeout!r}")
        with self._lock:
            self._check_running(accepting=True)
            task_id = method(
                time_arg,
                fn,
                interval,
                args=args,
                kwargs=kwargs,
                mode=mode,
                missed=self._missed if missed is None else missed,
            )
            if context or timeout is not None:
                self._sched._tasks[task_id].extra = (context, timeout)
            self._wake_for(self._sched.next_fire_time(task_id))
            return task_id

    def cancel(self, task_id: int) -> bool:
        """Cancel a task; once this returns True the task never starts again. As Scheduler.cancel."""
        with self._lock:
            self._check_running()
            return self._sched.cancel(task_id)

    def reschedule(self, task_id: int, delay: float) -> bool:
        """Move a task's next run to `delay` seconds from now. As Scheduler.reschedule."""
        with self._lock:
            self._check_running(accepting=True)
            moved = self._sched.reschedule(task_id, delay)
            self._wake_for(self._sched.next_fire_time(task_id))
            return moved

    def next_fire_time(self, task_id: int) -> float | None:
        """The clock time of a task's next run, or None if it is not armed."""
        with self._lock:
            return self._sched.next_fire_time(task_id)

    def pending(self) -> list[TimerInfo]:
        """Every armed task, sorted by next fire time, then id."""
        with self._lock:
            return self._sched.pending()

    def stats(self) -> Stats:
        """A snapshot of the counters (see Stats)."""
        with self._lock:
            queued = self._pool.queued if self._pool is not None else 0
            return dataclasses.replace(self._sched.stats(), queued=queued, clock_errors=self._clock_errors)

    @property
    def errors(self) -> list[str]:
        """Messages "task <id>: <message>" of failed runs, oldest first (a copy; the most recent 1000)."""
        with self._lock:
            return list(self._sched.errors)

    def _check_running(self, accepting: bool = False) -> None:
        if self._state == "new":
            raise NotStartedError("start() the scheduler before scheduling on it")
        if self._state == "closed":
            raise ClosedError("the scheduler is stopped or closed")
        if accepting and self._fault is not None:
            raise ClockError(
                f"the scheduler cannot read its clock ({self._fault!r}): its driver retries, and work is "
                "refused until it can, since it would not run"
            ) from self._fault

    # -- the driver -----------------------------------------------------------------------------------

    def _drive(self) -> None:
        backoff = 0.0
        with self._lock:
            while self._state == "running":
                self._wakeups += 1
                self._woken = False
                try:
                    wait, until = self._pass()
                    self._fault = None
                    backoff = 0.0
                except BaseException as exc:  # the driver never dies: it says why, and tries again soon
                    backoff = min(max(2 * backoff, 0.001), 1.0)
                    self._failed_pass(exc, backoff)
                    if self._state == "running":
                        self._wake.wait(backoff)  # real seconds, whatever the clock says
                    continue
                if self._state != "running":
                    break
                if wait == 0.0:
                    continue  # something became due meanwhile (a job took time, or was moved to now)
                self._sleep_until = until
                self._settled.notify_all()
                if self._manual or wait is None:
                    self._wake.wait()
                else:
                    self._wake.wait(min(wait, threading.TIMEOUT_MAX))
                self._sleep_until = -math.inf
            self._settled.notify_all()

    def _pass(self) -> tuple[float | None, float]:
        """One pass: time out the runs past their deadline, run what is due. Returns how long to wait
        (None: until woken) and the clock time that is. _ClockFailure if the clock could not be read, or
        reads past the wheel's range."""
        try:
            now = self._sched._now()
        except BaseException as exc:
            raise _ClockFailure(exc) from exc
        try:
            for _, ctx in self._deadlines.advance(max(now, self._deadlines.now)):
                self._time_out(ctx)
            self._sched._run_due(now, self._execute)
        except OverflowError as exc:  # only time past the wheel's range overflows here
            raise _ClockFailure(exc) from exc
        try:
            wait = self._next_wait()
            return wait, math.inf if wait is None else self._sched._now() + wait
        except BaseException as exc:
            raise _ClockFailure(exc) from exc

    def _failed_pass(self, exc: BaseException, backoff: float) -> None:
        if isinstance(exc, _ClockFailure):
            exc = exc.error
            self._fault = exc
            self._clock_errors += 1
            what = "cannot read its clock"
        else:
            what = "failed"
        self._settled.notify_all()  # whoever waits for the driver: it is not idle, and says why
        log_safely(
            self._logger,
            (),
            logging.ERROR,
            "timerwheel: the scheduler's driver %s (%r); retrying in %.3f s",
            what,
            exc,
            backoff,
            exc_info=exc,
        )

    def _internal_error(self, exc: BaseException) -> None:
        """Something a worker ran raised past every guard (a bug of ours): log it; the worker goes on."""
        log_safely(self._logger, (), logging.ERROR, "timerwheel: a worker failed (%r)", exc, exc_info=exc)

    def _next_wait(self) -> float | None:
        """Seconds until the driver has something to do (a due task or a job's deadline); None: nothing."""
        wait = self._sched.next_run_in()
        deadline = self._deadlines.next_due()
        if deadline is not None:
            until = max(0.0, deadline - self._sched._now())
            wait = until if wait is None else min(wait, until)
        return wait

    def _wake_for(self, due: float | None) -> None:
        """Wake the sleeping driver if `due` (a new due or deadline) comes before the time it sleeps until.

        O(1): one comparison, no clock read; while the driver is awake it sees every change itself.
        """
        if due is not None and due < self._sleep_until:
            self._woken = True
            self._wake.notify()

    def _on_clock(self, now: float) -> None:
        """ManualClock moved: wake the driver if it is now at or past what it sleeps until."""
        with self._lock:
            if self._sleep_until != -math.inf and now >= self._sleep_until:  # awake: it will see the time
                self._woken = True
                self._wake.notify()

    def _execute(self, run: Run) -> None:
        if self._pool is None:
            self._run(run)
        else:
            self._pool.submit(run)

    def _drop(self, run: Run) -> None:
        if self._sched._is_cancelled(run):
            self._sched._forget(run)
        else:
            self._sched._drop(run, self._sched._latest)

    def _run(self, run: Run) -> None:
        """Run one job with the lock released, then report it (called with the lock held)."""
        if self._state != "running" or self._sched._is_cancelled(run):
            self._drop(run)  # no job starts after stop(); a cancelled task's run is forgotten
            return
        task = run.task
        use_context, timeout = task.extra or (False, None)
        ctx = JobContext(task.id, run.scheduled_for, timeout) if use_context or timeout is not None else None
        started = self._sched._started(run)
        deadline_id = None
        if ctx is not None:
            self._live.add(ctx)
            if timeout is not None:
                deadline_id = self._deadlines.add_at(started + timeout, ctx)
                self._wake_for(started + timeout)
        error: BaseException | None = None
        self._lock.release()
        try:
            if use_context:
                task.fn(ctx, *task.args, **(task.kwargs or {}))
            else:
                run.call()
        except BaseException as exc:  # a scheduler thread never dies of a job
            error = exc
        finally:
            self._lock.acquire()
            finished = self._finished_at(started)
        timed_out = False
        if ctx is not None:
            self._live.discard(ctx)
            if deadline_id is not None:
                self._deadlines.cancel(deadline_id)
            timed_out = ctx.timed_out or (timeout is not None and finished - started > timeout)
        self._sched._finish(run, started, error, finished, timed_out=timed_out)
        report_run(
            self._logger,
            (),
            self._error_handler,
            task.id,
            task.interval,
            error,
            finished - started,
            timed_out,
        )
        self._wake_for(self._sched.next_fire_time(task.id))  # a FIXED_DELAY task re-armed just now

    def _finished_at(self, started: float) -> float:
        """The clock when a run finished; if the clock fails now, the run is still accounted for (the
        driver will report the clock)."""
        try:
            return self._sched._now()
        except BaseException:
            return started

    def _time_out(self, ctx: JobContext) -> None:
        ctx.timed_out = True
        ctx.cancelled.set()

    # -- tests ----------------------------------------------------------------------------------------

    def _settle(self, timeout: float = 10.0) -> None:
        """Wait until nothing is due at the current clock time and no job runs or waits (for tests)."""
        end = time.monotonic() + timeout
        with self._lock:
            while not self._is_settled():
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the scheduler did not settle")
                self._settled.wait(left)

    def _is_settled(self) -> bool:
        if self._state != "running":
            return not self._driver.is_alive()
        if self._sleep_until == -math.inf or self._woken or self._fault is not None:
            return False  # the driver is awake, working, backing off, or about to be
        if self._pool is not None and (self._pool.unclaimed or self._pool.active):
            return False
        wait = self._next_wait()
        return wait is None or wait > 0
