"""A deterministic simulation of keyed schedules: many processes, one store, kills, pauses and clock
faults, all on virtual time and all drawn from one seed.

`SimulatedCluster` runs N KeyedSchedulers ("processes") in this one Python process, each on an event loop
of its own on virtual time (an AsyncScheduler on a VirtualTimeLoop), over one store:

- "shared": a simulated PostgresStore (one database in memory, kept by the same rules as PostgresStore's
  statements: leases on the database's clock, fair shares, takeover, NOTIFY messages that may be late or
  lost), each process with its own store, owner id and lease;
- "sqlite": one process on a real SQLiteStore file; a kill keeps a copy of the file as it was at that
  instant, and the next life starts on that copy;
- "memory": one process on the MemoryStore.

Faults are injected where a user meets them: a process killed at any step (its memory gone, the store as
it was at that instant), paused past its lease and resumed, cut from the store (every call fails, or
hangs until the cut ends), a slow store, one write that fails (before or after its commit), a wall clock
that steps either way, and jobs that take long, raise, or are still going when their process dies.

An oracle watches every run and every change and checks, continuously, that each (key, generation,
scheduled_for) runs at most once (except the rerun, with a higher attempt, of a fire whose process died
or lost its lease), that no run starts before its due on its process's clock, that a key's runs do not
overlap (AFTER_FINISH), that generations never go back, that a change that returned is never lost, that
a due fire runs or is reported when no fault explains it, and that once the faults stop every key is held
by a live process and runs within lease + lease/3 + a tolerance.

Run as a command: `python -m timerwheel.testing.simulate --seeds 1000 --store shared --processes 3`; the
last line reads `N seeds, F faults, I invariant checks, V violations` and the exit status is 1 on a
violation, whose seed, shortest failing plan and trace are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import heapq
import inspect
import logging
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from .._keyed import CatchUp, KeyedScheduler, Recover, Reschedule
from .._stores import SQLiteStore, StoreError, abandon
from . import VirtualTimeLoop
from ._simstore import SimDatabase, SimStore

__all__ = [
    "Plan",
    "SimRun",
    "SimulatedCluster",
    "Violation",
    "campaign",
    "main",
    "plan",
    "shrink",
    "simulate",
]

_EPOCH = 1_790_000_000.0  # the wall clock when a simulation starts (2026-09-21, UTC)
_TOLERANCE = 1.0  # seconds beyond lease + lease/3 within which a key runs again once the faults stop


class Violation(AssertionError):
    """An invariant the simulation found broken: `invariant` names it, the message says how."""

    def __init__(self, invariant: str, message: str, at: float) -> None:
        super().__init__(f"[{invariant}] at t={at:.6f}: {message}")
        self.invariant = invariant
        self.at = at


@dataclasses.dataclass
class SimRun:
    """One run the oracle saw: where and when it started and ended, and its fence."""

    process: str
    key: Hashable
    generation: int
    scheduled_for: int  # microseconds since the epoch (UTC)
    attempt: int
    started: float  # simulated time
    wall: float  # the process's wall clock as it started (POSIX seconds)
    ended: float | None = None
    error: bool = False
    ended_wall: float | None = None  # the process's wall clock as it ended (its key's clock)


@dataclasses.dataclass
class _Window:
    start: float
    end: float
    kind: str


class Process:
    """One simulated process: its loop on virtual time, its clocks, its KeyedScheduler and its faults."""

    def __init__(self, cluster: SimulatedCluster, name: str, rng: random.Random) -> None:
        self.cluster = cluster
        self.name = name
        self.rng = rng
        self.alive = True
        self.drift = rng.uniform(-1e-4, 1e-4)  # monotonic clock rate error (100 ppm at most)
        self.base = cluster.now
        self.loop = VirtualTimeLoop(start=1000.0, wall=cluster.epoch)
        self.loop.set_exception_handler(self._loop_error)
        self.paused_until = -math.inf
        self.cut_until = -math.inf
        self.cut_hangs = False
        self.slow_until = -math.inf
        self.fail_writes = 0
        self.wall_offset = rng.uniform(-0.002, 0.002)  # this process's wall clock against the database's
        self.offsets = [(cluster.now, self.wall_offset)]  # (since, offset): its history, for the oracle
        self.died: float | None = None  # the simulated time it was killed
        self.windows: list[_Window] = []  # faults that hit this process
        self.store: Any = None
        self.keyed: Any = None

    def __repr__(self) -> str:
        return f"<process {self.name}>"

    # -- clocks ---------------------------------------------------------------------------------------

    def local(self, t: float) -> float:
        """This process's loop time at simulated time t."""
        return 1000.0 + (t - self.base) * (1.0 + self.drift)

    def wall(self) -> float:
        """This process's wall clock (a local store's; a shared store reads the database's instead)."""
        return self.cluster.epoch + self.cluster.now + self.wall_offset

    def clock_error(self) -> float:
        """What this process's reading of the database clock is off by, measured afresh, as
        PostgresStore measures it: a step of its wall clock is corrected at the next measurement, a
        change of 5 ms or less is not taken (its measurement's noise)."""
        measured = self.rng.uniform(-0.002, 0.002)
        if abs(measured - self.wall_offset) > 0.005:
            self.set_offset(measured)
        return self.wall_offset

    def set_offset(self, offset: float) -> None:
        self.wall_offset = offset
        self.offsets.append((self.cluster.now, offset))

    def offset_at(self, t: float) -> float:
        """Its wall clock's offset at simulated time t."""
        offset = self.offsets[0][1]
        for since, value in self.offsets:
            if since <= t:
                offset = value
        return offset

    def keyed_wall(self) -> float:
        """The wall clock its KeyedScheduler reads (a shared store's: the database's, as it reads it)."""
        return float(self.store.wall()) if self.cluster.kind == "shared" else self.wall()

    # -- faults ---------------------------------------------------------------------------------------

    def paused(self) -> bool:
        return self.cluster.now < self.paused_until

    def check_store(self, name: str, what: str) -> None:
        if self.cluster.now < self.cut_until and (
            not self.cut_hangs or what in ("renew its leases", "listen")
        ):
            raise StoreError(f"the {name} could not {what}: the database cannot be reached")

    def fail_next_write(self) -> bool:
        if self.fail_writes:
            self.fail_writes -= 1
            now = self.cluster.now
            self.windows.append(_Window(now, now, "write-failed"))  # (the fault strikes now)
            return True
        return False

    def latency(self) -> float:
        """Seconds a call to the store takes, one way (virtual)."""
        now = self.cluster.now
        if now < self.cut_until and self.cut_hangs:
            return self.cut_until - now + 0.001
        if now < self.slow_until:
            return self.rng.uniform(0.01, 0.4)
        return self.rng.uniform(0.0002, 0.002)

    def notify_delay(self) -> float | None:
        """A NOTIFY's delay, or None: lost (a listener reconnecting, or a cut)."""
        if not self.alive or self.cluster.now < self.cut_until or self.rng.random() < 0.05:
            return None
        return self.rng.uniform(0.001, 0.05)

    def _loop_error(self, loop: Any, context: dict[str, Any]) -> None:
        if self.alive:
            self.cluster._error(f"{self.name}: {context.get('message')} {context.get('exception')!r}")

    # -- stepping ---------------------------------------------------------------------------------------

    def next_time(self) -> float:
        """The simulated time of this process's next callback (inf: none)."""
        if not self.alive:
            return math.inf
        if self.paused():
            return self.paused_until
        loop: Any = self.loop
        return self.cluster.now if loop._ready else self._first_timer()

    def _first_timer(self) -> float:
        """The simulated time of the loop's earliest live timer (inf: none)."""
        scheduled = self.loop._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0].cancelled():
            heapq.heappop(scheduled)
        if not scheduled:
            return math.inf
        return float(self.base + (scheduled[0].when() - 1000.0) / (1.0 + self.drift))

    def step(self) -> None:
        """Run every callback due by now on this process's loop."""
        if not self.alive or self.paused():
            return
        loop: Any = self.loop
        local = self.local(self.cluster.now)
        if self._first_timer() <= self.cluster.now:  # (a timer due now: exactly at it, the two
            local = max(local, loop._scheduled[0].when())  # conversions between the clocks may round apart)
        if local > loop._virtual.now:
            loop._virtual.now = local
        for _ in range(100_000):
            due = loop._scheduled and loop._scheduled[0].when() <= loop._virtual.now
            if not loop._ready and not due:
                return
            loop.stop()
            loop.run_forever()
            if not self.alive:
                return
        raise RuntimeError(f"{self.name}: its loop never settles (a callback that calls itself at once?)")

    def kill(self) -> None:
        """SIGKILL: nothing of this process runs again, not even a job's `finally` or `except` block; its
        store's files are as they are now. Its tasks are kept, never resumed, until the cluster closes
        (a coroutine that Python frees is closed, which would run them: see SimulatedCluster.close)."""
        if self.alive:
            self.died = self.cluster.now
        self.alive = False
        loop: Any = self.loop
        loop.set_exception_handler(lambda loop, context: None)
        self.cluster._dead_tasks.extend(asyncio.all_tasks(loop))
        loop._ready.clear()
        loop._scheduled.clear()
        with contextlib.suppress(Exception):
            loop.close()


class SimulatedCluster:
    """KeyedSchedulers in simulated processes over one store, on virtual time, with faults on demand.

    Every process runs the same `next_run` and `run` (a plain or a coroutine function; `run(key, data)`,
    or `run(ctx, key, data)` with context=True); the cluster records every run, every change and every
    missed-fire report, and checks the invariants after every step (see the module docstring). Time moves
    only in run_for(): an hour of a cluster takes milliseconds.

    Args:
        next_run: next_run(now, key, data), as for KeyedScheduler (a Cron is one).
        run: the job.
        store: "shared" (a simulated PostgresStore), "sqlite" (a real SQLiteStore file) or "memory".
        processes: how many processes share the store ("shared" only; the others have one).
        lease: the shared store's lease, in seconds.
        seed: the seed of every random draw (latencies, clock errors, lost notifications).
        wall: the wall clock (POSIX seconds) when the simulation starts: near a DST change, say.
        points: next_run is a calendar (a Cron, a fixed grid): its points do not depend on when it is
            asked, and every run's scheduled_for must be one (next_run(scheduled_for - 1 us) gives it
            back), so that a fire run in the repeated hour of a DST change, or off its grid, is caught.
        context: pass the run a JobContext first (run(ctx, key, data)).
        keyed: more KeyedScheduler arguments (reschedule, catch_up, recover, max_catch_up, ...).

    Raises:
        ValueError: an unknown store, processes < 1 (or > 1 without "shared"), lease <= 0.

    Example:
        >>> from datetime import timedelta
        >>> def every_second(now, key, data):
        ...     return now.replace(microsecond=0) + timedelta(seconds=1)
        >>> cluster = SimulatedCluster(every_second, lambda key, data: None, processes=3, lease=3.0)
        >>> cluster.upsert("a", {})
        >>> cluster.run_for(5.0)
        >>> cluster.kill(cluster.holder("a"))
        >>> cluster.run_for(10.0)
        >>> cluster.check()
        >>> len({run.scheduled_for for run in cluster.runs if run.key == "a"}) >= 10
        True
        >>> cluster.close()
    """

    def __init__(
        self,
        next_run: Callable[[datetime, Any, Any], datetime | None],
        run: Callable[..., Any],
        *,
        store: str = "shared",
        processes: int = 3,
        lease: float = 3.0,
        seed: int = 0,
        wall: float = _EPOCH,
        points: bool = False,
        context: bool = False,
        **keyed: Any,
    ) -> None:
        if store not in ("shared", "sqlite", "memory"):
            raise ValueError(f"store must be 'shared', 'sqlite' or 'memory', got {store!r}")
        if not isinstance(processes, int) or processes < 1 or (processes > 1 and store != "shared"):
            raise ValueError(f"processes must be >= 1 (and 1 without a shared store), got {processes!r}")
        if not lease > 0:
            raise ValueError(f"lease must be > 0 seconds, got {lease!r}")
        self.kind = store
        self.epoch = float(wall)
        self._points = points
        self.lease = float(lease)
        self.now = 0.0
        self.rng = random.Random(seed)
        self._next_run = next_run
        self._user_run = run
        self._context = context
        self._keyed = keyed
        self._reschedule = keyed.get("reschedule", Reschedule.AFTER_FINISH)
        self.db = SimDatabase(lambda: self.epoch + self.now) if store == "shared" else None
        self._dir = tempfile.mkdtemp(prefix="timerwheel-sim-") if store == "sqlite" else None
        self._lives = 0
        self._copy: str | None = None  # the file a kill left, for the next life
        self.size = processes
        self.processes: list[Process] = []
        self.runs: list[SimRun] = []
        self.missed: list[tuple[str, Hashable, int, datetime, datetime]] = []
        self.changes: list[dict[str, Any]] = []  # every change asked for, with what became of it
        self.trace: list[str] = []
        self.violations: list[Violation] = []
        self.faults = 0
        self.checks = 0
        self.process_seconds = 0.0  # simulated seconds times the processes alive meanwhile
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._seen: dict[Hashable, int] = {}  # the highest generation the store ever had of each key
        self._quiet_since: float | None = None
        self._closed = False
        self._dead_tasks: list[asyncio.Task[Any]] = []  # the killed processes' tasks, never resumed
        self._reports: list[tuple[Hashable, float, float]] = []  # on_missed: (key, first, last covered)
        self._beyond = False  # (a report being made counts a lower bound: see _watch_reports)
        self._loads: list[tuple[float, dict[Hashable, Any]]] = []  # (when, every key) a life loaded
        for _ in range(processes):
            self.add_process()

    def __repr__(self) -> str:
        return f"<SimulatedCluster {self.kind} t={self.now:.3f} processes={len(self.live())}>"

    # -- processes ------------------------------------------------------------------------------------

    def add_process(self) -> Process:
        """Start one more process (a new life of the SQLite file's, after a kill)."""
        name = f"p{len(self.processes)}"
        process = Process(self, name, random.Random(self.rng.random()))
        self.processes.append(process)
        if self.kind == "shared":
            assert self.db is not None
            process.store = SimStore(self.db, process, f"{name}-{self.rng.getrandbits(32):08x}", self.lease)
            wall: Callable[[], float] = process.store.wall
        else:
            wall = process.wall
            if self.kind == "sqlite":
                assert self._dir is not None
                path, self._copy = self._copy or self._file(), None
                process.store = _FaultyStore(SQLiteStore(path), process)
        from .._drivers.asyncio import AsyncScheduler

        sched = AsyncScheduler(loop=process.loop, wall_clock=wall)
        process.keyed = KeyedScheduler(
            sched,
            self._next_run,
            self._job(process),
            context=True,
            store=process.store,
            on_missed=lambda key, data, n, first, last: self._on_missed(process, key, n, first, last),
            **self._keyed,
        )
        self._watch_reports(process.keyed)
        if self.kind == "sqlite":
            self._check_loaded(process)
        process.keyed.start()
        self._note(f"{name} starts")
        return process

    def _file(self) -> str:
        assert self._dir is not None
        self._lives += 1
        return os.path.join(self._dir, f"life{self._lives}.db")

    def live(self) -> list[Process]:
        """The processes alive now."""
        return [p for p in self.processes if p.alive]

    def process(self, which: int | str | Process) -> Process:
        """A process by its index in `processes`, its name ("p0"), or itself."""
        if isinstance(which, Process):
            return which
        if isinstance(which, int):
            return self.processes[which]
        return next(p for p in self.processes if p.name == which)

    def holder(self, key: Hashable) -> Process | None:
        """The live process that holds `key` now (shared: by the database; else the only one)."""
        if self.db is None:
            live = self.live()
            return live[0] if live else None
        row = self.db.keys.get(key)
        for p in self.live():
            if row is not None and p.store.owner_id == row["owner"]:
                return p
        return None

    # -- users' changes -------------------------------------------------------------------------------

    def upsert(self, key: Hashable, data: Any = None, process: int | str | Process = 0) -> None:
        """upsert(key, data) on a process (it returns as the run goes on: see changes)."""
        self._change(process, "upsert", key, data)

    def remove(self, key: Hashable, process: int | str | Process = 0) -> None:
        """remove(key) on a process."""
        self._change(process, "remove", key, None)

    def replace_all(self, mapping: Mapping[Hashable, Any], process: int | str | Process = 0) -> None:
        """replace_all(mapping) on a process."""
        self._change(process, "replace", None, dict(mapping))

    def _change(self, which: int | str | Process, what: str, key: Hashable, data: Any) -> None:
        p = self.process(which)
        change = {"what": what, "key": key, "data": data, "process": p.name, "asked": self.now}
        change.update(returned=None, error=None, ended=None)
        self.changes.append(change)
        self._note(f"{p.name} {what} {key!r} {data!r}")
        if not p.alive:
            change["error"] = "the process is dead"
            return
        keyed = p.keyed

        async def do() -> None:
            try:
                if what == "upsert":
                    await keyed.aupsert(key, data)
                elif what == "remove":
                    change["existed"] = await keyed.aremove(key)
                else:
                    await keyed.areplace_all(data)
            except Exception as exc:
                change["error"] = repr(exc)
            else:
                change["returned"] = self.now
                self._returned(p, change)
            finally:
                change["ended"] = self.now

        p.loop.create_task(do())

    # -- faults ---------------------------------------------------------------------------------------

    def kill(self, which: int | str | Process | None) -> None:
        """SIGKILL a process at this instant (nothing if it is None or dead). With SQLite, its file is
        kept as it is now, and restart() starts the next life on it."""
        if which is None:
            return
        p = self.process(which)
        if not p.alive:
            return
        self._fault(p, "kill", 0.0)
        if self.kind == "sqlite":
            self._copy = p.store.snapshot(self._file())  # (the file at the instant of the kill)
            p.store.abandon()
        p.kill()

    def restart(self) -> Process:
        """A new process: with SQLite, the next life on the file as the last one left it."""
        if self.kind != "shared" and self.live():
            raise RuntimeError(f"the {self.kind} store has a live process")
        return self.add_process()

    def pause(self, which: int | str | Process, seconds: float) -> None:
        """SIGSTOP a process for `seconds` of simulated time, then SIGCONT."""
        p = self.process(which)
        p.paused_until = max(p.paused_until, self.now + seconds)
        self._fault(p, "pause", seconds)

    def cut(self, which: int | str | Process, seconds: float, hang: bool = False) -> None:
        """Cut a process from the store for `seconds`: every call fails (or, with hang, waits until the
        cut ends); NOTIFY messages meanwhile are lost. On SQLite, the disk fails for that long (its calls
        are synchronous: they fail, never hang).

        Raises:
            ValueError: the memory store (nothing to cut), or hang on SQLite.
        """
        if self.kind == "memory" or (hang and self.kind == "sqlite"):
            raise ValueError(f"cut(hang={hang}) needs a shared store{'' if hang else ' or SQLite'}")
        p = self.process(which)
        p.cut_until, p.cut_hangs = self.now + seconds, hang
        self._fault(p, "hang" if hang else "cut", seconds)
        if self.kind == "shared":
            self.at(self.now + seconds, lambda: p.alive and p.loop.call_soon(p.store.heard, None))

    def slow(self, which: int | str | Process, seconds: float) -> None:
        """Make a process's store calls slow (10-400 ms each) for `seconds`.

        Raises:
            ValueError: not a shared store (a local store's calls are synchronous: they take no time on
                the simulation's clock).
        """
        if self.kind != "shared":
            raise ValueError("slow() needs a shared store")
        p = self.process(which)
        p.slow_until = self.now + seconds
        self._fault(p, "slow", seconds)

    def fail_write(self, which: int | str | Process) -> None:
        """The process's next write to the store fails (before its commit, or after it: the caller
        hears an error either way)."""
        p = self.process(which)
        p.fail_writes += 1
        self._fault(p, "fail-write", 0.0)

    def step_wall(self, which: int | str | Process, seconds: float) -> None:
        """Step a process's wall clock by `seconds` (either way), as NTP does; a shared store's reading
        of the database clock is corrected at its next keeper round."""
        p = self.process(which)
        p.set_offset(p.wall_offset + seconds)
        self._fault(p, "wall-step", abs(seconds) + (self.lease / 3 if self.kind == "shared" else 0.0))

    def _fault(self, p: Process, kind: str, seconds: float) -> None:
        self.faults += 1
        self._quiet_since = None
        p.windows.append(_Window(self.now, self.now + seconds, kind))
        self._note(f"{p.name} {kind} {seconds:.3f}")

    # -- time -----------------------------------------------------------------------------------------

    def at(self, t: float, action: Callable[[], Any]) -> None:
        """Do `action()` at simulated time t."""
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, action))

    def run_for(self, seconds: float) -> None:
        """Let `seconds` of simulated time pass: every process runs what comes due, in time order."""
        end = self.now + seconds
        while True:
            t = min([p.next_time() for p in self.processes] + [self._events[0][0] if self._events else end])
            if t > end:
                break
            self._lived(t)
            self.now = max(self.now, t)
            while self._events and self._events[0][0] <= self.now:
                heapq.heappop(self._events)[2]()
            for p in self.processes:
                if p.alive and not p.paused() and p.next_time() <= self.now:
                    p.step()
            self._check_store()
            if (
                t == end
                and not any(p.next_time() <= end for p in self.processes)
                and not (self._events and self._events[0][0] <= end)
            ):
                break
        self._lived(end)
        self.now = end

    def _lived(self, t: float) -> None:
        """Count the process-seconds simulated up to t (for the soak's figures)."""
        if t > self.now:
            self.process_seconds += (t - self.now) * sum(1 for p in self.processes if p.alive)

    def quiet(self, seconds: float | None = None) -> None:
        """Stop every fault and let the cluster run without any for `seconds` (default: long enough for
        every key to be taken over and run: lease + lease/3 + a tolerance, plus a minute of schedule),
        then check that every key is held by a live process and ran meanwhile."""
        for p in self.live():
            p.paused_until = min(p.paused_until, self.now)
            p.cut_until = min(p.cut_until, self.now)
            p.slow_until = min(p.slow_until, self.now)
            p.fail_writes = 0
        span = self.bound() + 60.0 if seconds is None else seconds
        self._quiet_since = self.now
        self._note(f"quiet {span:.3f}")
        self.run_for(span)
        self._check_progress()
        if self._points:
            self._check_no_lost_fire()

    def bound(self) -> float:
        """Seconds within which every key is held and armed again once the faults stop."""
        return self.lease + self.lease / 3 + _TOLERANCE if self.kind == "shared" else _TOLERANCE

    def close(self) -> None:
        """Close every live process (its KeyedScheduler, then its loop), and remove the SQLite files.

        The killed processes' jobs, never resumed since their kill, are closed last (Python would close
        them as it frees them): a `finally` block of a job cut by a kill runs here, once the simulation
        is over and nothing it could reach (the store, the oracle) takes it into account."""
        if self._closed:
            return
        self._closed = True
        for p in self.live():
            with contextlib.suppress(Exception):
                p.loop.run_until_complete(p.keyed.aclose())
            if p.store is not None and self.kind == "sqlite":
                with contextlib.suppress(Exception):
                    p.store.close()
            p.kill()
        tasks, self._dead_tasks = self._dead_tasks, []
        for task in tasks:
            with contextlib.suppress(BaseException):
                task.get_coro().close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> SimulatedCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the oracle -----------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise the first Violation found so far (none: return)."""
        if self.violations:
            raise self.violations[0]

    def _note(self, text: str) -> None:
        self.trace.append(f"t={self.now:10.4f} {text}")

    def _violate(self, invariant: str, message: str) -> None:
        violation = Violation(invariant, message, self.now)
        self.violations.append(violation)
        self._note(f"VIOLATION {violation}")

    def _error(self, text: str) -> None:
        self._violate("no-internal-error", text)

    def _job(self, p: Process) -> Callable[..., Any]:
        user = self._user_run
        context = self._context

        async def job(ctx: Any, key: Hashable, data: Any) -> None:
            fence = ctx.fence
            # (the wall clock the run started by: read as its fire was taken, and in the fire log; a shared
            # store's take is a round trip, over which the process may measure its clock again)
            wall = p.wall()
            if self.db is not None:
                fire = self.db.fires.get((key, fence.generation, fence.scheduled_for))
                wall = wall if fire is None else fire["started_at"] / 1e6
            run = SimRun(p.name, key, fence.generation, fence.scheduled_for, fence.attempt, self.now, wall)
            self._started(p, run)
            if self._points:
                self._on_a_point(run, data)
            try:
                result = user(ctx, key, data) if context else user(key, data)
                if inspect.isawaitable(result):
                    await result
            except BaseException:
                run.error = True
                raise
            finally:
                if p.alive:
                    run.ended, run.ended_wall = self.now, p.keyed_wall()
                    self._note(f"{p.name} ends {key!r} g{run.generation} {run.scheduled_for} a{run.attempt}")

        return job

    def _interrupted(self, run: SimRun, until: float) -> bool:
        """Whether the run's process died, or (a shared store) may have lost its lease, between its start
        and `until`."""
        p = self.process(run.process)
        if not p.alive and run.ended is None:
            return True
        kinds = ("pause", "cut", "hang", "slow", "kill") if self.kind == "shared" else ("kill",)
        return any(w.kind in kinds and w.start <= until and w.end >= run.started for w in p.windows)

    def _started(self, p: Process, run: SimRun) -> None:
        self.checks += 3
        self._note(f"{p.name} runs {run.key!r} g{run.generation} {run.scheduled_for} a{run.attempt}")
        if run.wall * 1_000_000 < run.scheduled_for - 1:
            self._violate(
                "no-early-run",
                f"{p.name} ran key {run.key!r} at wall {run.wall:.6f}, before its fire at "
                f"{run.scheduled_for / 1e6:.6f}",
            )
        same = [
            r
            for r in self.runs
            if r.key == run.key and r.generation == run.generation and r.scheduled_for == run.scheduled_for
        ]
        for earlier in same:
            if run.attempt <= earlier.attempt or not self._interrupted(earlier, self.now):
                self._violate(
                    "at-most-once",
                    f"key {run.key!r} fire (g{run.generation}, {run.scheduled_for}) ran again on {p.name} "
                    f"(attempt {run.attempt}) after {earlier.process} ran it (attempt {earlier.attempt}, "
                    f"ended {earlier.ended})",
                )
                break
        if self._reschedule is Reschedule.AFTER_FINISH:
            for other in self.runs:
                if other.key != run.key or other.ended is not None:
                    continue
                if not self.process(other.process).alive:
                    continue
                if other.process == run.process or (
                    other.generation == run.generation and not self._interrupted(other, self.now)
                ):
                    self._violate(
                        "no-overlap",
                        f"key {run.key!r}: a run (g{run.generation}, {run.scheduled_for}) on {p.name} "
                        "started "
                        f"while one (g{other.generation}, {other.scheduled_for}) on {other.process} goes",
                    )
                    break
        self.runs.append(run)

    def _on_a_point(self, run: SimRun, data: Any) -> None:
        self.checks += 1
        just_before = datetime.fromtimestamp((run.scheduled_for - 1) / 1e6, UTC)
        point = self._next_run(just_before, run.key, data)
        if point is None or round(point.timestamp() * 1e6) != run.scheduled_for:
            self._violate(
                "on-its-points",
                f"key {run.key!r} ran a fire at {run.scheduled_for / 1e6:.6f}, which is not a point of its "
                f"schedule (the point at or after it is {point})",
            )

    def _on_missed(self, p: Process, key: Hashable, count: int, first: datetime, last: datetime) -> None:
        self.missed.append((p.name, key, count, first, last))
        # (a report covers its points from first to last; one that counted only max_catch_up + 1 of them,
        # a lower bound, covers those after it too, up to now)
        self._reports.append((key, first.timestamp(), p.keyed_wall() if self._beyond else last.timestamp()))
        self._note(f"{p.name} missed {key!r} {count} from {first.isoformat()} to {last.isoformat()}")

    def _watch_reports(self, keyed: KeyedScheduler) -> None:
        """Note, for _on_missed, whether a report's count is a lower bound (more were missed than
        max_catch_up + 1, the most that a start counts)."""
        table = keyed._table
        report = table.report_missed

        def reported(rec: Any, skipped: list[float], beyond: bool) -> None:
            self._beyond = beyond
            try:
                report(rec, skipped, beyond)
            finally:
                self._beyond = False

        table.report_missed = reported  # type: ignore[method-assign]

    def _returned(self, p: Process, change: dict[str, Any]) -> None:
        """A change returned: it is committed (shared: the database has it)."""
        self.checks += 1
        self._note(f"{p.name} returned {change['what']} {change['key']!r}")
        if self.db is None:  # (the first fire each key's new generation planned: see _histories)
            keys = change["data"] if change["what"] == "replace" else [change["key"]]
            infos = {k: p.keyed.get(k) for k in keys}
            change["planned"] = {
                k: None if i is None or i.next_run_at is None else i.next_run_at.timestamp()
                for k, i in infos.items()
            }
            return
        what, key, data = change["what"], change["key"], change["data"]
        since = change["asked"]
        commits = [c for c in self.db.commits if c[0] >= since]
        if what == "upsert":
            ok = any(c[1] == "upsert" and c[2] == key and _loads(c[3]) == data for c in commits)
        elif what == "remove":
            ok = not change.get("existed") or any(c[1] == "remove" and c[2] == key for c in commits)
        else:
            ok = all(
                any(c[1] == "upsert" and c[2] == k and _loads(c[3]) == v for c in commits)
                for k, v in data.items()
            )
        if not ok:
            self._violate(
                "changes-kept", f"{p.name}'s {what} of {key!r} returned, but the store does not have it"
            )

    def _check_store(self) -> None:
        """After every step: generations never go back in the store."""
        if self.db is None:
            return
        self.checks += 1
        for key, row in self.db.keys.items():
            seen = self._seen.get(key, 0)
            if row["generation"] < seen:
                self._violate(
                    "generations-rise", f"key {key!r} is at generation {row['generation']}, after {seen}"
                )
            self._seen[key] = max(seen, row["generation"])

    def _check_loaded(self, p: Process) -> None:
        """A new life of a SQLite file: every change that returned is there (or one made after it, that
        raised or was going on at the kill: it may have been committed), and no generation went back."""
        self.checks += 1
        keyed = p.keyed
        expected: dict[Hashable, Any] = {}  # key: what the last change that returned made it
        maybe: dict[Hashable, list[Any]] = {}  # key: what a change since may have made it
        for change in self.changes:
            if change["what"] == "replace":
                values = {k: _MISSING for k in [*expected, *maybe]}
                values.update(change["data"])
            else:
                values = {change["key"]: change["data"] if change["what"] == "upsert" else _MISSING}
            for k, value in values.items():
                if change["returned"] is not None:
                    expected[k], maybe[k] = value, []
                else:
                    maybe.setdefault(k, []).append(value)
        for k in sorted({*expected, *maybe}, key=repr):
            info = keyed.get(k)
            got = _MISSING if info is None else info.data
            allowed = [expected.get(k, _MISSING), *maybe.get(k, [])]
            if not any(got is a or got == a for a in allowed):
                self._violate(
                    "changes-kept",
                    f"{p.name} found key {k!r} as {_shown(got)} in the file; the last change that returned "
                    f"made it {_shown(expected.get(k, _MISSING))}, and those since "
                    f"{[_shown(v) for v in maybe.get(k, [])]}",
                )
            if info is not None and info.generation < self._seen.get(k, 0):
                self._violate("generations-rise", f"key {k!r} came back at generation {info.generation}")
        snapshot = keyed.snapshot()
        for k, info in snapshot.items():
            self._seen[k] = max(self._seen.get(k, 0), info.generation)
        self._loads.append((self.now, {k: info.data for k, info in snapshot.items()}))

    # -- no lost fire ---------------------------------------------------------------------------------------

    def _check_no_lost_fire(self) -> None:
        """After a quiet spell, with a calendar next_run (points=True): every point of a key's schedule
        that came due while the key was stored, unchanged, and away from any fault (calm) is accounted
        for. It ran (at any attempt, in any process); or on_missed reported it (a report covers the
        points from its `first` to the wall clock when it was made: those after its `last` are the
        ones beyond max_catch_up, reported as a lower bound); or a run of the key went on over it (a
        point at or before the wall clock at a run's start is passed over: next_run is asked from then;
        under AFTER_FINISH, from the run's end)."""
        self.checks += 1
        runs: dict[Hashable, list[SimRun]] = {}
        for run in self.runs:
            runs.setdefault(run.key, []).append(run)
        reports: dict[Hashable, list[tuple[float, float]]] = {}
        for key, since, wall in self._reports:
            reports.setdefault(key, []).append((since, wall))
        if self._keyed.get("recover", Recover.RERUN) is Recover.RERUN:
            self._check_reruns()
        until = self.now - self.bound() - 1.0  # (points due since may still be on their way)
        for key, spans in self._histories().items():
            ran = {r.scheduled_for for r in runs.get(key, ())}
            for start, end, data, first in spans:
                for point in self._points_of(key, data, start, min(end, until), first):
                    self.checks += 1
                    if round(point * 1e6) in ran or self._excused(key, point, runs, reports):
                        continue
                    self._violate(
                        "no-lost-fire",
                        f"key {key!r}: its fire at {point:.6f} (t={point - self.epoch:.3f}) neither ran nor "
                        "was reported missed, and no run went on over it",
                    )
                    return

    def _superseded(self, key: Hashable, point: float, runs: dict[Hashable, list[SimRun]]) -> bool:
        """Whether a change of the key came while the point still waited its turn (its key was working
        through earlier fires: a catch-up queue behind a long run): a change supersedes the fires of the
        old generation that it finds unrun. Not if a later fire of the key started before the change
        (the point was passed by, not waiting)."""
        asks = [
            c["asked"]
            for c in self.changes
            if self._wall_at(c["asked"]) > point and (c["key"] == key or (c["what"] == "replace"))
        ]
        if not asks:
            return False
        change = min(asks)
        return not any(r.scheduled_for / 1e6 > point and r.started < change for r in runs.get(key, ()))

    def _behind(self, key: Hashable, point: float) -> bool:
        """Whether the key's holder has not come to the point yet: its next run is at or before it (a
        long catch-up queue, run one fire after another, is still on its way there)."""
        holder = self.holder(key)
        info = None if holder is None else holder.keyed.get(key)
        return (
            info is not None and info.next_run_at is not None and info.next_run_at.timestamp() <= point + 1e-6
        )

    def _check_reruns(self) -> None:
        """recover=RERUN: a fire whose run a kill cut runs again, at a higher attempt, unless its key was
        changed or removed since (its generation is no longer the store's), or another run of it ended
        (a run whose lease lapsed, which went on to its end: the fire ran). Judged once the fire is due
        by its holder's wall clock (and bound() and a second more, as the points are): a rerun waits for
        its time, as any fire does, and a next life whose clock is behind the killed one's (that had
        stepped ahead) has it still to come."""
        for r in self.runs:
            if r.ended is not None or self.process(r.process).died is None:
                continue
            self.checks += 1
            if self._generation(r.key) != r.generation:
                continue
            holder = self.holder(r.key)
            if holder is not None and r.scheduled_for / 1e6 > holder.keyed_wall() - self.bound() - 1.0:
                continue  # (not due yet on the clock it waits by: judged at a later quiet spell)
            if not any(
                o.key == r.key
                and o.generation == r.generation
                and o.scheduled_for == r.scheduled_for
                and (o.attempt > r.attempt or o.ended is not None)
                for o in self.runs
            ):
                self._violate(
                    "no-lost-fire",
                    f"key {r.key!r}: its fire (g{r.generation}, {r.scheduled_for}), cut by the kill of "
                    f"{r.process}, was not run again (recover=RERUN)",
                )
                return

    def _generation(self, key: Hashable) -> int | None:
        """The key's generation in the store now (None: not there)."""
        if self.db is not None:
            row = self.db.keys.get(key)
            return None if row is None else int(row["generation"])
        for p in self.live():
            info = p.keyed.get(key)
            return None if info is None else info.generation
        return None

    def _histories(self) -> dict[Hashable, list[tuple[float, float, Any, float | None]]]:
        """Each key's calm spans of simulated time, with the data it had and the first fire its change
        planned (a change made on a clock that was off plans its first fire by that clock: the points
        before it are not due), or None: (start, end, data, first). A span ends
        bound() before a change of the key begins (pending until it returns or raises, and a second
        after) and half a second before a fault (until bound() after it: a takeover, a restart)."""
        # key: [(since, data | _MISSING | _UNSURE, the first fire its writer planned | None)]
        timeline: dict[Hashable, list[tuple[float, Any, float | None]]] = {}
        busy: dict[Hashable, list[tuple[float, float]]] = {}  # key: [(from, to)] a change of it was going
        keys: set[Hashable] = set()
        for change in self.changes:
            touched = (
                {change["key"]: change["data"] if change["what"] == "upsert" else _MISSING}
                if change["what"] != "replace"
                else {**dict.fromkeys(keys, _MISSING), **change["data"]}
            )
            keys.update(touched)
            end = self.now if change["ended"] is None else change["ended"]
            for k, value in touched.items():
                # (a change supersedes the fires of the key's old generation that it finds unrun: those
                # due while no process held the key, between two holders, within bound() of it)
                busy.setdefault(k, []).append((change["asked"] - self.bound(), end + 1.0))
                if self.db is None:
                    settled = value if change["returned"] is not None else _UNSURE
                    planned = change.get("planned", {}).get(k)
                    timeline.setdefault(k, []).append((change["asked"], settled, planned))
        if self.db is not None:  # (the database's commits are what the keys are)
            for at, what, k, data, first in self.db.commits:
                value = _loads(data) if what == "upsert" else _MISSING
                planned = None if first is None else first / 1e6
                timeline.setdefault(k, []).append((at - self.epoch, value, planned))
        for at, snapshot in self._loads:  # (a new life has what the file has)
            for k in {*timeline, *snapshot}:
                timeline.setdefault(k, []).append((at, snapshot.get(k, _MISSING), None))
        faults = [(w.start - 0.5, w.end + self.bound()) for p in self.processes for w in p.windows]
        spans: dict[Hashable, list[tuple[float, float, Any, float | None]]] = {}
        for k, events in timeline.items():
            events.sort(key=lambda e: e[0])
            blocked = sorted(busy.get(k, []) + faults)
            for i, (since, data, planned) in enumerate(events):
                if data is _MISSING or data is _UNSURE:
                    continue
                end = events[i + 1][0] if i + 1 < len(events) else math.inf
                spans.setdefault(k, []).extend(
                    (a, b, data, planned) for a, b in _between(since, end, blocked)
                )
        return spans

    def _points_of(
        self, key: Hashable, data: Any, start: float, end: float, first: float | None = None
    ) -> Iterable[float]:
        """The points of the key's schedule due in the simulated span [start, end] (on the wall clock of
        whoever held the key then), from `first` on, if given."""
        if end <= start:
            return
        t = self._wall_at(start)
        if first is not None:
            t = max(t, first - 1e-6)
        stop = self._wall_at(end)
        for _ in range(100_000):
            point = self._next_run(datetime.fromtimestamp(t, UTC), key, data)
            if point is None:
                return
            t = point.timestamp()
            if t > stop:
                return
            yield t
        raise RuntimeError(f"key {key!r}: too many points between {start} and {end}")

    def _wall_at(self, t: float) -> float:
        """The keys' clock at simulated time t: the database's (shared); with one process at a time, the
        furthest wall clock any life reached by then (a point at or before it came due, and ran or was
        passed over; a clock that steps back, or a next life's that is behind, makes none due again)."""
        if self.db is not None:
            return self.epoch + t
        furthest = -math.inf
        for p in self.processes:
            stop = t if p.died is None else min(t, p.died)
            if p.base > stop:
                continue
            for i, (since, offset) in enumerate(p.offsets):
                begin = max(since, p.base)
                end = min(p.offsets[i + 1][0], stop) if i + 1 < len(p.offsets) else stop
                if begin <= end:
                    furthest = max(furthest, self.epoch + end + offset)
        return furthest if furthest > -math.inf else self.epoch + t

    def _excused(
        self,
        key: Hashable,
        point: float,
        runs: dict[Hashable, list[SimRun]],
        reports: dict[Hashable, list[tuple[float, float]]],
    ) -> bool:
        """Whether a point that did not run was reported missed, or passed over by a run of its key: under
        AFTER_FINISH, a point after a run's start and not after its end (next_run is asked from the
        end). A point between a run's fire and its start is not passed over by it: the run of a fire
        that is late (a rerun, a catch-up) says nothing of the points after it, which the catch-up
        decides about (and a late regular fire is near a fault, where points are not judged)."""
        for first, last in reports.get(key, ()):
            if first - 1e-6 <= point <= last + 1e-6:
                return True
        if self._superseded(key, point, runs) or self._behind(key, point):
            return True
        if self._reschedule is not Reschedule.AFTER_FINISH:
            return False
        for r in runs.get(key, ()):
            if r.wall >= point + 1e-6:
                continue
            if r.ended_wall is not None:
                over = r.ended_wall
            else:  # (a run cut by a kill: its end never came, and the next holder decides the rest)
                over = math.inf if self.process(r.process).died is None else r.wall
            if point <= over:
                return True
        return False

    def _check_progress(self) -> None:
        """After a quiet spell: every key is held by one live process, at the store's generation, and ran
        since lease + lease/3 + the tolerance after the spell began."""
        assert self._quiet_since is not None
        since = self._quiet_since + self.bound()
        live = self.live()
        self.checks += 1
        if not live:
            return
        if self.db is not None:
            keys = {k: r for k, r in self.db.keys.items()}
            for k, row in keys.items():
                holders = [p for p in live if k in p.keyed]
                owner = [p for p in live if p.store.owner_id == row["owner"]]
                if not owner or len(holders) != 1 or holders[0] is not owner[0]:
                    self._violate(
                        "progress",
                        f"key {k!r} is held in the store by {row['owner']!r} and in memory by "
                        f"{[p.name for p in holders]} after a quiet spell",
                    )
                    continue
                info = owner[0].keyed.get(k)
                if info.generation != row["generation"]:
                    self._violate(
                        "progress",
                        f"key {k!r}: {owner[0].name} holds g{info.generation}, the store "
                        f"g{row['generation']}",
                    )
        keyed_keys = {k: (p, info) for p in live for k, info in p.keyed.snapshot().items()}
        for k, (p, info) in keyed_keys.items():
            wall = p.keyed_wall()  # (the process's wall clock: the one its keys' next runs are on)
            if info.next_run_at is None and not info.running:
                continue  # (disabled, or invalid: nothing to run)
            if info.running and any(
                r.key == k and r.ended is None and r.process == p.name for r in self.runs
            ):
                continue  # (a run of it goes: a long one, or one that never returns, is the job's own)
            if info.next_run_at is not None:
                late = wall - info.next_run_at.timestamp()
                if late > 1.0:  # (due a second ago or more, and not running)
                    self._violate(
                        "progress", f"key {k!r} did not run: its next run is {late:.3f} s overdue on {p.name}"
                    )
                continue
            if not any(r.key == k and r.started >= since for r in self.runs):  # (its take on its way)
                self._violate(
                    "progress", f"key {k!r} did not run in the {self.now - since:.1f} s since {since:.3f}"
                )


_MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<no key>"})()
_UNSURE: Any = type("Unsure", (), {"__repr__": lambda self: "<a change that raised: either>"})()


def _between(start: float, end: float, blocked: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of [start, end) outside every (sorted) blocked span."""
    parts = []
    for a, b in blocked:
        if b <= start or a >= end:
            continue
        if a > start:
            parts.append((start, a))
        start = max(start, b)
        if start >= end:
            return parts
    if start < end:
        parts.append((start, end))
    return parts


def _shown(value: Any) -> str:
    return repr(value)


def _loads(text: Any) -> Any:
    import json

    return _MISSING if text is None else json.loads(text)


class _FaultyStore:
    """A SQLiteStore whose writes fail when its process says so (before their commit, or after it)."""

    def __init__(self, store: SQLiteStore, process: Process) -> None:
        self._store = store
        self._process = process
        self.durable = True
        self.shared = False
        self.name = store.name

    def _guard(self, what: str) -> bool:
        """Whether the write fails after its commit (StoreError now if before)."""
        if not self._process.fail_next_write():
            return False
        if self._process.rng.random() < 0.5:
            raise StoreError(f"the {self.name} could not {what}: disk I/O error")
        return True

    def _check(self, what: str) -> None:
        """StoreError if the process was killed, or while its disk fails (a cut)."""
        if not self._process.alive:
            raise StoreError(f"the {self.name}: its process was killed")
        if self._process.cluster.now < self._process.cut_until:
            raise StoreError(f"the {self.name} could not {what}: disk I/O error (the disk is gone)")

    def _write(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        self._check(what)
        after = self._guard(what)
        result = fn(*args)
        if after:
            raise StoreError(f"the {self.name} could not {what}: disk I/O error after commit")
        return result

    def load(self) -> Any:
        self._check("read the keys")
        return self._store.load()

    def put(self, row: Any) -> int:
        return int(self._write("store a key", self._store.put, row))

    def replace(self, rows: Any, removed: Any) -> list[int]:
        return list(self._write("replace the keys", self._store.replace, rows, removed))

    def save(self, rows: Any, finished: Iterable[Any] = ()) -> None:
        self._write("write keys", self._store.save, rows, list(finished))

    def delete(self, key: Hashable) -> bool:
        return bool(self._write("delete a key", self._store.delete, key))

    def start_fire(self, row: Any, scheduled_for: int, started_at: int, rerun: bool) -> int:
        return int(self._write("take a fire", self._store.start_fire, row, scheduled_for, started_at, rerun))

    def finish_fire(self, *args: Any) -> None:
        self._write("record a run's end", self._store.finish_fire, *args)

    def close(self) -> None:
        self._store.close()

    def snapshot(self, path: str) -> str:
        """Copy the file (and its write-ahead log) as it is now to `path`, as a kill leaves it."""
        for suffix in ("", "-wal"):
            if os.path.exists(self._store.path + suffix):
                shutil.copyfile(self._store.path + suffix, path + suffix)
        return path

    def abandon(self) -> None:
        """The process died: drop the connection and the owner lock without writing anything."""
        abandon(self._store)


# -- the campaign: a random workload and random faults from one seed ---------------------------------------


def grid(now: datetime, key: Any, data: Any) -> datetime | None:
    """The campaign's next_run: the next multiple of data["p"] seconds after now, or the next point of
    the cron expression data["cron"] in the zone data["tz"]."""
    if "cron" in data:
        point: datetime | None = _cron(data["cron"], data["tz"])(now)
        return point
    period = float(data["p"])
    t = now.timestamp()
    return datetime.fromtimestamp((math.floor(t / period + 1e-9) + 1) * period, UTC)


async def work(key: Any, data: Any) -> None:
    """The campaign's job: takes data["d"] seconds, and raises if data["x"]."""
    if data["d"]:
        await asyncio.sleep(data["d"])
    if data["x"]:
        raise RuntimeError(f"key {key!r} fails, as its data says")


@functools.lru_cache(maxsize=64)
def _cron(expr: str, tz: str) -> Any:
    from .._cron import Cron

    return Cron(expr, tz)


#: Zones whose offset changes the DST campaigns cross (a 30-minute change among them).
DST_ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago")


def dst_changes(zone: str, year: int) -> list[float]:
    """The instants (POSIX seconds) at which `zone` changes its offset in `year`, found by stepping an
    hour at a time, then halving down to the second."""
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(zone)

    def offset(t: float) -> Any:
        return datetime.fromtimestamp(t, tz).utcoffset()

    start = datetime(year, 1, 1, tzinfo=UTC).timestamp()
    found = []
    for hour in range(366 * 24):
        a, b = start + hour * 3600, start + (hour + 1) * 3600
        if offset(a) != offset(b):
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (mid, b) if offset(mid) == offset(a) else (a, mid)
            found.append(float(b))
    return found


@dataclasses.dataclass
class Plan:
    """A campaign's events, drawn from its seed: (time, what, args). A subset replays as a shorter plan."""

    seed: int
    store: str
    processes: int
    lease: float
    keyed: dict[str, Any]
    events: list[tuple[float, str, tuple[Any, ...]]]
    duration: float
    wall: float = _EPOCH  # the wall clock at the start


def plan(seed: int, store: str = "shared", processes: int = 3) -> Plan:
    """Draw a campaign from `seed`: the KeyedScheduler's options, a workload of changes and the faults."""
    rng = random.Random(seed)
    if store != "shared":
        processes = 1
    lease = rng.choice([1.5, 3.0, 6.0])
    keyed = {
        "reschedule": rng.choice([Reschedule.AFTER_FINISH, Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN]),
        "catch_up": rng.choice(list(CatchUp)),
        "recover": Recover.RERUN,
        "max_catch_up": rng.choice([3, 100]),
    }
    # (drawn apart, so that the seeds drawn before it was added replay as they did)
    keyed["run_timeout"] = random.Random(f"run_timeout {seed}").choice(
        [None, None, None, None, 0.05, 0.5, 3.0]
    )
    keys = rng.randint(2, 10)
    duration = rng.uniform(20.0, 120.0)
    wall, zone, pace = _EPOCH, None, 1.0
    if rng.random() < 0.2:  # around a DST change, with cron keys among the others
        zone = rng.choice(DST_ZONES)
        changes = dst_changes(zone, 2026)
        change = rng.choice(changes)
        duration, pace = rng.uniform(3000.0, 5400.0), 60.0
        wall = change - rng.uniform(0.0, duration * 0.6)

    def data(version: int) -> dict[str, Any]:
        if zone is not None and rng.random() < 0.6:
            expr = rng.choice(["*/1 * * * *", "30 2 * * *", "*/15 * * * *", "0 * * * *", "45 1-3 * * *"])
            return {"cron": expr, "tz": zone, "d": rng.choice([0.0, 5.0, 90.0]), "x": False, "v": version}
        period = rng.choice([0.5, 1.0, 2.0, 5.0]) * pace
        d = rng.choice([0.0, 0.0, 0.0, 0.01, 0.3 * period, 1.5 * period])
        return {"p": period, "d": round(d, 4), "x": rng.random() < 0.1, "v": version}

    events: list[tuple[float, str, tuple[Any, ...]]] = [
        (0.0, "replace", (0, {k: data(0) for k in range(keys)}))
    ]
    t, version = 0.0, 0
    while True:
        t += rng.expovariate(1 / (2.0 * pace))
        if t >= duration:
            break
        version += 1
        p = rng.randrange(processes)
        r = rng.random()
        if r < 0.35:
            events.append((t, "upsert", (p, rng.randrange(keys + 2), data(version))))
        elif r < 0.42:
            events.append((t, "remove", (p, rng.randrange(keys + 2))))
        elif r < 0.45:
            events.append((t, "replace", (p, {k: data(version) for k in rng.sample(range(keys + 2), keys)})))
        elif r < 0.55 and store != "memory":
            events.append((t, "kill", (p,)))
            events.append((t + rng.uniform(0.1, 2 * lease), "restart", ()))
        elif r < 0.65:
            events.append((t, "pause", (p, rng.choice([0.1, lease / 2, lease * 1.5, lease * 3]))))
        elif r < 0.72 and store == "shared":
            events.append((t, "cut", (p, rng.choice([0.2, lease / 2, lease * 2]), rng.random() < 0.5)))
        elif r < 0.78 and store != "memory":  # (SQLite: a disk that fails for a while)
            seconds = rng.uniform(0.5, 2 * lease)
            events.append((t, "slow", (p, seconds)) if store == "shared" else (t, "cut", (p, seconds, False)))
        elif r < 0.86 and store != "memory":
            events.append((t, "fail-write", (p,)))
        elif r < 0.92:
            events.append((t, "wall-step", (p, rng.choice([-2.0, -0.3, 0.3, 2.0, 30.0]))))
    events.sort(key=lambda e: e[0])
    return Plan(seed, store, processes, lease, keyed, events, duration, wall)


def simulate(plan_: Plan, *, keep: Iterable[int] | None = None) -> SimulatedCluster:
    """Run a plan (only the events numbered in `keep`, if given) and return its cluster, closed."""
    kept = set(range(len(plan_.events))) if keep is None else set(keep)
    cluster = SimulatedCluster(
        grid,
        work,
        store=plan_.store,
        processes=plan_.processes,
        lease=plan_.lease,
        seed=plan_.seed,
        wall=plan_.wall,
        points=True,
        **plan_.keyed,
    )
    try:
        for index, (t, what, args) in enumerate(plan_.events):
            if index not in kept:
                continue
            cluster.run_for(max(0.0, t - cluster.now))
            _do(cluster, what, args)
            if cluster.violations:
                break
        if not cluster.violations:
            cluster.run_for(max(0.0, plan_.duration - cluster.now))
            if cluster.kind == "sqlite" and not cluster.live():
                cluster.restart()
            if cluster.kind == "shared" and not cluster.live():
                cluster.add_process()
            cluster.quiet()
    finally:
        cluster.close()
    return cluster


def _do(cluster: SimulatedCluster, what: str, args: tuple[Any, ...]) -> None:
    live = cluster.live()
    if what == "restart":
        if not live or (cluster.kind == "shared" and len(live) < cluster.size):
            cluster.restart()
        return
    if not live:
        return
    p = live[args[0] % len(live)]
    if what in ("upsert", "remove", "replace"):
        if what == "upsert":
            cluster.upsert(args[1], args[2], p)
        elif what == "remove":
            cluster.remove(args[1], p)
        else:
            cluster.replace_all(args[1], p)
    elif what == "kill":
        cluster.kill(p)
    elif what == "pause":
        cluster.pause(p, args[1])
    elif what == "cut":
        cluster.cut(p, args[1], args[2])
    elif what == "slow":
        cluster.slow(p, args[1])
    elif what == "fail-write":
        cluster.fail_write(p)
    elif what == "wall-step":
        cluster.step_wall(p, args[1])


def shrink(plan_: Plan, invariant: str, budget: int = 200) -> list[int]:
    """The events of a failing plan, fewer and fewer while the same invariant still breaks (greedy:
    drop halves, then single events), within `budget` replays."""
    keep = list(range(len(plan_.events)))
    tries = 0

    def fails(subset: list[int]) -> bool:
        nonlocal tries
        tries += 1
        cluster = simulate(plan_, keep=subset)
        return any(v.invariant == invariant for v in cluster.violations)

    chunk = max(1, len(keep) // 2)
    while chunk >= 1 and tries < budget:
        i, changed = 0, False
        while i < len(keep) and tries < budget:
            trial = keep[:i] + keep[i + chunk :]
            if trial != keep and 0 in trial and fails(trial):
                keep, changed = trial, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return keep


class Summary(NamedTuple):
    """What a campaign ran and found."""

    seeds: int
    faults: int
    checks: int
    violations: list[tuple[int, Violation]]  # (seed, the first violation it found)
    process_hours: float  # simulated hours times the processes alive meanwhile


def campaign(
    seeds: Iterable[int], store: str = "shared", processes: int = 3, out: Any = None, shrink_budget: int = 200
) -> Summary:
    """Run a campaign over `seeds`: the seeds run, faults injected, invariant checks, violations found
    (with their seeds) and process-hours simulated. A violation is printed to `out` with its shortest
    failing plan and its trace."""
    runs = faults = checks = 0
    lived = 0.0
    found: list[tuple[int, Violation]] = []
    for seed in seeds:
        p = plan(seed, store, processes)
        cluster = simulate(p)
        runs += 1
        faults += cluster.faults
        checks += cluster.checks
        lived += cluster.process_seconds
        if cluster.violations:
            violation = cluster.violations[0]
            found.append((seed, violation))
            if out is not None:
                print(f"seed {seed}: {violation}", file=out)
                keep = (
                    shrink(p, violation.invariant, shrink_budget)
                    if shrink_budget
                    else list(range(len(p.events)))
                )
                print(f"  the shortest failing plan ({len(keep)} of {len(p.events)} events):", file=out)
                for i in keep:
                    print(f"    {p.events[i][0]:9.4f} {p.events[i][1]} {p.events[i][2]!r}", file=out)
                shown = simulate(p, keep=keep)
                print("  its trace (the last 40 steps):", file=out)
                for line in shown.trace[-40:]:
                    print(f"    {line}", file=out)
    return Summary(runs, faults, checks, found, lived / 3600)


def main(argv: list[str] | None = None) -> int:
    """The command: `python -m timerwheel.testing.simulate [--seeds N | --seed S] ...`."""
    parser = argparse.ArgumentParser(
        prog="python -m timerwheel.testing.simulate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100, help="run seeds B..B+N-1 (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed (replayed exactly)")
    parser.add_argument("--seed-base", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--processes", type=int, default=3, help="processes on a shared store (default 3)")
    parser.add_argument("--store", choices=("memory", "sqlite", "shared"), default="shared")
    parser.add_argument("--soak", type=float, default=None, help="run seeds for this many real seconds")
    parser.add_argument("--no-shrink", action="store_true", help="print a failing seed's whole plan")
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error("--processes must be >= 1")
    log = logging.getLogger("timerwheel")
    level = log.level
    log.setLevel(logging.CRITICAL)  # (the faults make the library log a lot; restored on the way out)
    try:
        return _main(args)
    finally:
        log.setLevel(level)


def _main(args: argparse.Namespace) -> int:
    budget = 0 if args.no_shrink else 200
    started = time.monotonic()
    if args.seed is not None:
        seeds: Iterable[int] = [args.seed]
    elif args.soak is not None:
        seeds = _until(args.seed_base, started + args.soak)
    else:
        seeds = range(args.seed_base, args.seed_base + args.seeds)
    done = campaign(seeds, args.store, args.processes, sys.stdout, budget)
    if args.soak is not None:
        print(
            f"soak: {time.monotonic() - started:.0f} s, {done.process_hours:.1f} simulated process-hours "
            f"({args.store}, seeds {args.seed_base}..{args.seed_base + done.seeds - 1})"
        )
    found = len(done.violations)
    print(f"{done.seeds} seeds, {done.faults} faults, {done.checks} invariant checks, {found} violations")
    return 1 if done.violations else 0


def _until(base: int, deadline: float) -> Iterable[int]:
    seed = base
    while time.monotonic() < deadline:
        yield seed
        seed += 1


if __name__ == "__main__":
    sys.exit(main())
