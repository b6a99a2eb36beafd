"""Every public entry point, every kind of bad value: a clear exception that names the argument, and the
state unchanged afterwards. One table; the rules are those of timerwheel._validate."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from timerwheel import (
    AsyncScheduler,
    HeapScheduler,
    PostgresStore,
    RunOptions,
    Scheduler,
    SQLiteStore,
    ThreadedScheduler,
    TimerWheel,
)
from timerwheel.testing import ManualClock, VirtualTimeLoop, wait_until_idle


class RaisingFloat(float):
    """A real number whose conversion fails."""

    def __float__(self) -> float:
        raise ArithmeticError("no float for you")


class LyingFloat(float):
    """A real number whose __float__ returns something that is not a float."""

    def __float__(self) -> Any:
        return "3.0"


class OnlyFloat:
    """Not a number at all, but it has __float__ (the old rule took it)."""

    def __float__(self) -> float:
        return 1.0


def numpy_array() -> Any:
    numpy = pytest.importorskip("numpy")
    return numpy.array([1.0, 2.0])


# (what is given, the exception, words the message must contain)
NOT_SECONDS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (lambda: "1", TypeError, "must be a real number, not str"),
    (lambda: b"1", TypeError, "must be a real number, not bytes"),
    (lambda: None, TypeError, "must be a real number, not NoneType"),
    (lambda: True, TypeError, "must be a real number, not bool"),
    (lambda: [1.0], TypeError, "must be a real number, not list"),
    (lambda: OnlyFloat(), TypeError, "must be a real number, not OnlyFloat"),
    (numpy_array, TypeError, "must be a real number, not ndarray"),
    (lambda: Decimal("sNaN"), ValueError, "could not be read as a number"),
    (lambda: Decimal("NaN"), ValueError, "must be finite"),
    (lambda: RaisingFloat(1.0), ValueError, "could not be read as a number"),
    (lambda: LyingFloat(1.0), ValueError, "could not be read as a number"),
    (lambda: math.nan, ValueError, "must be finite"),
    (lambda: math.inf, ValueError, "must be finite"),
    (lambda: 10**400, OverflowError, "too large"),
]


def snapshot(obj: Any) -> Any:
    if isinstance(obj, TimerWheel):
        return (len(obj), obj.next_due(), obj.now)
    if isinstance(obj, ManualClock):
        return obj()
    return (obj.pending(), obj.stats())


FIRST = 1 << 32  # the id of a new wheel's first timer (generation 1, entry 0)


def wheel() -> Any:
    w = TimerWheel()
    w.add(5.0, "x")
    return w


def scheduler() -> Any:
    s = Scheduler(ManualClock(10.0))
    s.schedule(5, print)
    return s


def heap() -> Any:
    s = HeapScheduler(ManualClock(10.0))
    s.schedule(5, print)
    return s


SECONDS_ENTRIES: dict[str, tuple[Callable[[], Any], Callable[[Any, Any], Any], str]] = {
    "TimerWheel.add": (wheel, lambda w, v: w.add(v, "y"), "delay"),
    "TimerWheel.add_at": (wheel, lambda w, v: w.add_at(v, "y"), "due"),
    "TimerWheel.reschedule": (wheel, lambda w, v: w.reschedule(FIRST, v), "delay"),
    "TimerWheel.reschedule_at": (wheel, lambda w, v: w.reschedule_at(FIRST, v), "due"),
    "TimerWheel.advance": (wheel, lambda w, v: w.advance(v), "now"),
    "Scheduler.schedule": (scheduler, lambda s, v: s.schedule(v, print), "delay"),
    "Scheduler.schedule_at": (scheduler, lambda s, v: s.schedule_at(v, print), "when"),
    "Scheduler.schedule interval": (scheduler, lambda s, v: s.schedule(1, print, v), "interval"),
    "Scheduler.reschedule": (scheduler, lambda s, v: s.reschedule(1, v), "delay"),
    "HeapScheduler.schedule": (heap, lambda s, v: s.schedule(v, print), "delay"),
    "HeapScheduler.reschedule": (heap, lambda s, v: s.reschedule(1, v), "delay"),
    "ManualClock.advance": (lambda: ManualClock(10.0), lambda c, v: c.advance(v), "seconds"),
    "ManualClock.set": (lambda: ManualClock(10.0), lambda c, v: c.set(v), "t"),
}


@pytest.mark.parametrize("entry", sorted(SECONDS_ENTRIES))
@pytest.mark.parametrize("bad", NOT_SECONDS, ids=[f"bad{i}" for i in range(len(NOT_SECONDS))])
def test_seconds(entry: str, bad: tuple[Callable[[], Any], type[Exception], str]) -> None:
    make, call, name = SECONDS_ENTRIES[entry]
    value, error, words = bad[0](), bad[1], bad[2]
    if value is None and name == "interval":
        return  # None is "no interval": the one-shot
    if words.startswith("too large") and entry.startswith("ManualClock"):
        error, words = OverflowError, "too large"
    target = make()
    before = snapshot(target)
    with pytest.raises(error) as info:
        call(target, value)
    message = str(info.value)
    assert message.startswith(name) and words in message, message
    assert snapshot(target) == before


def test_real_numbers_that_are_not_floats_are_taken() -> None:
    s = Scheduler(ManualClock(10.0))
    for value in (1, Fraction(1, 2), Decimal("0.25")):
        s.schedule(value, print)
    assert [info.next_fire_at for info in s.pending()] == [10.25, 10.5, 11.0]
    numpy = pytest.importorskip("numpy")
    s.schedule(numpy.float64(2.0), print)
    s.schedule(numpy.int64(3), print)
    assert [info.next_fire_at for info in s.pending()][-2:] == [12.0, 13.0]


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda s: s.cancel("1"), TypeError, "task_id must be an int, not str"),
        (lambda s: s.cancel(True), TypeError, "task_id must be an int, not bool"),
        (lambda s: s.cancel(1.0), TypeError, "task_id must be an int, not float"),
        (lambda s: s.next_fire_time(None), TypeError, "task_id must be an int, not NoneType"),
        (lambda s: s.reschedule(False, 1.0), TypeError, "task_id must be an int, not bool"),
        (lambda s: s.schedule(1, None), TypeError, "fn must be callable, not NoneType"),
        (lambda s: s.schedule(1, print, mode="fixed_rate"), TypeError, "mode must be a RepeatMode"),
        (lambda s: s.schedule(1, print, missed=0), TypeError, "missed must be a Missed"),
        (lambda s: s.schedule(1, print, args="ab"), TypeError, "args must be an iterable of arguments"),
        (lambda s: s.schedule(1, print, args=5), TypeError, "args must be an iterable of arguments, not int"),
        (lambda s: s.schedule(1, print, kwargs=[1, 2]), TypeError, "kwargs must be a mapping"),
        (lambda s: s.schedule(1, print, kwargs={1: 2}), TypeError, "kwargs keys must be strings, not 1"),
        (lambda s: s.schedule(1, print, options={}), TypeError, "options must be a RunOptions or None"),
        (lambda s: s.schedule(-1, print), ValueError, "delay must be >= 0"),
        (lambda s: s.schedule(1, print, -2.0), ValueError, "interval must be > 0"),
        (lambda s: s.schedule(1e300, print), OverflowError, "delay is too far ahead"),
    ],
)
def test_scheduler_arguments(call: Callable[[Any], Any], error: type[Exception], words: str) -> None:
    for make in (scheduler, heap):
        s = make()
        before = snapshot(s)
        if "too far" in words and make is heap:
            continue  # the heap holds any finite time
        with pytest.raises(error, match=words):
            call(s)
        assert snapshot(s) == before
        assert s.schedule(1, print) == 2  # no id was taken


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: Scheduler(3.0), TypeError, "clock must be a Clock or a callable"),  # type: ignore[arg-type]
        (lambda: Scheduler(lambda: "now"), TypeError, "the scheduler's clock returned 'now'"),
        (lambda: Scheduler(lambda: math.nan), ValueError, "the scheduler's clock returned nan"),
        (lambda: Scheduler(observer=3), TypeError, "observer must be callable or None"),  # type: ignore[arg-type]
        (lambda: Scheduler(error_handler="x"), TypeError, "error_handler must be callable or None"),  # type: ignore[arg-type]
        (lambda: Scheduler(logger=print), TypeError, "logger must be a logging.Logger or None"),  # type: ignore[arg-type]
        (lambda: Scheduler(slots=3), ValueError, "slots must be a power of two"),
        (lambda: Scheduler(store=TimerWheel(), slots=8), TypeError, "not with store"),
        (lambda: Scheduler(store="x"), TypeError, "store must be a timer store .* not str"),  # type: ignore[arg-type]
        (lambda: ThreadedScheduler(store=5), TypeError, "store must be a timer store"),  # type: ignore[arg-type]
        (lambda: AsyncScheduler(store=5), TypeError, "store must be a timer store"),  # type: ignore[arg-type]
        (lambda: AsyncScheduler(store=TimerWheel(), slots=8), TypeError, "not with store"),
        (lambda: Scheduler(ManualClock(0), store=TimerWheel(start=100)), ValueError, "store is ahead of"),
        (lambda: Scheduler(propagate="x"), TypeError, "propagate must be a tuple of exception classes"),  # type: ignore[arg-type]
        (lambda: Scheduler(propagate=(int,)), TypeError, "propagate must be a tuple of exception classes"),
        (lambda: TimerWheel(resolution=True), TypeError, "resolution must be a real number, not bool"),
        (lambda: TimerWheel(slots=True), TypeError, "slots must be an int, not bool"),
        (lambda: ThreadedScheduler(workers=True), TypeError, "workers must be an int, not bool"),
        (lambda: ThreadedScheduler(workers=-1), ValueError, "workers must be >= 0"),
        (lambda: ThreadedScheduler(queue_size=1.5), TypeError, "queue_size must be an int, not float"),
        (lambda: ThreadedScheduler(backpressure="drop"), TypeError, "backpressure must be a Backpressure"),  # type: ignore[arg-type]
        (lambda: ThreadedScheduler(missed=None), TypeError, "missed must be a Missed"),  # type: ignore[arg-type]
        (lambda: ThreadedScheduler(levels=0), ValueError, "levels must be from 1 to 8"),
        (lambda: AsyncScheduler(max_concurrency=0), ValueError, "max_concurrency must be >= 1"),
        (lambda: AsyncScheduler(max_concurrency=True), TypeError, "max_concurrency must be an int, not bool"),
        (lambda: AsyncScheduler(loop=3), TypeError, "loop must be an asyncio event loop or None"),  # type: ignore[arg-type]
        (lambda: RunOptions(timeout=-1), ValueError, "timeout must be > 0"),
        (lambda: RunOptions(timeout="x"), TypeError, "timeout must be a real number, not str"),  # type: ignore[arg-type]
        (lambda: RunOptions(context=1), TypeError, "context must be a bool, not int"),  # type: ignore[arg-type]
        (lambda: ManualClock("0"), TypeError, "start must be a real number, not str"),  # type: ignore[arg-type]
        (lambda: ManualClock(True), TypeError, "start must be a real number, not bool"),
        (lambda: ManualClock().subscribe(3), TypeError, "callback must be callable, not int"),  # type: ignore[arg-type]
        (lambda: VirtualTimeLoop(math.inf), ValueError, "start must be finite"),
        (lambda: wait_until_idle(Scheduler()), TypeError, "scheduler must be a ThreadedScheduler"),
    ],
)
def test_constructors_and_helpers(make: Callable[[], Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        make()


@pytest.mark.parametrize("lease", [1e300, 366 * 86400 + 1.0], ids=["1e300", "a-year-and-a-second"])
def test_a_postgres_store_refuses_a_lease_longer_than_a_year(lease: float) -> None:
    """PostgresStore(dsn, lease=1e300) used to be accepted (finite, and above the 0.3 s minimum), and
    then every statement that sets a lease (clock_timestamp() + make_interval(secs => lease)) failed with
    psycopg's DataError "interval out of range": upsert() raised it, and the keeper said it could not
    renew its leases, for ever. The constructor refuses a lease longer than a year with a ValueError
    naming lease, before it connects. (The other bad leases, with a server: test_shared.py,
    test_bad_arguments_are_refused_naming_them.)"""
    with pytest.raises(ValueError, match=r"lease must be between 0\.3 and"):
        PostgresStore("host=127.0.0.1 port=1 dbname=unused", lease=lease)


@pytest.mark.parametrize("path", [":memory:", ""], ids=["memory", "empty"])
def test_a_sqlite_store_refuses_a_path_that_keeps_nothing(path: str) -> None:
    """SQLiteStore(":memory:") and SQLiteStore("") used to be taken as durable stores (durable, WAL
    promised), though nothing they hold survives the process: ValueError naming path. (An int key too
    long for a durable store: test_durable.py,
    test_remove_refuses_a_key_the_store_cannot_hold_as_upsert_does.)"""
    with pytest.raises(ValueError, match="path must name a file"):
        SQLiteStore(path)


def test_manual_clock_subscribe_refuses_and_keeps_its_listeners() -> None:
    clock = ManualClock()
    seen: list[float] = []
    clock.subscribe(seen.append)
    with pytest.raises(TypeError, match="callback must be callable"):
        clock.subscribe(None)  # type: ignore[arg-type]
    clock.advance(1)
    assert seen == [1.0]


def test_driver_methods_name_their_arguments() -> None:
    clock = ManualClock(10.0)
    with ThreadedScheduler(clock=clock) as s:
        s.schedule(5, print)
        before = snapshot(s)
        for call, error, words in [
            (lambda: s.schedule("x", print), TypeError, "delay must be a real number, not str"),
            (lambda: s.schedule(1, print, context="yes"), TypeError, "context must be a bool"),
            (lambda: s.schedule(1, print, timeout=math.nan), ValueError, "timeout must be finite"),
            (lambda: s.schedule_at(Decimal("sNaN"), print), ValueError, "when could not be read as a number"),
            (lambda: s.reschedule(1, True), TypeError, "delay must be a real number, not bool"),
            (lambda: s.cancel(None), TypeError, "task_id must be an int"),
        ]:
            with pytest.raises(error, match=words):
                call()
        wait_until_idle(s)
        assert snapshot(s) == before


def test_asyncio_entry_points_name_their_arguments() -> None:
    async def main() -> None:
        async with AsyncScheduler() as s:
            handle = s.call_later(10, print)
            s.schedule(5, print)
            before = (snapshot(s), handle.when())
            async with s.timeout(30) as cm:
                when = cm.when()
                for call, error, words in [
                    (lambda: s.sleep("x").send(None), TypeError, "delay must be a real number, not str"),
                    (lambda: s.sleep(math.nan).send(None), ValueError, "delay must not be NaN"),
                    (lambda: s.timeout("x"), TypeError, "delay must be a real number, not str"),
                    (lambda: s.timeout(True), TypeError, "delay must be a real number, not bool"),
                    (lambda: s.timeout_at("x"), TypeError, "when must be a real number, not str"),
                    (lambda: s.call_later("x", print), TypeError, "delay must be a real number, not str"),
                    (lambda: s.call_later(1, 3), TypeError, "callback must be callable"),
                    (lambda: s.call_later(1, print, context=3), TypeError, "context must be a contextvars"),
                    (lambda: s.call_at(math.nan, print), ValueError, "when must not be NaN"),
                    (lambda: handle.reset("x"), TypeError, "delay must be a real number, not str"),
                    (lambda: handle.reset(math.nan), ValueError, "delay must not be NaN"),
                    (lambda: handle.reschedule(None), TypeError, "when must be a real number, not NoneType"),
                    (lambda: cm.reschedule("x"), TypeError, "when must be a real number, not str"),
                    (lambda: cm.reschedule(math.nan), ValueError, "when must not be NaN"),
                ]:
                    with pytest.raises(error, match=words):
                        call()
                assert cm.when() == when
                cm.reschedule(None)  # None stays allowed where asyncio allows it
                assert s.timeout(None).when() is None and s.timeout_at(None).when() is None
            assert (snapshot(s), handle.when()) == before

    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
