"""What a stored key does when a KeyedScheduler takes it up after a stop, decided by pure functions
(timerwheel._keyed.recovery.decide): no store, no scheduler, no clock; a key's row, its unfinished fires,
the wall time, the policy and next_run go in, a plan comes out. The same rules end to end, through each
store, are in test_durable.py and test_shared.py."""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import pytest

from timerwheel import CatchUp, KeyState, Recover, Reschedule
from timerwheel._keyed.keys import Key
from timerwheel._keyed.recovery import Plan, Policy, decide
from timerwheel.drivers import StoredFire


class Owner:
    """What a key's record needs of its KeyedScheduler (nothing here fires it)."""

    closed = False

    def fired(self, rec: Key) -> None:
        raise AssertionError("decide() fires nothing")


def every_10s(key: Hashable, data: Any, t: float) -> float:
    """next_run: the next multiple of 10 s after t."""
    return (math.floor(t / 10) + 1) * 10.0


def key_at(next_run_at: float | None, state: KeyState = KeyState.PENDING, last: float | None = None) -> Key:
    rec = Key(Owner(), "k", None)
    rec.state, rec.next_run_at, rec.last_scheduled_for, rec.generation = state, next_run_at, last, 3
    return rec


def policy(
    catch_up: CatchUp = CatchUp.ALL,
    max_catch_up: int = 100,
    grace: float | None = None,
    recover: Recover = Recover.RERUN,
    reschedule: Reschedule = Reschedule.AFTER_FINISH,
) -> Policy:
    return Policy(recover, reschedule, catch_up, max_catch_up, grace)


def fire(at: float, generation: int = 3) -> StoredFire:
    return StoredFire("k", generation, round(at * 1_000_000), 1)


def run(rec: Key, now: float, rules: Policy, unfinished: list[StoredFire] | None = None) -> Plan:
    return decide(rec, unfinished or [], now, rules, every_10s)


def test_catch_up_all_runs_every_missed_fire_in_order() -> None:
    plan = run(key_at(100.0), 135.0, policy(CatchUp.ALL))
    assert plan.queue == [(100.0, False), (110.0, False), (120.0, False), (130.0, False)]
    assert plan.caught_up == 4 and plan.skipped == [] and not plan.beyond
    assert (plan.state, plan.at) == (KeyState.PENDING, 100.0)


def test_catch_up_once_runs_the_latest_missed_fire_and_reports_the_others() -> None:
    plan = run(key_at(100.0), 135.0, policy(CatchUp.ONCE))
    assert plan.queue == [(130.0, False)] and plan.caught_up == 1
    assert plan.skipped == [100.0, 110.0, 120.0]


def test_catch_up_skip_runs_none_and_plans_the_next_fire_after_now() -> None:
    plan = run(key_at(100.0), 135.0, policy(CatchUp.SKIP))
    assert plan.queue == [] and plan.caught_up == 0
    assert plan.skipped == [100.0, 110.0, 120.0, 130.0]
    assert (plan.state, plan.at) == (KeyState.PENDING, 140.0)


def test_max_catch_up_bounds_the_fires_run_and_says_more_were_missed() -> None:
    plan = run(key_at(100.0), 1_000.0, policy(CatchUp.ALL, max_catch_up=2))
    assert plan.caught_up == 2 and len(plan.queue) == 2 and plan.beyond
    assert [at for at, _ in plan.queue] == sorted(at for at, _ in plan.queue)


@pytest.mark.parametrize("catch_up", [CatchUp.ALL, CatchUp.ONCE])
def test_once_beyond_max_catch_up_runs_the_latest_fire_before_now(catch_up: CatchUp) -> None:
    plan = run(key_at(100.0), 1_005.0, policy(catch_up, max_catch_up=2))
    assert plan.beyond
    if catch_up is CatchUp.ONCE:
        assert plan.queue == [(1_000.0, False)]  # the latest, not the oldest counted one


def test_misfire_grace_runs_only_the_fires_within_it() -> None:
    plan = run(key_at(100.0), 135.0, policy(CatchUp.ALL, grace=15.0))
    assert plan.queue == [(120.0, False), (130.0, False)]
    assert plan.skipped == [100.0, 110.0]


def test_an_interrupted_fire_is_run_again_first_with_recover_rerun() -> None:
    rec = key_at(None, KeyState.RUNNING, last=90.0)
    plan = run(rec, 95.0, policy(recover=Recover.RERUN), [fire(90.0)])
    assert plan.queue[0] == (90.0, True) and plan.recovered == 1 and plan.finished == []
    assert plan.state is KeyState.PENDING


def test_an_interrupted_fire_is_recorded_failed_with_recover_skip() -> None:
    rec = key_at(None, KeyState.RUNNING, last=90.0)
    plan = run(rec, 95.0, policy(recover=Recover.SKIP), [fire(90.0)])
    assert plan.recovered == 0 and (90.0, True) not in plan.queue
    assert len(plan.finished) == 1 and "interrupted" in (plan.finished[0].error or "")
    assert plan.abandoned and plan.last_error == plan.abandoned[0]
    assert (plan.state, plan.at) == (KeyState.PENDING, 100.0)  # as if it ended on time


def test_an_unfinished_fire_of_an_older_generation_is_finished_as_superseded() -> None:
    plan = run(key_at(100.0), 95.0, policy(), [fire(80.0, generation=2)])
    assert plan.queue == [] and plan.recovered == 0
    assert [f.error for f in plan.finished] == ["superseded: its key was replaced"]
    assert (plan.state, plan.at) == (KeyState.PENDING, 100.0)


def test_a_fire_at_or_before_the_last_started_one_is_not_a_missed_fire() -> None:
    plan = run(key_at(100.0, last=110.0), 125.0, policy(CatchUp.ALL))
    assert plan.queue == [(120.0, False)] and plan.skipped == []


def test_an_interrupted_run_of_reschedule_none_leaves_the_key_disabled() -> None:
    rec = key_at(None, KeyState.RUNNING, last=90.0)
    plan = run(rec, 95.0, policy(reschedule=Reschedule.NONE, recover=Recover.SKIP), [fire(90.0)])
    assert (plan.state, plan.at) == (KeyState.DISABLED, None) and plan.queue == []


def test_a_next_run_that_fails_makes_the_key_invalid() -> None:
    def failing(key: Hashable, data: Any, t: float) -> BaseException:
        return ValueError("no schedule")

    plan = decide(key_at(None, KeyState.INVALID), [], 95.0, policy(), failing)
    assert plan.state is KeyState.INVALID and isinstance(plan.error, ValueError)
