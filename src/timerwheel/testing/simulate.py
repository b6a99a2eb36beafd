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

from .._drivers.base import CALENDAR_WAKE
from .._keyed import CatchUp, KeyedScheduler, Overlap, Recover, Reschedule, Retry
from .._stores import SQLiteStore, StoreError, abandon
from . import VirtualTimeLoop
from ._oracle import Oracle, SimRun, Violation
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
            self.cluster._oracle.error(f"{self.name}: {context.get('message')} {context.get('exception')!r}")

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
        self._keyed = keyed
        self.db = SimDatabase(lambda: self.epoch + self.now) if store == "shared" else None
        self._dir = tempfile.mkdtemp(prefix="timerwheel-sim-") if store == "sqlite" else None
        self._lives = 0
        self._copy: str | None = None  # the file a kill left, for the next life
        self.size = processes
        self.processes: list[Process] = []
        self._oracle = oracle = Oracle(self, next_run, run, context, points, keyed)
        self.runs = oracle.runs
        self.missed = oracle.missed
        self.changes = oracle.changes
        self.trace = oracle.trace
        self.violations = oracle.violations
        self.faults = 0
        self.process_seconds = 0.0  # simulated seconds times the processes alive meanwhile
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._closed = False
        self._dead_tasks: list[asyncio.Task[Any]] = []  # the killed processes' tasks, never resumed
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
            self._oracle.job(process),
            context=True,
            store=process.store,
            on_missed=lambda key, data, n, first, last: self._oracle.on_missed(process, key, n, first, last),
            on_late=(
                (lambda key, due, late_by: self._oracle.on_late(process, key, due, late_by))
                if self._keyed.get("late_grace") is not None
                else None
            ),
            **self._keyed,
        )
        self._oracle.watch_reports(process.keyed, process)
        if self.kind == "sqlite":
            self._oracle.check_loaded(process)
        process.keyed.start()
        self._oracle.note(f"{name} starts")
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

    def upsert(
        self, key: Hashable, data: Any = None, process: int | str | Process = 0, **options: Any
    ) -> None:
        """upsert(key, data, **options) on a process (it returns as the run goes on: see changes)."""
        self._change(process, "upsert", key, data, options)

    def remove(self, key: Hashable, process: int | str | Process = 0) -> None:
        """remove(key) on a process."""
        self._change(process, "remove", key, None)

    def replace_all(self, mapping: Mapping[Hashable, Any], process: int | str | Process = 0) -> None:
        """replace_all(mapping) on a process."""
        self._change(process, "replace", None, dict(mapping))

    def pause_key(self, key: Hashable | None, process: int | str | Process = 0) -> None:
        """pause(key) on a process (key None: pause_all())."""
        self._change(process, "pause", key, None)

    def resume_key(self, key: Hashable | None, process: int | str | Process = 0) -> None:
        """resume(key) on a process (key None: resume_all())."""
        self._change(process, "resume", key, None)

    def trigger_key(
        self,
        key: Hashable,
        process: int | str | Process = 0,
        restart: bool = False,
        overlap: Overlap | None = None,
    ) -> None:
        """trigger(key) on a process; the change records the time of the fire that runs for it (`at`)."""
        self._change(process, "trigger", key, (restart, overlap))

    def _change(
        self, which: int | str | Process, what: str, key: Hashable, data: Any, options: Any = None
    ) -> None:
        p = self.process(which)
        change = {"what": what, "key": key, "data": data, "process": p.name, "asked": self.now}
        change.update(returned=None, error=None, ended=None)
        self.changes.append(change)
        self._oracle.note(f"{p.name} {what} {key!r} {data!r}")
        if not p.alive:
            change["error"] = "the process is dead"
            return
        keyed = p.keyed
        if what == "trigger":  # (the time a trigger that raises may have stored all the same: now)
            change["wall"] = p.keyed_wall()

        async def do() -> None:
            try:
                if what == "upsert":
                    await keyed.aupsert(key, data, **(options or {}))
                elif what == "remove":
                    change["existed"] = await keyed.aremove(key)
                elif what == "pause":
                    change["existed"] = await (keyed.apause_all() if key is None else keyed.apause(key))
                elif what == "resume":
                    change["existed"] = await (keyed.aresume_all() if key is None else keyed.aresume(key))
                elif what == "trigger":
                    at = await keyed.atrigger(key, restart=data[0], overlap=data[1])
                    change["at"] = None if at is None else at.timestamp()
                else:
                    await keyed.areplace_all(data)
            except Exception as exc:
                change["error"] = repr(exc)
            else:
                change["returned"] = self.now
                self._oracle.returned(p, change)
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
        # (a step forward is noticed at the driver's next wake, at most CALENDAR_WAKE later: its wall
        # timers fire late until then, and a late fire's run passes over the points it is late for)
        noticed = CALENDAR_WAKE if seconds > 0 else 0.0
        corrected = self.lease / 3 if self.kind == "shared" else 0.0
        self._fault(p, "wall-step", seconds, lasting=abs(seconds) + noticed + corrected)

    def _fault(self, p: Process, kind: str, seconds: float, lasting: float | None = None) -> None:
        """Note a fault of `seconds` (its effects last `lasting` seconds, if longer: not judged then)."""
        self.faults += 1
        self._oracle.quiet_since = None
        p.windows.append(_Window(self.now, self.now + (seconds if lasting is None else lasting), kind))
        self._oracle.note(f"{p.name} {kind} {seconds:.3f}")

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
            self._oracle.check_store()
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
        self._oracle.quiet_since = self.now
        self._oracle.note(f"quiet {span:.3f}")
        self.run_for(span)
        self._oracle.check_progress()
        self._oracle.check_history()
        if self._points:
            self._oracle.check_no_lost_fire()

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

    @property
    def checks(self) -> int:
        """How many invariant checks the oracle made so far."""
        return self._oracle.checks


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

    def add_history(self, entries: Any, keep: int) -> None:
        self._store.add_history(entries, keep)  # (kept for the next write: no fault of its own)

    def history(self, key: Hashable) -> Any:
        self._check("read a history")
        return self._store.history(key)

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
    keyed["overlap"] = random.Random(f"overlap {seed}").choice([None, None, None, *Overlap])
    retries = random.Random(f"retry {seed}")
    if retries.random() < 0.3:  # (failed runs tried again: the oracle allows their attempts, and counts them)
        keyed["retry"] = Retry(retries.choice([2, 3, 5]), retries.choice([0.05, 0.3, 1.0]), 4.0)
    late = random.Random(f"late {seed}")
    if late.random() < 0.3:  # (late checks: the oracle checks that a fire told late had not begun)
        keyed["late_grace"] = late.choice([0.05, 0.5, 2.0])
    delays = random.Random(f"delays {seed}")
    if delays.random() < 0.3:  # (fires delayed by a hash of the key and the fire: the oracle checks it)
        keyed["jitter"] = delays.choice([0.0, 0.05, 0.3, 2.0])
        keyed["spread"] = delays.choice([0.0, 0.1, 1.0])
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
    # Keys paused and resumed (drawn apart, so that the seeds drawn before they were added replay as they
    # did): a key or every key (None), resumed after a while, or left paused.
    holds = random.Random(f"pauses {seed}")
    if holds.random() < 0.6:
        for _ in range(holds.randint(1, 4)):
            at = holds.uniform(0.0, duration)
            key = holds.randrange(keys + 2) if holds.random() < 0.8 else None
            events.append((at, "pause-key", (holds.randrange(processes), key)))
            if holds.random() < 0.85:
                later = at + holds.uniform(0.05, 3 * lease) * pace
                events.append((later, "resume-key", (holds.randrange(processes), key)))
    # Keys triggered (drawn apart, as the pauses): now and then, with or without restart, under the key's
    # overlap or one given
    runs_now = random.Random(f"triggers {seed}")
    if runs_now.random() < 0.6:
        for _ in range(runs_now.randint(1, 6)):
            at = runs_now.uniform(0.0, duration)
            overlap = runs_now.choice([None, None, *Overlap])
            restart = runs_now.random() < 0.3
            events.append(
                (
                    at,
                    "trigger-key",
                    (runs_now.randrange(processes), runs_now.randrange(keys + 1), restart, overlap),
                )
            )
    # Windows and counts of the keys upserted (drawn apart, as the pauses): in the data ("m": max_runs,
    # "w": [start, end] in POSIX seconds, either None), which the oracle reads, and given to upsert()
    limits = random.Random(f"limits {seed}")
    if limits.random() < 0.4:
        for _, what, args in events:
            if what != "upsert":
                continue
            if limits.random() < 0.5:
                args[2]["m"] = limits.choice([1, 2, 3, 5, 8])
            if limits.random() < 0.4:
                opens = round(wall + limits.uniform(-0.2, 0.8) * duration, 6)
                closes = round(opens + limits.uniform(0.02, 0.5) * duration, 6)
                side = limits.choice(["both", "both", "start", "end"])
                args[2]["w"] = [None if side == "end" else opens, None if side == "start" else closes]
    events.sort(key=lambda e: e[0])
    return Plan(seed, store, processes, lease, keyed, events, duration, wall)


def limits_of(data: Any) -> dict[str, Any]:
    """A campaign key's window and count, from its data ("w", "m"), as upsert() takes them."""
    if not isinstance(data, dict):
        return {}
    found: dict[str, Any] = {}
    if data.get("m") is not None:
        found["max_runs"] = data["m"]
    opens, closes = data.get("w") or (None, None)
    if opens is not None:
        found["start"] = datetime.fromtimestamp(opens, UTC)
    if closes is not None:
        found["end"] = datetime.fromtimestamp(closes, UTC)
    return found


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
            cluster.upsert(args[1], args[2], p, **limits_of(args[2]))
        elif what == "remove":
            cluster.remove(args[1], p)
        else:
            cluster.replace_all(args[1], p)
    elif what == "pause-key":
        cluster.pause_key(args[1], p)
    elif what == "resume-key":
        cluster.resume_key(args[1], p)
    elif what == "trigger-key":
        cluster.trigger_key(args[1], p, args[2], args[3])
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
                print("  its trace (the 40 steps up to the violation):", file=out)
                for line in _up_to_violation(shown.trace, 40):
                    print(f"    {line}", file=out)
    return Summary(runs, faults, checks, found, lived / 3600)


def _up_to_violation(trace: list[str], steps: int) -> list[str]:
    """The last `steps` lines of a trace up to its first violation (the last lines if it has none)."""
    end = next((i + 1 for i, line in enumerate(trace) if "VIOLATION" in line), len(trace))
    return trace[max(0, end - steps) : end]


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
