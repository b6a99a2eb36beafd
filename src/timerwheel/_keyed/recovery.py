"""What a stored key does when a KeyedScheduler takes it up (at start, or when a shared store's claim
brings it here): its interrupted fire (recover), the fires it missed meanwhile (catch_up, max_catch_up,
misfire_grace), then its next run. Pure functions of the key's row, its unfinished fires, the wall time,
the policy and next_run: they decide only. Then load, decide_all and apply_all: what a KeyedScheduler
does with them, on its key table (the only functions here that change anything)."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .._stores import FinishedFire, StoredFire, StoredKey, StoreError
from .keys import (
    CatchUp,
    Key,
    KeyState,
    Overlap,
    Policy,
    Recover,
    Reschedule,
    Trigger,
    advancing,
    iso,
    micro,
    outcome_of,
    spent,
)
from .table import KeyTable

logger = logging.getLogger("timerwheel")

#: next_run at a wall time, checked: POSIX seconds, None (disabled), or the error that makes a key INVALID.
Evaluate = Callable[[Hashable, Any, float], "float | BaseException | None"]


@dataclasses.dataclass(slots=True)
class Plan:
    """What a stored key does at start (decide): its fires to run at once, its state and
    next run after them, the fires it missed and did not run, and the fires to mark finished."""

    state: KeyState
    at: float | None
    last_error: str | None
    error: BaseException | None = None
    queue: list[tuple[float, bool]] = dataclasses.field(default_factory=list)
    decided: float | None = None  # (its wall time: the queue stands for the fires due till then)
    skipped: list[float] = dataclasses.field(default_factory=list)
    beyond: bool = False
    finished: list[FinishedFire] = dataclasses.field(default_factory=list)
    recovered: int = 0
    caught_up: int = 0
    abandoned: list[str] = dataclasses.field(default_factory=list)

    def finish(self, rec: Key, fire: StoredFire, wall_now: float, error: str) -> None:
        self.finished.append(
            FinishedFire(rec.key, fire.generation, fire.scheduled_for, micro(wall_now), error)
        )


def decide(
    rec: Key,
    unfinished: Iterable[StoredFire],
    wall_now: float,
    policy: Policy,
    evaluate: Evaluate,
    queued: Iterable[tuple[float, bool]] = (),
) -> Plan:
    """What a stored key does at start (or when a shared store's claim brings it here, or when it is
    resumed): its interrupted fire (recover), the fires it missed meanwhile (catch_up, max_catch_up,
    misfire_grace), then its timer. `queued`: a resumed key's queue: its reruns of interrupted fires
    (decided by recover already) run first, as they are; its other fires (a catch-up not run yet, a
    fire waiting to be taken again) are fires it owes, missed as the others. Decided only: nothing
    changes until apply_all."""
    plan = Plan(rec.state, rec.next_run_at, rec.last_error, decided=wall_now)
    queue = plan.queue
    owed = [when for when, rerun in queued if not rerun]
    queue += [fire for fire in queued if fire[1]]  # (they stand for the catch-up run, as at a start)
    base: float | None
    decided = rec.decided[1] if rec.decided is not None and rec.decided[0] == rec.generation else None
    if owed and decided is not None:
        # (a catch-up queued at a start or a claim: it decided the fires up to then; not again)
        base = _as_if_ended(rec, max(max(owed), decided), evaluate)
    elif owed:
        base, owed = min(owed), []
    else:
        base = rec.next_run_at if not queue else _as_if_ended(rec, queue[-1][0], evaluate)
    interrupted = rec.state is KeyState.RUNNING  # (a run was going when the process stopped)
    # A fire at or before the key's last started one is no missed fire: it ran, or it is in the
    # fire log as unfinished (rerun, or abandoned, below), and so is every unfinished one (the row
    # may say less: a run's end written after a later fire's take).
    started = rec.last_scheduled_for
    if queue and (started is None or queue[-1][0] > started):
        started = queue[-1][0]
    for fire in unfinished:
        when = fire.scheduled_for / 1_000_000
        if fire.generation != rec.generation:
            plan.finish(rec, fire, wall_now, "superseded: its key was replaced")
            continue
        if started is None or when > started:
            started = when
        if policy.recover is Recover.RERUN:
            queue.append((when, True))
            plan.recovered += 1
        else:
            message = (
                f"the run of {iso(when)} was interrupted (the process stopped during it); "
                "recover=Recover.SKIP does not run it again"
            )
            plan.finish(rec, fire, wall_now, message)
            plan.last_error = message
            plan.abandoned.append(message)
        if base is None and policy.reschedule is Reschedule.AFTER_FINISH:
            base = _as_if_ended(rec, when, evaluate)  # AFTER_FINISH leaves it unset while a run goes
    if (
        base is None
        and interrupted
        and not queue
        and rec.last_scheduled_for is not None
        and policy.reschedule is Reschedule.AFTER_FINISH
    ):  # its run's end was recorded, not its row (closed during the run, or a shared key taken over
        base = _as_if_ended(rec, rec.last_scheduled_for, evaluate)  # then): as if it ended on time
    if spent(rec):  # (it ran its max_runs: it owes nothing, but its reruns)
        if queue:
            plan.state, plan.at = KeyState.PENDING, queue[0][0]
        else:
            plan.state, plan.at = KeyState.DISABLED, None
        return plan
    if policy.reschedule is Reschedule.NONE and interrupted and base is None:
        # A run of Reschedule.NONE was going: the key is DISABLED after it (after its rerun, if any).
        if queue:
            plan.state, plan.at = KeyState.PENDING, queue[0][0]
        else:
            plan.state, plan.at = KeyState.DISABLED, None
        return plan
    if rec.state is KeyState.INVALID or (
        base is None and not queue and not owed and rec.state is not KeyState.DISABLED
    ):  # (nothing to catch up from: next_run afresh; fires it owes, with no schedule after them, are run)
        return _afresh(plan, rec, wall_now, evaluate)
    missed: list[float] = sorted(owed)
    t: float | None = base
    result: Any = base
    # (A life that decided to rerun a fire and ended before the rerun left it as the key's next run:
    # it is that rerun, not a miss.)
    while t is not None and t <= wall_now:
        if len(missed) > policy.max_catch_up:
            plan.beyond = True
            break
        if started is None or t > started:
            missed.append(t)
        result = advancing(evaluate(rec.key, rec.data, t), t)
        t = result if isinstance(result, float) else None  # (a next_run that keeps its date: once)
    grace = policy.grace
    later: list[float] = []
    if plan.beyond:  # more were missed than counted: those in the grace, or else the latest
        if grace is not None:
            later = _fires_in_grace(rec, wall_now - grace, missed, wall_now, evaluate, policy.max_catch_up)
        if not later:
            later = _latest_fire(rec, missed, wall_now, evaluate)
    runnable = [m for m in missed + later if grace is None or wall_now - m <= grace]
    if policy.catch_up is CatchUp.ONCE:
        run = [] if queue else runnable[-1:]  # an interrupted fire run again is the run of the catch-up
    elif policy.catch_up is CatchUp.SKIP:
        run = []
    else:
        run = sorted(set(runnable))[: policy.max_catch_up]
    limit = None if rec.options is None else rec.options.max_runs
    if limit is not None:  # (a key that may run only so many times more: the earliest of them run)
        run = run[: max(0, limit - rec.runs - sum(1 for _, rerun in queue if not rerun))]
    chosen = set(run)
    trigger = rec.triggered  # (a stored trigger at a point of the schedule runs for it: not missed)
    spared = trigger.at if trigger is not None and trigger.generation == rec.generation else None
    plan.skipped = [m for m in missed if m not in chosen and m != spared]
    queue += [(m, False) for m in run]
    plan.caught_up = len(chosen.difference(owed))  # (a fire it owed was counted when it was queued)
    if queue:
        plan.state, plan.at = KeyState.PENDING, queue[0][0]
    elif plan.beyond:
        return _afresh(plan, rec, wall_now, evaluate)  # more missed than counted: the next fire after now
    elif rec.state is KeyState.DISABLED and base is None:
        pass  # disabled it stays (next_run gave None, or Reschedule.NONE ran it), until upserted
    else:
        _outcome_into(plan, rec, result if t is None else t)
    return plan


def _as_if_ended(rec: Key, when: float, evaluate: Evaluate) -> float | None:
    after = advancing(evaluate(rec.key, rec.data, when), when)
    return after if isinstance(after, float) else None


def _afresh(plan: Plan, rec: Key, wall_now: float, evaluate: Evaluate) -> Plan:
    _outcome_into(plan, rec, evaluate(rec.key, rec.data, wall_now))
    return plan


def _outcome_into(plan: Plan, rec: Key, result: float | BaseException | None) -> None:
    state, at, last_error = outcome_of(rec, result)
    if rec.state is not KeyState.INVALID and plan.last_error != rec.last_error:
        last_error = plan.last_error  # (an abandoned fire's message)
    plan.state, plan.at, plan.last_error = state, at, last_error
    plan.error = result if isinstance(result, BaseException) else None


def _latest_fire(rec: Key, missed: list[float], wall_now: float, evaluate: Evaluate) -> list[float]:
    """The latest fire at or before now, beyond the counted ones (`missed`), or none. next_run(t) is
    the first fire after t, so the search gallops back from now instead of stepping through every
    missed fire: exact for a calendar schedule (a Cron); for a schedule relative to `now` (now +
    an interval) the fire it finds is at now."""
    step = max((missed[-1] - missed[0]) / max(1, len(missed) - 1), 1e-3)
    reach = step
    found: float | None = None
    while found is None and wall_now - reach > missed[-1]:
        first = evaluate(rec.key, rec.data, wall_now - reach)
        if isinstance(first, float) and missed[-1] < first <= wall_now:
            found = first
        reach *= 2
    if found is None:
        return []
    for _ in range(10_000):  # (from there, step to the latest)
        after = evaluate(rec.key, rec.data, found)
        if not isinstance(after, float) or not found < after <= wall_now:
            break
        found = after
    return [found]


def _fires_in_grace(
    rec: Key, since: float, missed: list[float], wall_now: float, evaluate: Evaluate, max_catch_up: int
) -> list[float]:
    """The fires after `since` (now - misfire_grace) and at or before now, beyond the counted ones
    (at most max_catch_up + 1)."""
    fires: list[float] = []
    t = evaluate(rec.key, rec.data, max(since, missed[-1]))
    while isinstance(t, float) and t <= wall_now and len(fires) <= max_catch_up:
        fires.append(t)
        after = evaluate(rec.key, rec.data, t)
        if not isinstance(after, float) or after <= t:
            break
        t = after
    return fires


# -- applying: what a KeyedScheduler does with the plans, on its key table ----------------------------


def load(table: KeyTable) -> None:
    """Take the stored keys into memory (not armed: start() decides), and the unfinished fires."""
    rows, fires = table.store.load()
    for row in rows:
        try:
            rec = table.record(row)
        except (TypeError, ValueError) as exc:
            raise StoreError(
                f"the {table.store.name} has a row that this timerwheel cannot read ({exc}): {row!r}"
            ) from None
        table.keys[row.key] = rec
        table.loaded.add(row.key)
    for fire in fires:
        table.unfinished.setdefault(fire.key, []).append(fire)


def decide_all(
    table: KeyTable, recs: list[Key], wall_now: float
) -> tuple[list[tuple[Key, int, Plan]], list[StoredKey], list[FinishedFire]]:
    """Stored keys (loaded at start, or claimed from a shared store): decide what each does about its
    interrupted fires and the fires it missed (decide), and the rows and finished fires that record
    it (for the caller to write in one transaction). Nothing is applied yet (see apply_all). A paused
    key is decided about when it is resumed (see resume): its unfinished fires are kept for then."""
    if any(rec.paused for rec in recs):
        for rec in recs:
            if rec.paused and rec.key in table.unfinished:
                table.paused_fires[rec.key] = table.unfinished.pop(rec.key)
        recs = [rec for rec in recs if not rec.paused]
    plans = [
        (
            rec,
            rec.generation,
            decide(
                rec,
                table.unfinished.get(rec.key, ()),
                wall_now,
                table.policy,
                table.evaluate,
                rec.catch_up or (),
            ),
        )
        for rec in recs
    ]
    # (next_run is user code: it may have removed or replaced a key meanwhile; that one is left be)
    plans = [p for p in plans if table.keys.get(p[0].key) is p[0] and p[0].generation == p[1]]
    rows = [
        rec.row(table.encode(rec.data), generation, plan.state, plan.at, plan.last_error)
        for rec, generation, plan in plans
        if plan.queue
        or (plan.state, plan.at, plan.last_error) != (rec.state, rec.next_run_at, rec.last_error)
    ]
    finished = [f for _, _, plan in plans for f in plan.finished]
    table.unfinished.clear()
    return plans, rows, finished


def apply_all(table: KeyTable, plans: list[tuple[Key, int, Plan]], paused: bool = False) -> None:
    """Apply what decide_all decided and wrote: arm the keys, then tell on_missed (`paused`: of fires
    missed while the keys were paused)."""
    summary = [0, 0]  # keys, fires
    for rec, generation, plan in plans:
        if table.closed or table.keys.get(rec.key) is not rec or rec.generation != generation:
            continue  # (a callback of an earlier key removed or replaced it)
        table.counts["recovered"] += plan.recovered
        table.counts["abandoned"] += len(plan.abandoned)
        table.counts["caught_up"] += plan.caught_up
        for message in plan.abandoned:
            logger.warning("timerwheel: key %r: %s", rec.key, message)
        rec.catch_up = plan.queue or None
        if plan.queue and plan.decided is not None:
            rec.decided = (generation, plan.decided)
        rec.taken_up = plan.decided
        table.apply(rec, plan.state, plan.at, plan.last_error, plan.error)
        if rec.triggered is not None and not rec.paused:  # (stored, not run yet: after the catch-up)
            table.trigger(rec, rec.triggered)
        if plan.skipped:
            count = len(plan.skipped)
            table.counts["missed"] += count
            summary[0] += 1
            summary[1] += count
    if summary[0]:
        logger.warning(
            "timerwheel: %d key(s) of the %s missed %d fire(s) while %s, not run "
            "(catch_up=%s, max_catch_up=%d, misfire_grace=%r): see on_missed and stats()",
            summary[0],
            table.store.name,
            summary[1],
            _while(table, paused),
            table.policy.catch_up.name,
            table.policy.max_catch_up,
            table.policy.grace,
        )
    for rec, _, plan in plans:  # (after every key is armed: a callback that changes keys is final)
        if plan.skipped:
            table.report_missed(rec, plan.skipped, plan.beyond, _while(table, paused))


def _while(table: KeyTable, paused: bool) -> str:
    if paused:
        return "paused"
    return "no process held them" if table.shared else "the process was down"


def resume(
    table: KeyTable,
    recs: list[Key],
    wall_now: float,
    write: Callable[[list[StoredKey], list[FinishedFire]], object] | None,
) -> None:
    """Paused keys resumed: the pause was downtime, and the same rules as a restart decide what runs
    (decide: the fires it held back and those that fell due meanwhile, catch_up, max_catch_up,
    misfire_grace; an interrupted fire found as it was loaded, recover). A key whose run goes on is
    planned when the run ends, as always. `write(rows, finished)` records what was decided (every
    resumed key's row, not paused), before anything is applied; if it raises, the keys stay paused and
    nothing changed. The rows written are the keys as the pause left them, unpaused, not what was
    decided: a write that raised but was made all the same (an I/O error after the commit), or a crash
    before the keys' next takes, leaves the next life to decide the same from them, as a restart does
    (what the pause held back is run or reported missed, never lost; a report may be made again)."""
    recs = [rec for rec in recs if rec.paused]
    for rec in recs:
        if rec.taking:  # (a take on its way: decided once it is done, from what it made of the key)
            rec.paused, rec.resumed = False, True
    recs = [rec for rec in recs if rec.paused]
    fires = {rec.key: table.paused_fires.pop(rec.key) for rec in recs if rec.key in table.paused_fires}
    for rec in recs:
        rec.paused = False
    table.unfinished.update(fires)
    # (a run going on, with no next run planned: its end plans the key)
    waiting = [rec for rec in recs if rec.running and rec.next_run_at is None and not rec.catch_up]
    idle = [rec for rec in recs if rec not in waiting]
    try:
        plans, _, finished = decide_all(table, idle, wall_now)
        if write is not None:  # (the rows as the pause left them, unpaused: see above)
            write([_row(table, rec, False) for rec in recs if table.keys.get(rec.key) is rec], finished)
    except BaseException:
        for rec in recs:
            rec.paused = True
        table.paused_fires.update(fires)
        table.unfinished.clear()
        raise
    # The user sees PAUSED change to what the key does now (its state is set from PAUSED).
    for rec in waiting:
        rec.state, state = KeyState.PAUSED, rec.state
        table.set_state(rec, state)
    for rec, _, _ in plans:
        rec.state = KeyState.PAUSED
    apply_all(table, plans, paused=True)
    engine = table.engine
    for rec in recs:  # (a retry whose time came while paused: tried now, unless it gives way to a fire)
        retrying = rec.retrying
        if retrying is not None and retrying.held and engine is not None:
            retrying.held = False
            engine.add_wall_timer(retrying, wall_now)
    for rec, _, _ in plans:
        if rec.state is KeyState.PAUSED:  # (not applied: a callback replaced or removed it meanwhile)
            rec.state = KeyState.DISABLED if rec.next_run_at is None else KeyState.PENDING
        elif rec.running and rec.state is not KeyState.INVALID and table.reschedule is Reschedule.BEFORE_RUN:
            table.set_state(rec, KeyState.RUNNING)  # (a run goes on: BEFORE_RUN, armed meanwhile)
        # (else, a run of an older generation goes on, the key upserted meanwhile: it shows its plan, as
        # after any upsert during a run; the run's end plans nothing of the newer generation)


def set_paused(table: KeyTable, keys: list[Hashable] | None, paused: bool) -> int:
    """pause() and resume() of `keys` (None: every key) with a local store (memory, a file): the rows
    written first (a store that fails changes nothing), then the keys paused, or resumed (see resume;
    before start() a resumed key is only unpaused: start() decides about it). Returns how many of `keys`
    there are, or (None) how many changed."""
    recs = list(table.keys.values()) if keys is None else [table.keys[k] for k in keys if k in table.keys]
    changing = [rec for rec in recs if rec.paused != paused]
    write = table.store.save if table.durable else None
    if paused or not table.started:
        if write is not None and changing:
            write([_row(table, rec, paused) for rec in changing])
        if not paused:
            unpause(table, changing)
        for rec in changing if paused else ():
            table.pause(rec)
    elif changing:
        resume(table, changing, table.wall_now(), write)
    return len(changing) if keys is None else len(recs)


def trigger(table: KeyTable, key: Hashable, restart: bool, overlap: Overlap | None) -> float | None:
    """trigger() with a local store (under the lock): the key's trigger, committed by a durable store
    with the key's row, then applied (KeyTable.trigger); None for a key not here, or paused."""
    if not table.started:
        raise RuntimeError("trigger() runs a key now: start() the KeyedScheduler first")
    rec = table.keys.get(key)
    if rec is None or rec.paused:
        return None
    write = None
    if table.durable:

        def write(applied: Trigger) -> None:
            row = rec.row(
                table.encode(rec.data),
                rec.generation,
                rec.state,
                rec.next_run_at,
                rec.last_error,
                triggered=applied,
            )
            table.store.save([row])

    # (in the microseconds a store keeps: exact as a datetime; and after the key's latest started fire,
    # if the wall clock stepped back behind it: a trigger is a new fire, never one that ran)
    us = math.floor(table.wall_now() * 1_000_000)  # (not after the clock's now)
    if rec.last_scheduled_for is not None and us <= micro(rec.last_scheduled_for):
        us = micro(rec.last_scheduled_for) + 1
    at = us / 1_000_000
    return table.trigger(rec, Trigger(rec.generation, at, restart, overlap), write)


def unpause(table: KeyTable, recs: list[Key]) -> None:
    """Paused keys resumed before start(), which decides about them (as about every key): only
    unpaused, and the user told."""
    for rec in recs:
        rec.paused = False
        table.call(table.on_state_change, rec.key, KeyState.PAUSED, rec.state)


def _row(table: KeyTable, rec: Key, paused: bool) -> StoredKey:
    encoded = table.encode(rec.data)  # (a pause drops a trigger not run yet: none, paused or resumed)
    return rec.row(
        encoded, rec.generation, rec.state, rec.next_run_at, rec.last_error, triggered=None, paused=paused
    )
