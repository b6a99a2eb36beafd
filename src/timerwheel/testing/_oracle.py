"""The simulation's oracle: it records every run, every change and every missed-fire report of a
SimulatedCluster, and checks the invariants (see the simulate module's docstring) after every step."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
from collections.abc import Callable, Hashable, Iterable
from datetime import UTC, datetime
from typing import Any

from .._keyed import KeyedScheduler, KeyState, Overlap, Recover, Reschedule


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
    taken: float | None = None  # a shared store's: simulated time of its take's commit (the database's)


_SAME_DATA = ("pause", "resume", "trigger")  # (changes that keep a key's data and generation)


class Oracle:
    """What a SimulatedCluster saw, and the checks of it. Its lists are the cluster's public ones (runs,
    missed, changes, trace, violations)."""

    def __init__(
        self,
        cluster: Any,
        next_run: Callable[[datetime, Any, Any], datetime | None],
        run: Callable[..., Any],
        context: bool,
        points: bool,
        keyed: dict[str, Any],
    ) -> None:
        self.cluster = cluster
        self._user_next_run = next_run
        self._user_run = run
        self._context = context
        self._points = points
        self._keyed = keyed
        self._reschedule = keyed.get("reschedule", Reschedule.AFTER_FINISH)
        overlap = keyed.get("overlap")
        # a fire that comes while a run of its key goes does not run beside it (it is skipped or waits)
        self._serial = overlap in (Overlap.SKIP, Overlap.QUEUE_ONE) or (
            overlap is None and self._reschedule is not Reschedule.BEFORE_RUN
        )
        # ... and, under BEFORE_RUN, the points that fall during a run may be passed over (skipped, or but
        # the first, which waits; under REPLACE, while the fires of a catch-up queue run in turn)
        self._passes_over = overlap in (Overlap.SKIP, Overlap.QUEUE_ONE, Overlap.REPLACE)
        self.runs: list[SimRun] = []
        self.missed: list[tuple[str, Hashable, int, datetime, datetime]] = []
        self.changes: list[dict[str, Any]] = []  # every change asked for, with what became of it
        self.trace: list[str] = []
        self.violations: list[Violation] = []
        self.checks = 0
        self.quiet_since: float | None = None  # (no fault since then: see check_progress)
        self._seen: dict[Hashable, int] = {}  # the highest generation the store ever had of each key
        self._reports: list[tuple[Hashable, float, float]] = []  # on_missed: (key, first, last covered)
        self._beyond = False  # (a report being made counts a lower bound: see watch_reports)
        # (key, generation): the fires reported missed, (process, scheduled_for)
        self._skipped: dict[tuple[Hashable, int], set[tuple[str, int]]] = {}
        self._loads: list[tuple[float, dict[Hashable, Any]]] = []  # (when, every key) a life loaded
        self._loaded_paused: list[set[Hashable]] = []  # (the keys each life loaded paused)

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.cluster.now:10.4f} {text}")

    def violate(self, invariant: str, message: str) -> None:
        violation = Violation(invariant, message, self.cluster.now)
        self.violations.append(violation)
        self.note(f"VIOLATION {violation}")

    def error(self, text: str) -> None:
        self.violate("no-internal-error", text)

    def job(self, p: Any) -> Callable[..., Any]:
        user = self._user_run
        context = self._context

        async def job(ctx: Any, key: Hashable, data: Any) -> None:
            fence = ctx.fence
            # (the wall clock the run started by: read as its fire was taken, and in the fire log; a shared
            # store's take is a round trip, over which the process may measure its clock again)
            wall = p.wall()
            taken = None
            if self.cluster.db is not None:
                fire = self.cluster.db.fires.get((key, fence.generation, fence.scheduled_for))
                if fire is not None:
                    wall, taken = fire["started_at"] / 1e6, fire["taken"] - self.cluster.epoch
            run = SimRun(
                p.name, key, fence.generation, fence.scheduled_for, fence.attempt, self.cluster.now, wall
            )
            run.taken = taken
            self.started(p, run)
            if self._points and run.scheduled_for not in self._triggers(key):
                self._on_a_point(run, data)
                self._within_limits(run, data)
            try:
                result = user(ctx, key, data) if context else user(key, data)
                if inspect.isawaitable(result):
                    await result
            except BaseException:
                run.error = True
                raise
            finally:
                if p.alive:
                    run.ended, run.ended_wall = self.cluster.now, p.keyed_wall()
                    self.note(f"{p.name} ends {key!r} g{run.generation} {run.scheduled_for} a{run.attempt}")

        return job

    def _interrupted(self, run: SimRun, until: float) -> bool:
        """Whether the run's process died, or (a shared store) may have lost its lease, between its start
        and `until`."""
        p = self.cluster.process(run.process)
        if not p.alive and run.ended is None:
            return True
        kinds = ("pause", "cut", "hang", "slow", "kill") if self.cluster.kind == "shared" else ("kill",)
        return any(w.kind in kinds and w.start <= until and w.end >= run.started for w in p.windows)

    def started(self, p: Any, run: SimRun) -> None:
        self.checks += 4
        if self.cluster.db is None:
            paused = self.paused_at(run.key, self.cluster.now, len(self.trace))
        else:  # (shared: the store's commits say whether the key was paused as its fire was taken)
            fire = self.cluster.db.fires.get((run.key, run.generation, run.scheduled_for))
            paused = fire is not None and self._paused_in_store(run.key, fire["taken"])
        if paused:
            self.violate(
                "paused-runs-nothing",
                f"{p.name} ran key {run.key!r} (g{run.generation}, {run.scheduled_for}) while it was paused",
            )
        self.note(f"{p.name} runs {run.key!r} g{run.generation} {run.scheduled_for} a{run.attempt}")
        trigger = run.scheduled_for in self._triggers(run.key)  # (runs now: after the clock stepped back,
        if run.wall * 1_000_000 < run.scheduled_for - 1 and not trigger:  # its time is after the last fire)
            self.violate(
                "no-early-run",
                f"{p.name} ran key {run.key!r} at wall {run.wall:.6f}, before its fire at "
                f"{run.scheduled_for / 1e6:.6f}",
            )
        if (run.process, run.scheduled_for) in self._skipped.get((run.key, run.generation), ()):
            self._ran_and_missed(run)
        same = [
            r
            for r in self.runs
            if r.key == run.key and r.generation == run.generation and r.scheduled_for == run.scheduled_for
        ]
        retry = self._keyed.get("retry")
        for earlier in same:
            # (a fire runs again after a kill or a lost lease; and, with retry=, after its run failed)
            failed = retry is not None and earlier.error and earlier.ended is not None
            if run.attempt <= earlier.attempt or not (failed or self._interrupted(earlier, self.cluster.now)):
                self.violate(
                    "at-most-once",
                    f"key {run.key!r} fire (g{run.generation}, {run.scheduled_for}) ran again on {p.name} "
                    f"(attempt {run.attempt}) after {earlier.process} ran it (attempt {earlier.attempt}, "
                    f"ended {earlier.ended})",
                )
                break
            if failed and not self._interrupted(earlier, self.cluster.now):  # (a retry: it gives way)
                newer = [
                    r
                    for r in self.runs
                    if r.key == run.key
                    and r.generation == run.generation
                    and r.scheduled_for > run.scheduled_for
                    and r.started >= earlier.started
                ]
                if newer:
                    self.violate(
                        "retry-gives-way",
                        f"key {run.key!r} fire (g{run.generation}, {run.scheduled_for}) was tried again on "
                        f"{p.name} (attempt {run.attempt}) after a newer fire ({newer[0].scheduled_for}) "
                        "began",
                    )
                    break
        if (
            retry is not None
            and same
            and len(same) >= retry.attempts
            and all(e.error and not self._interrupted(e, self.cluster.now) for e in same)
        ):
            self.violate(
                "retry-attempts",
                f"key {run.key!r} fire (g{run.generation}, {run.scheduled_for}) ran a run more after "
                f"{len(same)} failed ones, and its retry is {retry}",
            )
        allowed = self._triggers(run.key).get(run.scheduled_for) in (Overlap.ALLOW, Overlap.REPLACE)
        if self._serial and not allowed:  # (a trigger may run beside a run if it says so)
            for other in self.runs:
                if other.key != run.key or other.ended is not None:
                    continue
                if not self.cluster.process(other.process).alive:
                    continue
                if other.process == run.process or (
                    other.generation == run.generation and not self._interrupted(other, self.cluster.now)
                ):
                    self.violate(
                        "no-overlap",
                        f"key {run.key!r}: a run (g{run.generation}, {run.scheduled_for}) on {p.name} "
                        "started "
                        f"while one (g{other.generation}, {other.scheduled_for}) on {other.process} goes",
                    )
                    break
        self.runs.append(run)

    def _within_limits(self, run: SimRun, data: Any) -> None:
        """A run of a fire of the key's schedule (not a trigger's) keeps to its window (upsert's start
        and end, in the data as "w": its point in it, the fire up to the delay's reach after end) and to
        its max_runs (in the data as "m"): a new fire (not a rerun of one that ran) starts only while
        fewer fires of the key than that started since it was last removed (a count of the runs seen:
        never more than the store counted, so a violation is one)."""
        if not isinstance(data, dict):
            return
        self.checks += 1
        opens, closes = data.get("w") or (None, None)
        reach = (self._keyed.get("jitter") or 0.0) + (self._keyed.get("spread") or 0.0)
        if (opens is not None and run.scheduled_for < round(opens * 1e6)) or (
            closes is not None and run.scheduled_for > round((closes + reach) * 1e6)
        ):
            self.violate(
                "in-its-window",
                f"key {run.key!r} ran a fire at {run.scheduled_for / 1e6:.6f}, outside its window "
                f"[{opens}, {closes}]",
            )
        limit = data.get("m")
        if limit is None:
            return
        since = self._incarnation(run)
        if since is None:
            return
        fires = {  # (a shared store's run: when the database took its fire; a process's wall may step)
            (r.generation, r.scheduled_for)
            for r in self.runs
            if r.key == run.key and r is not run and (r.started if r.taken is None else r.taken) > since
        }
        if (run.generation, run.scheduled_for) not in fires and len(fires) >= limit:
            self.violate(
                "max-runs",
                f"key {run.key!r} ran a new fire (g{run.generation}, {run.scheduled_for}) after {len(fires)} "
                f"fires since {since:.3f}, and its max_runs is {limit}",
            )

    def _incarnation(self, run: SimRun) -> float | None:
        """The simulated time after which the key's runs count toward its max_runs, as the run started:
        the end of the latest change that removed it (remove, or replace without it), or None if one is
        still on its way (a removal commits by the time its change ends: counting from then, the runs
        counted are never more than the store's)."""
        since = -math.inf
        for c in self.changes:
            if c["asked"] > run.started:
                continue
            if not (
                (c["what"] == "remove" and c["key"] == run.key)
                or (c["what"] == "replace" and run.key not in c["data"])
            ):
                continue
            if c["ended"] is None or c["ended"] > run.started:
                return None
            since = max(since, c["ended"])
        return since

    def _ran_and_missed(self, run: SimRun) -> None:
        self.violate(
            "missed-not-run",
            f"key {run.key!r}: its fire (g{run.generation}, {run.scheduled_for}) was reported missed and ran "
            f"(on {run.process})",
        )

    def _triggers(self, key: Hashable) -> dict[int, Overlap | None]:
        """The times (microseconds) of the key's triggers, its fires that are no point of its schedule,
        with the overlap each was given."""
        times: dict[int, Overlap | None] = {}
        for c in self.changes:  # (a trigger while one waits returns its time: the first's overlap holds)
            if c["what"] == "trigger" and c["key"] == key and c.get("at") is not None:
                times.setdefault(round(c["at"] * 1e6), c["data"][1])
        for c in self.changes:  # (one that raised may have been committed before: its fire may run)
            if c["what"] == "trigger" and c["key"] == key and c["error"] is not None and "wall" in c:
                # (at the wall read, as a datetime: floored to the microsecond; or, a wall clock that
                # stepped back behind the key's latest started fire, a microsecond after that fire)
                latest = max(
                    (r.scheduled_for for r in self.runs if r.key == key and r.started <= c["asked"]),
                    default=None,
                )
                candidates = [math.floor(c["wall"] * 1e6), round(c["wall"] * 1e6)]
                if latest is not None:
                    candidates.append(latest + 1)
                for at in candidates:
                    times.setdefault(at, c["data"][1])
        if self.cluster.db is not None:  # (committed: known before the trigger returned)
            for _, what, k, overlap, first in self.cluster.db.commits:
                if what == "trigger" and k == key:
                    times[first] = None if overlap is None else Overlap(overlap)
        return times

    def _check_triggers(self, runs: dict[Hashable, list[SimRun]], until: float) -> None:
        """A trigger that returned ran: a run of its key at its time, or of a later fire that started as
        it came (by bound() after the call returned: a fire at or after a trigger runs for it, taken
        before its holder heard of it) or late
        (a catch-up queued after a restart), unless
        the key was changed, paused or removed since it was asked (which drops it), or it may have been
        skipped (Overlap.SKIP: a run of its key went), or the store keeps nothing (a memory store, its
        process killed since)."""
        skips = self._keyed.get("overlap") is Overlap.SKIP
        for change in self.changes:
            if change["what"] != "trigger" or change.get("at") is None or change["asked"] > until:
                continue
            key, asked, at = change["key"], change["asked"], round(change["at"] * 1e6)
            # (committed by the time it returned: a process paused during the call commits it late)
            made = asked if change["ended"] is None else change["ended"]
            self.checks += 1
            bound = self.cluster.bound()
            if any(
                r.scheduled_for == at
                or (
                    r.scheduled_for > at
                    and (r.started <= made + bound or r.wall > r.scheduled_for / 1e6 + bound)
                )
                for r in runs.get(key, ())
            ):
                continue  # (ran; or a later fire ran for it: taken as it came, or overdue, from a catch-up)
            if skips or change["data"][1] is Overlap.SKIP:
                continue
            if self._trigger_waits(key, at):
                continue  # (behind the key's queue of fires to run at once: a long catch-up, one by one)
            if any(
                c["asked"] >= asked
                and c["what"] != "trigger"
                and (c["key"] in (key, None) or c["what"] == "replace")
                for c in self.changes
            ):
                continue  # (dropped by the change)
            if self.cluster.kind == "memory" and any(
                p.died is not None and p.died >= asked for p in self.cluster.processes
            ):
                continue
            self.violate(
                "trigger-runs",
                f"key {key!r}: its trigger of {at / 1e6:.6f} (asked at t={asked:.3f}) returned, and no run "
                "of it, or of a later fire, started",
            )
            return

    def _next_run(self, now: datetime, key: Hashable, data: Any) -> datetime | None:
        """The key's next fire after `now`, as the KeyedScheduler's options make it, by the documented
        rule (an account of its own, not the keyed layer's code): next_run's point P0, delayed (jitter,
        spread) by spread x u(key) + jitter x u(key, P), u a fraction drawn from a BLAKE2b hash, scaled
        into the room before the next point; or an earlier point's delayed fire still to come (points
        from now - reach on that lead to P0, at most 64)."""
        first = self._windowed(now, key, data)
        jitter, spread = self._keyed.get("jitter") or 0.0, self._keyed.get("spread") or 0.0
        if not jitter and not spread:
            return first
        ident = json.dumps(key) if type(key) in (str, int) else repr(key)

        def fraction(text: str) -> float:
            return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest()) / 2**64

        def point_after(t: float) -> float | None:
            found = self._windowed(datetime.fromtimestamp(t, UTC), key, data)
            return None if found is None else found.timestamp()

        def fire(p: float, after: float | None) -> float:
            room = after - p if after is not None and after > p else math.inf
            delay = spread * fraction(ident) + jitter * fraction(f"{ident}@{round(p * 1e6)}")
            if delay >= room:
                delay = room * delay / (jitter + spread)
            at = round((p + delay) * 1e6) / 1e6
            return p if at >= p + room else at

        p0, t = None if first is None else first.timestamp(), now.timestamp()
        chain: list[float] = []
        walked = point_after(t - jitter - spread)
        while walked is not None and (p0 is None or walked < p0) and len(chain) <= 64:
            chain.append(walked)
            walked = point_after(walked)
        if walked == p0 and len(chain) <= 64:  # (a schedule that ends: its last points' fires)
            for i, p in enumerate(chain):
                at = fire(p, chain[i + 1] if i + 1 < len(chain) else p0)
                if at > t:
                    return datetime.fromtimestamp(at, UTC)
        return None if p0 is None else datetime.fromtimestamp(fire(p0, point_after(p0)), UTC)

    def _windowed(self, now: datetime, key: Hashable, data: Any) -> datetime | None:
        """next_run's first point after now in the key's window (the data's "w": [start, end], POSIX
        seconds, either None): the campaign's schedules are calendars, so the first point at or after
        start is the first after start - 1 us."""
        opens, closes = (data.get("w") if isinstance(data, dict) else None) or (None, None)
        if opens is not None and now.timestamp() < opens:
            now = datetime.fromtimestamp(opens - 1e-6, UTC)
        point = self._user_next_run(now, key, data)
        if point is not None and closes is not None and point.timestamp() > closes:
            return None
        return point

    def _on_a_point(self, run: SimRun, data: Any) -> None:
        self.checks += 1
        reach = (self._keyed.get("jitter") or 0.0) + (self._keyed.get("spread") or 0.0)
        # (a delayed fire: its point is before it, within the reach; the fire of that point must be it)
        t = (run.scheduled_for - 1) / 1e6 - reach
        point = self._next_run(datetime.fromtimestamp(t, UTC), run.key, data)
        for _ in range(10_000):
            if point is None or round(point.timestamp() * 1e6) >= run.scheduled_for:
                break
            t = self._user_next_run(datetime.fromtimestamp(t, UTC), run.key, data).timestamp()  # type: ignore[union-attr]
            point = self._next_run(datetime.fromtimestamp(t, UTC), run.key, data)
        if point is None or round(point.timestamp() * 1e6) != run.scheduled_for:
            self.violate(
                "on-its-points",
                f"key {run.key!r} ran a fire at {run.scheduled_for / 1e6:.6f}, which is not a point of its "
                f"schedule (the point at or after it is {point})",
            )

    def on_missed(self, p: Any, key: Hashable, count: int, first: datetime, last: datetime) -> None:
        self.missed.append((p.name, key, count, first, last))
        # (a report covers its points from first to last; one that counted only max_catch_up + 1 of them,
        # a lower bound, covers those after it too, up to now)
        self._reports.append((key, first.timestamp(), p.keyed_wall() if self._beyond else last.timestamp()))
        self.note(f"{p.name} missed {key!r} {count} from {first.isoformat()} to {last.isoformat()}")

    def on_late(self, p: Any, key: Hashable, due: datetime, late_by: float) -> None:
        """on_late: the fire had not begun on that process (its time `due`), and it is late_grace late."""
        self.checks += 1
        self.note(f"{p.name} late {key!r} {due.timestamp():.6f} by {late_by:.6f}")
        at = round(due.timestamp() * 1e6)
        grace = self._keyed["late_grace"]
        if late_by < grace - 1e-6:
            self.violate(
                "late-told-late", f"{p.name} told key {key!r}'s fire of {at} late by {late_by} < {grace}"
            )
        rec = p.keyed._table.keys.get(key)  # (the fire told is of the key's generation there: an older
        generation = None if rec is None else rec.generation  # one's run of the same time may go)
        for run in self.runs:
            if (
                run.key == key
                and run.scheduled_for == at
                and run.process == p.name
                and run.ended is None
                and generation in (None, run.generation)
            ):
                self.violate(
                    "late-told-late",
                    f"{p.name} told key {key!r}'s fire of {at} late while its run "
                    f"(attempt {run.attempt}) goes",
                )
                return

    def watch_reports(self, keyed: KeyedScheduler, process: Any) -> None:
        """Note, for _on_missed, whether a report's count is a lower bound (more were missed than
        max_catch_up + 1, the most that a start counts)."""
        table = keyed._table
        report = table.report_missed

        def reported(rec: Any, skipped: list[float], beyond: bool, why: str) -> None:
            # (a fire a process reports missed it never ran, and never runs: see started. Another
            # process, or the next life, decides anew: a decision is not stored)
            self._beyond = beyond
            fires = {(process.name, round(t * 1e6)) for t in skipped}
            self._skipped.setdefault((rec.key, rec.generation), set()).update(fires)
            for run in self.runs:
                mine = run.key == rec.key and run.generation == rec.generation
                if mine and (run.process, run.scheduled_for) in fires:
                    self._ran_and_missed(run)
            try:
                report(rec, skipped, beyond, why)
            finally:
                self._beyond = False

        table.report_missed = reported  # type: ignore[method-assign]

    def returned(self, p: Any, change: dict[str, Any]) -> None:
        """A change returned: it is committed (shared: the database has it)."""
        self.checks += 1
        self.note(f"{p.name} returned {change['what']} {change['key']!r}")
        change["seq"] = len(self.trace)  # (what came after it: see paused_at)
        if change["what"] in _SAME_DATA:
            return  # (the data is as it was: see _histories for what a pause makes due)
        if self.cluster.db is None:  # (the first fire each key's new generation planned: see _histories)
            keys = change["data"] if change["what"] == "replace" else [change["key"]]
            infos = {k: p.keyed.get(k) for k in keys}
            change["planned"] = {
                k: None if i is None or i.next_run_at is None else i.next_run_at.timestamp()
                for k, i in infos.items()
            }
            return
        what, key, data = change["what"], change["key"], change["data"]
        since = change["asked"]
        commits = [c for c in self.cluster.db.commits if c[0] >= since]
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
            self.violate(
                "changes-kept", f"{p.name}'s {what} of {key!r} returned, but the store does not have it"
            )

    def check_store(self) -> None:
        """After every step: generations never go back in the store."""
        if self.cluster.db is None:
            return
        self.checks += 1
        for key, row in self.cluster.db.keys.items():
            seen = self._seen.get(key, 0)
            if row["generation"] < seen:
                self.violate(
                    "generations-rise", f"key {key!r} is at generation {row['generation']}, after {seen}"
                )
            self._seen[key] = max(seen, row["generation"])

    def check_loaded(self, p: Any) -> None:
        """A new life of a SQLite file: every change that returned is there (or one made after it, that
        raised or was going on at the kill: it may have been committed), and no generation went back."""
        self.checks += 1
        keyed = p.keyed
        expected: dict[Hashable, Any] = {}  # key: what the last change that returned made it
        maybe: dict[Hashable, list[Any]] = {}  # key: what a change since may have made it
        for change in self.changes:
            if change["what"] in _SAME_DATA:
                continue  # (the data is as it was)
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
                self.violate(
                    "changes-kept",
                    f"{p.name} found key {k!r} as {_shown(got)} in the file; the last change that returned "
                    f"made it {_shown(expected.get(k, _MISSING))}, and those since "
                    f"{[_shown(v) for v in maybe.get(k, [])]}",
                )
            if info is not None and info.generation < self._seen.get(k, 0):
                self.violate("generations-rise", f"key {k!r} came back at generation {info.generation}")
        snapshot = keyed.snapshot()
        for k, info in snapshot.items():
            self._seen[k] = max(self._seen.get(k, 0), info.generation)
        self._loads.append((self.cluster.now, {k: info.data for k, info in snapshot.items()}))
        self._loaded_paused.append({k for k, info in snapshot.items() if info.state is KeyState.PAUSED})

    # -- histories ------------------------------------------------------------------------------------------

    def check_history(self) -> None:
        """After a quiet spell: every run a key's history says ended (ran, failed) is a run the oracle
        saw end, of that fire at that attempt, failed if and only if it raised; a retry's entry is of a
        fire that failed before, at its next attempt. (A shared store's database; a local store's, as a
        live process reads it.)"""
        runs: dict[tuple[Hashable, int, int], list[SimRun]] = {}
        for run in self.runs:
            runs.setdefault((run.key, run.scheduled_for, run.attempt), []).append(run)
        histories: dict[Hashable, list[Any]] = {}
        if self.cluster.db is not None:
            histories = {k: list(v) for k, v in self.cluster.db.history.items()}
        else:
            for p in self.cluster.live():
                for key in {run.key for run in self.runs}:
                    try:
                        histories[key] = p.keyed._table.store.history(key)
                    except Exception:  # (a disk cut: nothing to check there)
                        continue
        for key, entries in histories.items():
            for entry in entries:
                self.checks += 1
                if entry.outcome in ("ran", "failed"):
                    seen = [
                        r
                        for r in runs.get((key, entry.scheduled_for, entry.attempt), ())
                        if r.ended is not None and r.error == (entry.outcome == "failed")
                    ]
                    if not seen:
                        self.violate(
                            "history-true",
                            f"key {key!r}'s history says its fire of {entry.scheduled_for} "
                            f"{entry.outcome} at attempt {entry.attempt}: no such run ended",
                        )
                elif entry.outcome == "retried":
                    before = runs.get((key, entry.scheduled_for, entry.attempt - 1), ())
                    if not any(r.error for r in before):
                        self.violate(
                            "history-true",
                            f"key {key!r}'s history says its fire of {entry.scheduled_for} was retried "
                            f"(attempt {entry.attempt}), and no run of attempt {entry.attempt - 1} failed",
                        )

    # -- no lost fire ---------------------------------------------------------------------------------------

    def check_no_lost_fire(self) -> None:
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
        until = self.cluster.now - self.cluster.bound() - 1.0  # (points due since may still be on their way)
        self._check_triggers(runs, until)
        for key, spans in self._histories().items():
            ran = {r.scheduled_for for r in runs.get(key, ())}
            for start, end, data, first in spans:
                if isinstance(data, dict) and data.get("m") is not None:
                    continue  # (a key with max_runs: its points are owed while it has runs left; see
                    # _within_limits for the bound)
                for point in self._points_of(key, data, start, min(end, until), first):
                    epoch = self.cluster.epoch
                    self.checks += 1
                    if round(point * 1e6) in ran or self._excused(key, point, runs, reports):
                        continue
                    self.violate(
                        "no-lost-fire",
                        f"key {key!r}: its fire at {point:.6f} (t={point - epoch:.3f}) neither ran nor was "
                        "reported missed, and no run went on over it",
                    )
                    return

    def _superseded(self, key: Hashable, point: float, runs: dict[Hashable, list[SimRun]]) -> bool:
        """Whether a change of the key came while the point still waited its turn (its key was working
        through earlier fires: a catch-up queue behind a long run): a change supersedes the fires of the
        old generation that it finds unrun. Not if a later fire of the key started before the change
        (the point was passed by, not waiting)."""
        asks = [  # (a pause or a resume keeps the key's generation: it supersedes nothing)
            c["asked"]
            for c in self.changes
            if self._wall_at(c["asked"]) > point
            and (c["key"] == key or c["what"] == "replace")
            and c["what"] not in _SAME_DATA
        ]
        if not asks:
            return False
        change = min(asks)
        return not any(r.scheduled_for / 1e6 > point and r.started < change for r in runs.get(key, ()))

    def _held(self, key: Hashable, point: float) -> bool:
        """Whether a pause of the key after the point may hold it still: a fire not run by then (a
        catch-up queue behind a long run) is kept by the pause, and the resume decides it; a pause that
        no resume surely ended (none came, or the one that came raised) holds it to the end."""
        paused = False
        for c in sorted(self.changes, key=lambda c: c["asked"]):
            if c["what"] not in ("pause", "resume") or c["key"] not in (key, None):
                continue
            if c["what"] == "pause" and self._wall_at(c["asked"]) > point:
                paused = True
            elif c["what"] == "resume" and c["returned"] is not None:
                paused = False
        return paused

    def _trigger_waits(self, key: Hashable, at: int) -> bool:
        """Whether the key's holder still has that trigger, not run yet (in its queue of fires to run at
        once, behind a catch-up or a rerun: the `progress` invariant judges a queue that does not move)."""
        holder = self.cluster.holder(key)
        rec = None if holder is None else holder.keyed._table.keys.get(key)
        trigger = None if rec is None else rec.triggered
        return trigger is not None and round(trigger.at * 1e6) == at

    def _behind(self, key: Hashable, point: float) -> bool:
        """Whether the key's holder has not come to the point yet: its next run is at or before it (a
        long catch-up queue, run one fire after another, is still on its way there)."""
        holder = self.cluster.holder(key)
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
            if r.ended is not None or self.cluster.process(r.process).died is None:
                continue
            self.checks += 1
            if self._generation(r.key) != r.generation or self._paused_now(r.key):
                continue  # (changed since; or paused: its rerun waits for the resume, which decides it)
            holder = self.cluster.holder(r.key)
            if (
                holder is not None
                and r.scheduled_for / 1e6 > holder.keyed_wall() - self.cluster.bound() - 1.0
            ):
                continue  # (not due yet on the clock it waits by: judged at a later quiet spell)
            if not any(
                o.key == r.key
                and o.generation == r.generation
                and o.scheduled_for == r.scheduled_for
                and (o.attempt > r.attempt or o.ended is not None)
                for o in self.runs
            ):
                self.violate(
                    "no-lost-fire",
                    f"key {r.key!r}: its fire (g{r.generation}, {r.scheduled_for}), cut by the kill of "
                    f"{r.process}, was not run again (recover=RERUN)",
                )
                return

    def _paused_now(self, key: Hashable) -> bool:
        """Whether the key is paused now (in the store; or, one process, in its memory)."""
        if self.cluster.db is not None:
            row = self.cluster.db.keys.get(key)
            return row is not None and bool(row["paused"])
        return any(
            (info := p.keyed.get(key)) is not None and info.state is KeyState.PAUSED
            for p in self.cluster.live()
        )

    def _paused_in_store(self, key: Hashable, at: float) -> bool:
        """Whether the shared store had the key paused at `at` (the database's clock), by its commits:
        paused by a pause, until a resume or a removal (an upsert keeps it)."""
        paused = False
        for when, what, k, _, _ in self.cluster.db.commits:
            if when > at:
                break
            if k != key:
                continue
            if what == "pause":
                paused = True
            elif what in ("resume", "remove"):
                paused = False
        return paused

    def _generation(self, key: Hashable) -> int | None:
        """The key's generation in the store now (None: not there)."""
        if self.cluster.db is not None:
            row = self.cluster.db.keys.get(key)
            return None if row is None else int(row["generation"])
        for p in self.cluster.live():
            info = p.keyed.get(key)
            return None if info is None else info.generation
        return None

    def _histories(self) -> dict[Hashable, list[tuple[float, float, Any, float | None]]]:
        """Each key's calm spans of simulated time, with the data it had and the first fire its change
        planned (a change made on a clock that was off plans its first fire by that clock: the points
        before it are not due), or None: (start, end, data, first). A span ends
        bound() before a change of the key begins (pending until it returns or raises, and a second
        after) and half a second before a fault (until bound() after it: a takeover, a restart). A
        pause is downtime once it is resumed (its points are due: run, or reported missed by the
        catch-up at resume); while it lasts, the key's points are not due (see _unpaused)."""
        # key: [(since, what: "data" | "pause" | "resume", data | _MISSING | _UNSURE, first fire | None)]
        timeline: dict[Hashable, list[tuple[float, str, Any, float | None]]] = {}
        busy: dict[Hashable, list[tuple[float, float]]] = {}  # key: [(from, to)] a change of it was going
        keys: set[Hashable] = set()
        for change in self.changes:
            what = change["what"]
            if what == "trigger":
                continue  # (a trigger's fire is no point of the schedule: see _triggers)
            if what in ("pause", "resume"):
                touched = dict.fromkeys(keys if change["key"] is None else [change["key"]], what)
            elif what == "replace":
                touched = {**dict.fromkeys(keys, _MISSING), **change["data"]}
            else:
                touched = {change["key"]: change["data"] if what == "upsert" else _MISSING}
            keys.update(k for k, v in touched.items() if v not in ("pause", "resume"))
            end = self.cluster.now if change["ended"] is None else change["ended"]
            for k, value in touched.items():
                # (a change supersedes the fires of the key's old generation that it finds unrun: those
                # due while no process held the key, between two holders, within bound() of it)
                busy.setdefault(k, []).append((change["asked"] - self.cluster.bound(), end + 1.0))
                if self.cluster.db is None:
                    returned = change["returned"] is not None
                    if value in ("pause", "resume"):  # ("pause?": one that raised, or never returned)
                        kind = value if returned else f"{value}?"
                        timeline.setdefault(k, []).append((change["asked"], kind, None, None))
                        continue
                    settled = value if returned else _UNSURE
                    planned = change.get("planned", {}).get(k)
                    timeline.setdefault(k, []).append((change["asked"], "data", settled, planned))
        if self.cluster.db is not None:  # (the database's commits are what the keys are)
            for at, what, k, data, first in self.cluster.db.commits:
                if what == "trigger":
                    continue
                value = _loads(data) if what == "upsert" else _MISSING
                planned = None if first is None else first / 1e6
                kind = what if what in ("pause", "resume") else "data"
                timeline.setdefault(k, []).append((at - self.cluster.epoch, kind, value, planned))
        for (at, snapshot), paused in zip(self._loads, self._loaded_paused, strict=True):
            for k in {*timeline, *snapshot}:  # (a new life has what the file has, before its changes)
                loaded = [(at, "data", snapshot.get(k, _MISSING), None)]
                if k in paused:
                    loaded.append((at, "pause", None, None))
                timeline[k] = loaded + timeline.get(k, [])
        faults = [
            (w.start - 0.5, w.end + self.cluster.bound()) for p in self.cluster.processes for w in p.windows
        ]
        spans: dict[Hashable, list[tuple[float, float, Any, float | None]]] = {}
        for k, events in timeline.items():
            events.sort(key=lambda e: e[0])
            blocked = sorted(busy.get(k, []) + faults)
            for i, (since, data, planned) in enumerate(_unpaused(events)):
                if data is _MISSING or data is _UNSURE:
                    continue
                end = events[i + 1][0] if i + 1 < len(events) else math.inf
                spans.setdefault(k, []).extend(
                    (a, b, data, planned) for a, b in _between(since, end, blocked)
                )
        return spans

    def paused_at(self, key: Hashable, t: float, seq: int) -> bool:
        """Whether `key` was surely paused at simulated time t (the trace's `seq`th line), with one
        process on its store (memory, a file): by a pause that returned by then (pause_all: of the keys
        there then), and no resume, remove or replace without it asked since; or as a life loaded it."""
        events: list[tuple[float, dict[str, Any]]] = [  # (a life's load first: before its changes)
            (at, {"what": "load", "keys": snapshot, "paused": paused_keys})
            for (at, snapshot), paused_keys in zip(self._loads, self._loaded_paused, strict=True)
            if at <= t
        ]
        events += [(c["asked"], c) for c in self.changes if c["asked"] <= t]
        paused = False
        exists: bool | None = False  # (None: a change that raised may or may not have made it)
        for _, c in sorted(events, key=lambda e: e[0]):
            what = c["what"]
            made = c.get("returned") is not None
            if what == "load":
                exists, paused = key in c["keys"], key in c["paused"]
            elif what == "replace":
                exists = (key in c["data"]) if made else None
                paused = paused and exists is True
            elif c["key"] not in (key, None):
                continue
            elif what == "upsert":
                exists = True if made else (exists or None)
            elif what == "remove":
                exists, paused = (False if made else None), False
            elif what == "resume":
                paused = False
            elif what == "pause" and c.get("seq", math.inf) < seq:
                paused = paused or exists is True
        return paused

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
        if self.cluster.db is not None:
            return float(self.cluster.epoch + t)
        furthest = -math.inf
        for p in self.cluster.processes:
            stop = t if p.died is None else min(t, p.died)
            if p.base > stop:
                continue
            for i, (since, offset) in enumerate(p.offsets):
                begin = max(since, p.base)
                end = min(p.offsets[i + 1][0], stop) if i + 1 < len(p.offsets) else stop
                if begin <= end:
                    furthest = max(furthest, self.cluster.epoch + end + offset)
        return furthest if furthest > -math.inf else self.cluster.epoch + t

    def _excused(
        self,
        key: Hashable,
        point: float,
        runs: dict[Hashable, list[SimRun]],
        reports: dict[Hashable, list[tuple[float, float]]],
    ) -> bool:
        """Whether a point that did not run was reported missed, or passed over by a run of its key: under
        AFTER_FINISH, a point after a run's start and not after its end (next_run is asked from the
        end); under BEFORE_RUN with Overlap.SKIP, QUEUE_ONE or REPLACE, one after a run's fire and not
        after its end (it came while the run went). Under AFTER_FINISH, a point between a run's fire and
        its start is not passed over by it: the run of a fire that is late (a rerun, a catch-up) says
        nothing of the points after it, which the catch-up decides about (and a late regular fire is
        near a fault, where points are not judged)."""
        for first, last in reports.get(key, ()):
            if first - 1e-6 <= point <= last + 1e-6:
                return True
        if self._superseded(key, point, runs) or self._behind(key, point) or self._held(key, point):
            return True
        triggers = self._triggers(key)
        for r in runs.get(key, ()):  # (a trigger waiting to run holds the key's fires, as a queue does)
            if r.scheduled_for in triggers and r.scheduled_for / 1e6 - 1e-6 <= point <= r.wall:
                return True
        reach = (self._keyed.get("jitter") or 0.0) + (self._keyed.get("spread") or 0.0)
        for c in self.changes:  # (a trigger that restarts the cadence supersedes a point before it whose
            at = c.get("at")  # delayed fire was still to come)
            if at is None or c["what"] != "trigger" or c["key"] != key or not c["data"][0]:
                continue
            if at < point <= at + reach:
                return True
        after_finish = self._reschedule is Reschedule.AFTER_FINISH
        if not after_finish and not self._passes_over:
            return False
        for r in runs.get(key, ()):
            # (under BEFORE_RUN with SKIP or QUEUE_ONE, from the run's fire: a fire that came while its
            # take was on its way was skipped, or waits, as one during the run)
            start = r.wall if after_finish else min(r.wall, r.scheduled_for / 1e6)
            if start >= point + 1e-6:
                continue
            died = self.cluster.process(r.process).died
            if r.ended_wall is not None and r.ended is not None:
                # (its end's wall clock; or the furthest one reached by then, if the clock stepped back
                # during the run: the points up to there came while the run went)
                over = max(r.ended_wall, self._wall_at(r.ended))
            elif died is None:
                over = math.inf
            elif after_finish and not self._passes_over:  # (a run cut by a kill: its end never came, and
                over = r.wall  # the next holder decides the rest)
            else:  # (the points that came until the kill were passed over, skipped, or waited: the store
                over = self._wall_at(died)  # has the plan past them, which the next holder goes on from)
            if point <= over:
                return True
        return False

    def check_progress(self) -> None:
        """After a quiet spell: every key is held by one live process, at the store's generation, and ran
        since lease + lease/3 + the tolerance after the spell began."""
        assert self.quiet_since is not None
        since = self.quiet_since + self.cluster.bound()
        live = self.cluster.live()
        self.checks += 1
        if not live:
            return
        if self.cluster.db is not None:
            keys = {k: r for k, r in self.cluster.db.keys.items()}
            for k, row in keys.items():
                holders = [p for p in live if k in p.keyed]
                owner = [p for p in live if p.store.owner_id == row["owner"]]
                if not owner or len(holders) != 1 or holders[0] is not owner[0]:
                    self.violate(
                        "progress",
                        f"key {k!r} is held in the store by {row['owner']!r} and in memory by "
                        f"{[p.name for p in holders]} after a quiet spell",
                    )
                    continue
                info = owner[0].keyed.get(k)
                if info.generation != row["generation"]:
                    self.violate(
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
                    self.violate(
                        "progress", f"key {k!r} did not run: its next run is {late:.3f} s overdue on {p.name}"
                    )
                continue
            if not any(r.key == k and r.started >= since for r in self.runs):  # (its take on its way)
                self.violate(
                    "progress",
                    f"key {k!r} did not run in the {self.cluster.now - since:.1f} s since {since:.3f}",
                )


_MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<no key>"})()
_UNSURE: Any = type("Unsure", (), {"__repr__": lambda self: "<a change that raised: either>"})()


def _unpaused(events: list[tuple[float, str, Any, float | None]]) -> list[tuple[float, Any, float | None]]:
    """A key's timeline (sorted) as (since, data due, first fire). A pause that a resume ends is
    downtime: its points are due as any (each one ran, or the catch-up at resume reported it missed).
    A pause that no resume ends (the key is still paused, or it was removed) makes nothing due from it.
    A pause or a resume that may not have been made ("pause?", "resume?": it raised, or its process
    died first) leaves the key's pause unknown (_UNSURE: not judged) until a resume that returned, or
    a removal, says; a pause that a resume ends is downtime, made or not."""
    ended = [False] * len(events)
    open_: list[int] = []
    for i, (_, kind, value, _) in enumerate(events):
        if kind in ("pause", "pause?"):
            open_.append(i)
        elif kind == "resume":
            for j in open_:
                ended[j] = True
            open_ = []
        elif kind == "data" and value is _MISSING:  # (removed: its pause went with it)
            open_ = []
    out: list[tuple[float, Any, float | None]] = []
    data: Any = _MISSING
    pause: Any = None  # None: not paused; True: paused (no resume ends it); _UNSURE: unknown
    for i, (since, kind, value, planned) in enumerate(events):
        if kind == "pause" and not ended[i]:
            pause = True
        elif kind == "pause?" and not ended[i]:
            pause = True if pause is True else _UNSURE
        elif kind == "resume":
            pause = None
        elif kind == "resume?":
            pause = None if pause is None else _UNSURE
        elif kind == "data":
            if value is _MISSING:
                pause = None
            data = value
        if data is _MISSING or pause is True:
            out.append((since, _MISSING, None))
        elif pause is _UNSURE:
            out.append((since, _UNSURE, None))
        else:
            out.append((since, data, planned if kind == "data" else None))
    return out


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
