"""Durable keys on SQLite: what survives a close and a crash, the catch-up table, recovery of interrupted
runs, ownership of the file (and what a forked child inherits), generations, bad input, and content the
store cannot read.

Time comes from a ManualClock (the wall clock is moved while the scheduler is closed: the process was
down). Processes are real where a crash, a fork or a second process is the point: they run in child
processes of the test, synchronised by pipes, never by sleeping.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    Backpressure,
    CatchUp,
    Cron,
    KeyedScheduler,
    KeyState,
    MemoryStore,
    Overlap,
    Recover,
    Reschedule,
    Scheduler,
    SQLiteStore,
    StoreError,
    ThreadedScheduler,
)
from timerwheel._stores import StoredKey
from timerwheel.testing import ManualClock, wait_until_idle

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
GENEROUS = 20.0  # seconds a test waits for a child process before it fails instead of hanging


def every(now: datetime, key: Any, data: Any) -> datetime:
    """next_run: data["every"] seconds after now."""
    return now + timedelta(seconds=data["every"])


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


class Life:
    """One life of a process: a Scheduler on the clock and a KeyedScheduler on the file at `path` (or on
    the store given), recording its runs, missed fires and changes of state."""

    def __init__(self, path: Path | Any, clock: ManualClock, **kwargs: Any) -> None:
        self.clock = clock
        self.ran: list[tuple[Any, float]] = []
        self.missed: list[tuple[Any, int, float, float]] = []
        self.states: list[tuple[Any, KeyState, KeyState]] = []
        kwargs.setdefault("on_missed", self._missed)
        kwargs.setdefault("on_state_change", lambda key, old, new: self.states.append((key, old, new)))
        self.sched = Scheduler(clock)
        self.keyed = KeyedScheduler(
            self.sched,
            kwargs.pop("next_run", every),
            kwargs.pop("run", self._run),
            store=SQLiteStore(path) if isinstance(path, (str, os.PathLike)) else path,
            **kwargs,
        )

    def _run(self, key: Any, data: Any) -> None:
        self.ran.append((key, self.clock.wall() - T0))

    def _missed(self, key: Any, data: Any, count: int, first: datetime, last: datetime) -> None:
        self.missed.append((key, count, first.timestamp() - T0, last.timestamp() - T0))

    def advance(self, seconds: float) -> None:
        """Move the clock, running what comes due on the way (as a driver would)."""
        end = self.clock() + seconds
        for _ in range(100_000):
            self.sched.run_pending()
            wait = self.sched.next_run_in()
            if wait is None or self.clock() + wait > end:
                break
            self.clock.advance(wait)
        self.clock.set(end)
        self.sched.run_pending()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "keys.db"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0, wall=T0)


def down(clock: ManualClock, seconds: float) -> None:
    """The process is down: the wall clock moves on (a new process's monotonic clock starts anew)."""
    clock.set_wall(clock.wall() + seconds)


# -- what survives ------------------------------------------------------------------------------------


def test_keys_data_generations_and_next_runs_survive(path: Path, clock: ManualClock) -> None:
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("a", {"every": 10})
    life.keyed.upsert(7, {"every": 30, "note": "an int key"})
    life.keyed.upsert("a", {"every": 20})  # generation 2
    life.keyed.upsert("gone", {"every": 5})
    assert life.keyed.remove("gone")
    life.advance(20)
    assert life.ran == [("a", 20.0)]
    life.keyed.close()

    again = Life(path, clock)
    snap = again.keyed.snapshot()  # loaded at construction, before start()
    assert set(snap) == {"a", 7}
    assert snap["a"].data == {"every": 20} and snap["a"].generation == 2
    assert snap["a"].next_run_at == at(40) and snap[7].next_run_at == at(30)
    again.keyed.start()
    again.advance(20)
    assert again.ran == [(7, 30.0), ("a", 40.0)] and again.missed == []
    again.keyed.close()


def test_close_does_not_write_disabled_into_the_store(path: Path, clock: ManualClock) -> None:
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("a", {"every": 10})
    life.keyed.close()
    assert life.keyed.get("a").state is KeyState.DISABLED  # type: ignore[union-attr]
    again = Life(path, clock)
    assert again.keyed.get("a").state is KeyState.PENDING  # type: ignore[union-attr]
    again.keyed.close()


@pytest.mark.parametrize("reschedule", [Reschedule.BEFORE_RUN, Reschedule.AFTER_FINISH])
def test_close_during_a_run_does_not_write_disabled_into_the_store(
    path: Path, clock: ManualClock, reschedule: Reschedule
) -> None:
    """BEFORE_RUN, close() while a run goes: its end used to write the key's row as DISABLED with
    next_run_at NULL, so that no later life ever ran the key again."""
    life = Life(path, clock, reschedule=reschedule)

    def closes(key: Any, data: Any) -> None:
        life.keyed.close()  # (from the run: it does not wait for it)

    life.keyed._runs._run = closes  # type: ignore[method-assign]
    life.keyed.start()
    life.keyed.upsert("a", {"every": 10})
    life.advance(10)
    assert life.keyed.get("a").state is KeyState.DISABLED  # type: ignore[union-attr]
    again = Life(path, clock, reschedule=reschedule)
    info = again.keyed.get("a")
    assert info is not None and info.state is KeyState.PENDING and info.next_run_at == at(20)
    again.keyed.start()
    again.advance(10)
    assert again.ran == [("a", 20.0)]
    again.keyed.close()


def test_a_run_going_on_past_close_removes_its_own_key_from_the_file(path: Path, clock: ManualClock) -> None:
    """A one-shot job removes its key at its end; close() came during its run. The file is still held
    for that run, and the remove reaches it: the next life does not run the key again. After the last
    run ends (the file released), remove() is refused as upsert() is."""
    life = Life(path, clock)
    removed: list[bool] = []

    def once(key: Any, data: Any) -> None:
        life.keyed.close()  # (from the run: it does not wait for it)
        removed.append(life.keyed.remove(key))

    life.keyed._runs._run = once  # type: ignore[method-assign]
    life.keyed.start()
    life.keyed.upsert("once", {"every": 10})
    life.keyed.upsert("other", {"every": 100})
    life.advance(10)
    assert removed == [True]
    with pytest.raises(RuntimeError, match="closed"):
        life.keyed.remove("other")
    again = Life(path, clock)
    assert set(again.keyed) == {"other"}
    again.keyed.close()


def test_a_key_removed_and_upserted_again_keeps_its_generation_rising_across_lives(
    path: Path, clock: ManualClock
) -> None:
    life = Life(path, clock)
    life.keyed.start()
    for _ in range(3):
        life.keyed.upsert("a", {"every": 10})
    assert life.keyed.remove("a")
    life.keyed.upsert("a", {"every": 10})
    assert life.keyed.get("a").generation == 5  # type: ignore[union-attr]  # (the removal was the 4th)
    life.keyed.remove("a")
    life.keyed.close()
    again = Life(path, clock)  # the file remembers: a new life starts above every generation it held
    again.keyed.start()
    again.keyed.upsert("a", {"every": 10})
    assert again.keyed.get("a").generation == 6  # type: ignore[union-attr]
    again.keyed.close()


# -- the catch-up table --------------------------------------------------------------------------------


def catch_up_life(path: Path, clock: ManualClock, downtime: float, **kwargs: Any) -> Life:
    """A key every 10 s that ran at 10, then the process was down for `downtime` s; a new life starts."""
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("k", {"every": 10})
    life.advance(10)
    assert life.ran == [("k", 10.0)]  # next at 20
    life.keyed.close()
    down(clock, downtime)  # wall: 10 + downtime
    again = Life(path, clock, **kwargs)
    again.keyed.start()
    again.advance(0.05)  # catch-up runs of a key: one per pass (never a burst in one call), 1 ms apart
    again.ran[:] = [(key, round(t, 1)) for key, t in again.ran]
    return again


@pytest.mark.parametrize(
    ("kwargs", "ran", "missed", "next_at"),
    [
        # down from 10 to 105: the fires of 20, 30, ..., 100 (9) were missed
        ({}, [("k", 105.0)], [("k", 8, 20.0, 90.0)], 115.0),  # ONCE: the latest now, 8 reported
        ({"catch_up": CatchUp.SKIP}, [], [("k", 9, 20.0, 100.0)], 110.0),  # SKIP: none, the next fire
        ({"catch_up": CatchUp.ALL}, [("k", 105.0)] * 9, [], 115.0),  # ALL: each, in order
        # ALL, max_catch_up=3: counted up to 4 (max_catch_up + 1), 3 run, "at least 1" more reported
        ({"catch_up": CatchUp.ALL, "max_catch_up": 3}, [("k", 105.0)] * 3, [("k", 1, 50.0, 50.0)], 115.0),
        ({"misfire_grace": 30.0}, [("k", 105.0)], [("k", 8, 20.0, 90.0)], 115.0),
        ({"catch_up": CatchUp.ALL, "misfire_grace": 30.0}, [("k", 105.0)] * 3, [("k", 6, 20.0, 70.0)], 115.0),
        ({"misfire_grace": 1.0}, [], [("k", 9, 20.0, 100.0)], 110.0),  # every missed fire too late
    ],
    ids=["once", "skip", "all", "all-max3", "once-grace30", "all-grace30", "once-grace1"],
)
def test_the_catch_up_table(
    path: Path, clock: ManualClock, kwargs: dict[str, Any], ran: list[Any], missed: list[Any], next_at: float
) -> None:
    life = catch_up_life(path, clock, 95.0, **kwargs)
    assert life.ran == ran
    assert life.missed == missed
    nxt = life.keyed.get("k").next_run_at.timestamp() - T0  # type: ignore[union-attr]
    assert next_at <= nxt < next_at + 0.05  # (+ the ms the catch-up runs took, 1 ms apart)
    stats = life.keyed.stats()
    assert stats.missed == sum(m[1] for m in missed) and stats.caught_up == len(ran)
    life.keyed.close()


def test_catch_up_all_runs_the_missed_fires_in_order_with_their_times(path: Path, clock: ManualClock) -> None:
    scheduled: list[float] = []

    def run(ctx: Any, key: Any, data: Any) -> None:
        scheduled.append(ctx.scheduled_for)

    life = catch_up_life(path, clock, 35.0, catch_up=CatchUp.ALL, context=True, run=run)
    assert scheduled == [T0 + 20, T0 + 30, T0 + 40]  # down until 45: each missed fire, in order, at once
    nxt = life.keyed.get("k").next_run_at.timestamp() - T0  # type: ignore[union-attr]
    assert 55 <= nxt < 55.01  # AFTER_FINISH, from the end of the last of them (1 ms apart, from 45)
    life.keyed.close()


def test_more_missed_fires_than_max_catch_up_are_counted_as_at_least(
    path: Path, clock: ManualClock, caplog: Any
) -> None:
    scheduled: list[float] = []
    life = catch_up_life(
        path,
        clock,
        100_000.0,
        max_catch_up=5,
        context=True,
        run=lambda ctx, k, d: scheduled.append(ctx.scheduled_for),
    )
    # ONCE runs the latest missed fire (100_010, found without stepping through the 10**4 missed), and the
    # 6 counted (max_catch_up + 1) are reported, as "at least"
    assert scheduled == [T0 + 100_010]
    ((key, count, first, last),) = life.missed
    assert (key, count, first, last) == ("k", 6, 20.0, 70.0)
    assert "1 key(s) of the SQLite file" in caplog.text and "missed 6 fire(s)" in caplog.text
    assert life.keyed.get("k").next_run_at == at(100_020)  # type: ignore[union-attr]
    life.keyed.close()


def test_a_cron_key_catches_up_once(path: Path, clock: ManualClock) -> None:
    cron = Cron("0 * * * *")
    ran: list[float] = []
    life = Life(path, clock, next_run=cron, run=lambda key, data: ran.append(clock.wall()))
    life.keyed.start()
    life.keyed.upsert("hourly")
    life.keyed.close()
    down(clock, 5 * 3600 + 600)  # down from 12:00 to 17:10: 13:00 .. 17:00 missed
    again = Life(path, clock, next_run=cron, run=lambda key, data: ran.append(clock.wall()))
    again.keyed.start()
    again.sched.run_pending()
    assert ran == [T0 + 5 * 3600 + 600]
    assert again.missed == [("hourly", 4, 3600.0, 4 * 3600.0)]
    assert again.keyed.get("hourly").next_run_at == at(6 * 3600)  # type: ignore[union-attr]
    again.keyed.close()


def test_nothing_missed_nothing_reported(path: Path, clock: ManualClock) -> None:
    life = catch_up_life(path, clock, 5.0)  # down from 10 to 15: the next fire (20) is still ahead
    assert life.ran == [] and life.missed == [] and life.keyed.stats().missed == 0
    life.advance(5)
    assert life.ran == [("k", 20.0)]
    life.keyed.close()


def test_a_disabled_key_stays_disabled_and_a_keys_own_next_run_is_used(
    path: Path, clock: ManualClock
) -> None:
    def next_run(now: datetime, key: Any, data: Any) -> datetime | None:
        return None if data["off"] else now + timedelta(seconds=data["every"])

    life = Life(path, clock, next_run=next_run, reschedule=Reschedule.NONE)
    life.keyed.start()
    life.keyed.upsert("off", {"off": True})
    life.keyed.upsert("once", {"off": False, "every": 10})
    life.advance(10)  # "once" runs, then is DISABLED (Reschedule.NONE)
    life.keyed.close()
    down(clock, 1000)
    again = Life(path, clock, next_run=next_run, reschedule=Reschedule.NONE)
    again.keyed.start()
    again.sched.run_pending()
    assert again.ran == [] and again.missed == []
    assert {k: i.state for k, i in again.keyed.snapshot().items()} == {
        "off": KeyState.DISABLED,
        "once": KeyState.DISABLED,
    }
    again.keyed.close()


def test_catch_up_once_beyond_max_catch_up_runs_the_latest_missed_fire_within_the_grace(
    path: Path, clock: ManualClock
) -> None:
    """More fires missed than max_catch_up + 1 counts, with misfire_grace: the one run of CatchUp.ONCE is
    the latest missed fire (0.5 s late, well within a grace of 5 s). It used to be the oldest-but-counted
    fire (110 s), too late for the grace, so that nothing ran at all. (Without a grace, the run of the
    latest missed fire: test_more_missed_fires_than_max_catch_up_are_counted_as_at_least.)"""
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("k", {"every": 10})
    life.keyed.close()  # next at 10
    down(clock, 1000.5)  # fires 10 .. 1000 (100) missed; the latest 0.5 s ago
    scheduled: list[float] = []
    again = Life(
        path,
        clock,
        max_catch_up=10,
        misfire_grace=5.0,
        context=True,
        run=lambda ctx, key, data: scheduled.append(ctx.scheduled_for - T0),
    )
    again.keyed.start()
    again.sched.run_pending()
    again.keyed.close()
    assert len(scheduled) == 1 and 1000.0 <= scheduled[0] <= 1000.5


def test_catch_up_all_of_a_one_off_key_runs_it_once_then_makes_it_invalid(
    path: Path, clock: ManualClock
) -> None:
    """CatchUp.ALL and a one-off key (next_run returns its date, again and again): the missed date runs
    once, stats().caught_up counts that one run, and the key is then INVALID (a next_run not after the
    fire that ran). It used to count the same date max_catch_up + 1 times (caught_up 100, one run) and
    leave the key PENDING with a past next_run_at and no timer: it never ran again and never said why."""

    def one_off(now: datetime, key: Any, data: Any) -> datetime:
        return at(data["at"])  # always its date

    life = Life(path, clock, next_run=one_off)
    life.keyed.start()
    life.keyed.upsert("once", {"at": 50})
    life.keyed.close()
    down(clock, 100)  # down over its date
    again = Life(path, clock, next_run=one_off, catch_up=CatchUp.ALL)
    again.keyed.start()
    for _ in range(300):
        clock.advance(0.001)
        again.sched.run_pending()
    info = again.keyed.get("once")
    stats = again.keyed.stats()
    again.keyed.close()
    assert len(again.ran) == 1 and stats.caught_up == len(again.ran)
    assert info is not None and info.state is KeyState.INVALID and info.next_run_at is None


# -- recovery of a run the process died in -----------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    from timerwheel import KeyedScheduler, ThreadedScheduler, SQLiteStore

    path, marker = sys.argv[1], sys.argv[2]

    def run(key, data):
        with open(marker, "w") as f:
            f.write("started")
        time.sleep(60)  # the parent kills us here

    sched = ThreadedScheduler(workers=1)
    keyed = KeyedScheduler(sched, lambda now, key, data: now + timedelta(seconds=0.05), run,
                           store=SQLiteStore(path))
    keyed.start()
    keyed.upsert("job", {"n": 1})
    time.sleep(60)
    """
)


def killed_mid_run(path: Path, tmp_path: Path) -> None:
    """A child process whose run of key "job" is going when it is SIGKILLed."""
    marker = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(marker)])
    try:
        deadline = time.monotonic() + GENEROUS
        while not marker.exists():  # waits for the child's run to start (a condition, not a duration)
            assert time.monotonic() < deadline and child.poll() is None, "the child did not start its run"
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


@pytest.mark.realtime  # real processes: the child's clocks are real, and it runs its key 50 ms after start
def test_recover_rerun_runs_an_interrupted_fire_again(path: Path, tmp_path: Path) -> None:
    killed_mid_run(path, tmp_path)
    runs: list[tuple[float, float]] = []

    def run(ctx: Any, key: Any, data: Any) -> None:
        runs.append((ctx.scheduled_for, time.time()))

    with ThreadedScheduler() as sched:
        keyed = KeyedScheduler(
            sched, lambda now, key, data: now + timedelta(hours=1), run, context=True, store=SQLiteStore(path)
        )
        assert keyed.get("job").state is KeyState.RUNNING  # type: ignore[union-attr]  # as it was at the kill
        keyed.start()
        wait_until_idle(sched)
        assert len(runs) == 1 and keyed.stats().recovered == 1
        info = keyed.get("job")
        assert info is not None and info.state is KeyState.PENDING and not info.running
        keyed.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT attempts, finished_at IS NOT NULL FROM timerwheel_fires").fetchall() == [(2, 1)]
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


@pytest.mark.realtime  # as above
def test_recover_skip_records_an_interrupted_fire_as_failed(path: Path, tmp_path: Path) -> None:
    killed_mid_run(path, tmp_path)
    runs: list[Any] = []
    with ThreadedScheduler() as sched:
        keyed = KeyedScheduler(
            sched,
            lambda now, key, data: now + timedelta(hours=1),
            lambda key, data: runs.append(key),
            store=SQLiteStore(path),
            recover=Recover.SKIP,
        )
        keyed.start()
        wait_until_idle(sched)
        info = keyed.get("job")
        assert runs == [] and keyed.stats().abandoned == 1
        assert info is not None and info.state is KeyState.PENDING
        assert (
            info.last_error is not None
            and "was interrupted" in info.last_error
            and "Recover.SKIP" in info.last_error
        )
        keyed.close()
    db = sqlite3.connect(path)
    ((error,),) = db.execute("SELECT error FROM timerwheel_fires WHERE finished_at IS NOT NULL").fetchall()
    assert "interrupted" in error
    db.close()


ONE_SHOT_DIES_IN_ITS_RUN = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import timedelta
    from timerwheel import KeyedScheduler, Reschedule, Scheduler, SQLiteStore
    from timerwheel.testing import ManualClock

    path, wall = sys.argv[1], float(sys.argv[2])
    clock = ManualClock(0.0, wall=wall)
    sched = Scheduler(clock)
    keyed = KeyedScheduler(sched, lambda now, key, data: now + timedelta(seconds=data["every"]),
                           lambda key, data: os.kill(os.getpid(), signal.SIGKILL),  # dies in its run
                           store=SQLiteStore(path), reschedule=Reschedule.NONE)
    keyed.start()
    keyed.upsert("job", {"every": 10})
    clock.advance(10)
    sched.run_pending()
    """
)


@pytest.mark.parametrize(
    ("kwargs", "runs"),
    [
        ({"recover": Recover.RERUN, "catch_up": CatchUp.ALL}, 1),  # the rerun of its one fire, no more
        ({"recover": Recover.SKIP}, 0),  # its one fire abandoned: nothing more
    ],
    ids=["rerun-all", "skip-once"],
)
def test_a_reschedule_none_key_killed_in_its_one_run_runs_no_fires_that_never_existed(
    path: Path, clock: ManualClock, kwargs: dict[str, Any], runs: int
) -> None:
    """Reschedule.NONE (one run, then DISABLED): the process is SIGKILLed during the key's one run. The
    next start used to plan the key on from the interrupted fire, as AFTER_FINISH would, and count missed
    fires from there: with RERUN and CatchUp.ALL it ran 1 + 9 times, with SKIP and ONCE once more although
    its one fire was abandoned, and fires that could never exist were reported missed."""
    child = subprocess.run(
        [sys.executable, "-c", ONE_SHOT_DIES_IN_ITS_RUN, str(path), repr(T0)], timeout=GENEROUS, check=False
    )
    assert child.returncode == -signal.SIGKILL, child
    down(clock, 105)
    life = Life(path, clock, reschedule=Reschedule.NONE, **kwargs)
    life.keyed.start()
    for _ in range(50):
        clock.advance(0.001)
        life.sched.run_pending()
    life.keyed.close()
    assert len(life.ran) == runs
    assert life.missed == []


def test_a_run_whose_end_could_not_be_recorded_is_not_run_again_at_the_next_start(
    path: Path, clock: ManualClock
) -> None:
    """A store error as a run's end is recorded (finish_fire: a transient full disk) is only logged. The
    fire used to stay "started" in the log for good, although the key's later fires were recorded: at the
    next start, Recover.RERUN ran that long-finished fire again (with no crash at all), and with
    CatchUp.ONCE it stood in for the catch-up."""
    ran: list[int] = []
    life = Life(
        path, clock, context=True, run=lambda ctx, key, data: ran.append(round(ctx.scheduled_for - T0))
    )
    store = life.keyed._table.store
    real = store.finish_fire
    failures = [1]

    def disk_full_once(*args: Any) -> Any:
        if failures and failures.pop():
            raise sqlite3.OperationalError("database or disk is full")
        return real(*args)

    store.finish_fire = disk_full_once  # type: ignore[method-assign]
    life.keyed.start()
    life.keyed.upsert("k", {"every": 10})
    for _ in range(35):
        clock.advance(1.0)
        life.sched.run_pending()
    assert ran == [10, 20, 30] and failures == []  # (the end of 10 not recorded; 20 and 30 recorded)
    life.keyed.close()
    down(clock, 1)  # a clean restart a moment later: nothing missed
    ran.clear()
    again = Life(
        path, clock, context=True, run=lambda ctx, key, data: ran.append(round(ctx.scheduled_for - T0))
    )
    again.keyed.start()
    for _ in range(3):
        clock.advance(0.001)
        again.sched.run_pending()
    again.keyed.close()
    assert 10 not in ran


# -- ownership -------------------------------------------------------------------------------------------


def second_process_opens(path: Path) -> subprocess.CompletedProcess[str]:
    """Another process makes a SQLiteStore on the file."""
    return subprocess.run(
        [sys.executable, "-c", f"from timerwheel import SQLiteStore; SQLiteStore({str(path)!r})"],
        capture_output=True,
        text=True,
        timeout=GENEROUS,
    )


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks and hard links need privileges there")
def test_the_owner_keeps_the_file_under_every_name(path: Path, tmp_path: Path) -> None:
    """The owner lock was a lock file named after the path given: after a backup copy in the owner (which
    drops SQLite's own lock), a second process opened the same file through a symlink or a hard link,
    and both ran the same fires. The lock is on the file itself now."""
    store = SQLiteStore(path)
    shutil.copy(path, tmp_path / "backup.db")  # (the owner opens and closes the file: SQLite's lock goes)
    (tmp_path / "symlink.db").symlink_to(path)
    os.link(path, tmp_path / "hardlink.db")
    for other_name in ("symlink.db", "hardlink.db"):
        other = second_process_opens(tmp_path / other_name)
        assert other.returncode != 0 and "owned by another store" in other.stderr, other.stderr
    store.close()
    assert second_process_opens(tmp_path / "hardlink.db").returncode == 0  # (free once the owner closed)


def test_one_owner_per_file(path: Path, clock: ManualClock) -> None:
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match=f"{path.name}.* owned by another store.*PostgresStore"):
        SQLiteStore(path)
    other = second_process_opens(path)
    assert other.returncode != 0 and "owned by another store" in other.stderr
    keyed = KeyedScheduler(Scheduler(clock), every, print, store=store)
    with pytest.raises(ValueError, match="in use by another KeyedScheduler"):
        KeyedScheduler(Scheduler(clock), every, print, store=store)
    keyed.close()
    SQLiteStore(path).close()  # released


class _SlottedStore:
    """A durable store of one's own whose class has __slots__ (it wraps a SQLiteStore)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: SQLiteStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_store_of_ones_own_with_slots_serves_one_keyed_scheduler_at_a_time(
    path: Path, clock: ManualClock
) -> None:
    """The KeyedScheduler marked the durable store it used by writing an attribute on it: a store of
    one's own with __slots__ raised AttributeError from the constructor. Which KeyedScheduler uses a
    store is kept beside it now: the store is used, and refused to a second KeyedScheduler until the
    first closes."""
    store = _SlottedStore(SQLiteStore(path))
    keyed = KeyedScheduler(Scheduler(clock), every, print, store=store)
    keyed.upsert("k", {})
    with pytest.raises(ValueError, match="in use by another KeyedScheduler"):
        KeyedScheduler(Scheduler(clock), every, print, store=store)
    keyed.close()
    again = KeyedScheduler(Scheduler(clock), every, print, store=_SlottedStore(SQLiteStore(path)))
    assert list(again.snapshot()) == ["k"]
    again.close()


def test_the_owner_keeps_the_file_when_it_copies_or_opens_it(
    path: Path, tmp_path: Path, clock: ManualClock
) -> None:
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("a", {"every": 10})
    shutil.copy(path, tmp_path / "backup.db")  # the owner process opens and closes the file...
    with open(path, "rb") as f:  # ...and again
        f.read(16)
    with pytest.raises(StoreError, match=f"{path.name}.* owned by another store"):
        SQLiteStore(path)
    other = second_process_opens(path)
    assert other.returncode != 0 and "owned by another store" in other.stderr, other.stderr
    life.keyed.upsert("b", {"every": 10})
    life.keyed.close()
    again = Life(path, clock)
    assert set(again.keyed.snapshot()) == {"a", "b"}
    again.keyed.close()


# -- a forked child that inherited the store ------------------------------------------------------------

FORK_CHILD = Path(__file__).with_name("_sqlite_fork.py")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork() on this platform")
@pytest.mark.parametrize("how", ["return", "exit", "exec", "killed", "use"])
def test_a_forked_child_that_inherited_the_store_costs_its_owner_nothing(path: Path, how: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, str(FORK_CHILD), str(path), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdin is not None and owner.stdout is not None and owner.stderr is not None
    try:
        assert select.select([owner.stdout], [], [], GENEROUS)[0], "the owner did not report its fork"
        line = owner.stdout.readline()
        assert line, owner.stderr.read()
        report = json.loads(line)
        assert report["wal_kept"], "the child's end unlinked the WAL file its parent writes to"
        if how == "use":  # (an upsert of a KeyedScheduler on the store, and a call of the store's)
            inherited = f"the SQLite file {str(path)!r} was inherited through fork: a child process cannot"
            assert [error[: len(inherited)] for error in report["child"].splitlines()] == [inherited] * 2
        # the child has ended: the owner, alive between its upserts, still owns the file
        with pytest.raises(StoreError, match="owned by another store"):
            SQLiteStore(path)
        owner.stdin.write("go\n")
        owner.stdin.flush()
        owner.wait(GENEROUS)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    assert owner.returncode == -signal.SIGKILL, owner.stderr.read()
    store = SQLiteStore(path)  # a new process (this one) finds every upsert that returned
    rows, _ = store.load()
    keys = {row.key for row in rows}
    assert keys == {f"{when}-{i}" for when in ("before", "after") for i in range(100)}
    assert store.integrity() == "ok"
    store.close()


# -- generations never go back -------------------------------------------------------------------------


def row(key: Any, generation: int) -> StoredKey:
    return StoredKey(key, "{}", generation, "pending", None, None, None)


def test_a_key_deleted_and_stored_again_gets_a_generation_above_the_deleted_one(path: Path) -> None:
    store = SQLiteStore(path)
    assert [store.put(row("a", g)) for g in (1, 2, 3)] == [1, 2, 3]
    assert store.put(row("kept", 1)) == 1
    assert store.delete("a")
    assert store.put(row("a", 1)) == 4  # above the 3 deleted
    assert store.put(row("new", 1)) == 4  # any key stored anew
    assert store.put(row("kept", 2)) == 2  # a stored key keeps the generation it is given
    assert store.put(row("kept", 1)) == 2  # never below the one stored (a put that raised after its commit)
    assert store.put(row("a", 9)) == 9
    assert store.delete("a") and not store.delete("a")
    store.close()
    store = SQLiteStore(path)  # the floor is in the file
    assert store.put(row("a", 1)) == 10
    rows, _ = store.load()
    assert {r.key: r.generation for r in rows} == {"a": 10, "kept": 2, "new": 4}
    store.close()


def test_replace_that_removes_a_key_puts_it_back_above_its_generation(path: Path) -> None:
    store = SQLiteStore(path)
    assert store.replace([row("a", 5), row("b", 1)], []) == [5, 1]
    assert store.replace([row("b", 2)], ["a"]) == [2]  # removes a (generation 5)
    assert store.replace([row("a", 1), row("c", 1), row("b", 3)], []) == [6, 6, 3]
    assert store.replace([row("a", 1), row("c", 6), row("b", 3)], ["a"]) == [7, 6, 3]  # a: removed, put back
    store.close()
    store = SQLiteStore(path)
    assert store.replace([row("a", 1), row("b", 3), row("c", 6)], ["a"]) == [8, 3, 6]
    rows, _ = store.load()
    assert {r.key: r.generation for r in rows} == {"a": 8, "b": 3, "c": 6}
    store.close()


# -- bad input -------------------------------------------------------------------------------------------


def test_bad_data_and_keys_are_refused_and_nothing_is_stored(path: Path, clock: ManualClock) -> None:
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("a", {"every": 10})
    for call, error, words in [
        (
            lambda: life.keyed.upsert("b", {"every": 10, "when": datetime.now()}),
            TypeError,
            "data must be JSON",
        ),
        (lambda: life.keyed.upsert("a", {"every": float("nan")}), TypeError, "data must be JSON"),
        (lambda: life.keyed.upsert(("a", 1), {"every": 10}), TypeError, "key must be a str or an int"),
        (lambda: life.keyed.upsert(True, {"every": 10}), TypeError, "key must be a str or an int"),
        (lambda: life.keyed.upsert(1.5, {"every": 10}), TypeError, "key must be a str or an int"),
        (lambda: life.keyed.replace_all({"a": {"every": 1}, "b": {1, 2}}), TypeError, "data must be JSON"),
        (lambda: life.keyed.replace_all({"a": {"every": 1}, (1,): {}}), TypeError, "key must be a str"),
    ]:
        with pytest.raises(error, match=words):
            call()
    snap = life.keyed.snapshot()
    assert set(snap) == {"a"} and snap["a"].data == {"every": 10} and snap["a"].generation == 1
    life.keyed.close()
    again = Life(path, clock)
    snap = again.keyed.snapshot()
    assert set(snap) == {"a"} and snap["a"].data == {"every": 10} and snap["a"].generation == 1
    again.keyed.close()


def test_remove_refuses_a_key_the_store_cannot_hold_as_upsert_does(path: Path, clock: ManualClock) -> None:
    """A key a durable store cannot hold (a tuple, an int too long to write) is bad input to remove() as
    to upsert(): the same error, naming key, and nothing changes. (A tuple answered False, and a long int
    raised the store's ValueError from inside the store.)"""
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("a", {"every": 10})
    for key, error in ((10**5000, ValueError), (("a", 1), TypeError)):
        with pytest.raises(error, match="key"):
            life.keyed.upsert(key, {"every": 10})
        with pytest.raises(error, match="key"):
            life.keyed.remove(key)
    assert life.keyed.remove("unknown") is False
    assert set(life.keyed.snapshot()) == {"a"}
    life.keyed.close()


def test_paths_that_are_not_stores(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        SQLiteStore(tmp_path / "no-such-dir" / "keys.db")
    with pytest.raises(StoreError, match="cannot open"):
        SQLiteStore(tmp_path)  # a directory
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, not at all" * 100)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        SQLiteStore(junk)
    assert junk.read_bytes().startswith(b"this is not")  # left as it was
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE timerwheel_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO timerwheel_meta VALUES ('schema', '99')")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema version 99"):
        SQLiteStore(other)
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike"):
        SQLiteStore(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="synchronous must be"):
        SQLiteStore(tmp_path / "x.db", synchronous="OFF")


def test_a_file_of_a_schema_it_does_not_read_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A file of a schema version this timerwheel does not read is refused, "and left as it was": the
    store used to switch it to WAL (a lasting change of the file's header) and run its CREATE TABLEs
    before it read the version."""
    future = tmp_path / "future.db"
    db = sqlite3.connect(future)
    db.execute("CREATE TABLE timerwheel_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO timerwheel_meta VALUES ('schema', '99')")
    db.commit()
    db.close()
    before = future.read_bytes()
    with pytest.raises(StoreError, match="schema version 99"):
        SQLiteStore(future)
    assert future.read_bytes() == before


def test_a_database_of_another_application_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A SQLite database of another application (tables, none of timerwheel's) is not a timerwheel
    store: it used to be taken over, timerwheel's tables created in it and the file switched to WAL."""
    app = tmp_path / "app.db"
    db = sqlite3.connect(app)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    before = app.read_bytes()
    with pytest.raises(StoreError, match="a database of another application"):
        SQLiteStore(app)
    assert app.read_bytes() == before


# -- content the store cannot read -----------------------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def a_store_with_rows(path: Path, clock: ManualClock, keys: int = 1) -> None:
    life = Life(path, clock)
    life.keyed.start()
    for i in range(keys):
        life.keyed.upsert(f"key-{i}", {"every": 10, "pad": "x" * 200})
    life.advance(10)  # (a fire of each, finished: rows in timerwheel_fires too)
    life.keyed.close()


def opened_and_loaded(path: Path, clock: ManualClock) -> None:
    """What a program does: a store on the file, a KeyedScheduler on it (which loads every row)."""
    store = SQLiteStore(path)
    try:
        KeyedScheduler(Scheduler(clock), every, print, store=store)
    finally:
        store.close()


GOOD = (
    '"bad"',
    '{"every":10}',
    1,
    "pending",
    1_736_165_000_000_000,
    None,
    None,
    0,
    None,
    None,
)  # a key's row
AT = 1_736_165_000_000_000
FAR = 2**62  # (an int SQLite keeps; microseconds far beyond the year 9999)


@pytest.mark.parametrize(
    ("table", "values", "words"),
    [
        pytest.param(
            "keys", ("not json", *GOOD[1:]), "'not json'.* not the JSON of a str or an int", id="key"
        ),
        pytest.param("keys", ("[1]", *GOOD[1:]), r"'\[1\]'.* not the JSON of a str or an int", id="key-list"),
        pytest.param("keys", ("true", *GOOD[1:]), "'true'.* not the JSON of a str or an int", id="key-bool"),
        pytest.param("keys", ('"\\u0061"', *GOOD[1:]), "u0061.* as timerwheel writes it", id="key-spelling"),
        pytest.param("keys", (b"bad", *GOOD[1:]), "b'bad'.* the key is bytes", id="key-blob"),
        pytest.param("keys", (GOOD[0], '{"every": ', *GOOD[2:]), "bad.* its data is not JSON", id="data"),
        pytest.param(
            "keys", (GOOD[0], '{"a":NaN}', *GOOD[2:]), "bad.* its data is not JSON .NaN", id="data-nan"
        ),
        pytest.param("keys", (GOOD[0], b"{}", *GOOD[2:]), "bad.* its data is bytes", id="data-blob"),
        pytest.param(
            "keys", (*GOOD[:2], -1, *GOOD[3:]), "bad.* its generation is -1, not an int >= 0", id="gen"
        ),
        pytest.param("keys", (*GOOD[:2], 1.5, *GOOD[3:]), "bad.* its generation is 1.5", id="gen-real"),
        pytest.param("keys", (*GOOD[:3], "sleeping", *GOOD[4:]), "bad.* its state is 'sleeping'", id="state"),
        pytest.param(
            "keys", (*GOOD[:4], FAR, *GOOD[5:]), f"bad.* its next_run_at is {FAR}, not an int from", id="next"
        ),
        pytest.param(
            "keys", (*GOOD[:4], -FAR, *GOOD[5:]), f"bad.* its next_run_at is {-FAR}", id="next-past"
        ),
        pytest.param(
            "keys", (*GOOD[:4], "soon", *GOOD[5:]), "bad.* its next_run_at is 'soon'", id="next-text"
        ),
        pytest.param(
            "keys", (*GOOD[:5], FAR, *GOOD[6:]), f"bad.* its last_scheduled_for is {FAR}", id="last"
        ),
        pytest.param(
            "keys", (*GOOD[:6], b"\x00", *GOOD[7:]), "bad.* its last_error is bytes", id="error-blob"
        ),
        pytest.param("keys", (*GOOD[:7], 2, *GOOD[8:]), "bad.* its paused is 2, not a boolean", id="paused"),
        pytest.param("keys", (*GOOD[:8], "{", None), "bad.* its options are not JSON", id="options"),
        pytest.param(
            "keys",
            (*GOOD[:8], "[1]", None),
            r"bad.* its options are '\[1\]', not a JSON object",
            id="opt-list",
        ),
        pytest.param("keys", (*GOOD[:8], b"{}", None), "bad.* its options are bytes", id="opt-blob"),
        pytest.param(
            "keys",
            (*GOOD[:8], '{"history":1}', None),
            "bad.* its options have 'history', which this",
            id="opt-unknown",
        ),
        pytest.param(
            "keys",
            (*GOOD[:8], '{"retry":[0,1,1]}', None),
            r"bad.* its retry is \[0, 1, 1\], not \[attempts",
            id="opt-retry",
        ),
        pytest.param(
            "keys",
            (*GOOD[:8], '{"overlap":"wait"}', None),
            "bad.* its overlap is 'wait', not one of",
            id="overlap",
        ),
        pytest.param(
            "keys", (*GOOD[:8], '{"overlap":[]}', None), r"bad.* its overlap is \[\]", id="overlap-list"
        ),
        pytest.param(
            "keys", (*GOOD[:8], '{"jitter":-1}', None), "bad.* its jitter is -1, not a", id="jitter"
        ),
        pytest.param(
            "keys", (*GOOD[:8], '{"spread":"1"}', None), "bad.* its spread is '1', not a", id="spread"
        ),
        pytest.param("keys", (*GOOD[:9], "{"), "bad.* its triggered is not JSON", id="triggered"),
        pytest.param(
            "keys",
            (*GOOD[:9], '{"at":1}'),
            "bad.* its triggered is .*, not an object of at",
            id="trig-fields",
        ),
        pytest.param(
            "keys",
            (*GOOD[:9], '{"at":4611686018427387904,"restart":false,"overlap":null}'),
            "bad.* its triggered at is 4611686018427387904",
            id="trig-at",
        ),
        pytest.param(
            "keys",
            (*GOOD[:9], '{"at":1736165000000000,"restart":0,"overlap":null}'),
            "bad.* its triggered restart is 0, not a boolean",
            id="trig-restart",
        ),
        pytest.param(
            "keys",
            (*GOOD[:9], '{"at":1736165000000000,"restart":true,"overlap":"x"}'),
            "bad.* its triggered overlap is 'x'",
            id="trig-overlap",
        ),
        pytest.param("keys", (*GOOD, -1), "bad.* its runs is -1, not an int >= 0", id="runs"),
        pytest.param("keys", (*GOOD, 2.5), "bad.* its runs is 2.5", id="runs-real"),
        pytest.param("keys", (*GOOD[:8], '{"max_runs":0}', None), "bad.* its max_runs is 0", id="max-runs"),
        pytest.param(
            "keys", (*GOOD[:8], '{"start":5,"end":4}', None), r"bad.* its end \(4\) is before", id="window"
        ),
        pytest.param("keys", (*GOOD[:8], '{"end":"x"}', None), "bad.* its end is 'x'", id="end"),
        pytest.param("fires", ("nope", 1, AT, 0, None, None, 1), "'nope'.* timerwheel_fires", id="fire-key"),
        pytest.param(
            "fires", (GOOD[0], -2, AT, 0, None, None, 1), "bad.* its generation is -2", id="fire-gen"
        ),
        pytest.param(
            "fires", (GOOD[0], 1, FAR, 0, None, None, 1), f"bad.* its scheduled_for is {FAR}", id="fire-at"
        ),
        pytest.param(
            "fires", (GOOD[0], 1, AT, 0, None, None, 0), "bad.* its attempts is 0", id="fire-attempts"
        ),
        pytest.param("meta", ("generation_floor", "-3"), "generation_floor.* timerwheel_meta", id="floor"),
    ],
)
def test_a_row_it_cannot_read_is_a_store_error_naming_the_file_and_the_row(
    path: Path, clock: ManualClock, table: str, values: tuple[Any, ...], words: str
) -> None:
    a_store_with_rows(path, clock)
    db = sqlite3.connect(path)  # (what another program, or a damaged disk, may leave)
    columns = [r[1] for r in db.execute(f"PRAGMA table_info(timerwheel_{table})")][: len(values)]
    db.execute(
        f"INSERT INTO timerwheel_{table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(values))})",
        values,
    )
    db.commit()
    db.close()
    before = digest(path)
    with pytest.raises(StoreError, match=f"{path.name}.* cannot read.*{words}") as info:
        opened_and_loaded(path, clock)
    assert str(path) in str(info.value)
    assert digest(path) == before  # nothing written


def test_a_row_it_cannot_read_leaves_the_store_free_for_another_thread_to_close(
    path: Path, clock: ManualClock
) -> None:
    """A row the loader cannot read (a state it does not know, e.g. from a newer or hand-edited file of
    the same schema number): KeyedScheduler() used to raise a bare ValueError, not a StoreError naming the
    file, and the suspended generator of the store's rows kept the store's lock, so that store.close()
    from another thread hung. (A thread that waits on a lock: joined with a deadline.)"""
    a_store_with_rows(path, clock)
    db = sqlite3.connect(path)
    db.execute("UPDATE timerwheel_keys SET state = 'paused'")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match=f"{path.name}.* cannot read"):
        KeyedScheduler(Scheduler(clock), every, print, store=store)
    closing = threading.Thread(target=store.close, daemon=True)
    closing.start()
    closing.join(GENEROUS)
    assert not closing.is_alive(), "store.close() hangs: the store's lock is still held"


def test_a_store_reads_a_row_in_every_key_state(path: Path, clock: ManualClock) -> None:
    a_store_with_rows(path, clock)
    db = sqlite3.connect(path)
    for state in KeyState:  # (a paused key: a row of any state, paused)
        paused = state is KeyState.PAUSED
        db.execute(
            "INSERT INTO timerwheel_keys VALUES (?, '{}', 1, ?, NULL, NULL, NULL, ?, NULL, NULL, 0)",
            (f'"{state.value}"', "disabled" if paused else state.value, paused),
        )
    for overlap in Overlap:  # (and every key's own overlap)
        db.execute(
            "INSERT INTO timerwheel_keys VALUES (?, '{}', 1, 'disabled', NULL, NULL, NULL, 0, ?, NULL, 0)",
            (f'"{overlap.name}"', json.dumps({"overlap": overlap.value})),
        )
    db.commit()
    db.close()
    keyed = KeyedScheduler(Scheduler(clock), every, print, store=SQLiteStore(path))
    snapshot = keyed.snapshot()
    states = {key: info.state for key, info in snapshot.items() if key in {s.value for s in KeyState}}
    assert states == {state.value: state for state in KeyState}
    assert {o.name: snapshot[o.name].overlap for o in Overlap} == {o.name: o for o in Overlap}
    assert snapshot["pending"].overlap is Overlap.QUEUE_ONE  # (none of its own: the KeyedScheduler's)
    keyed.close()


@pytest.mark.parametrize("table", ["timerwheel_keys", "timerwheel_fires"])
def test_a_damaged_page_is_a_store_error_naming_the_file_and_nothing_is_written(
    path: Path, clock: ManualClock, table: str
) -> None:
    a_store_with_rows(path, clock, keys=300)  # (some pages of each table)
    db = sqlite3.connect(path)
    ((root,),) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
    ((size,),) = db.execute("PRAGMA page_size")
    db.close()
    with open(path, "r+b") as f:  # the table's root page overwritten with junk
        f.seek((root - 1) * size)
        f.write(bytes(range(256)) * (size // 256))
    before = digest(path)
    with pytest.raises(StoreError, match=f"{path.name}.* is damaged: "):
        opened_and_loaded(path, clock)
    assert digest(path) == before


def test_a_write_the_file_cannot_take_is_a_store_error_and_changes_nothing(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteStore(path)
    keyed = KeyedScheduler(Scheduler(clock), every, print, store=store)
    keyed.start()
    keyed.upsert("a", {"every": 10})
    db = store._conn()  # (a full disk, as SQLite reports it: the file may not grow by a page)
    ((pages,),) = db.execute("PRAGMA page_count")
    db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError, match=f"{path.name}.* cannot grow: database or disk is full"):
        keyed.upsert("b", {"every": 10, "pad": "x" * 100_000})
    with pytest.raises(StoreError, match=f"{path.name}.* cannot grow"):
        keyed.replace_all({"c": {"every": 10, "pad": "y" * 100_000}})
    assert set(keyed.snapshot()) == {"a"}
    keyed.close()
    again = Life(path, clock)
    assert set(again.keyed.snapshot()) == {"a"}
    again.keyed.close()


READ_ONLY_CHILD = Path(__file__).with_name("_sqlite_readonly.py")


@pytest.mark.skipif(
    sys.platform == "win32", reason="the permissions of a directory do not stop writes on Windows"
)
@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_read_only_file_or_directory_is_a_store_error_saying_read_only(
    tmp_path: Path, clock: ManualClock, what: str
) -> None:
    directory = tmp_path / "stores"
    directory.mkdir()
    path = directory / "keys.db"
    a_store_with_rows(path, clock)
    before, names = digest(path), sorted(os.listdir(directory))
    target = path if what == "file" else directory
    mode = target.stat().st_mode
    target.chmod(0o444 if what == "file" else 0o555)
    try:  # (a child process: as root it gives up what lets root write anyway, see _sqlite_readonly.py)
        child = subprocess.run(
            [sys.executable, str(READ_ONLY_CHILD), str(path)],
            capture_output=True,
            text=True,
            timeout=GENEROUS,
        )
    finally:
        target.chmod(mode)
    if child.returncode == 2:
        pytest.skip(child.stdout.strip())
    assert child.returncode == 0, child.stderr
    expected = "the file is read-only" if what == "file" else f"its directory {str(directory)!r} is read-only"
    assert child.stdout.startswith(f"StoreError: the SQLite file {str(path)!r} is read-only: {expected}"), (
        child.stdout
    )
    assert digest(path) == before and sorted(os.listdir(directory)) == names


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"catch_up": "once"}, TypeError, "catch_up must be a CatchUp"),
        ({"recover": None}, TypeError, "recover must be a Recover"),
        ({"max_catch_up": -1}, ValueError, "max_catch_up must be >= 0"),
        ({"max_catch_up": 2.0}, TypeError, "max_catch_up must be an int"),
        ({"misfire_grace": -1}, ValueError, "misfire_grace must be >= 0"),
        ({"misfire_grace": "1"}, TypeError, "misfire_grace must be a real number"),
        ({"on_missed": 3}, TypeError, "on_missed must be callable"),
        ({"store": "keys.db"}, TypeError, "store must be a MemoryStore, a SQLiteStore"),
    ],
)
def test_bad_durability_arguments(kwargs: dict[str, Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        KeyedScheduler(Scheduler(ManualClock()), every, print, **kwargs)


def test_the_memory_store_is_todays_behaviour(clock: ManualClock) -> None:
    keyed = KeyedScheduler(Scheduler(clock), every, print, store=MemoryStore())
    keyed.start()
    keyed.upsert(("a", "tuple", "key"), object())  # anything hashable, any data: nothing is stored
    assert len(keyed) == 1
    keyed.close()


# -- a crash at any instant: real processes, SIGKILL -----------------------------------------------------

CRASH_CHILD = Path(__file__).with_name("_crash_child.py")


@pytest.mark.realtime  # real processes and clocks: the kills land at random instants of a busy child
def test_sigkill_at_random_instants_loses_nothing_and_runs_each_fire_once(tmp_path: Path) -> None:
    import random

    path = tmp_path / "crash.db"
    journal = tmp_path / "journal"
    rnd = random.Random(20261201)
    kills: list[tuple[float, float]] = []  # (killed at, restarted at): wall clock
    for life in range(21):
        errors = (tmp_path / f"stderr{life}").open("w")
        child = subprocess.Popen(
            [sys.executable, str(CRASH_CHILD), str(path), str(journal), str(life)], stderr=errors
        )
        errors.close()
        started = time.time()
        ready = journal.with_suffix(f".ready{life}")
        deadline = time.monotonic() + GENEROUS
        while not ready.exists():  # the child has opened the store and started (a condition)
            assert child.poll() is None, (tmp_path / f"stderr{life}").read_text()
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.01)
        if life == 20:
            child.send_signal(signal.SIGTERM)  # the last one closes cleanly
            child.wait(GENEROUS)
            break
        time.sleep(rnd.uniform(0.3, 1.2))  # let it run, then kill it at a random instant
        child.send_signal(signal.SIGKILL)
        child.wait(GENEROUS)
        kills.append((time.time(), started))
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        db.close()
    check_journal(journal, path)


def check_journal(journal: Path, path: Path) -> None:
    """Every committed upsert survived; every (key, scheduled_for) ran once, a second time only as the
    rerun of a fire that had started in a killed process; at most one catch-up run per key and restart."""
    starts: dict[tuple[str, int], list[int]] = {}  # (key, scheduled_us) -> the lives it started in
    begun: dict[int, float] = {}  # life -> wall time before its start()
    committed: dict[str, str] = {}  # key -> data of its last upsert that returned
    pending: dict[str, str] = {}  # key -> data of an upsert made after that one, not known to return
    for line in journal.read_text().splitlines():
        kind, *rest = line.split()
        if kind == "B":
            begun[int(rest[0])] = float(rest[1])
        elif kind == "S":
            starts.setdefault((rest[0], int(rest[1])), []).append(int(rest[2]))
        elif kind == "u":
            pending[rest[0]] = rest[1]
        elif kind == "U":
            committed[rest[0]] = rest[1]
            pending.pop(rest[0], None)
    assert len(starts) > 1000, "too little ran"
    db = sqlite3.connect(path)
    stored = {json.loads(k): d for k, d in db.execute("SELECT key, data FROM timerwheel_keys")}
    db.close()
    assert len(stored) == 1000
    for key, data in committed.items():  # no committed upsert lost (a later one may have committed too)
        assert stored[key] in (data, pending.get(key)), (key, stored[key], data)
    for (key, at), lives in starts.items():
        assert len(lives) == 1 or (len(lives) == 2 and lives[1] > lives[0]), (
            key,
            at,
            lives,
        )  # once, or a rerun
    catch_ups: dict[tuple[str, int], int] = {}
    for (key, at), lives in starts.items():
        life = lives[0]
        if life > 0 and at / 1_000_000 < begun[life]:  # due before this life started: a catch-up run
            catch_ups[(key, life)] = catch_ups.get((key, life), 0) + 1
    assert max(catch_ups.values(), default=0) <= 1, {k: n for k, n in catch_ups.items() if n > 1}


def test_with_a_durable_store_data_is_what_json_gives_back(path: Path, clock: ManualClock) -> None:
    """The JSON is kept, not the object: run and next_run get a fresh decoded object each time (a tuple
    is a list, a mutation does not stick), in this life as in the next."""
    seen: list[Any] = []

    def run(key: Any, data: Any) -> None:
        seen.append(json.loads(json.dumps(data)))  # (a copy, as it came)
        data["every"] = 999  # a mutation of the object given: not the key's data

    life = Life(path, clock, run=run)
    life.keyed.start()
    original = {"every": 10, "pair": (1, 2)}
    life.keyed.upsert("a", original)
    original["every"] = 5  # the caller's object, changed after upsert: not the key's data either
    life.advance(20)
    assert seen == [{"every": 10, "pair": [1, 2]}, {"every": 10, "pair": [1, 2]}]
    assert life.keyed.get("a").data == {"every": 10, "pair": [1, 2]}  # type: ignore[union-attr]
    life.keyed.close()


def test_next_run_at_upsert_and_replace_all_gets_what_json_gives_back(path: Path, clock: ManualClock) -> None:
    """next_run gets what JSON gives back at upsert() and replace_all() too, not the caller's object: {1: 10}
    (an int dict key) used to be {1: 10} for next_run at upsert and {"1": 10} everywhere else, so that the
    key was INVALID in this life and fine after a restart."""
    seen: list[Any] = []

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        seen.append(data)
        return now + timedelta(seconds=data["1"])  # what the stored JSON gives back: a str key

    life = Life(path, clock, next_run=next_run)
    life.keyed.start()
    life.keyed.upsert("a", {1: 10})
    life.keyed.replace_all({"a": {1: 10}, "b": {1: 20}})
    this_life = {key: info.state for key, info in life.keyed.snapshot().items()}
    life.keyed.close()
    again = Life(path, clock, next_run=next_run)
    again.keyed.start()
    next_life = {key: info.state for key, info in again.keyed.snapshot().items()}
    again.keyed.close()
    assert not any(type(data) is dict and 1 in data for data in seen)
    assert this_life["a"] == next_life["a"]


def crash(life: Life) -> None:
    """The process dies here: its store's file is left as it is (nothing more is written to it)."""
    life.keyed._table.store.close()


def test_a_fire_rerun_after_a_recovering_life_that_ended_is_not_reported_missed(
    path: Path, clock: ManualClock
) -> None:
    """A run is interrupted; the next life's start() writes its decisions (a rerun of that fire) and the
    process ends before the rerun. The life after reruns the fire: that fire ran, it was not missed, and
    on_missed used to be told it was."""
    first = Life(path, clock)

    def dies_mid_run(key: Any, data: Any) -> None:
        crash(first)
        raise RuntimeError("the process is killed during this run")

    first.keyed._runs._run = dies_mid_run  # type: ignore[method-assign]
    first.keyed.start()
    first.keyed.upsert("job", {"every": 10})
    first.advance(10)  # the run of T0 + 10 starts, and the process dies in it
    down(clock, 2)
    second = Life(path, clock)
    second.keyed.start()  # decides: rerun the fire of T0 + 10; and dies before it runs
    assert second.keyed.stats().recovered == 1
    crash(second)
    down(clock, 2)
    third = Life(path, clock)
    third.keyed.start()
    third.advance(0)
    assert third.ran == [("job", 14.0)] and third.keyed.stats().recovered == 1
    assert third.missed == [] and third.keyed.stats().missed == 0
    third.keyed.close()


def dies_during_its_first_run(path: Path, clock: ManualClock, fences: list[Any]) -> None:
    """A life whose key "job" (every 10 s) fires at 10 s: the process dies during that run (its fence
    appended to `fences`), and is down for a second."""
    first = Life(path, clock, context=True)

    def dies_mid_run(ctx: Any, key: Any, data: Any) -> None:
        fences.append(ctx.fence)
        crash(first)
        raise RuntimeError("the process is killed during this run")

    first.keyed._runs._run = dies_mid_run  # type: ignore[method-assign]
    first.keyed.start()
    first.keyed.upsert("job", {"every": 10})
    first.advance(10)
    down(clock, 1)


def test_a_rerun_carries_a_fence_above_the_interrupted_run(path: Path, clock: ManualClock) -> None:
    """ctx.fence: the key's generation, the fire and its attempt; a rerun's is above the first run's."""
    fences: list[Any] = []
    dies_during_its_first_run(path, clock, fences)
    second = Life(path, clock, context=True, run=lambda ctx, key, data: fences.append(ctx.fence))
    second.keyed.start()
    second.advance(0)
    at = round((T0 + 10) * 1_000_000)
    assert fences == [(1, at, 1), (1, at, 2)] and fences[1] > fences[0]
    assert (fences[1].generation, fences[1].scheduled_for, fences[1].attempt) == (1, at, 2)
    second.advance(10)  # the next fire: a fence above both
    assert fences[2] == (1, round((T0 + 21) * 1_000_000), 1) and fences[2] > fences[1]
    second.keyed.close()


def test_a_fire_taken_as_the_scheduler_closes_is_run_by_the_next_life(path: Path, clock: ManualClock) -> None:
    """close() came between a fire's take and its run (here from on_state_change(RUNNING); in a shared
    store, while the take's reply was on its way): the fire used to be recorded as finished, "superseded
    before it started", and no life ever ran it. It is left unfinished: the next life runs it again."""
    holder: list[Life] = []

    def closes(key: Any, old: KeyState, new: KeyState) -> None:
        if new is KeyState.RUNNING:
            holder[0].keyed.close()

    first = Life(path, clock, on_state_change=closes)
    holder.append(first)
    first.keyed.start()
    first.keyed.upsert("job", {"every": 10})
    first.advance(10)
    assert first.ran == []
    down(clock, 1)
    second = Life(path, clock)
    second.keyed.start()
    second.advance(0)
    assert second.ran == [("job", 11.0)] and second.keyed.stats().recovered == 1
    second.keyed.close()


CLOSES_MID_RUN = """
import sys, time
from datetime import timedelta
from timerwheel import KeyedScheduler, SQLiteStore, ThreadedScheduler

path, marker = sys.argv[1], sys.argv[2]

def run(key, data):
    with open(marker, "a") as f:
        f.write("started\\n")
    time.sleep(0.5)  # a run that is still going when the program closes and ends
    with open(marker, "a") as f:
        f.write("ended\\n")

keyed = KeyedScheduler(
    ThreadedScheduler(workers=1), lambda now, key, data: now + timedelta(seconds=0.05), run,
    store=SQLiteStore(path),
)
keyed.start()
keyed.upsert("job")
while "started" not in open(marker).read():
    time.sleep(0.01)
keyed.close()  # returns at once; the program then ends
"""


@pytest.mark.realtime  # a real child process whose run takes 0.5 s (its clocks are real)
def test_a_program_that_ends_after_close_records_the_end_of_the_run_that_went_on(
    path: Path, tmp_path: Path
) -> None:
    """close() returns while a run goes; the program then ended at once, and the run, cut short at
    exit, was run again by the next life. At exit the run is waited for (up to EXIT_GRACE) and its end
    recorded: the next life finds nothing to recover."""
    marker = tmp_path / "marker"
    marker.touch()
    done = subprocess.run(
        [sys.executable, "-c", CLOSES_MID_RUN, str(path), str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text().split() == ["started", "ended"]
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM timerwheel_fires WHERE finished_at IS NULL").fetchone() == (0,)
    db.close()
    life = Life(path, ManualClock(0.0, wall=time.time()))
    life.keyed.start()
    assert life.keyed.stats().recovered == 0
    life.keyed.close()


def answers_lost(life: Life, takes: int) -> None:
    """The life's next `takes` takes of a fire commit, then raise (an I/O error on the way back)."""
    store = life.keyed._table.store
    real = store.start_fire
    failures = [1] * takes

    def answer_lost(*args: Any) -> int:
        attempt = real(*args)
        if failures and failures.pop():
            raise StoreError(f"the {store.name} could not take a fire: disk I/O error after commit")
        return attempt

    store.start_fire = answer_lost  # type: ignore[method-assign]


def test_a_take_whose_commit_answered_an_error_is_taken_when_tried_again(
    path: Path, clock: ManualClock
) -> None:
    """A fire's take committed, but the store raised after the commit (an I/O error on the way back):
    its retry used to find the fire in the log, unfinished, and take it for one taken already, so the fire
    never ran and stayed unfinished until a later life ran it again. It is the same take: it runs, once."""
    life = Life(path, clock, context=True)
    fences: list[Any] = []
    answers_lost(life, 1)
    life.keyed._runs._run = lambda ctx, key, data: fences.append(ctx.fence)  # type: ignore[method-assign]
    life.keyed.start()
    life.keyed.upsert("job", {"every": 10})
    life.advance(10)
    assert fences == []  # (the take raised: tried again in a second)
    life.advance(1)
    assert fences == [(1, round((T0 + 10) * 1_000_000), 1)]
    life.advance(10)  # the next fire: the key went on from the one that ran
    assert len(fences) == 2 and fences[1].scheduled_for == round((T0 + 21) * 1_000_000)
    life.keyed.close()
    assert SQLiteStore(path).load()[1] == []  # nothing left unfinished in the log


def test_a_reruns_take_whose_commit_answered_an_error_keeps_its_attempt(
    path: Path, clock: ManualClock
) -> None:
    """The rerun of an interrupted fire is taken, and the store raises after the commit: its retry is
    the same take (the same started_at), at the same attempt, one above the interrupted run's. (Each
    retry used to count one more attempt.)"""
    fences: list[Any] = []
    dies_during_its_first_run(path, clock, fences)
    second = Life(path, clock, context=True, run=lambda ctx, key, data: fences.append(ctx.fence))
    answers_lost(second, 2)
    second.keyed.start()
    second.advance(0)
    second.advance(1)  # (the retry: its answer lost again)
    assert fences[1:] == []
    second.advance(1)
    at = round((T0 + 10) * 1_000_000)
    assert fences == [(1, at, 1), (1, at, 2)]
    second.keyed.close()
    assert SQLiteStore(path).load()[1] == []


def test_a_rerun_whose_key_a_remove_that_raised_after_its_commit_deleted_still_runs(
    path: Path, clock: ManualClock
) -> None:
    """remove() of a key whose interrupted fire waits for its rerun: the delete commits, then the store
    raises (an I/O error on the way back). For the caller nothing changed, and the key goes on in memory;
    its rerun used to find the fire gone from the log and was dropped, never run. It runs, an attempt
    above the interrupted run, and the key goes on from it."""
    fences: list[Any] = []
    dies_during_its_first_run(path, clock, fences)
    second = Life(path, clock, context=True, run=lambda ctx, key, data: fences.append(ctx.fence))
    second.keyed.start()
    store = second.keyed._table.store
    real = store.delete

    def answer_lost(key: Any) -> bool:
        real(key)
        raise StoreError(f"the {store.name} could not delete a key: disk I/O error after commit")

    store.delete = answer_lost  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="after commit"):
        second.keyed.remove("job")
    del store.delete
    second.advance(0)
    at = round((T0 + 10) * 1_000_000)
    assert fences == [(1, at, 1), (1, at, 2)]
    second.advance(10)  # the key goes on, and the file has it again
    assert len(fences) == 3 and fences[2].scheduled_for == round((T0 + 21) * 1_000_000)
    second.keyed.close()
    assert [row.key for row in SQLiteStore(path).load()[0]] == ["job"]


def test_a_rerun_of_a_finished_fire_whose_row_a_later_take_dropped_is_not_taken_again(path: Path) -> None:
    """The rerun take of a fire missing from the log takes it anew (a remove that raised after its
    commit deleted it), but not one before a later fire of its generation in the log: that one ran (its
    finished row was dropped by the later take), and it must not run twice."""
    store = SQLiteStore(path)
    g = store.put(row("job", 1))
    assert store.start_fire(row("job", g), 10, 10, False) == 1
    store.finish_fire(None, "job", g, 10, 11, None)
    assert store.start_fire(row("job", g), 20, 20, False) == 1  # (drops the finished row of 10)
    assert store.start_fire(row("job", g), 10, 30, True) == 0
    assert store.start_fire(row("job", g), 20, 40, True) == 2  # (its own unfinished take: a rerun)
    store.close()


def test_a_rerun_of_a_fire_older_than_the_latest_started_does_not_run_the_later_ones_again(
    path: Path, clock: ManualClock
) -> None:
    """The file says the key's latest started fire was at 119 s, and a fire at 115 s was left unfinished
    (a life whose wall clock ran ahead; this one's is at 91 s). The rerun of 115 runs once it is due, and
    the key goes on after 119, not from 115: the fires from 116 to 119 ran already."""
    store = SQLiteStore(path)
    us = lambda s: round((T0 + s) * 1_000_000)  # noqa: E731
    generation = store.put(StoredKey("job", '{"every":1}', 1, "pending", us(115), us(114), None))
    assert (
        store.start_fire(
            StoredKey("job", '{"every":1}', generation, "running", None, us(115), None),
            us(115),
            us(115),
            False,
        )
        == 1
    )
    store.save([StoredKey("job", '{"every":1}', generation, "pending", us(120), us(119), None)])
    store.close()
    down(clock, 91)
    life = Life(path, clock)
    life.keyed.start()
    life.advance(30)
    assert life.ran[:2] == [("job", 115.0), ("job", 120.0)]
    assert life.keyed.stats().recovered == 1
    life.keyed.close()


def test_an_unfinished_fire_later_than_the_rows_last_fire_is_rerun_once_not_caught_up_again(
    path: Path, clock: ManualClock
) -> None:
    """A fire at 99 s was taken, and then a run's end wrote the key's row saying its last fire was at 98 s
    (the end of an earlier run, written after the take). The next life counted 99 both as the interrupted
    fire to rerun and as a missed fire to catch up: it ran twice. It is rerun once."""
    store = SQLiteStore(path)
    us = lambda s: round((T0 + s) * 1_000_000)  # noqa: E731
    data = '{"every":1}'
    generation = store.put(StoredKey("job", data, 1, "pending", us(98), us(97), None))
    assert store.start_fire(
        StoredKey("job", data, generation, "running", None, us(99), None), us(99), us(99), False
    )
    store.save([StoredKey("job", data, generation, "pending", us(99), us(98), None)])
    store.close()
    down(clock, 101.5)
    fences: list[Any] = []
    life = Life(
        path,
        clock,
        catch_up=CatchUp.ALL,
        reschedule=Reschedule.BEFORE_RUN,
        context=True,
        run=lambda ctx, key, data: fences.append((ctx.fence.scheduled_for - us(0)) / 1e6),
    )
    life.keyed.start()
    for _ in range(5):
        life.advance(0.01)
    assert fences == [99.0, 100.0, 101.0]  # 99 (rerun), then the missed 100 and 101: each once
    assert life.keyed.stats().recovered == 1 and life.keyed.stats().caught_up == 2
    life.keyed.close()


def upsert_whose_answer_is_lost(life: Life, key: str) -> None:
    """upsert(key) whose put commits, then raises StoreError (an I/O error on the way back)."""
    store = life.keyed._table.store
    real = store.put

    def answer_lost(row: StoredKey) -> int:
        real(row)
        raise StoreError(f"the {store.name} could not store a key: disk I/O error after commit")

    store.put = answer_lost  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="after commit"):
        life.keyed.upsert(key, {"every": 10})
    del store.put


def test_replace_all_deletes_a_key_whose_upsert_raised_after_its_commit(
    path: Path, clock: ManualClock
) -> None:
    """An upsert raised StoreError after its commit (an I/O error on the way back): the key is in the file
    and not in the KeyedScheduler's memory. A replace_all() without it used to delete only the keys in
    memory, and the key came back in the next life. replace_all() makes the file exactly its mapping."""
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("kept", {"every": 10})
    upsert_whose_answer_is_lost(life, "ghost")
    life.keyed.replace_all({"kept": {"every": 20}})
    crash(life)
    down(clock, 1)
    second = Life(path, clock)
    assert set(second.keyed) == {"kept"}
    second.keyed.close()


def test_remove_deletes_a_key_whose_upsert_raised_after_its_commit(path: Path, clock: ManualClock) -> None:
    """The same ghost as above, removed: remove() used to return False without asking the store (the key
    was not in memory), and the key came back in the next life. It is deleted from the file."""
    life = Life(path, clock)
    life.keyed.start()
    upsert_whose_answer_is_lost(life, "ghost")
    assert life.keyed.remove("ghost") is True  # (it was in the store)
    assert life.keyed.remove("ghost") is False
    with pytest.raises(TypeError, match="key"):  # (a key no durable store keeps: refused, as by upsert)
        life.keyed.remove(1.5)
    crash(life)
    down(clock, 1)
    second = Life(path, clock)
    assert set(second.keyed) == set()
    second.keyed.close()


def test_an_upsert_after_one_that_raised_after_its_commit_does_not_take_the_generation_back(
    path: Path, clock: ManualClock
) -> None:
    """A key removed in an earlier life (the file's floor is its generation, 3); in this life, whose
    memory starts from 0, an upsert of it raises StoreError after its commit: the file has it at 4, above
    the floor, and the memory does not have it. The next upsert's row (generation 1: one above the
    memory's) used to be written as it was, the key being stored: the generation went back from 4 to 1 in
    the file, below the 3 deleted, and the next life loaded it there. It is stored at 4 or above."""
    life = Life(path, clock)
    life.keyed.start()
    for _ in range(3):
        life.keyed.upsert("a", {"every": 10})
    assert life.keyed.remove("a")  # (the file's floor: 3)
    life.keyed.close()
    second = Life(path, clock)
    second.keyed.start()
    upsert_whose_answer_is_lost(second, "a")  # (in the file at 4, not in memory)
    second.keyed.upsert("a", {"every": 20})
    assert second.keyed.get("a").generation >= 4  # type: ignore[union-attr]
    crash(second)
    down(clock, 1)
    third = Life(path, clock)
    info = third.keyed.get("a")
    assert info is not None and info.data == {"every": 20} and info.generation >= 4
    third.keyed.close()


# -- callbacks that call back in during start() and upsert() --------------------------------------------


def a_key_that_missed_fires(path: Path, clock: ManualClock) -> None:
    """A key every 10 s in the file, then the process is down for 100 s: its fires 10 .. 100 missed."""
    life = Life(path, clock)
    life.keyed.start()
    life.keyed.upsert("k", {"every": 10})
    life.keyed.close()
    down(clock, 100)


def test_a_key_removed_from_on_missed_during_start_stays_removed(path: Path, clock: ManualClock) -> None:
    """remove() from on_missed during start() returns True (committed); start()'s final write of the
    keys it planned used to put the removed key back into the file: it was back at the next start."""
    a_key_that_missed_fires(path, clock)
    removed: list[bool] = []

    def on_missed(key: Any, data: Any, count: int, first: datetime, last: datetime) -> None:
        removed.append(life.keyed.remove(key))

    life = Life(path, clock, catch_up=CatchUp.SKIP, on_missed=on_missed)
    life.keyed.start()
    assert removed == [True]
    assert "k" not in life.keyed
    life.keyed.close()
    again = Life(path, clock)
    assert "k" not in again.keyed
    again.keyed.close()


def test_an_upsert_from_on_missed_during_start_is_not_overridden_by_the_old_catch_up(
    path: Path, clock: ManualClock
) -> None:
    """upsert() from on_missed during start() commits a new generation, planned afresh (next run in
    1000 s). start() then went on and re-armed the key at the old generation's catch-up fire: the new
    generation ran at once, at a stale scheduled time, and the file got the stale next_run_at."""
    a_key_that_missed_fires(path, clock)
    ran: list[tuple[Any, float]] = []

    def on_missed(key: Any, data: Any, count: int, first: datetime, last: datetime) -> None:
        life.keyed.upsert(key, {"every": 1000})

    life = Life(
        path,
        clock,
        on_missed=on_missed,
        context=True,
        run=lambda ctx, key, data: ran.append((data, ctx.scheduled_for - T0)),
    )
    life.keyed.start()
    info = life.keyed.get("k")
    life.sched.run_pending()
    life.keyed.close()
    assert ran == []
    assert info is not None and info.data == {"every": 1000} and info.next_run_at >= at(1000)  # type: ignore[operator]


def test_a_key_removed_from_on_state_change_during_start_stays_removed(
    path: Path, clock: ManualClock
) -> None:
    """An INVALID stored key is planned again by start() (INVALID -> PENDING); remove() from that
    on_state_change returns True, and start() used to write the removed key's row back into the file."""
    broken = [True]

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        if broken[0]:
            raise RuntimeError("a bug in next_run")
        return now + timedelta(seconds=10)

    first = Life(path, clock, next_run=next_run)
    first.keyed.start()
    first.keyed.upsert("k", {})
    assert first.keyed.get("k").state is KeyState.INVALID  # type: ignore[union-attr]
    first.keyed.close()
    broken[0] = False  # the code was fixed
    removed: list[bool] = []

    def on_state_change(key: Any, old: KeyState, new: KeyState) -> None:
        if new is KeyState.PENDING:
            removed.append(life.keyed.remove(key))

    life = Life(path, clock, next_run=next_run, on_state_change=on_state_change)
    life.keyed.start()
    assert removed == [True]
    life.keyed.close()
    again = Life(path, clock, next_run=next_run)
    assert "k" not in again.keyed
    again.keyed.close()


def test_an_upsert_after_start_drops_the_old_generations_catch_up_fires(
    path: Path, clock: ManualClock
) -> None:
    """CatchUp.ALL, and an upsert with a new schedule (a new generation) after the first catch-up run: the
    old generation's queue of missed fires used to be kept, and the new generation ran each stale fire,
    one per pass, right after its own first run, with stale scheduled times."""
    a_key_that_missed_fires(path, clock)
    ran: list[tuple[int, float]] = []
    life = Life(
        path,
        clock,
        catch_up=CatchUp.ALL,
        context=True,
        run=lambda ctx, key, data: ran.append((data["every"], ctx.scheduled_for - T0)),
    )
    life.keyed.start()
    life.sched.run_pending()  # the first catch-up fire runs (generation 1)
    life.keyed.upsert("k", {"every": 1000})  # generation 2: next run in 1000 s
    ran.clear()
    clock.advance(1000.0)
    life.sched.run_pending()  # generation 2's own first run is due
    for _ in range(20):  # 20 ms more of passes: generation 2 is next due in 1000 s
        clock.advance(0.001)
        life.sched.run_pending()
    life.keyed.close()
    assert len(ran) == 1 and ran[0][1] >= 1000


def test_a_key_its_own_next_run_removes_during_upsert_is_gone_from_memory_and_file_alike(
    path: Path, clock: ManualClock
) -> None:
    """upsert() evaluates next_run before it commits; a next_run that removes the key (remove() returns
    True: committed) used to be followed by the upsert's commit of the row, while in memory the key
    stayed removed: the snapshot said the key was gone, the file that it was there (back at the next
    start). Memory and file agree."""

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        if data.get("drop") and key in life.keyed:
            life.keyed.remove(key)
        return now + timedelta(seconds=10)

    life = Life(path, clock, next_run=next_run)
    life.keyed.start()
    life.keyed.upsert("k", {})
    life.keyed.upsert("k", {"drop": True})
    in_memory = "k" in life.keyed
    life.keyed.close()
    again = Life(path, clock, next_run=next_run)
    in_file = "k" in again.keyed
    again.keyed.close()
    assert in_memory == in_file


FINALIZER_UPSERTS = textwrap.dedent(
    """
    import faulthandler, gc, sys
    from datetime import timedelta
    from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
    from timerwheel.testing import ManualClock

    path, wall = sys.argv[1], float(sys.argv[2])
    faulthandler.dump_traceback_later(10, exit=True)  # the watchdog: a deadlock dumps the stacks, exits 1
    keyed = KeyedScheduler(Scheduler(ManualClock(0.0, wall=wall)),
                           lambda now, key, data: now + timedelta(seconds=10), lambda key, data: None,
                           store=SQLiteStore(path))
    keyed.start()

    class Finalized:
        def __init__(self):
            self.me = self  # a cycle: only the cyclic GC frees it

        def __del__(self):
            keyed.upsert("from-finalizer", {"n": 1})

    for threshold in range(2, 200):  # some allocation inside the store's transaction
        gc.set_threshold(threshold, 1000, 1000)  # ... triggers a collection, for some threshold
        for i in range(50):
            Finalized()  # garbage in a cycle: freed at a later collection
            keyed.upsert(f"k{i}", {"n": i})
    gc.set_threshold(700, 10, 10)
    faulthandler.cancel_dump_traceback_later()
    keyed.close()
    """
)


def test_a_finalizer_that_upserts_while_the_store_is_in_a_transaction_does_not_deadlock(path: Path) -> None:
    """A garbage-collector finalizer that calls back in (upsert) while the SQLiteStore is inside a
    transaction, in the same thread: the store's lock was a plain Lock, and the finalizer's write waited
    for ever for the lock its own thread held. Then a finalizer that ran between the outer BEGIN and the
    count of the nesting began a transaction of its own inside it, failed, and rolled the outer one back
    (both upserts raised). In a child process, with a watchdog: a hang is a failure."""
    child = subprocess.run(
        [sys.executable, "-c", FINALIZER_UPSERTS, str(path), repr(T0)],
        capture_output=True,
        text=True,
        timeout=GENEROUS,
        check=False,
    )
    assert child.returncode == 0, f"deadlock or crash:\n{child.stdout}\n{child.stderr}"


# -- store errors lose no key ---------------------------------------------------------------------------


def test_a_store_error_during_start_leaves_no_key_unarmed(path: Path, clock: ManualClock) -> None:
    """A store error during start() (a full disk as start() records an interrupted fire as abandoned,
    Recover.SKIP) used to propagate out of start() half-way: the KeyedScheduler was left started (start()
    could not be tried again), and the keys after the failing one were never armed: "b" stayed PENDING
    with a next_run_at and never ran. start() writes its decisions before it arms anything: a store error
    leaves it as it was, and start() tried again arms every key."""
    first = Life(path, clock)

    def dies_in_a(key: Any, data: Any) -> None:
        if key == "a":
            crash(first)
            raise RuntimeError("the process is killed during this run")

    first.keyed._runs._run = dies_in_a  # type: ignore[method-assign]
    first.keyed.start()
    first.keyed.upsert("a", {"every": 10})
    first.keyed.upsert("b", {"every": 30})
    first.advance(10)  # a's run starts, and the process dies in it
    down(clock, 2)
    life = Life(path, clock, recover=Recover.SKIP)
    store = life.keyed._table.store
    real = store.save
    failures = [1]

    def disk_full_once(*args: Any) -> Any:
        if failures and failures.pop():
            raise StoreError(f"the {store.name} cannot grow: database or disk is full")
        return real(*args)

    store.save = disk_full_once  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="disk is full"):
        life.keyed.start()
    life.keyed.start()  # (tried again)
    for _ in range(100):
        clock.advance(1.0)
        life.sched.run_pending()
    life.keyed.close()
    assert "b" in [key for key, _ in life.ran]


def test_a_store_error_in_a_run_dropped_by_backpressure_does_not_lose_its_key(
    path: Path, clock: ManualClock
) -> None:
    """A run dropped by backpressure (ThreadedScheduler, DROP): the key's new row was written unguarded,
    and when that write failed (a transient full disk) the exception escaped before the key was armed
    again: the key stayed PENDING with no timer and never ran again (the memory store's case:
    tests/test_keyed.py, test_a_run_dropped_by_backpressure_does_not_lose_its_key)."""
    gate = threading.Event()
    runs: list[str] = []

    def run(key: str, data: Any) -> None:
        runs.append(key)
        if key == "blocker":
            assert gate.wait(GENEROUS)

    store = SQLiteStore(path)
    failures: list[int] = []

    def disk_full_once(write: Callable[..., Any]) -> Callable[..., Any]:
        def fails_once(*args: Any) -> Any:
            if failures and failures.pop():
                raise StoreError(f"the {store.name} cannot grow: database or disk is full")
            return write(*args)

        return fails_once

    store.put = disk_full_once(store.put)  # type: ignore[method-assign]
    store.save = disk_full_once(store.save)  # type: ignore[method-assign]  # (the write of a dropped run)
    with ThreadedScheduler(clock=clock, workers=1, queue_size=1, backpressure=Backpressure.DROP) as sched:
        keyed = KeyedScheduler(sched, lambda now, key, data: now + timedelta(seconds=10), run, store=store)
        keyed.start()
        for key in ("blocker", "queued", "victim"):
            keyed.upsert(key)
        failures.append(1)  # the next write (the dropped run's) fails, once
        clock.advance(10)
        deadline = time.monotonic() + GENEROUS
        while sched.stats().dropped != 1:  # a condition that the scheduler's thread makes true
            assert time.monotonic() < deadline, "no run was dropped"
            time.sleep(0.001)
        gate.set()
        wait_until_idle(sched)
        for _ in range(5):
            clock.advance(10)
            wait_until_idle(sched)
        keyed.close()
    assert failures == []  # (the store error did happen)
    assert runs.count("victim") > 0


def test_a_fire_the_catch_up_reported_missed_does_not_run_when_the_wall_clock_steps_back(
    path: Path, clock: ManualClock
) -> None:
    """A start reruns an interrupted fire (10 s) and reports the fires missed since (20, 30 and 40 s,
    CatchUp.ONCE: the rerun is the catch-up's run). The wall clock steps back during the rerun: the key
    goes on after the catch-up's decision (45 s), and the fires it reported missed do not run after all
    (the fire of 40 s used to run: next_run was asked from the stepped-back clock)."""
    store = SQLiteStore(path)
    life = Life(
        store,
        clock,
        next_run=lambda now, key, data: (
            now.replace(second=0) + timedelta(seconds=10 * (now.second // 10 + 1))
        ),
    )
    life.keyed.upsert("k", {"every": 10})
    life.keyed.start()
    row = next(iter(store.load()[0]))
    assert store.start_fire(row._replace(state="running", next_run_at=None), round((T0 + 10) * 1e6), 1, False)
    life.keyed.close()
    down(clock, 45)
    fires: list[float] = []

    def run(ctx: Any, key: Any, data: Any) -> None:
        fires.append(ctx.scheduled_for - T0)
        if len(fires) == 1:
            clock.set_wall(clock.wall() - 10)  # (an NTP step back, during the rerun)

    life = Life(SQLiteStore(path), clock, run=run, context=True, next_run=life.keyed._table.next_run)
    life.keyed.start()
    assert life.missed == [("k", 3, 20.0, 40.0)]
    life.advance(20)
    assert fires[0] == 10.0 and not [t for t in fires if t in (20.0, 30.0, 40.0)]
    life.keyed.close()
