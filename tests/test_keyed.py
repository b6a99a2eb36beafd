"""KeyedScheduler: jobs by business key, on every scheduler, deterministic (ManualClock, VirtualTimeLoop).

In the spirit of lib-x/timewheel's scheduler tests, made exact: validation, upsert before start, remove,
cancel on remove and replace, stale completions, replace_all, the three Reschedule policies, invalid and
disabled keys, close, run_timeout, races of upserts against fires, and next_run on the injected clock.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    Backpressure,
    Cron,
    JobContext,
    JobEvent,
    KeyedScheduler,
    KeyState,
    MemoryStore,
    NotStartedError,
    Reschedule,
    Scheduler,
    SQLiteStore,
    ThreadedScheduler,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop, wait_until_idle

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()  # a Monday noon, on every test's wall clock
GENEROUS = 10.0


def every(seconds: float) -> Callable[[datetime, Any, Any], datetime]:
    """A next_run: `seconds` after now."""
    return lambda now, key, data: now + timedelta(seconds=seconds)


class Driver:
    """A scheduler under a KeyedScheduler, and how to move its time."""

    name = ""
    threads = False  # runs may go on while the test thread does something else

    def make(self, **kwargs: Any) -> Any:
        raise NotImplementedError

    def keyed(self, next_run: Any, run: Any, **kwargs: Any) -> KeyedScheduler:
        self.k = KeyedScheduler(self.make(**kwargs.pop("sched", {})), next_run, run, **kwargs)
        return self.k

    def advance(self, seconds: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Inline(Driver):
    name = "scheduler"

    def __init__(self) -> None:
        self.clock = ManualClock(100.0, wall=T0)

    def make(self, **kwargs: Any) -> Any:
        self.sched = Scheduler(self.clock, **kwargs)
        return self.sched

    def wall(self) -> float:
        return self.clock.wall()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.sched.run_pending()

    def close(self) -> None:
        if not self.k._table.closed:
            self.k.close()


class Threads(Driver):
    threads = True

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.name = f"threaded-{workers}"
        self.clock = ManualClock(100.0, wall=T0)

    def make(self, **kwargs: Any) -> Any:
        self.sched = ThreadedScheduler(clock=self.clock, workers=self.workers, **kwargs)
        return self.sched

    def wall(self) -> float:
        return self.clock.wall()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        wait_until_idle(self.sched)

    def close(self) -> None:
        self.k.close()
        self.sched.close()


class Loop(Driver):
    name = "asyncio"

    def __init__(self) -> None:
        self.loop = VirtualTimeLoop(100.0, wall=T0)

    def make(self, **kwargs: Any) -> Any:
        self.sched = AsyncScheduler(loop=self.loop, **kwargs)
        return self.sched

    def wall(self) -> float:
        return self.loop.wall()

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))
        for _ in range(3):
            self.loop.run_until_complete(asyncio.sleep(0))

    def close(self) -> None:
        self.loop.run_until_complete(self.k.aclose())
        self.loop.run_until_complete(self.sched.close())
        self.loop.close()


@pytest.fixture(params=["scheduler", "threaded-0", "threaded-2", "asyncio"])
def d(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver: Driver = {
        "scheduler": Inline,
        "threaded-0": lambda: Threads(0),
        "threaded-2": lambda: Threads(2),
        "asyncio": Loop,
    }[request.param]()
    yield driver
    if hasattr(driver, "k"):
        driver.close()


def log_runs(d: Driver, log: list[Any]) -> Callable[[Any, Any], None]:
    return lambda key, data: log.append((key, data, d.wall() - T0))


# -- validation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        (
            {"scheduler": object()},
            TypeError,
            "scheduler must be a Scheduler, ThreadedScheduler or AsyncScheduler",
        ),
        ({"next_run": 3}, TypeError, "next_run must be callable"),
        ({"run": None}, TypeError, "run must be callable"),
        ({"reschedule": "after_finish"}, TypeError, "reschedule must be a Reschedule"),
        ({"run_timeout": -1}, ValueError, "run_timeout must be > 0"),
        ({"run_timeout": 0}, ValueError, "run_timeout must be > 0"),
        ({"run_timeout": "1"}, TypeError, "run_timeout must be a real number"),
        ({"context": 1}, TypeError, "context must be a bool"),
        ({"on_finish": 3}, TypeError, "on_finish must be callable or None"),
    ],
)
def test_bad_construction(kwargs: dict[str, Any], error: type[Exception], words: str) -> None:
    args = {"scheduler": Scheduler(ManualClock()), "next_run": every(1), "run": print}
    args.update(kwargs)
    with pytest.raises(error, match=words):
        KeyedScheduler(args.pop("scheduler"), args.pop("next_run"), args.pop("run"), **args)


def test_bad_keys_and_bad_next_runs(d: Driver) -> None:
    invalid: list[tuple[Any, str]] = []
    results: dict[str, Any] = {
        "naive": datetime(2030, 1, 1),
        "number": 5,
        "raises": ZeroDivisionError("no"),
        "none": None,
    }

    def next_run(now: datetime, key: str, data: Any) -> Any:
        result = results[key]
        if isinstance(result, Exception):
            raise result
        return result

    k = d.keyed(next_run, print, on_invalid=lambda key, data, exc: invalid.append((key, type(exc).__name__)))
    for bad in ([1], {}, {1}):
        with pytest.raises(TypeError, match="key must be hashable"):
            k.upsert(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be hashable"):
            k.remove(bad)  # type: ignore[arg-type]
    assert len(k) == 0
    k.start()
    for key in results:
        k.upsert(key)  # never raises: a failing next_run makes the key INVALID
    snap = k.snapshot()
    assert {key: info.state for key, info in snap.items()} == {
        "naive": KeyState.INVALID,
        "number": KeyState.INVALID,
        "raises": KeyState.INVALID,
        "none": KeyState.DISABLED,
    }
    assert "naive" in (snap["naive"].last_error or "") and "not int" in (snap["number"].last_error or "")
    assert snap["raises"].last_error == "ZeroDivisionError: no"
    assert invalid == [("naive", "ValueError"), ("number", "TypeError"), ("raises", "ZeroDivisionError")]
    assert all(info.next_run_at is None for info in snap.values())
    assert d.sched.stats().pending == 0


# -- the lifecycle of keys ----------------------------------------------------------------------------------


def test_upsert_before_start_then_start(d: Driver) -> None:
    log: list[Any] = []
    seen: list[float] = []

    def next_run(now: datetime, key: str, data: Any) -> datetime:
        seen.append(now.timestamp() - T0)
        return now + timedelta(seconds=10)

    k = d.keyed(next_run, log_runs(d, log))
    k.upsert("a", 1)
    info = k.get("a")
    assert info is not None and info.state is KeyState.PENDING and info.generation == 1
    assert info.next_run_at == datetime.fromtimestamp(T0 + 10, tz=UTC)
    assert seen == [0.0]  # next_run saw the injected wall clock
    if not isinstance(d, Loop):
        d.clock.advance(20)  # type: ignore[attr-defined]  # nothing is armed before start()
    k.start()
    assert seen[-1] == (20.0 if not isinstance(d, Loop) else 0.0)  # start() evaluates again
    assert log == []
    d.advance(10)
    assert [(key, data) for key, data, _ in log] == [("a", 1)]


def test_remove_a_pending_key(d: Driver) -> None:
    log: list[Any] = []
    k = d.keyed(every(5), log_runs(d, log))
    k.start()
    k.upsert("a")
    k.upsert("b")
    assert k.remove("a") and not k.remove("a") and not k.remove("never")
    d.advance(5)
    assert [key for key, _, _ in log] == ["b"] and "a" not in k
    assert k.get("a") is None


def test_upsert_of_an_armed_key_moves_its_timer(d: Driver) -> None:
    k = d.keyed(lambda now, key, data: now + timedelta(seconds=data), print)
    k.start()
    k.upsert("a", 60)
    rec = k._keys["a"]  # the key's record is its one timer, in the engine's store
    before = (rec.id, rec.due)
    assert d.sched.timers == 1 and before[0] is not None
    k.upsert("a", 30)  # moved in place: the same entry, O(1)
    assert (rec.id, rec.due) == (before[0], before[1] - 30) and d.sched.timers == 1
    assert k.get("a").generation == 2  # type: ignore[union-attr]


def test_replace_all(d: Driver) -> None:
    log: list[Any] = []
    k = d.keyed(every(5), log_runs(d, log))
    k.start()
    k.replace_all({"a": 1, "b": 2, "c": 3})
    k.replace_all({"b": 20, "d": 4})
    assert sorted(k.snapshot()) == ["b", "d"] and k.get("b").data == 20  # type: ignore[union-attr]
    d.advance(5)
    assert sorted((key, data) for key, data, _ in log) == [("b", 20), ("d", 4)]
    with pytest.raises(TypeError, match="mapping"):
        k.replace_all([("a", 1)])  # type: ignore[arg-type]


# -- a shared store's writer ---------------------------------------------------------------------------------


def test_the_writer_batches_what_is_queued_together_keeping_each_keys_order_and_other_work() -> None:
    """A shared store's writer takes the batch items of one kind queued with the first (fires' takes, runs'
    ends) in one call: they may pass items of the other kind, but not an earlier item of their own key
    (a key's take, end and next take reach the database in their order), and no other work; an error of
    the call is each item's."""
    from timerwheel._keyed.journal import Writer

    writer = Writer("test")
    calls: list[tuple[str, list[Any]]] = []
    gate = threading.Event()

    def takes(items: list[Any]) -> list[Any]:
        calls.append(("takes", list(items)))
        if "bad" in items:
            raise RuntimeError("the database is down")
        return [f"took {item}" for item in items]

    def ends(items: list[Any]) -> list[Any]:
        calls.append(("ends", list(items)))
        return [None] * len(items)

    try:
        writer.submit(gate.wait, 10)  # (the writer busy: what follows queues up)
        a1 = writer.submit_batched(takes, "a1", "a")
        b_end = writer.submit_batched(ends, "b end", "b")
        c1 = writer.submit_batched(takes, "c1", "c")
        b2 = writer.submit_batched(takes, "b2", "b")  # (after b's end: not before it)
        a_end = writer.submit_batched(ends, "a end", "a")
        other = writer.submit(calls.append, ("other", []))
        d1 = writer.submit_batched(takes, "d1", "d")  # (after other work: not before it)
        bad = writer.submit_batched(takes, "bad", "e")
        gate.set()
        assert [f.result(10) for f in (a1, c1, b2)] == ["took a1", "took c1", "took b2"]
        assert b_end.result(10) is None and a_end.result(10) is None and other.result(10) is None
        for failed in (d1, bad):  # (one call: its error is each item's)
            with pytest.raises(RuntimeError, match="down"):
                failed.result(10)
        assert calls == [
            ("takes", ["a1", "c1"]),
            ("ends", ["b end", "a end"]),
            ("takes", ["b2"]),
            ("other", []),
            ("takes", ["d1", "bad"]),
        ]
    finally:
        gate.set()
        writer.stop()


# -- reschedule policies ------------------------------------------------------------------------------------


def test_after_finish_never_overlaps_and_follows_the_finish(d: Driver) -> None:
    log: list[Any] = []

    def run(key: str, data: Any) -> None:
        log.append(d.wall() - T0)
        if not isinstance(d, Loop):
            d.clock.advance(3)  # type: ignore[attr-defined]  # the run takes 3 s

    k = d.keyed(every(5), run)
    k.start()
    k.upsert("a")
    for _ in range(4):
        d.advance(5)
    if isinstance(d, Loop):
        assert log == [5.0, 10.0, 15.0, 20.0]
    else:  # each next run is 5 s after the previous finished: 5, 13, (21)
        assert log[:2] == [5.0, 13.0]
    assert k.get("a").state is KeyState.PENDING  # type: ignore[union-attr]


def test_before_run_is_armed_while_it_runs(d: Driver) -> None:
    if not d.threads:
        pytest.skip("a run that stays open needs a worker thread")
    release = threading.Event()
    started = threading.Event()

    def run(key: str, data: Any) -> None:
        started.set()
        assert release.wait(GENEROUS)

    k = d.keyed(every(5), run, reschedule=Reschedule.BEFORE_RUN)
    k.start()
    k.upsert("a")
    d.clock.advance(5)  # type: ignore[attr-defined]
    assert started.wait(GENEROUS)
    info = k.get("a")
    assert info is not None and info.state is KeyState.RUNNING and info.running
    assert info.next_run_at == datetime.fromtimestamp(T0 + 10, tz=UTC)
    release.set()
    wait_until_idle(d.sched)  # type: ignore[attr-defined]


def test_none_disables_after_a_run(d: Driver) -> None:
    log: list[Any] = []
    k = d.keyed(every(5), log_runs(d, log), reschedule=Reschedule.NONE)
    k.start()
    k.upsert("a")
    d.advance(5)
    d.advance(5)
    info = k.get("a")
    assert len(log) == 1 and info is not None and info.state is KeyState.DISABLED and info.next_run_at is None
    k.upsert("a")  # upserted again: armed again
    d.advance(5)
    assert len(log) == 2


# -- running runs: cancel, replace, timeout, close ---------------------------------------------------------


def held_run(d: Driver) -> tuple[Callable[..., Any], threading.Event, threading.Event, list[JobContext]]:
    release, started = threading.Event(), threading.Event()
    contexts: list[JobContext] = []

    def run(ctx: JobContext, key: str, data: Any) -> None:
        contexts.append(ctx)
        started.set()
        ctx.cancelled.wait(GENEROUS) if not release.is_set() else None
        release.wait(GENEROUS)

    return run, release, started, contexts


def test_cancel_running_on_remove_and_on_replace(d: Driver) -> None:
    if not d.threads:
        pytest.skip("a run that stays open needs a worker thread")
    finished: list[tuple[str, Any, Any]] = []
    run, release, started, contexts = held_run(d)
    k = d.keyed(
        every(5),
        run,
        context=True,
        cancel_running_on_remove=True,
        cancel_running_on_replace=True,
        on_finish=lambda key, data, error: finished.append((key, data, error)),
    )
    k.start()
    k.upsert("a", "old")
    d.clock.advance(5)  # type: ignore[attr-defined]
    assert started.wait(GENEROUS)
    k.upsert("a", "new")  # replace while it runs: its ctx is cancelled, a new generation is armed
    assert contexts[0].cancelled.is_set()
    info = k.get("a")
    assert info is not None and info.generation == 2 and info.state is KeyState.PENDING and info.running
    release.set()
    wait_until_idle(d.sched)  # type: ignore[attr-defined]
    # the stale completion changed nothing of the new generation; on_finish heard of it
    info = k.get("a")
    assert info is not None and info.state is KeyState.PENDING and not info.running
    assert info.next_run_at == datetime.fromtimestamp(T0 + 10, tz=UTC)
    assert finished == [("a", "old", None)]  # the data that run was given
    assert k.remove("a")


def test_run_timeout_sets_the_context(d: Driver) -> None:
    if not d.threads or d.workers == 0:  # type: ignore[attr-defined]
        pytest.skip("a timeout during the run needs a worker thread")
    events: list[JobEvent] = []
    started = threading.Event()
    seen: list[bool] = []

    def run(ctx: JobContext, key: str, data: Any) -> None:
        started.set()
        seen.append(ctx.cancelled.wait(GENEROUS))  # returns when the timeout elapses on the manual clock

    d.keyed(every(5), run, context=True, run_timeout=2.0, sched={"observer": events.append})
    k = d.k
    k.start()
    k.upsert("a")
    d.clock.advance(5)  # type: ignore[attr-defined]
    assert started.wait(GENEROUS)
    d.clock.advance(2)  # type: ignore[attr-defined]
    wait_until_idle(d.sched)  # type: ignore[attr-defined]
    assert seen == [True] and [e.timed_out for e in events] == [True]


@pytest.mark.parametrize("fault", ["slow store", "timeout shorter than a round trip"])
def test_a_run_timeout_that_expires_during_a_shared_stores_take_still_runs_the_job(fault: str) -> None:
    """Under asyncio, a run's timeout can expire while its fire's take is still on its way to a shared
    store (a slow database; a timeout shorter than a round trip to it, with a burst of fires taken
    together). The take is waited for all the same, and the fire it took runs, its ctx.cancelled set, as
    a ThreadedScheduler's job is told of its timeout. (The key used to be left counted as running with
    nothing armed, never to run again; then the fire was recorded as a failed run without its job ever
    being called.)"""
    from timerwheel.testing import SimulatedCluster

    told: list[bool] = []

    def every_second(now: datetime, key: Any, data: Any) -> datetime:
        return now.replace(microsecond=0) + timedelta(seconds=1)

    def job(ctx: JobContext, key: Any, data: Any) -> None:
        told.append(ctx.cancelled.is_set())

    keys = 1 if fault == "slow store" else 30
    timeout = 0.05 if fault == "slow store" else 0.001  # (a round trip: 0.4 to 4 ms; 20 to 800 slowed)
    cluster = SimulatedCluster(
        every_second, job, processes=1, seed=3, run_timeout=timeout, context=True, points=True
    )
    with cluster:
        cluster.replace_all({f"k{i}": {} for i in range(keys)})
        cluster.run_for(5.0)
        if fault == "slow store":  # (each call to the store takes 10-400 ms each way)
            cluster.slow(0, 20.0)
        cluster.run_for(20.0)
        cluster.quiet()
        cluster.check()  # (every fire ran: no-lost-fire, and the keys went on: progress)
        assert any(told), "no take outlasted the run's timeout: the test did not test anything"
        assert len(told) == len(cluster.runs) >= keys * 80


def test_a_reruns_take_whose_answer_was_lost_keeps_its_attempt_on_a_shared_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder of a key dies during a run; the process that takes the key over reruns the fire, and
    its take commits, then raises (the answer lost), twice. Each retry is the same take (the first
    try's started_at): the rerun runs once, at the attempt above the interrupted run's."""
    from timerwheel import StoreError
    from timerwheel.testing import SimulatedCluster
    from timerwheel.testing._simstore import SimStore

    real = SimStore.start_fires
    lost = [2]

    def answer_lost(self: Any, takes: list[Any]) -> list[Any]:
        results = real(self, takes)
        if any(rerun for *_, rerun in takes) and lost[0]:
            lost[0] -= 1
            raise StoreError("the connection was lost after the commit")
        return results

    monkeypatch.setattr(SimStore, "start_fires", answer_lost)

    def every_5s(now: datetime, key: Any, data: Any) -> datetime:
        return now.replace(microsecond=0) + timedelta(seconds=5 - now.second % 5)

    async def job(key: Any, data: Any) -> None:
        await asyncio.sleep(3.0)

    cluster = SimulatedCluster(every_5s, job, processes=2, seed=5, lease=1.5)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(6.0)  # (the run of 5 s goes on)
        cluster.kill(cluster.holder("a"))
        cluster.run_for(15.0)
        cluster.check()
        fire = [run for run in cluster.runs if run.scheduled_for == round((cluster.epoch + 5) * 1e6)]
        assert lost == [0] and [run.attempt for run in fire] == [1, 2]


def test_close_disables_every_key_and_keeps_them(d: Driver) -> None:
    states: list[tuple[Any, KeyState, KeyState]] = []
    k = d.keyed(every(5), print, on_state_change=lambda key, old, new: states.append((key, old, new)))
    k.start()
    k.upsert("a")
    k.upsert("b")
    d.close()
    snap = k.snapshot()
    assert sorted(snap) == ["a", "b"]
    assert all(info.state is KeyState.DISABLED and info.next_run_at is None for info in snap.values())
    assert ("a", KeyState.PENDING, KeyState.DISABLED) in states
    with pytest.raises(RuntimeError, match="closed"):
        k.upsert("c")
    del d.k


def test_close_waits_for_running_runs_when_asked() -> None:
    clock = ManualClock(100.0, wall=T0)
    sched = ThreadedScheduler(clock=clock, workers=1)
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def run(key: str, data: Any) -> None:
        started.set()
        release.wait(GENEROUS)
        done.append(key)

    k = KeyedScheduler(sched, every(5), run, wait_running_on_close=True)
    k.start()
    k.upsert("a")
    clock.advance(5)
    assert started.wait(GENEROUS)
    closer = threading.Thread(target=k.close)
    closer.start()
    closer.join(0.05)  # a real-time wait: close() must still be waiting for the run
    assert closer.is_alive() and done == []
    release.set()
    closer.join(GENEROUS)
    assert not closer.is_alive() and done == ["a"]
    assert "closed" in repr(sched)  # start() started it, close() closed it


# -- races, clocks, cron -------------------------------------------------------------------------------------


def test_upserts_racing_fires_never_resurrect_a_fired_timer() -> None:
    """Several threads upsert and remove keys while their timers fire on workers: every key ends with at
    most one armed timer, the scheduler's tasks are exactly the keys' timers, and no run of a removed key
    happens after its removal returned."""
    clock = ManualClock(100.0, wall=T0)
    sched = ThreadedScheduler(clock=clock, workers=2)
    removed_at: dict[str, int] = {}
    late: list[str] = []
    lock = threading.Lock()
    epoch = [0]

    def run(key: str, data: Any) -> None:
        with lock:
            if key in removed_at and removed_at[key] < epoch[0] - 1:
                late.append(key)

    k = KeyedScheduler(sched, every(1), run)
    k.start()

    def churn(seed: int) -> None:
        # (each thread its own keys: with keys shared, a thread's note "removed" could land after another
        # thread's upsert of the same key, and a live key's runs were taken for runs after its removal)
        for i in range(300):
            key = f"k{seed}-{i % 7}"
            if i % 5 == 4:
                if k.remove(key):
                    with lock:
                        removed_at[key] = epoch[0]
            else:
                with lock:
                    removed_at.pop(key, None)
                k.upsert(key, i)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for _ in range(200):
        clock.advance(0.5)
        with lock:
            epoch[0] += 1
    for t in threads:
        t.join(GENEROUS)
    wait_until_idle(sched)
    snap = k.snapshot()
    pending = [key for key, info in snap.items() if info.state is KeyState.PENDING]
    assert sched.timers == len(pending) and sched.stats().pending == 0  # one timer per armed key, no other
    assert all((k._keys[key].id is not None) == (key in pending) for key in snap)
    assert all(info.state in (KeyState.PENDING, KeyState.RUNNING) for info in snap.values())
    assert late == []
    k.close()
    sched.close()


def test_a_cron_as_next_run_and_the_wall_clock() -> None:
    clock = ManualClock(100.0, wall=datetime(2025, 3, 29, 23, 0, tzinfo=UTC).timestamp())
    ran: list[str] = []
    sched = Scheduler(clock)
    k = KeyedScheduler(
        sched,
        Cron("30 2 * * *", "Europe/Berlin"),
        lambda key, data: ran.append(datetime.fromtimestamp(clock.wall(), UTC).isoformat()),
    )
    k.start()
    k.upsert("nightly")
    info = k.get("nightly")
    assert info is not None and info.next_run_at == datetime(2025, 3, 30, 1, 0, tzinfo=UTC)  # 02:30 -> 03:00
    clock.advance(2 * 3600)
    sched.run_pending()
    assert ran == ["2025-03-30T01:00:00+00:00"]
    clock.set_wall(clock.wall() + 86400)  # the machine slept a day: the next point is due at once
    sched.run_pending()
    assert ran == ["2025-03-30T01:00:00+00:00", "2025-03-31T01:00:00+00:00"]


def test_upsert_a_fraction_of_a_microsecond_before_a_cron_point_runs_at_that_point(d: Driver) -> None:
    """next_run is asked from now rounded down to the microsecond, never up to the point itself (which a
    Cron would skip), before start() and after it, on every scheduler."""
    point = datetime(2025, 3, 30, 1, 0, tzinfo=UTC)
    clock = d.loop if isinstance(d, Loop) else d.clock  # type: ignore[attr-defined]
    clock.set_wall(point.timestamp() - 3e-7)
    k = d.keyed(Cron("* * * * *"), lambda key, data: None)
    k.upsert("before start")
    k.start()
    k.upsert("started")
    for key in ("before start", "started"):
        info = k.get(key)
        assert info is not None and info.next_run_at == point, key


def test_a_wall_clock_that_steps_back_between_a_fire_and_its_start_delays_the_start() -> None:
    """Two keys fire at wall 10; the first one's run steps the wall clock back 30 s (NTP) before the
    second one's run starts. The second used to start then, at wall -20, before its time: it waits for its
    time again, as its timer would have, and runs once the wall clock reaches it."""
    clock = ManualClock(0.0, wall=1000.0)
    ran: list[tuple[str, float]] = []

    def run(key: str, data: Any) -> None:
        ran.append((key, clock.wall()))
        if key == "a":
            clock.set_wall(clock.wall() - 30.0)

    sched = Scheduler(clock)
    k = KeyedScheduler(sched, lambda now, key, data: datetime.fromtimestamp(1010.0, UTC), run)
    k.start()
    k.upsert("a")
    k.upsert("b")
    clock.advance(10.0)
    sched.run_pending()
    assert ran == [("a", 1010.0)]  # (b waits: the wall clock says 980)
    info = k.get("b")
    assert info is not None and info.next_run_at == datetime.fromtimestamp(1010.0, UTC)
    clock.advance(29.0)
    sched.run_pending()
    assert ran == [("a", 1010.0)]
    clock.advance(1.0)
    sched.run_pending()
    assert ran == [("a", 1010.0), ("b", 1010.0)]


def test_a_key_armed_after_a_silent_step_of_the_wall_clock_fires_at_its_time(d: Driver) -> None:
    """Found by the simulation (a MemoryStore): the wall clock stepped forward while the
    KeyedScheduler had no key, so nothing drained (no calendar work: the driver does not wake to notice a
    step), and a key upserted later was armed by the wall offset seen before the step: its timer came
    due late by the whole step (an hour here, a machine that slept), and its first run, late, passed over
    the points in between unreported. A wall timer armed or moved outside a drain follows the wall clock
    first (nobody tells the driver of this step: the wall clock is the scheduler's own callable)."""
    shift = [0.0]
    runs: list[tuple[str, float]] = []
    k = d.keyed(
        lambda now, key, data: now + timedelta(seconds=data),
        lambda key, data: runs.append((key, d.wall() + shift[0] - T0)),
        sched={"wall_clock": lambda: d.wall() + shift[0]},
    )
    k.start()
    k.upsert("a", 1.0)
    d.advance(1.0)
    assert runs == [("a", 1.0)]
    k.remove("a")
    d.advance(5.0)
    shift[0] = 3600.0  # the wall clock steps an hour forward, silently, with no key armed
    d.advance(5.0)
    k.upsert("b", 1.0)  # armed (add_wall_timer) at wall 3612
    d.advance(1.0)
    assert runs == [("a", 1.0), ("b", 3612.0)]
    k.upsert("c", 1000.0)
    d.advance(5.0)
    shift[0] = 7200.0  # another hour, silently, while c waits (armed)
    k.upsert("c", 0.5)  # moved (move_wall_timer) to wall 7217.5
    d.advance(0.5)
    assert ("c", 7217.5) in runs


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
def test_a_wall_clock_that_steps_back_during_a_run_does_not_make_a_sound_key_invalid(
    durable: bool, tmp_path: Path
) -> None:
    """The wall clock steps back 2 minutes (NTP) while a minutely cron key runs: at the run's end,
    next_run at the new, earlier now gives a time after now but not after the fire that ran, and the
    key used to be declared INVALID ("would run again at once, without end"): a sound key stopped for
    good because of a clock step."""
    clock = ManualClock(0.0, wall=T0)
    sched = Scheduler(clock)

    def run(key: Any, data: Any) -> None:
        clock.set_wall(clock.wall() - 120)  # NTP steps the wall clock back during the run

    store = SQLiteStore(tmp_path / "keys.db") if durable else MemoryStore()
    k = KeyedScheduler(sched, Cron("* * * * *"), run, store=store)
    k.start()
    k.upsert("minutely")
    clock.advance(60)
    sched.run_pending()
    info = k.get("minutely")
    k.close()
    assert info is not None and info.state is not KeyState.INVALID, info


# -- next runs a key cannot keep, and upserts before there is a clock ---------------------------------------


def test_a_next_run_that_does_not_advance_makes_the_key_invalid(d: Driver) -> None:
    """A one-off job at a fixed past datetime used to re-run without end (run_pending never returned, the
    loop froze, threads spun): a past time runs once, and a next_run after the run that is not after the
    fire it follows makes the key INVALID, saying why."""
    past = datetime(2020, 1, 1, tzinfo=UTC)
    runs: list[float] = []
    k = d.keyed(lambda now, key, data: past, log_runs(d, runs))
    k.start()
    k.upsert("once")
    d.advance(0)
    d.advance(1)
    assert len(runs) == 1
    info = k.get("once")
    assert info is not None and info.state is KeyState.INVALID and info.next_run_at is None
    assert "not after the fire it follows" in (info.last_error or "")


def test_datetimes_at_the_ends_of_the_range_make_the_key_invalid() -> None:
    from zoneinfo import ZoneInfo

    k = KeyedScheduler(Scheduler(ManualClock(0.0, wall=T0)), lambda now, key, data: data, print)
    k.start()
    k.upsert("max", datetime.max.replace(tzinfo=ZoneInfo("America/New_York")))
    k.upsert("min", datetime.min.replace(tzinfo=timezone(timedelta(hours=1))))
    snap = k.snapshot()  # used to raise "year 10000 is out of range" for every key
    assert snap["max"].state is KeyState.INVALID and "out of the range" in (snap["max"].last_error or "")
    assert snap["min"].state is KeyState.INVALID
    k.close()


def test_upsert_and_replace_all_without_a_clock_change_nothing() -> None:
    """An AsyncScheduler made outside a loop and not started has no clock yet: upsert() and replace_all()
    raise NotStartedError and leave the keys as they were (upsert used to add the key, DISABLED, first)."""
    keyed = KeyedScheduler(AsyncScheduler(), every(10), print)
    with pytest.raises(NotStartedError):
        keyed.upsert("a", 1)
    assert len(keyed) == 0 and keyed.get("a") is None
    with pytest.raises(NotStartedError):
        keyed.replace_all({"b": 2})
    assert len(keyed) == 0 and keyed.get("b") is None


# -- a run dropped by backpressure; close() from a run, and what close() lets go ----------------------------


def test_a_run_dropped_by_backpressure_does_not_lose_its_key() -> None:
    """With DROP, a key whose run is dropped stays PENDING, armed for its next point, and runs then (it
    stayed PENDING with no timer, and never ran again)."""
    clock = ManualClock(100.0, wall=T0)
    gate = threading.Event()
    runs: list[str] = []

    def run(key: str, data: Any) -> None:
        runs.append(key)
        if key == "blocker":
            assert gate.wait(GENEROUS)

    with ThreadedScheduler(clock=clock, workers=1, queue_size=1, backpressure=Backpressure.DROP) as sched:
        k = KeyedScheduler(sched, every(10), run)
        k.start()
        for key in ("blocker", "queued", "victim"):
            k.upsert(key)
        clock.advance(10)
        _wait_for(lambda: sched.stats().dropped == 1)
        info = k.get("victim")
        assert info is not None and info.state is KeyState.PENDING and info.next_run_at == dt(T0 + 20)
        assert info.last_error is not None and "dropped" in info.last_error
        gate.set()
        wait_until_idle(sched)
        clock.advance(10)
        wait_until_idle(sched)
        assert runs.count("victim") == 1 and sched.timers == 3
        k.close()


def _wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GENEROUS
    while not predicate():  # a condition that a worker thread makes true (not a duration)
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def test_close_from_a_callback_of_the_run_does_not_wait_for_itself() -> None:
    clock = ManualClock(100.0, wall=T0)
    sched = Scheduler(clock)
    k: list[KeyedScheduler] = []

    def on_state(key: Any, old: KeyState, new: KeyState) -> None:
        if new is KeyState.RUNNING:
            k[0].close()

    ran: list[str] = []
    k.append(
        KeyedScheduler(
            sched,
            every(0),
            lambda key, data: ran.append(key),
            wait_running_on_close=True,
            on_state_change=on_state,
        )
    )
    k[0].start()
    k[0].upsert("a")
    done = threading.Event()
    threading.Thread(target=lambda: (sched.run_pending(), done.set()), daemon=True).start()
    assert done.wait(GENEROUS), "close() from on_state_change waited for its own run"
    assert ran == []  # closed before the run started: it did not start
    assert k[0].get("a").state is KeyState.DISABLED  # type: ignore[union-attr]


def test_aclose_from_a_coroutine_run_does_not_wait_for_itself() -> None:
    loop = VirtualTimeLoop(100.0, wall=T0)
    closed: list[bool] = []

    async def main() -> None:
        async with AsyncScheduler() as sched:
            keyed: list[KeyedScheduler] = []

            async def run(key: str, data: Any) -> None:
                await keyed[0].aclose()
                closed.append(True)

            keyed.append(KeyedScheduler(sched, every(1), run, wait_running_on_close=True))
            keyed[0].start()
            keyed[0].upsert("a")
            await asyncio.wait_for(asyncio.sleep(5), GENEROUS)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert closed == [True]


def test_close_unregisters_the_keys_from_the_engine() -> None:
    sched = Scheduler(ManualClock(0.0, wall=T0))
    for _ in range(3):
        k = KeyedScheduler(sched, every(10), print)
        k.start()
        for i in range(10):
            k.upsert(i)
        k.close()
    assert sched.calendar == 0 and sched.timers == 0


# -- remove() and upsert() from on_state_change or a finalizer ----------------------------------------------


def test_remove_or_upsert_from_on_state_change_supersedes_the_run(d: Driver) -> None:
    """remove() from on_state_change(RUNNING) returns True and the run does not start (it returned True,
    then the run started); an upsert() there supersedes the run: the new generation runs next."""
    runs: list[Any] = []
    removed: list[bool] = []
    keyed: list[KeyedScheduler] = []

    def on_state(key: Any, old: KeyState, new: KeyState) -> None:
        if new is KeyState.RUNNING and key == "gone":
            removed.append(keyed[0].remove(key))
        if new is KeyState.RUNNING and key == "new" and not removed[1:]:
            removed.append(True)
            keyed[0].upsert(key, "data of the new generation")

    keyed.append(d.keyed(every(5), log_runs(d, runs), on_state_change=on_state))
    keyed[0].start()
    keyed[0].upsert("gone", "old")
    d.advance(5)
    assert removed == [True] and runs == [] and "gone" not in keyed[0]
    keyed[0].upsert("new", "old")
    d.advance(5)
    assert runs == []  # superseded by the upsert before it started: the new generation runs next
    d.advance(5)
    assert len(runs) == 1


def test_a_finalizer_that_upserts_the_same_key_leaves_one_timer() -> None:
    import timerwheel._keyed.scheduler as keyed_module

    clock = ManualClock(0.0, wall=T0)
    sched = Scheduler(clock)
    k = KeyedScheduler(sched, every(10), print)
    k.start()
    real = keyed_module.Key
    calls = [0]

    class Finalizing(real):  # type: ignore[misc,valid-type]
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            calls[0] += 1
            if calls[0] == 1:
                k.upsert("a", "from a finalizer")  # as a finalizer that this allocation ran would
            super().__init__(*args)

    keyed_module.Key = Finalizing  # type: ignore[misc]
    try:
        k.upsert("a", "outer")
    finally:
        keyed_module.Key = real  # type: ignore[misc]
    assert sched.timers == 1 and len(k) == 1 and k.get("a").data == "outer"  # type: ignore[union-attr]
    k.close()
    assert sched.timers == 0


# -- runs that overlap, and when AFTER_FINISH and BEFORE_RUN plan the next ----------------------------------


def overlap_counter() -> tuple[Callable[[Any, Any], None], threading.Event, list[int], list[int], list[Any]]:
    """A run that counts how many runs go at once (the peak), and holds the runs of data "old" until
    the gate opens: (run, gate, active, peak, ran)."""
    gate = threading.Event()
    active, peak, ran = [0], [0], []
    lock = threading.Lock()

    def run(key: str, data: Any) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        if data == "old":
            assert gate.wait(GENEROUS)
        with lock:
            active[0] -= 1
            ran.append(data)

    return run, gate, active, peak, ran


def test_after_finish_runs_never_overlap_across_generations() -> None:
    """An upsert during a run armed the new generation at once, and with workers=2 its run began beside
    the old one: now the new generation's fire waits for the old run to end."""
    clock = ManualClock(100.0, wall=T0)
    run, gate, active, peak, ran = overlap_counter()

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        return now + timedelta(seconds=0 if data == "old" and not ran else 5)

    with ThreadedScheduler(clock=clock, workers=2) as sched:
        k = KeyedScheduler(sched, next_run, run)
        k.start()
        k.upsert("a", "old")
        _wait_for(lambda: active[0] == 1)
        k.upsert("a", "new")  # a new generation, due in 5 s
        clock.advance(5)  # its fire comes while the old run goes: it waits (the key is not armed)
        _wait_for(lambda: sched.stats().keys == 0)
        assert peak[0] == 1 and ran == [] and k.get("a").running  # type: ignore[union-attr]
        gate.set()  # the old run ends: the waiting fire runs now
        _wait_for(lambda: ran == ["old", "new"])
        wait_until_idle(sched)
        assert peak[0] == 1
        info = k.get("a")
        assert info is not None and info.state is KeyState.PENDING and info.next_run_at == dt(T0 + 10)
        k.close()


def test_before_run_states_while_runs_overlap_and_when_next_run_ends_the_key() -> None:
    clock = ManualClock(100.0, wall=T0)
    gates = [threading.Event(), threading.Event()]
    started = threading.Semaphore(0)
    n = [0]

    def run(key: str, data: Any) -> None:
        i = n[0]
        n[0] += 1
        started.release()
        assert gates[min(i, 1)].wait(GENEROUS)

    with ThreadedScheduler(clock=clock, workers=2) as sched:
        k = KeyedScheduler(sched, every(10), run, reschedule=Reschedule.BEFORE_RUN)
        k.start()
        k.upsert("a")
        for _ in range(2):
            clock.advance(10)
            assert started.acquire(timeout=GENEROUS)
        gates[0].set()
        _wait_for(lambda: sched.stats().running == 1)
        assert k.get("a").state is KeyState.RUNNING  # type: ignore[union-attr]  # the second still goes
        gates[1].set()
        wait_until_idle(sched)
        assert k.get("a").state is KeyState.PENDING  # type: ignore[union-attr]
        k.close()

    clock = ManualClock(100.0, wall=T0)
    sched2 = Scheduler(clock)
    seen: list[tuple[KeyState, bool]] = []
    calls = [0]

    def next_run(now: datetime, key: Any, data: Any) -> datetime | None:
        calls[0] += 1
        return now if calls[0] == 1 else None  # the run's own plan ends the key

    def look(key: str, data: Any) -> None:
        info = k2.get(key)
        assert info is not None
        seen.append((info.state, info.running))

    k2 = KeyedScheduler(sched2, next_run, look, reschedule=Reschedule.BEFORE_RUN)
    k2.start()
    k2.upsert("b")
    sched2.run_pending()
    assert seen == [(KeyState.RUNNING, True)]
    assert k2.get("b").state is KeyState.DISABLED  # type: ignore[union-attr]


def test_after_finish_counts_from_when_the_run_returned_not_from_a_wait_for_the_lock() -> None:
    """AFTER_FINISH: next_run sees the time the run returned. The run's end used to be read only once
    _end() had the scheduler's lock, which another thread may hold meanwhile (a durable store's database
    round trip): under load a key then skipped a point of its grid (seen as a "lost" fire by
    test_shared's journal check). Here another thread holds the lock while the clocks move 10 s: the
    next run is planned 5 s after the first returned (T0 + 10, due at once), not after the wait (T0 + 20)."""
    worker: list[threading.Thread] = []
    read_after_run = threading.Event()

    class Watched(ManualClock):
        watching = False

        def wall(self) -> float:
            now = super().wall()
            if self.watching and worker and threading.current_thread() is worker[0]:
                read_after_run.set()  # the run's end was read, on the run's thread
            return now

    clock = Watched(100.0, wall=T0)
    sched = ThreadedScheduler(clock=clock, workers=1)
    held = threading.Event()
    scheduled: list[float] = []

    def holder() -> None:
        with sched._lock:
            held.set()
            read_after_run.wait(GENEROUS)  # (without the fix, the end is read only after this returns)
            clock.advance(10)  # time passes while the lock is held

    second = threading.Event()

    def run(ctx: JobContext, key: str, data: Any) -> None:
        scheduled.append(ctx.scheduled_for)
        if len(scheduled) == 2:
            second.set()
        if not worker:
            worker.append(threading.current_thread())
            threading.Thread(target=holder, daemon=True).start()
            assert held.wait(GENEROUS)
            clock.watching = True

    k = KeyedScheduler(sched, every(5), run, context=True)
    k.start()
    try:
        k.upsert("a")
        clock.advance(5)  # the first run, at T0 + 5, returns at T0 + 5
        second.wait(GENEROUS)  # (without the fix, no second run comes: the next is planned at T0 + 20)
        assert scheduled[:2] == [T0 + 5, T0 + 10], scheduled
    finally:
        k.close()


# -- faults: callbacks that raise BaseException, a key removed while it runs, a failing wall clock -----------


def test_a_base_exception_from_on_state_change_at_a_runs_start_wedges_nothing(d: Driver) -> None:
    """SystemExit from on_state_change(RUNNING) used to escape before the run's end was set up: the key
    stayed RUNNING for ever and close(wait_running_on_close=True) hung. Now the callback is guarded as a
    job is: the run goes on, its end is recorded, and the exception surfaces where a job's would (out of
    run_pending() and the asyncio loop; logged on a scheduler thread)."""
    raised: list[bool] = []
    runs: list[Any] = []

    def on_state(key: Any, old: KeyState, new: KeyState) -> None:
        if new is KeyState.RUNNING and not raised:
            raised.append(True)
            raise SystemExit("from on_state_change")

    k = d.keyed(every(5), log_runs(d, runs), on_state_change=on_state, wait_running_on_close=True)
    k.start()
    k.upsert("a")
    surfaced = False
    try:
        d.advance(5)
    except SystemExit:
        surfaced = True
    assert raised == [True] and len(runs) == 1
    assert surfaced is (d.name in ("scheduler", "asyncio"))  # a scheduler thread never dies of it
    info = k.get("a")
    assert info is not None and info.state is KeyState.PENDING and not info.running
    d.advance(5)
    assert len(runs) == 2  # it goes on firing
    d.close()  # and close() with wait_running_on_close returns
    del d.k


@pytest.mark.parametrize("callback", ["next_run", "on_finish", "on_invalid"])
def test_a_base_exception_from_any_keyed_callback_wedges_no_key(callback: str) -> None:
    """Every user callback of the keyed layer is guarded like a job: a KeyboardInterrupt from it leaves
    the key consistent (its run's end recorded, a timer armed or the key INVALID) and then surfaces."""
    clock = ManualClock(100.0, wall=T0)
    sched = Scheduler(clock)
    armed = [False]
    runs: list[str] = []

    def next_run(now: datetime, key: Any, data: Any) -> datetime:
        if callback == "next_run" and armed[0]:
            armed[0] = False
            raise KeyboardInterrupt
        return now + timedelta(seconds=5 if data != "bad" else -(10**12))

    def interrupt(*args: Any) -> None:
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    k = KeyedScheduler(
        sched,
        next_run,
        lambda key, data: runs.append(key),
        on_finish=interrupt if callback == "on_finish" else None,
        on_invalid=interrupt if callback == "on_invalid" else None,
    )
    k.start()
    k.upsert("a")
    armed[0] = True
    if callback == "on_invalid":
        with pytest.raises(KeyboardInterrupt):
            k.upsert("a", "bad")  # out of range: INVALID, then the interrupt
        info = k.get("a")
        assert info is not None and info.state is KeyState.INVALID and info.generation == 2
        k.upsert("a")
    else:
        clock.advance(5)
        with pytest.raises(KeyboardInterrupt):
            sched.run_pending()
    assert runs == ([] if callback == "on_invalid" else ["a"])
    info = k.get("a")
    assert info is not None and not info.running
    assert info.state is (KeyState.INVALID if callback == "next_run" else KeyState.PENDING)
    if callback != "next_run":
        clock.advance(5)
        sched.run_pending()
        assert runs.count("a") == (1 if callback == "on_invalid" else 2)
    k.close()


def test_remove_then_upsert_while_a_run_goes_waits_for_that_run_and_keeps_the_generation() -> None:
    """A config reload (remove() then upsert(), or replace_all() without the key, then with it) while the
    key's run goes: the new record used to run at once beside the old run, at generation 1 again. Now
    AFTER_FINISH's promise holds across the removal: its first fire waits for the old run to end, and the
    generation only goes up."""
    clock = ManualClock(100.0, wall=T0)
    run, gate, active, peak, ran = overlap_counter()

    with ThreadedScheduler(clock=clock, workers=2) as sched:
        for reload in ("remove", "replace_all"):
            gate.clear()
            ran.clear()
            k = KeyedScheduler(sched, lambda now, key, data: now + timedelta(seconds=5), run)
            k.start()
            k.upsert("a", "old")
            clock.advance(5)
            _wait_for(lambda: active[0] == 1)
            before = k.get("a")
            assert before is not None
            if reload == "remove":
                assert k.remove("a")
                k.upsert("a", "new")
            else:
                k.replace_all({})
                k.replace_all({"a": "new"})
            info = k.get("a")
            assert info is not None and info.generation > before.generation and info.running
            clock.advance(5)  # the new record's fire comes while the old run goes: it waits
            _wait_for(lambda: sched.stats().keys == 0)  # (it came, found the run going: not armed)
            assert ran == [] and peak[0] == 1
            gate.set()
            _wait_for(lambda: ran == ["old", "new"])
            wait_until_idle(sched)
            assert peak[0] == 1
            k.close()


def test_a_keys_generation_never_goes_back_across_remove() -> None:
    k = KeyedScheduler(Scheduler(ManualClock(0.0, wall=T0)), every(10), print)
    k.start()
    for _ in range(3):
        k.upsert("a")
    assert k.get("a").generation == 3  # type: ignore[union-attr]
    k.remove("a")
    k.upsert("a")
    assert k.get("a").generation > 3  # type: ignore[union-attr]
    k.replace_all({})
    k.replace_all({"a": None})
    assert k.get("a").generation > 4  # type: ignore[union-attr]
    k.close()


def test_a_before_run_run_that_ends_while_its_next_fire_waits_stays_pending() -> None:
    """BEFORE_RUN, one worker: the next fire waits for the worker while the run goes. Its end used to
    report the key DISABLED (RUNNING -> DISABLED -> PENDING) although next_run never returned None."""
    clock = ManualClock(100.0, wall=T0)
    states: list[tuple[KeyState, KeyState]] = []
    gate, started = threading.Event(), threading.Event()
    calls = [0]

    def run(key: str, data: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            started.set()
            assert gate.wait(GENEROUS)

    with ThreadedScheduler(clock=clock, workers=1) as sched:
        k = KeyedScheduler(
            sched,
            every(5),
            run,
            reschedule=Reschedule.BEFORE_RUN,
            on_state_change=lambda key, old, new: states.append((old, new)),
        )
        k.start()
        k.upsert("a")
        clock.advance(5)
        assert started.wait(GENEROUS)
        clock.advance(5)  # the next fire: handed over, waits for the busy worker
        _wait_for(lambda: sched.stats().queued == 1)
        gate.set()
        _wait_for(lambda: calls[0] == 2)
        wait_until_idle(sched)
        assert (KeyState.RUNNING, KeyState.DISABLED) not in states, states
        info = k.get("a")
        assert info is not None and info.state is KeyState.PENDING
        k.close()


def test_a_run_that_returns_a_coroutine_is_awaited_under_asyncio() -> None:
    """A plain callable returning a coroutine (an async function behind an ordinary decorator) used to be
    reported finished without its body ever running."""
    loop = VirtualTimeLoop(100.0, wall=T0)
    bodies: list[str] = []
    finished: list[tuple[Any, BaseException | None]] = []

    async def body(key: str) -> None:
        await asyncio.sleep(1)
        bodies.append(key)

    async def main() -> None:
        async with AsyncScheduler() as sched:
            k = KeyedScheduler(
                sched,
                every(5),
                lambda key, data: body(key),
                on_finish=lambda key, data, error: finished.append((key, error)),
            )
            k.start()
            k.upsert("a")
            await asyncio.sleep(5.5)
            assert bodies == [] and finished == []  # it runs, as a task: not finished yet
            await asyncio.sleep(1)
            assert bodies == ["a"] and finished == [("a", None)]
            await k.aclose()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_run_that_returns_a_coroutine_without_a_loop_is_a_failure() -> None:
    clock = ManualClock(100.0, wall=T0)
    sched = Scheduler(clock)
    finished: list[BaseException | None] = []

    async def body() -> None:
        raise AssertionError("never runs")

    k = KeyedScheduler(
        sched, every(5), lambda key, data: body(), on_finish=lambda k, d, e: finished.append(e)
    )
    k.start()
    k.upsert("a")
    clock.advance(5)
    sched.run_pending()
    assert len(finished) == 1 and isinstance(finished[0], TypeError)
    assert "AsyncScheduler" in str(finished[0])
    assert "TypeError" in (k.get("a").last_error or "")  # type: ignore[union-attr]
    k.close()


def test_close_without_wait_running_on_close_returns_while_a_run_goes() -> None:
    """close() of a KeyedScheduler that started its ThreadedScheduler used to join the workers, so a run
    that never returns turned a shutdown into a hang. The run is told (ctx.cancelled) and goes on."""
    clock = ManualClock(100.0, wall=T0)
    started, release = threading.Event(), threading.Event()
    told: list[bool] = []

    def run(ctx: JobContext, key: str, data: Any) -> None:
        started.set()
        told.append(ctx.cancelled.wait(GENEROUS))
        release.wait(GENEROUS)

    sched = ThreadedScheduler(clock=clock, workers=1)
    k = KeyedScheduler(sched, every(5), run, context=True)
    k.start()
    k.upsert("a")
    clock.advance(5)
    assert started.wait(GENEROUS)
    closer = threading.Thread(target=k.close, daemon=True)
    closer.start()
    closer.join(GENEROUS)
    try:
        assert not closer.is_alive(), "close() waited for the run"
        _wait_for(lambda: told == [True])
        assert "closed" in repr(sched)
    finally:
        release.set()


class FlakyWall(ManualClock):
    """A clock whose wall() raises the next `failures` times it is read (by the keyed layer's run, if
    `in_runs`: as a run starts or ends; the engine's own reads still answer)."""

    failures = 0
    in_runs = False

    def wall(self) -> float:
        if self.failures and (not self.in_runs or self._in_a_run()):
            self.failures -= 1
            raise OSError("the wall clock is not there")
        return super().wall()

    @staticmethod
    def _in_a_run() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_name in ("_prepare_start", "end", "_ended"):
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False


@pytest.mark.parametrize("at", ["start", "end"])
def test_a_wall_clock_that_fails_once_loses_no_key(at: str) -> None:
    """One failed read of the wall clock as a key's run starts used to lose the key for good (no timer,
    PENDING with next_run_at in the past). As the drivers do: logged, counted, retried after a back-off,
    and what is due runs once the clock answers."""
    clock = FlakyWall(100.0, wall=T0)
    clock.in_runs = True
    sched = Scheduler(clock)
    runs: list[float] = []

    def run(key: str, data: Any) -> None:
        runs.append(clock.wall())
        if at == "end":
            clock.failures = 2  # the end's reads fail

    k = KeyedScheduler(sched, every(5), run)
    k.start()
    k.upsert("a")
    clock.advance(5)
    if at == "start":
        clock.failures = 1
    sched.run_pending()
    if at == "start":
        assert runs == []
        clock.advance(1)  # past the back-off (at most 1 s)
        sched.run_pending()
    assert runs == [T0 + 5] if at == "end" else [T0 + 6]
    assert k.stats().clock_errors >= 1
    info = k.get("a")
    assert info is not None and info.state is KeyState.PENDING and not info.running
    assert info.next_run_at is not None and info.next_run_at.timestamp() > clock.wall()
    clock.advance(10)
    sched.run_pending()
    assert len(runs) == 2
    k.close()


def test_a_closed_keyed_scheduler_refuses_remove_as_it_refuses_upsert() -> None:
    k = KeyedScheduler(Scheduler(ManualClock(wall=T0)), every(5), print)
    k.start()
    k.upsert("a", 1)
    k.close()
    for key in ("a", "unknown", 10**5000):
        with pytest.raises(RuntimeError, match="closed"):
            k.remove(key)
        with pytest.raises(RuntimeError, match="closed"):
            k.upsert(key, 2)
    info = k.get("a")
    assert info is not None and info.data == 1  # (kept as close() left it)


def test_an_upsert_whose_wall_clock_fails_raises_and_changes_nothing() -> None:
    clock = FlakyWall(100.0, wall=T0)
    k = KeyedScheduler(Scheduler(clock), every(5), print)
    k.start()
    k.upsert("a", 1)
    clock.failures = 1
    with pytest.raises(OSError, match="not there"):
        k.upsert("a", 2)
    info = k.get("a")
    assert info is not None and info.data == 1 and info.generation == 1 and info.state is KeyState.PENDING
    k.close()


def test_a_keyed_scheduler_on_a_closed_scheduler_is_refused() -> None:
    """It used to start, take upserts and show them PENDING, and never run anything."""
    from timerwheel import ClosedError

    sched = ThreadedScheduler(clock=ManualClock(0.0, wall=T0))
    sched.close()
    with pytest.raises(ClosedError, match="closed"):
        KeyedScheduler(sched, every(5), print)
    live = ThreadedScheduler(clock=ManualClock(0.0, wall=T0))
    live.start()
    k = KeyedScheduler(live, every(5), print)
    live.close()
    with pytest.raises(ClosedError, match="closed"):
        k.start()
    live2 = ThreadedScheduler(clock=ManualClock(0.0, wall=T0))
    k2 = KeyedScheduler(live2, every(5), print)
    k2.start()
    live2.close()
    with pytest.raises(ClosedError, match="closed"):
        k2.upsert("a")
    assert "a" not in k2


def test_every_run_carries_a_fence_that_grows(d: Driver) -> None:
    fences: list[Any] = []
    k = d.keyed(every(5), lambda ctx, key, data: fences.append(ctx.fence), context=True)
    k.start()
    k.upsert("a")
    d.advance(5)
    k.upsert("a")  # a new generation
    d.advance(5)
    assert [f.attempt for f in fences] == [1, 1] and fences[1] > fences[0]
    assert fences[0].generation == 1 and fences[1].generation == 2
    assert fences[0].scheduled_for == round((T0 + 5) * 1_000_000)


def test_the_coroutine_twins_of_upsert_replace_all_and_remove() -> None:
    """aupsert(), areplace_all() and aremove(): with a store that is not shared, what the plain calls do."""
    loop = VirtualTimeLoop(100.0, wall=T0)
    ran: list[str] = []

    async def main() -> None:
        async with AsyncScheduler() as sched:
            k = KeyedScheduler(sched, every(5), lambda key, data: ran.append(key))
            k.start()
            await k.aupsert("a", 1)
            await k.areplace_all({"a": 2, "b": 3})
            assert await k.aremove("b") and not await k.aremove("b")
            with pytest.raises(TypeError, match="hashable"):
                await k.aupsert([], 1)
            await asyncio.sleep(5)
            assert ran == ["a"] and k.get("a").data == 2  # type: ignore[union-attr]
            await k.aclose()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize("durable", [False, True])
def test_a_base_exception_from_a_callback_during_replace_all_is_raised_once_all_is_done(
    durable: bool, tmp_path: Any
) -> None:
    """A KeyboardInterrupt from on_state_change during replace_all(): the replace used to stop half-way
    (keys not added, removed ones gone) without a store; with one, it returned and the next unrelated
    call raised it. Now every key is done, then replace_all() raises it."""
    from timerwheel import SQLiteStore

    raised: list[str] = []

    def on_state(key: Any, old: KeyState, new: KeyState) -> None:
        if key == "b" and not raised:
            raised.append(key)
            raise KeyboardInterrupt("from on_state_change of b")

    store = SQLiteStore(tmp_path / "keys.db") if durable else None
    k = KeyedScheduler(
        Scheduler(ManualClock(0.0, wall=T0)), every(60), print, on_state_change=on_state, store=store
    )
    k.start()
    k.upsert("old", 1)
    with pytest.raises(KeyboardInterrupt):
        k.replace_all({"a": 1, "b": 2, "c": 3})
    assert sorted(k) == ["a", "b", "c"] and all(i.state is KeyState.PENDING for i in k.snapshot().values())
    k.upsert("z", 4)  # nothing is left held for the next call
    k.close()


def test_close_tells_the_runs_that_go_on_on_a_scheduler_it_does_not_own() -> None:
    """close() without wait_running_on_close sets a running run's ctx.cancelled also when the user
    started the scheduler (it used to do so only through the scheduler it closed itself)."""
    clock = ManualClock(100.0, wall=T0)
    started, release = threading.Event(), threading.Event()
    told: list[bool] = []

    def run(ctx: JobContext, key: str, data: Any) -> None:
        started.set()
        told.append(ctx.cancelled.wait(GENEROUS))
        release.wait(GENEROUS)

    with ThreadedScheduler(clock=clock, workers=1) as sched:
        k = KeyedScheduler(sched, every(5), run, context=True)
        k.start()
        k.upsert("a")
        clock.advance(5)
        assert started.wait(GENEROUS)
        k.close()
        _wait_for(lambda: told == [True])
        release.set()


def test_states_counts_the_keys_in_each_state_as_get_shows_them() -> None:
    clock = ManualClock(0.0, wall=1_800_000_000.0)
    sched = Scheduler(clock)

    def next_run(now: datetime, key: Any, data: Any) -> datetime | None:
        if data == "bad":
            raise ValueError("no schedule")
        return None if data == "done" else now + timedelta(seconds=10)

    keyed = KeyedScheduler(sched, next_run, lambda key, data: None)
    for key, data in (("a", None), ("b", None), ("c", "done"), ("d", "bad")):
        keyed.upsert(key, data)
    keyed.start()
    keyed.pause("b")
    counts = keyed.states()
    assert counts == {
        KeyState.PENDING: 1,
        KeyState.RUNNING: 0,
        KeyState.DISABLED: 1,
        KeyState.INVALID: 1,
        KeyState.PAUSED: 1,
    }
    assert counts == {s: sum(1 for i in keyed.snapshot().values() if i.state is s) for s in KeyState}
    keyed.close()
    assert keyed.states()[KeyState.DISABLED] == 4
