"""KeyedScheduler against APScheduler 3.11 (BackgroundScheduler, MemoryJobStore), 10**3..10**5 keys.

Both hold `size` keys (jobs) due 1 to 27 hours ahead, a one-shot each (seeded, the same for both), and
nothing runs: KeyedScheduler sits on a started Scheduler (the default clocks: time.monotonic, and
time.time for the wall) that nobody calls run_pending() on; APScheduler is started paused, so its jobs
only sit in the store. Each round does OPS operations.

    upsert known   KeyedScheduler.upsert(key, data) of pending keys: the O(1) move of its timer
                   APScheduler modify_job(id, next_run_time=...): the same change of an existing job
    upsert new     KeyedScheduler.upsert(new_key) / APScheduler add_job(...) of OPS new keys (taken back,
                   untimed, before the next round)
    remove         KeyedScheduler.remove(key) / APScheduler remove_job(id) of OPS keys (added, untimed,
                   before each round)
    next_run       the next_run function alone, called as upsert calls it: what "beyond next_run" leaves out
    snapshot       KeyedScheduler.snapshot() of all the keys (one op per key)

KeyedScheduler's next_run returns a datetime computed ahead (the data is the offset in seconds), so that the
figures are of the bookkeeping, not of a calendar.

    python -m pytest benchmarks/test_bench_keyed.py --benchmark-only \
        --benchmark-json=benchmarks/.build/keyed.json
    python -m timerwheel bench --report benchmarks/.build/keyed.json --baseline KeyedScheduler
"""

from __future__ import annotations

import gc
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from timerwheel import KeyedScheduler, Scheduler
from timerwheel.bench.workloads import SEED, delays

SIZES = {"1e3": 10**3, "1e4": 10**4, "1e5": 10**5}
OPS = 2_000
ROUNDS = 20
T0 = datetime.fromtimestamp(time.time() + 3600, UTC)  # an hour ahead: no due passes during the run
WHENS = [T0 + timedelta(seconds=d * 1000) for d in delays(10**5 + OPS)]  # the next runs, ahead of time


def next_run(now: datetime, key: Any, data: int) -> datetime:
    """The cheapest next_run: a datetime looked up, not computed."""
    return WHENS[data]


def noop(*args: Any) -> None:
    """The job (never runs here)."""


class Keyed:
    """A started KeyedScheduler with `n` keys k0..k{n-1}; key ki's data is i (its next run WHENS[i])."""

    def __init__(self, n: int) -> None:
        self.sched = Scheduler()
        self.keyed = KeyedScheduler(self.sched, next_run, noop)
        self.keyed.start()
        for i in range(n):
            self.keyed.upsert(f"k{i}", i)
        self.n = n


class Aps:
    """A paused APScheduler BackgroundScheduler (MemoryJobStore) with `n` one-shot date jobs k0..."""

    def __init__(self, n: int) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        self.sched = BackgroundScheduler(timezone="UTC")
        self.sched.start(paused=True)
        for i in range(n):
            self.sched.add_job(noop, "date", run_date=WHENS[i], id=f"k{i}")
        self.n = n


def _built(cls: type, n: int) -> Any:
    gc.disable()
    try:
        return cls(n)
    finally:
        gc.enable()


@pytest.fixture(scope="module", params=SIZES)
def size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def keyed(size: str) -> Keyed:
    return _built(Keyed, SIZES[size])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def aps(size: str) -> Any:
    pytest.importorskip("apscheduler", reason="the baseline: pip install 'apscheduler==3.11.*'")
    built = _built(Aps, SIZES[size])
    yield built
    built.sched.shutdown(wait=False)


def known_keys(n: int) -> list[tuple[str, int]]:
    """OPS pending keys drawn at random (seeded), each with a new data: its next run moves."""
    rnd = random.Random(SEED)
    return [(f"k{rnd.randrange(n)}", rnd.randrange(10**5)) for _ in range(OPS)]


# -- upsert of a known key ------------------------------------------------------------------------------


def keyed_upsert_known(job: tuple[Keyed, list[tuple[str, int]]], ops: int) -> None:
    k, moves = job
    upsert = k.keyed.upsert
    for key, data in moves:
        upsert(key, data)


def aps_modify(job: tuple[Any, list[tuple[str, int]]], ops: int) -> None:
    a, moves = job
    modify = a.sched.modify_job
    for key, data in moves:
        modify(key, next_run_time=WHENS[data])


def test_upsert_known_keyed(per_op: Any, keyed: Keyed, size: str) -> None:
    per_op(
        keyed_upsert_known,
        (keyed, known_keys(keyed.n)),
        OPS,
        ROUNDS,
        record=("KeyedScheduler", "upsert_known", SIZES[size]),
    )
    assert len(keyed.keyed) == keyed.n and keyed.sched.timers == keyed.n


def test_upsert_known_aps(per_op: Any, aps: Any, size: str) -> None:
    per_op(
        aps_modify, (aps, known_keys(aps.n)), OPS, ROUNDS, record=("APScheduler", "upsert_known", SIZES[size])
    )
    assert len(aps.sched.get_jobs()) == aps.n


# -- upsert of a new key, and remove ------------------------------------------------------------------------

NEW = [(f"new{i}", 10**5 + i) for i in range(OPS)]


def keyed_upsert_new(k: Keyed, ops: int) -> None:
    upsert = k.keyed.upsert
    for key, data in NEW:
        upsert(key, data)


def keyed_remove(k: Keyed, ops: int) -> None:
    remove = k.keyed.remove
    for key, _ in NEW:
        remove(key)


def aps_add(a: Any, ops: int) -> None:
    add = a.sched.add_job
    for key, data in NEW:
        add(noop, "date", run_date=WHENS[data], id=key)


def aps_remove(a: Any, ops: int) -> None:
    remove = a.sched.remove_job
    for key, _ in NEW:
        remove(key)


def test_upsert_new_keyed(per_op: Any, keyed: Keyed, size: str) -> None:
    per_op(
        keyed_upsert_new,
        keyed,
        OPS,
        ROUNDS,
        setup=lambda: keyed_remove(keyed, OPS),
        record=("KeyedScheduler", "upsert_new", SIZES[size]),
    )
    keyed_remove(keyed, OPS)


def test_upsert_new_aps(per_op: Any, aps: Any, size: str) -> None:
    def clear() -> None:
        if aps.sched.get_job("new0") is not None:
            aps_remove(aps, OPS)

    per_op(aps_add, aps, OPS, ROUNDS, setup=clear, record=("APScheduler", "upsert_new", SIZES[size]))
    clear()


def test_remove_keyed(per_op: Any, keyed: Keyed, size: str) -> None:
    per_op(
        keyed_remove,
        keyed,
        OPS,
        ROUNDS,
        setup=lambda: keyed_upsert_new(keyed, OPS),
        record=("KeyedScheduler", "remove", SIZES[size]),
    )
    assert len(keyed.keyed) == keyed.n


def test_remove_aps(per_op: Any, aps: Any, size: str) -> None:
    per_op(
        aps_remove,
        aps,
        OPS,
        ROUNDS,
        setup=lambda: aps_add(aps, OPS),
        record=("APScheduler", "remove", SIZES[size]),
    )
    assert len(aps.sched.get_jobs()) == aps.n


# -- next_run alone, and the snapshot ---------------------------------------------------------------------


def next_run_alone(job: tuple[Keyed, list[tuple[str, int]]], ops: int) -> None:
    _, moves = job
    now = datetime.fromtimestamp(time.time(), UTC)
    for key, data in moves:
        next_run(now, key, data)


def test_next_run_alone(per_op: Any, keyed: Keyed, size: str) -> None:
    per_op(
        next_run_alone,
        (keyed, known_keys(keyed.n)),
        OPS,
        ROUNDS,
        record=("next_run alone", "upsert_known", SIZES[size]),
    )


def snapshot(k: Keyed, ops: int) -> None:
    assert len(k.keyed.snapshot()) == ops


def test_snapshot_keyed(per_op: Any, keyed: Keyed, size: str) -> None:
    per_op(snapshot, keyed, keyed.n, 5, record=("KeyedScheduler", "snapshot", SIZES[size]))
