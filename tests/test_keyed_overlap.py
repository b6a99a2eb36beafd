"""Overlap policies (Overlap.SKIP, QUEUE_ONE, ALLOW, REPLACE): what a key's fire does when it comes while
a run of the key goes, given to the KeyedScheduler (every key's) and to upsert() (one key's, kept by a
durable store with the key).

Runs are coroutines on an AsyncScheduler on a VirtualTimeLoop: a run goes until the test lets it go (or
its ctx.cancelled is set), so that a fire comes during it at a known virtual time."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    JobContext,
    KeyedScheduler,
    KeyState,
    MemoryStore,
    Overlap,
    Reschedule,
    SQLiteStore,
    ThreadedScheduler,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop, wait_until_idle

from .test_keyed_pause import T0, every_10s


class Life:
    """A KeyedScheduler whose runs go until they are let go (`finish`) or told to stop (ctx.cancelled),
    on virtual time: `started` lists (key, scheduled_for, start) and `ended` (key, scheduled_for, end,
    cancelled), in seconds after T0."""

    def __init__(self, store: Any = None, wall: float = T0, **kwargs: Any) -> None:
        self.loop = VirtualTimeLoop(100.0, wall=wall)
        self.sched = AsyncScheduler(loop=self.loop)
        self.started: list[tuple[Any, float, float]] = []
        self.ended: list[tuple[Any, float, float, bool]] = []
        self.going: dict[tuple[Any, float], asyncio.Event] = {}
        kwargs.setdefault("reschedule", Reschedule.BEFORE_RUN)
        self.keyed = KeyedScheduler(
            self.sched, kwargs.pop("next_run", every_10s), self._run, context=True, store=store, **kwargs
        )

    def now(self) -> float:
        return self.loop.wall() - T0

    async def _run(self, ctx: JobContext, key: Any, data: Any) -> None:
        at = ctx.scheduled_for - T0
        self.started.append((key, at, self.now()))
        done = self.going[(key, at)] = asyncio.Event()
        while not done.is_set() and not ctx.cancelled.is_set():
            await asyncio.sleep(0.25)
        self.ended.append((key, at, self.now(), ctx.cancelled.is_set()))

    def finish(self, key: Any, scheduled_for: float) -> None:
        self.going[(key, scheduled_for)].set()

    def running(self) -> list[tuple[Any, float]]:
        done = {(k, at) for k, at, _, _ in self.ended}
        return [(k, at) for k, at, _ in self.started if (k, at) not in done]

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def close(self) -> None:
        for done in self.going.values():
            done.set()
        self.advance(1)  # (the runs end)
        self.loop.run_until_complete(self.keyed.aclose())
        self.loop.run_until_complete(self.sched.close())
        self.loop.close()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "keys.db")


def test_the_default_under_before_run_is_allow_runs_go_side_by_side(store: Any) -> None:
    life = Life(store)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(25)
    assert life.running() == [("k", 10.0), ("k", 20.0)]  # the fire at 20 began beside the run of 10
    assert life.keyed.get("k").overlap is Overlap.ALLOW  # type: ignore[union-attr]
    life.close()


def test_skip_runs_nothing_while_a_run_goes_counts_it_and_plans_the_next(store: Any) -> None:
    life = Life(store, overlap=Overlap.SKIP)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(32)  # the run of 10 goes on: the fires at 20 and 30 are skipped
    assert life.running() == [("k", 10.0)]
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.RUNNING and info.running
    assert info.next_run_at == datetime.fromtimestamp(T0 + 40, UTC)  # (armed for the next)
    assert life.keyed.stats().skipped == 2
    life.finish("k", 10.0)
    life.advance(10)  # the fire at 40 comes with no run going: it runs
    assert [at for _, at, _ in life.started] == [10.0, 40.0]
    assert life.keyed.stats().skipped == 2 and life.keyed.stats().started == 2
    life.close()


def test_queue_one_runs_the_first_fire_that_came_once_the_run_ends_and_no_more(store: Any) -> None:
    life = Life(store, overlap=Overlap.QUEUE_ONE)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(42)  # the run of 10 goes on: the fire at 20 waits; those at 30 and 40 do not come
    assert life.running() == [("k", 10.0)]
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == datetime.fromtimestamp(T0 + 20, UTC)  # (it waits)
    life.finish("k", 10.0)
    life.advance(1)
    assert life.started == [("k", 10.0, 10.0), ("k", 20.0, 42.25)]  # the waiting fire, at once
    life.finish("k", 20.0)
    life.advance(10)
    assert [at for _, at, _ in life.started] == [10.0, 20.0, 50.0]  # then on schedule again
    assert life.keyed.stats().skipped == 0
    life.close()


def test_a_fire_older_than_one_of_its_key_that_began_is_skipped_in_every_store(store: Any) -> None:
    """The run of 10 goes on; at 19.5 the wall clock steps to 24 and a trigger (Overlap.ALLOW) begins
    beside the run: a fire of 24. The fire of 20, due as the driver notices the step, waits behind the
    run (Overlap.QUEUE_ONE). When the run ends it does not begin after the newer fire: it is skipped
    (counted, in the history), the same in memory and in a file, and the key goes on at 30."""
    life = Life(store, overlap=Overlap.QUEUE_ONE)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(19.5)
    life.loop.set_wall(T0 + 24)
    when = life.keyed.trigger("k", overlap=Overlap.ALLOW)
    assert when == datetime.fromtimestamp(T0 + 24, UTC)
    life.advance(0.5)
    assert life.running() == [("k", 10.0), ("k", 24.0)]
    life.finish("k", 10.0)
    life.finish("k", 24.0)
    life.advance(1)
    assert [(at, start) for _, at, start in life.started] == [(10.0, 10.0), (24.0, 24.0)]
    assert life.keyed.stats().skipped == 1
    skipped = [e for e in life.keyed.history("k") if e.outcome == "skipped"]
    assert [(e.scheduled_for, e.error) for e in skipped] == [
        (datetime.fromtimestamp(T0 + 20, UTC), "a newer fire of the key began")
    ]
    assert life.keyed.get("k").next_run_at == datetime.fromtimestamp(T0 + 30, UTC)  # type: ignore[union-attr]
    life.close()


def test_an_upserts_first_fire_is_not_held_back_by_an_older_generations_latest_fire(store: Any) -> None:
    """A one-off key ran at 50; upserted (a new generation) with an overdue date, 30, its fire runs at
    once: the older generation's fire of 50 does not make it "older than one that began"."""

    def one_off(now: datetime, key: Any, data: Any) -> datetime:
        return datetime.fromtimestamp(T0 + data, UTC)

    life = Life(store, next_run=one_off)
    life.keyed.upsert("report", 50)
    life.keyed.start()
    life.advance(55)
    life.finish("report", 50.0)
    life.advance(5)
    life.keyed.upsert("report", 30)
    life.advance(1)
    assert [(at, start) for _, at, start in life.started] == [(50.0, 50.0), (30.0, 60.0)]
    assert life.keyed.stats().skipped == 0
    life.close()


def test_under_replace_a_fire_older_than_one_that_began_replaces_nothing(store: Any) -> None:
    """As the test above it, under Overlap.REPLACE: the fire of 20, older than the trigger's 24 that
    began beside the run of 10, is skipped, and tells neither run to stop."""
    life = Life(store, overlap=Overlap.REPLACE)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(19.5)
    life.loop.set_wall(T0 + 24)
    life.keyed.trigger("k", overlap=Overlap.ALLOW)
    life.advance(1.5)
    assert life.running() == [("k", 10.0), ("k", 24.0)] and life.ended == []
    assert life.keyed.stats().skipped == 1
    life.close()


def test_replace_tells_the_running_run_to_stop_and_starts_at_once(store: Any) -> None:
    life = Life(store, overlap=Overlap.REPLACE)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(21)
    assert life.started == [("k", 10.0, 10.0), ("k", 20.0, 20.0)]
    assert life.ended == [("k", 10.0, 20.0, True)]  # told through ctx.cancelled, as the new one began
    assert life.running() == [("k", 20.0)]
    life.close()


def test_a_keys_own_overlap_goes_before_the_schedulers_and_an_upsert_without_it_resets_it(
    store: Any,
) -> None:
    life = Life(store)  # (every key ALLOW: BEFORE_RUN's default)
    life.keyed.upsert("skips", overlap=Overlap.SKIP)
    life.keyed.upsert("allows")
    life.keyed.start()
    assert life.keyed.get("skips").overlap is Overlap.SKIP  # type: ignore[union-attr]
    life.advance(25)
    assert sorted(life.running()) == [("allows", 10.0), ("allows", 20.0), ("skips", 10.0)]
    life.keyed.upsert("skips")  # (no overlap: the KeyedScheduler's again)
    assert life.keyed.get("skips").overlap is Overlap.ALLOW  # type: ignore[union-attr]
    life.advance(10)
    assert ("skips", 30.0) in life.running()
    life.close()


def test_a_keys_own_overlap_is_kept_by_the_file_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    life = Life(SQLiteStore(path))
    life.keyed.upsert("k", overlap=Overlap.SKIP)
    life.keyed.upsert("plain")
    life.keyed.start()
    life.advance(12)  # (runs and ends write the key's row: they keep its options)
    life.close()
    db = sqlite3.connect(path)
    options = dict(db.execute("SELECT key, options FROM timerwheel_keys").fetchall())
    db.close()
    assert options == {'"k"': json.dumps({"overlap": "skip"}, separators=(",", ":")), '"plain"': None}
    again = Life(SQLiteStore(path), wall=T0 + 15)
    assert again.keyed.get("k").overlap is Overlap.SKIP  # type: ignore[union-attr]
    again.keyed.start()
    again.advance(20)  # the fire at 30 comes while the run of 20 goes: skipped for k, beside it for plain
    assert sorted(again.running()) == [("k", 20.0), ("plain", 20.0), ("plain", 30.0)]
    assert again.keyed.stats().skipped == 1
    again.close()


def test_under_after_finish_skip_drops_a_newer_generations_fire_that_comes_during_a_run() -> None:
    """Under AFTER_FINISH a key's own fires never come during its run; an upsert during a run does make
    one come (the newer generation's): SKIP drops it and plans the next; the default waits for the run."""
    for overlap, expected in ((Overlap.SKIP, [10.0, 30.0]), (None, [10.0, 20.0])):
        life = Life(reschedule=Reschedule.AFTER_FINISH, overlap=overlap)
        life.keyed.upsert("k")
        life.keyed.start()
        life.advance(12)
        life.keyed.upsert("k", "new data")  # its first fire, at 20, comes while the run of 10 goes
        life.advance(10)
        assert life.running() == [("k", 10.0)]
        life.finish("k", 10.0)
        life.advance(10)
        assert [at for _, at, _ in life.started] == expected, overlap
        life.close()


def test_bad_overlap_is_refused_naming_the_argument_and_changes_nothing() -> None:
    life = Life()
    with pytest.raises(TypeError, match="overlap must be an Overlap"):
        life.keyed.upsert("k", overlap="skip")  # type: ignore[arg-type]
    assert "k" not in life.keyed
    life.keyed.upsert("k", overlap=Overlap.SKIP)
    with pytest.raises(TypeError, match="overlap must be an Overlap"):
        life.keyed.upsert("k", "new", overlap=1)  # type: ignore[arg-type]
    info = life.keyed.get("k")
    assert info is not None and info.data is None and info.overlap is Overlap.SKIP
    with pytest.raises(TypeError, match="overlap must be an Overlap"):
        Life(overlap="allow")
    life.close()


def _clock_fails_once_as_a_fire_is_decided(life: Life) -> dict[str, bool]:
    """The keyed layer's wall clock fails once, when armed, as a fire of a key is decided (as it comes
    during a run, or as its run is to begin)."""
    table = life.keyed._table
    real = table.wall_now
    flag = {"armed": False}

    def wall_now() -> float:
        if flag["armed"] and sys._getframe(1).f_code.co_name in ("_overlapping", "_prepare"):
            flag["armed"] = False
            raise OSError("the wall clock is not there")
        return real()

    table.wall_now = wall_now  # type: ignore[method-assign]
    return flag


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.REPLACE])
def test_a_fire_whose_clock_failed_once_as_it_came_during_a_run_keeps_its_overlap(overlap: Overlap) -> None:
    """A fire put back at the head of its key's queue by a wall clock that failed as it came during a run
    was taken for a fire a catch-up decided to run: it waited for the run (SKIP: it ran late, after it;
    REPLACE: it never replaced the run, which ran on)."""
    life = Life(overlap=overlap)
    life.keyed.upsert("k")
    life.keyed.start()
    flag = _clock_fails_once_as_a_fire_is_decided(life)
    life.advance(15)  # the run of 10 goes
    flag["armed"] = True
    life.advance(17)  # the fire of 20 comes, and meets the failing clock; then the fire of 30
    assert not flag["armed"]
    if overlap is Overlap.SKIP:
        life.finish("k", 10.0)
        life.advance(1)
        assert [at for _, at, _ in life.started] == [10.0]  # the fires of 20 and 30: skipped, not late
        assert life.keyed.stats().skipped == 2
    else:
        assert life.ended[0][:2] == ("k", 10.0) and life.ended[0][3]  # told to stop
        assert ("k", 30.0) in life.running()
    life.close()


def test_a_key_whose_plan_ends_at_a_skipped_fire_shows_running_while_its_run_goes() -> None:
    """As at a run's start: next_run says None at the skipped fire, and the key showed DISABLED (and
    on_state_change heard RUNNING -> DISABLED) while its run went on."""

    def at_10_and_20(now: datetime, key: Any, data: Any) -> datetime | None:
        return None if now.timestamp() - T0 >= 20 else every_10s(now, key, data)

    life = Life(overlap=Overlap.SKIP, next_run=at_10_and_20)
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(22)  # the run of 10 goes; the fire of 20 is skipped, and next_run says None after it
    info = life.keyed.get("k")
    assert life.keyed.stats().skipped == 1
    assert info is not None and info.running and info.state is KeyState.RUNNING
    life.finish("k", 10.0)
    life.advance(1)
    assert life.keyed.get("k").state is KeyState.DISABLED  # type: ignore[union-attr]
    life.close()


class OneWorker:
    """A KeyedScheduler (BEFORE_RUN) on a ThreadedScheduler with one worker, on a ManualClock: a run goes
    until it is let go or told to stop. The waits are for conditions; their deadline only keeps a
    broken test from hanging."""

    def __init__(self, overlap: Overlap) -> None:
        self.clock = ManualClock(100.0, wall=T0)
        self.sched = ThreadedScheduler(clock=self.clock, workers=1)
        self.started: list[float] = []
        self.ended: dict[float, bool] = {}  # scheduled_for: told to stop
        self.gates: dict[float, threading.Event] = {}
        self.keyed = KeyedScheduler(
            self.sched, every_10s, self._run, context=True, reschedule=Reschedule.BEFORE_RUN, overlap=overlap
        )

    def _run(self, ctx: JobContext, key: Any, data: Any) -> None:
        at = ctx.scheduled_for - T0
        gate = self.gates[at] = threading.Event()
        self.started.append(at)
        while not gate.wait(0.001) and not ctx.cancelled.is_set():
            pass
        self.ended[at] = ctx.cancelled.is_set()

    def close(self) -> None:
        for gate in list(self.gates.values()):
            gate.set()
        self.keyed.close()
        self.sched.close()


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.REPLACE])
def test_with_every_worker_busy_a_fire_is_decided_as_it_comes(overlap: Overlap) -> None:
    """With one worker, busy with the key's run, the fire of 20 was decided when a worker took it, not
    when it came: under SKIP it ran late, after the run; under REPLACE the run was never told to stop
    (no worker was ever free for the fire that was to tell it), and the key never ran again."""
    one = OneWorker(overlap)
    one.keyed.upsert("k")
    one.keyed.start()
    one.clock.advance(10)
    _until(lambda: one.started == [10.0])
    one.clock.advance(15)  # 25: the fire of 20 came while the run of 10 goes
    if overlap is Overlap.SKIP:
        _until(lambda: one.keyed.stats().skipped == 1)
        one.gates[10.0].set()
        _until(lambda: 10.0 in one.ended)
        wait_until_idle(one.sched)
        assert one.started == [10.0]
    else:
        _until(lambda: 10.0 in one.ended)
        assert one.ended[10.0] is True  # told to stop, as the fire came
        _until(lambda: one.started == [10.0, 20.0])
    one.close()


def _until(condition: Any, deadline: float = 10.0) -> None:
    stop = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < stop, "the condition never held"
        time.sleep(0.001)


def test_a_fire_skipped_as_it_came_is_not_started_when_the_clock_failed_then() -> None:
    """SKIP: the wall clock failed as the fire of 20 came during the run (and again as it was to start):
    the decision said "not overlapping", and the fire started beside the run."""
    life = Life(overlap=Overlap.SKIP)
    table = life.keyed._table
    real = table.wall_now
    fails = [0]

    def wall_now() -> float:
        if fails[0] and sys._getframe(1).f_code.co_name == "_overlapping":
            fails[0] -= 1
            raise OSError("the wall clock is not there")
        return real()

    table.wall_now = wall_now  # type: ignore[method-assign]
    life.keyed.upsert("k")
    life.keyed.start()
    life.advance(12)  # the run of 10 goes on
    fails[0] = 2
    life.advance(10)
    assert life.running() == [("k", 10.0)]
    assert life.keyed.stats().skipped == 1 and life.keyed.stats().clock_errors == 2
    life.close()
