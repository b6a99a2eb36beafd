"""AsyncScheduler: the driver on an asyncio loop. Time is virtual (VirtualTimeLoop): nothing here sleeps."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from timerwheel import (
    AlreadyRunningError,
    AsyncScheduler,
    Backpressure,
    ClockError,
    ClosedError,
    JobEvent,
    Missed,
    NotStartedError,
    RepeatMode,
    TimerHandle,
)
from timerwheel.testing import VirtualTimeLoop

try:
    import uvloop
except ImportError:  # not on Windows, nor without the compare extra
    uvloop = None

#: The "uvloop" parameter of a test that runs on several loops (skipped without uvloop).
ON_UVLOOP = pytest.param(
    "uvloop",
    marks=pytest.mark.skipif(uvloop is None, reason="uvloop is not installed (it is in the compare extra)"),
)


GENEROUS = 10.0  # seconds a test thread waits for another before failing instead of hanging


def run(main: Callable[[], Coroutine[Any, Any, Any]], loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Run main() on a fresh virtual-time loop (or the given one) and close it."""
    loop = loop or VirtualTimeLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def our_handles(loop: asyncio.AbstractEventLoop, sched: AsyncScheduler) -> int:
    """Live timer handles of ours on the loop."""
    return sum(
        1
        for handle in loop._scheduled  # type: ignore[attr-defined]
        if not handle.cancelled() and handle._callback == sched._on_wake
    )


# -- construction and lifecycle ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"max_concurrency": 0}, ValueError, "max_concurrency"),
        ({"max_concurrency": True}, TypeError, "max_concurrency"),
        ({"max_concurrency": 2.0}, TypeError, "max_concurrency"),
        ({"backpressure": Backpressure.RUN_INLINE}, ValueError, "backpressure"),
        ({"backpressure": "drop"}, TypeError, "backpressure"),
        ({"missed": "skip"}, TypeError, "missed"),
        ({"observer": 3}, TypeError, "observer"),
        ({"error_handler": 3}, TypeError, "error_handler"),
        ({"logger": "x"}, TypeError, "logger"),
        ({"loop": object()}, TypeError, "loop"),
        ({"resolution": 0}, ValueError, "resolution"),
        ({"slots": 3}, ValueError, "slots"),
        ({"levels": 0}, ValueError, "levels"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict[str, Any], error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        AsyncScheduler(**kwargs)


def test_lifecycle() -> None:
    async def main() -> None:
        sched = AsyncScheduler()
        assert repr(sched).startswith("<AsyncScheduler new")
        with pytest.raises(NotStartedError):
            sched.schedule(1, print)
        with pytest.raises(NotStartedError):
            sched.timeout(1)
        with pytest.raises(NotStartedError):
            await sched.sleep(1)
        sched.start()
        with pytest.raises(AlreadyRunningError):
            sched.start()
        sched.schedule(1, print)
        await sched.close()
        await sched.close()  # idempotent
        assert sched.stats().pending == 0 and sched.pending() == []
        for call in (
            lambda: sched.schedule(1, print),
            lambda: sched.cancel(1),
            lambda: sched.reschedule(1, 1),
        ):
            with pytest.raises(ClosedError):
                call()
        with pytest.raises(ClosedError):
            sched.start()
        never = AsyncScheduler()
        await never.aclose()
        with pytest.raises(ClosedError):
            never.start()

    run(main)


def test_async_with_starts_and_closes() -> None:
    async def main() -> None:
        async with AsyncScheduler() as sched:
            assert repr(sched).startswith("<AsyncScheduler running")
        assert repr(sched).startswith("<AsyncScheduler closed")

    run(main)


def test_start_needs_a_loop() -> None:
    sched = AsyncScheduler()  # no running loop here: bound at start()
    with pytest.raises(RuntimeError, match="no running event loop"):
        sched.start()
    assert sched.stats().executed == 0 and sched.pending() == [] and sched.errors == []
    assert sched.next_fire_time(1) is None


def test_a_start_that_fails_to_make_the_engine_can_be_retried() -> None:
    """A start() that fails while making the engine leaves the scheduler new: a second start() fails the
    same way, and it closes (it used to leave the loop bound and no engine: the second start() said it
    succeeded, and schedule() and close() raised AttributeError)."""
    from timerwheel._engine.heap import HeapQueue

    store = HeapQueue(5000.0)  # ahead of the loop's clock (1000): refused when the engine is made

    sched = AsyncScheduler(store=store)  # no loop runs: it is bound at start()

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(ValueError, match="store is ahead of the clock"):
                sched.start()
        assert repr(sched).startswith("<AsyncScheduler new") and sched.stats().executed == 0
        await sched.aclose()
        assert repr(sched).startswith("<AsyncScheduler closed")

    loop = VirtualTimeLoop(1000.0)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_given_loop_can_be_scheduled_on_before_it_runs() -> None:
    loop = VirtualTimeLoop()
    sched = AsyncScheduler(loop=loop)
    sched.start()
    seen: list[float] = []
    t0 = loop.time()
    sched.schedule(5, lambda: seen.append(loop.time() - t0))
    run(lambda: asyncio.sleep(10), loop)
    assert seen == [5.0]


def test_calls_from_another_thread_are_refused() -> None:
    async def main() -> None:
        async with AsyncScheduler() as sched:
            errors: list[BaseException] = []

            def elsewhere() -> None:
                for call in (lambda: sched.schedule(1, print), lambda: sched.cancel(1)):
                    try:
                        call()
                    except RuntimeError as exc:
                        errors.append(exc)

            thread = threading.Thread(target=elsewhere)
            thread.start()
            await asyncio.get_running_loop().run_in_executor(None, thread.join)
            assert len(errors) == 2
            assert all("thread-safe" in str(exc) for exc in errors)
            assert sched.stats().pending == 0

    run(main)


# -- jobs -------------------------------------------------------------------------------------------------


def test_plain_jobs_run_at_their_exact_loop_time() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seen: list[tuple[str, float]] = []
        async with AsyncScheduler() as sched:
            sched.schedule(2.5, lambda: seen.append(("once", loop.time() - t0)))
            sched.schedule_at(t0 + 1.25, lambda: seen.append(("at", loop.time() - t0)))
            rate = sched.schedule(1, lambda: seen.append(("rate", loop.time() - t0)), 2.0)
            await sched.sleep(6)
            assert sched.cancel(rate)
            await sched.sleep(10)
        return seen

    assert run(main) == [("rate", 1), ("at", 1.25), ("once", 2.5), ("rate", 3), ("rate", 5)]


def test_a_job_scheduled_due_now_by_a_job_runs_in_the_same_pass() -> None:
    async def main() -> list[str]:
        seen: list[str] = []
        async with AsyncScheduler() as sched:

            def first() -> None:
                seen.append("first")
                sched.schedule(0, lambda: seen.append("spawned"))

            sched.schedule(1, first)
            sched.schedule(1, lambda: seen.append("second"))
            await sched.sleep(1)  # on the same wheel and the same due: runs after both jobs
            seen.append("sleeper woke")
        return seen

    assert run(main) == ["first", "second", "spawned", "sleeper woke"]


def test_coroutine_jobs_run_as_tasks_and_fixed_delay_waits_for_them() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        starts: list[float] = []

        async def job() -> None:
            starts.append(loop.time() - t0)
            await asyncio.sleep(3)

        async with AsyncScheduler() as sched:
            sched.schedule(1, job, 10, mode=RepeatMode.FIXED_DELAY)
            await sched.sleep(41)
            stats = sched.stats()
            assert (stats.executed, stats.running) == (4, 1)  # executed counts runs started
        return starts

    assert run(main) == [1, 14, 27, 40]


def test_skip_if_running_looks_at_the_task() -> None:
    async def main() -> tuple[list[float], int]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        starts: list[float] = []

        async def slow() -> None:
            starts.append(loop.time() - t0)
            await asyncio.sleep(25)

        async with AsyncScheduler() as sched:
            sched.schedule(10, slow, 10, mode=RepeatMode.SKIP_IF_RUNNING)
            await sched.sleep(45)
            skipped = sched.stats().skipped
        return starts, skipped

    assert run(main) == ([10, 40], 2)


def test_fixed_rate_coroutine_runs_overlap() -> None:
    async def main() -> int:
        most = 0
        async with AsyncScheduler() as sched:

            async def slow() -> None:
                nonlocal most
                most = max(most, sched.stats().running)
                await asyncio.sleep(25)

            sched.schedule(10, slow, 10)
            await sched.sleep(50)
        return most

    assert run(main) == 3


def test_callable_objects_and_partials_of_coroutine_functions_are_coroutine_jobs() -> None:
    import functools

    class Job:
        async def __call__(self, tag: str) -> None:
            await asyncio.sleep(1)
            seen.append(tag)

    async def job(tag: str) -> None:
        await asyncio.sleep(1)
        seen.append(tag)

    seen: list[str] = []

    async def main() -> None:
        async with AsyncScheduler(max_concurrency=1) as sched:
            sched.schedule(1, Job(), args=("object",))
            sched.schedule(1, functools.partial(job, "partial"))
            sched.schedule(1, lambda: job("lambda"))  # an awaitable from a plain callable: run as a task
            await sched.sleep(10)
            assert sched.stats().executed == 3 and sched.errors == []

    run(main)
    assert sorted(seen) == ["lambda", "object", "partial"]


def test_max_concurrency_block_waits_in_due_order() -> None:
    async def main() -> list[tuple[int, float]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        starts: list[tuple[int, float]] = []

        async def job(i: int) -> None:
            starts.append((i, loop.time() - t0))
            await asyncio.sleep(10)

        async with AsyncScheduler(max_concurrency=2) as sched:
            for i in range(5):
                sched.schedule(1 + i * 0.001, job, args=(i,))
            await sched.sleep(5)
            stats = sched.stats()
            assert (stats.running, stats.queued) == (2, 3)  # two run, three wait
            await sched.sleep(40)
            assert sched.stats().dropped == 0 and sched.stats().executed == 5
        return starts

    starts = run(main)
    assert [i for i, _ in starts] == [0, 1, 2, 3, 4]  # in due order
    assert [t for _, t in starts] == pytest.approx([1, 1.001, 11, 11.001, 21])


def test_max_concurrency_drop_counts_and_reports() -> None:
    events: list[JobEvent] = []

    async def main() -> None:
        async def job() -> None:
            await asyncio.sleep(10)

        async with AsyncScheduler(
            max_concurrency=2, backpressure=Backpressure.DROP, observer=events.append
        ) as s:
            for _ in range(5):
                s.schedule(1, job)
            s.schedule(1, lambda: None)  # plain jobs are not bounded
            await s.sleep(20)
            stats = s.stats()
            assert (stats.executed, stats.dropped, stats.running) == (3, 3, 0)

    run(main)
    dropped = [e for e in events if e.dropped]
    assert len(dropped) == 3 and all(e.duration == 0 for e in dropped)


def test_a_waiting_run_of_a_cancelled_recurring_task_never_starts() -> None:
    async def main() -> None:
        ran: list[int] = []

        async def job(i: int) -> None:
            ran.append(i)
            await asyncio.sleep(10)

        async with AsyncScheduler(max_concurrency=1) as sched:
            sched.schedule(1, job, args=(1,))
            waiting = sched.schedule(1, job, 100, args=(2,))
            await sched.sleep(2)
            assert sched.cancel(waiting)
            await sched.sleep(20)
            assert ran == [1]
            assert sched.stats().running == 0

    run(main)


def test_errors_are_recorded_handled_logged_and_never_stop_it(caplog: pytest.LogCaptureFixture) -> None:
    handled: list[tuple[int, str]] = []
    logger = logging.getLogger("test.asyncio.errors")

    async def main() -> None:
        async def bad_coro() -> None:
            await asyncio.sleep(1)
            raise KeyError("coro")

        def bad_observer(event: JobEvent) -> None:
            raise RuntimeError("observer")

        async with AsyncScheduler(
            error_handler=lambda tid, exc: handled.append((tid, type(exc).__name__)),
            logger=logger,
            observer=bad_observer,
        ) as sched:
            a = sched.schedule(1, lambda: 1 / 0)
            b = sched.schedule(1, bad_coro)
            ok: list[int] = []
            sched.schedule(2, ok.append, args=(1,))
            await sched.sleep(5)
            assert ok == [1]
            assert sched.stats().failed == 2 and sched.stats().executed == 3
            assert sched.errors == [f"task {a}: division by zero", f"task {b}: 'coro'"]

    with caplog.at_level(logging.ERROR, logger="test.asyncio.errors"):
        run(main)
    assert handled == [(1, "ZeroDivisionError"), (2, "KeyError")]
    assert sum("failed" in r.getMessage() for r in caplog.records if r.name == "test.asyncio.errors") == 2
    assert any("observer raised" in r.getMessage() for r in caplog.records)


def test_a_job_task_cancelled_by_someone_else_failed_with_cancelled_error() -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def job() -> None:
            started.set()
            await asyncio.sleep(100)

        async with AsyncScheduler() as sched:
            sched.schedule(1, job)
            await started.wait()
            (task,) = sched._tasks.jobs
            task.cancel()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert sched.stats().failed == 1 and sched.stats().running == 0

    run(main)


def test_keyboard_interrupt_from_a_plain_job_propagates_and_the_rest_still_run() -> None:
    loop = VirtualTimeLoop()
    seen: list[str] = []
    sched = AsyncScheduler(loop=loop)
    sched.start()

    def interrupt() -> None:
        raise KeyboardInterrupt

    sched.schedule(1, interrupt)
    sched.schedule(1, seen.append, args=("after",))
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.sleep(5))
        assert sched.stats().executed == 1 and seen == []
        loop.run_until_complete(asyncio.sleep(5))
        assert seen == ["after"]
        assert sched.stats().executed == 2
    finally:
        loop.run_until_complete(sched.close())
        loop.close()


def test_an_early_handle_waits_for_the_rest_and_never_spins() -> None:
    """asyncio runs a timer up to its clock resolution early (uvloop rounds to milliseconds: callbacks
    ran up to 0.5 ms early). Never early: our handle, run early, waits the rest."""
    loop = VirtualTimeLoop()
    loop._clock_resolution = 0.5  # type: ignore[attr-defined]
    events: list[JobEvent] = []
    seen: list[float] = []

    async def main() -> None:
        async with AsyncScheduler(observer=events.append) as sched:
            t0 = loop.time()
            sched.schedule(2, lambda: seen.append(loop.time() - t0))
            timer = sched.call_later(2, lambda: seen.append(loop.time() - t0))
            await asyncio.sleep(1.6)  # the loop runs handles due before 1.6 + 0.5: ours, at 2, too
            assert sched.stats().executed == 0 and not timer.cancelled()
            await asyncio.sleep(0.5)
            assert sched.stats().executed == 1
            # early; early again (the loop still had a ready callback, so its time stood still); on time:
            # a bounded wait of one clock resolution, not a spin
            assert sched._wakes == 3  # type: ignore[attr-defined]
            assert events[0].scheduled_for == t0 + 2 and events[0].started_at >= t0 + 2

    wakes = 0
    original = AsyncScheduler._on_wake

    def counting(self: AsyncScheduler) -> None:
        nonlocal wakes
        wakes += 1
        self._wakes = wakes  # type: ignore[attr-defined]
        original(self)

    AsyncScheduler._on_wake = counting  # type: ignore[method-assign]
    try:
        run(main, loop)
    finally:
        AsyncScheduler._on_wake = original  # type: ignore[method-assign]
    assert seen == [2.0, 2.0]


@pytest.mark.skipif(uvloop is None, reason="uvloop is not installed (it is in the compare extra)")
def test_never_early_on_uvloop() -> None:
    """On uvloop (real time): every callback and job runs at or after its due by loop.time()."""

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        early = 0
        ran = 0
        done = asyncio.Event()

        def check(when: list[float]) -> None:
            nonlocal early, ran
            early += loop.time() < when[0]
            ran += 1
            if ran == 600:
                done.set()

        async with AsyncScheduler() as sched:
            for i in range(300):  # dues 1.0 to 4.0 ms out, a tenth of a millisecond apart
                box: list[float] = []
                handle = sched.call_later(0.001 + (i % 30) * 0.0001, check, box)
                box.append(handle.when())
                job_box: list[float] = []
                tid = sched.schedule(0.001 + (i % 30) * 0.0001, check, args=(job_box,))
                job_box.append(sched.next_fire_time(tid) or 0.0)
            await asyncio.wait_for(done.wait(), 10)
        return early, ran

    assert uvloop is not None
    assert uvloop.run(main()) == (0, 600)


# -- one loop handle --------------------------------------------------------------------------------------


def test_the_loop_holds_one_handle_of_ours_whatever_the_number_of_timers() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            assert our_handles(loop, sched) == 0  # idle: nothing armed
            ids = [sched.schedule(10 + i * 0.01, lambda: None) for i in range(1000)]
            stop = asyncio.Event()

            async def holder(i: int) -> None:
                async with sched.timeout(20 + i * 0.001):
                    await stop.wait()

            holders = [asyncio.ensure_future(holder(i)) for i in range(1000)]
            await asyncio.sleep(0)
            assert our_handles(loop, sched) == 1
            assert sched._armed == loop.time() + 10

            calls = 0
            call_at = loop.call_at

            def counting_call_at(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return call_at(*args, **kwargs)

            loop.call_at = counting_call_at  # type: ignore[method-assign]
            for task_id in ids:  # later: the handle stays where it is
                sched.reschedule(task_id, 30)
            assert calls == 0
            sched.reschedule(ids[0], 1)  # earlier: re-armed, once
            assert calls == 1 and our_handles(loop, sched) == 1
            loop.call_at = call_at  # type: ignore[method-assign]

            await sched.sleep(25)
            assert our_handles(loop, sched) == 1
            assert sched.stats().executed == 1 and sched._engine.timers == 0  # the timeouts expired
            stop.set()
            await asyncio.gather(*holders, return_exceptions=True)
            await sched.sleep(10)
            assert sched.stats().executed == 1000
            assert our_handles(loop, sched) == 0 and sched._handle is None  # idle again: nothing armed

    run(main)


def test_the_timeout_reset_path_moves_its_entry_and_allocates_no_handle() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            async with sched.timeout(10) as cm:
                handle = cm._timeout_handler
                for i in range(100):
                    cm.reschedule(loop.time() + 10 + i)
                    assert cm._timeout_handler is handle
                assert sched._engine.timers == 1 and cm.when() == loop.time() + 109
            assert sched._engine.timers == 0

    run(main)


# -- sleep and close --------------------------------------------------------------------------------------


def test_sleep() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            t0 = loop.time()
            assert await sched.sleep(2.5, result="r") == "r"
            assert loop.time() - t0 == 2.5
            assert await sched.sleep(0, "zero") == "zero" and await sched.sleep(-1) is None
            assert loop.time() - t0 == 2.5
            with pytest.raises(ValueError, match="delay"):
                await sched.sleep(float("nan"))
            with pytest.raises(TypeError):
                await sched.sleep("1")  # type: ignore[arg-type]
            sleeper = asyncio.ensure_future(sched.sleep(100))
            await asyncio.sleep(1)
            assert sched._engine.timers == 1
            sleeper.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeper
            assert sched._engine.timers == 0

    run(main)


def test_close_cancels_running_jobs_drops_waiting_ones_and_keeps_deadlines() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        cancelled: list[int] = []

        async def job(i: int) -> None:
            try:
                await asyncio.sleep(100)
            except asyncio.CancelledError:
                cancelled.append(i)
                raise

        async def guarded() -> str:
            try:
                async with sched.timeout(10):
                    await asyncio.sleep(100)
            except TimeoutError:
                return f"timed out at +{loop.time() - t0}"
            return "not timed out"

        t0 = loop.time()
        sched = AsyncScheduler(max_concurrency=2)
        sched.start()
        for i in range(3):
            sched.schedule(1, job, args=(i,))
        sched.schedule(50, print)
        waiter = asyncio.ensure_future(guarded())
        sleeper = asyncio.ensure_future(sched.sleep(20, "slept"))
        await asyncio.sleep(2)
        await sched.close()
        assert sorted(cancelled) == [0, 1]
        stats = sched.stats()
        assert (stats.executed, stats.dropped, stats.failed, stats.running, stats.pending) == (2, 1, 0, 0, 0)
        assert await waiter == "timed out at +10.0"  # handed to the loop's own timers at close
        assert await sleeper == "slept"
        assert sched.timeout(1).when() == loop.time() + 1  # still usable, on asyncio's timers
        assert await sched.sleep(1, "after close") == "after close"

    run(main)


def test_close_from_inside_a_job_does_not_wait_for_itself() -> None:
    async def main() -> None:
        async with AsyncScheduler() as sched:
            done = asyncio.Event()

            async def closer() -> None:
                await sched.close()
                done.set()

            sched.schedule(1, closer)
            await done.wait()
            assert repr(sched).startswith("<AsyncScheduler closed")

    run(main)


def test_missed_runs_after_a_stall_follow_the_policy() -> None:
    """A plain job that blocks the loop for 35 s: the SKIP task keeps its grid, the DELAY task slides."""

    async def main() -> tuple[list[float], list[float]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        skip: list[float] = []
        delay: list[float] = []
        async with AsyncScheduler() as sched:
            sched.schedule(10, lambda: skip.append(loop.time() - t0), 10)
            sched.schedule(10, lambda: delay.append(loop.time() - t0), 10, missed=Missed.DELAY)

            def stall() -> None:
                loop._virtual.now += 35  # type: ignore[attr-defined]  # a blocking call, in virtual time

            sched.schedule(11, stall)
            await sched.sleep(70)
        return skip, delay

    skip, delay = run(main)
    assert skip == [10, 46, 50, 60, 70]
    assert delay == [10, 46, 56, 66]


# -- call_later, call_at and their handles ----------------------------------------------------------------


def test_call_later_and_call_at_run_callbacks_like_asyncio() -> None:
    """The same callbacks on the loop's timers and on ours, on a virtual loop: the same order and times."""

    async def main(use_wheel: bool) -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seen: list[tuple[str, float]] = []
        var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

        def note(tag: str) -> None:
            seen.append((f"{tag}:{var.get()}", loop.time() - t0))

        async with AsyncScheduler() as sched:
            call_later = sched.call_later if use_wheel else loop.call_later
            call_at = sched.call_at if use_wheel else loop.call_at
            var.set("captured")
            call_later(3, note, "later")
            call_at(t0 + 1.5, note, "at")
            call_later(0, note, "now")
            call_later(-5, note, "past")
            var.set("other")
            ctx = contextvars.copy_context()
            ctx.run(var.set, "explicit")
            call_later(2, note, "ctx", context=ctx)
            cancelled = call_later(2.5, note, "cancelled")
            cancelled.cancel()
            assert cancelled.cancelled()
            seen.append(("sync", loop.time() - t0))
            await asyncio.sleep(4)
        return seen

    theirs = run(lambda: main(False))
    ours = run(lambda: main(True))
    assert ours == theirs
    assert [tag for tag, _ in ours] == [
        "sync",
        "past:captured",
        "now:captured",
        "at:captured",
        "ctx:explicit",
        "later:captured",
    ]


def test_a_handle_has_asyncio_s_interface_and_moves_in_place() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seen: list[float] = []
        async with AsyncScheduler() as sched:
            handle = sched.call_later(10, lambda: seen.append(loop.time() - t0))
            assert isinstance(handle, TimerHandle) and not handle.cancelled()
            assert handle.when() == t0 + 10 and "pending" in repr(handle)
            calls = 0
            call_at = loop.call_at

            def counting(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return call_at(*args, **kwargs)

            loop.call_at = counting  # type: ignore[method-assign]
            for delay in (20, 30, 40.5):  # later: the loop is not touched
                assert handle.reset(delay) is True
            assert handle.reschedule(t0 + 50) is True
            assert calls == 0 and handle.when() == t0 + 50
            assert handle.reschedule(t0 + 5) is True  # earlier than our loop handle: armed again, once
            assert calls == 1
            loop.call_at = call_at  # type: ignore[method-assign]
            await sched.sleep(6)
            assert seen == [5.0] and "done" in repr(handle)
            assert handle.reset(1) is False and handle.reschedule(t0) is False  # it ran: nothing moves
            handle.cancel()
            assert not handle.cancelled()  # as asyncio: cancel() after the run changes nothing
            other = sched.call_later(1, seen.append, -1.0)
            other.cancel()
            assert other.cancelled() and other.reset(1) is False
            await sched.sleep(2)
            assert seen == [5.0]

    run(main)


def test_bad_delays_name_the_argument_and_change_nothing() -> None:
    async def main() -> None:
        async with AsyncScheduler() as sched:
            handle = sched.call_later(10, print)
            when = handle.when()
            for bad, error, name in (
                (float("nan"), ValueError, "delay"),
                ("1", TypeError, "delay"),
                (None, TypeError, "delay"),
            ):
                with pytest.raises(error, match=name):
                    handle.reset(bad)  # type: ignore[arg-type]
                with pytest.raises(error, match=name):
                    sched.call_later(bad, print)  # type: ignore[arg-type]
                assert handle.when() == when and sched._engine.timers == 1
            with pytest.raises(ValueError, match="when"):
                handle.reschedule(float("nan"))
            with pytest.raises(TypeError, match="when"):
                sched.call_at("1", print)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="callback"):
                sched.call_later(1, "print")  # type: ignore[arg-type]
            assert handle.when() == when and sched._engine.timers == 1
            assert handle.reset(3) is True and handle.when() == asyncio.get_running_loop().time() + 3

    run(main)


def test_an_infinite_due_never_fires_until_moved() -> None:
    async def main() -> None:
        seen: list[str] = []
        async with AsyncScheduler() as sched:
            handle = sched.call_later(float("inf"), seen.append, "x")
            assert sched._engine.timers == 0 and handle.when() == float("inf")
            await sched.sleep(1e6)
            assert seen == [] and not handle.cancelled()
            assert handle.reset(1) is True
            await sched.sleep(2)
            assert seen == ["x"]

    run(main)


def test_a_callback_error_goes_to_the_loop_s_exception_handler_and_the_rest_run() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reports: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reports.append(context))
        seen: list[int] = []
        async with AsyncScheduler() as sched:
            bad = sched.call_later(1, lambda: 1 / 0)
            sched.call_later(1, seen.append, 1)
            await sched.sleep(2)
        assert seen == [1]
        (report,) = reports
        assert isinstance(report["exception"], ZeroDivisionError) and report["handle"] is bad
        assert report["message"].startswith("Exception in callback")

    run(main)


def test_handles_outlive_close_on_the_loop_s_own_timers() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seen: list[tuple[str, float]] = []
        sched = AsyncScheduler()
        sched.start()
        first = sched.call_later(5, lambda: seen.append(("first", loop.time() - t0)))
        second = sched.call_later(6, lambda: seen.append(("second", loop.time() - t0)))
        await sched.close()
        assert second.reset(8) is True  # moved on the loop's timers now
        assert not first.cancelled()
        with pytest.raises(ClosedError):
            sched.call_later(1, print)
        await asyncio.sleep(10)
        assert seen == [("first", 5.0), ("second", 8.0)]

    run(main)


def test_reset_from_another_thread_is_refused() -> None:
    async def main() -> None:
        async with AsyncScheduler() as sched:
            handle = sched.call_later(10, print)
            when = handle.when()
            errors: list[BaseException] = []

            def elsewhere() -> None:
                try:
                    handle.reset(20.0)
                except RuntimeError as exc:
                    errors.append(exc)

            await asyncio.get_running_loop().run_in_executor(None, elsewhere)
            assert len(errors) == 1 and handle.when() == when

    run(main)


@pytest.mark.parametrize(
    "loop_kind",
    [
        "asyncio",
        ON_UVLOOP,
    ],
)
def test_every_method_refuses_another_thread_and_changes_nothing(loop_kind: str) -> None:
    """Every method called from another thread raises RuntimeError and changes nothing (TimerHandle.cancel()
    from another thread used to raise nothing and race the loop), on uvloop too, whose loop records no
    thread: there the compiled paths check the thread the loop was last seen running on."""

    async def main() -> None:
        async with AsyncScheduler() as sched:
            tid = sched.schedule(10, print)
            handle = sched.call_later(10, print)
            async with sched.timeout(30) as cm:
                calls = {
                    "schedule": lambda: sched.schedule(1, print),
                    "schedule_at": lambda: sched.schedule_at(1, print),
                    "cancel": lambda: sched.cancel(tid),
                    "reschedule": lambda: sched.reschedule(tid, 5),
                    "next_fire_time": lambda: sched.next_fire_time(tid),
                    "pending": sched.pending,
                    "stats": sched.stats,
                    "errors": lambda: sched.errors,
                    "call_later": lambda: sched.call_later(1, print),
                    "call_at": lambda: sched.call_at(1, print),
                    "timeout": lambda: sched.timeout(1),
                    "timeout_at": lambda: sched.timeout_at(1),
                    "sleep": lambda: sched.sleep(1).send(None),
                    "start": sched.start,
                    "handle.cancel": handle.cancel,
                    "handle.cancelled": handle.cancelled,
                    "handle.when": handle.when,
                    "handle.reset": lambda: handle.reset(20.0),
                    "handle.reschedule": lambda: handle.reschedule(20.0),
                    "timeout.reschedule": lambda: cm.reschedule(cm.when() + 5),  # type: ignore[operator]
                    "timeout.when": cm.when,
                    "timeout.expired": cm.expired,
                }
                before = (sched.pending(), handle.when(), handle.cancelled(), cm.when(), sched.stats())
                refused: dict[str, str] = {}

                def elsewhere() -> None:
                    for name, call in calls.items():
                        try:
                            call()
                        except RuntimeError as exc:
                            refused[name] = str(exc)

                await asyncio.get_running_loop().run_in_executor(None, elsewhere)
                assert sorted(refused) == sorted(calls)
                assert refused.pop("start") == "the scheduler is already running"
                assert all("thread" in message for message in refused.values()), refused
                assert (
                    sched.pending(),
                    handle.when(),
                    handle.cancelled(),
                    cm.when(),
                    sched.stats(),
                ) == before

    if loop_kind == "uvloop":
        assert uvloop is not None
        uvloop.run(main())  # (no timer comes due: nothing here waits for real time)
    else:
        run(main)


def test_reset_and_reschedule_take_what_call_later_takes() -> None:
    """handle.reset() and reschedule() take any delay call_later() takes (handle.reset(10**400) used to
    raise OverflowError on a live handle)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        async with AsyncScheduler() as sched:
            far = sched.call_later(10**400, ran.append, "far")  # documented: never fires until moved
            live = sched.call_later(10, ran.append, "live")
            assert live.reset(10**400) and live.when() == math.inf
            assert far.reschedule(10**400) and far.when() == math.inf
            assert live.reset(-(10**400)) and live.when() == -math.inf  # as asyncio: runs at once
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert ran == ["live"]
            async with sched.timeout(10) as cm:
                cm.reschedule(10**400)
                await asyncio.sleep(3600)
                assert not cm.expired()
                cm.reschedule(loop.time() + 1)
            assert not far.cancelled() and ran == ["live"]

    run(main)


def test_a_failing_loop_clock_backs_off_and_recovers(caplog: Any) -> None:
    class FlakyLoop(VirtualTimeLoop):
        fail = 0

        def time(self) -> float:
            # fails for the scheduler's readings only: asyncio's own would stop the loop itself
            if self.fail and sys._getframe(1).f_globals["__name__"].startswith("timerwheel"):
                self.fail -= 1
                raise OSError("the loop's clock broke")
            return super().time()

    loop = FlakyLoop()
    ran: list[float] = []

    async def main() -> None:
        async with AsyncScheduler() as sched:
            sched.schedule(1, lambda: ran.append(loop.time()))
            await asyncio.sleep(0.5)
            loop.fail = 1  # the next reading, our wake's, fails once
            await asyncio.sleep(1)
            assert sched.stats().clock_errors == 1 and len(ran) == 1

    with caplog.at_level(logging.ERROR, logger="timerwheel"):
        run(main, loop)
    assert "AsyncScheduler cannot read its clock" in caplog.text


def test_an_observer_interrupt_does_not_strand_the_waiting_runs() -> None:
    raised: list[int] = []

    def observer(event: JobEvent) -> None:
        if not raised:
            raised.append(event.task_id)
            raise KeyboardInterrupt

    loop = VirtualTimeLoop()
    done: list[int] = []

    async def job(i: int) -> None:
        await asyncio.sleep(1)
        done.append(i)

    sched = AsyncScheduler(loop=loop, max_concurrency=1, observer=observer)
    sched.start()
    for i in range(3):
        sched.schedule(0, job, args=(i,))
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(10))  # the first job's finish: the observer raises through
    loop.run_until_complete(asyncio.sleep(5))  # the loop goes on: the next waiting run started regardless
    assert done == [0, 1, 2]
    loop.run_until_complete(sched.close())
    loop.close()


@pytest.mark.parametrize("glitch", ["nan", "raise"])
def test_a_loop_clock_glitch_as_a_fixed_delay_job_finishes_does_not_end_the_task(glitch: str) -> None:
    """A loop clock that reads NaN or raises once, as a FIXED_DELAY run finishes, neither ends the task
    nor leaves it unarmed: it runs on, with stats().running back to 0 (the finish read loop.time() raw:
    NaN ended the task, an exception left it unarmed with stats().running stuck at 1)."""

    class GlitchLoop(VirtualTimeLoop):
        armed = False

        def time(self) -> float:
            if self.armed and sys._getframe(1).f_globals["__name__"].startswith("timerwheel"):
                self.armed = False
                if glitch == "nan":
                    return math.nan
                raise OSError("the clock glitched")
            return super().time()

    loop = GlitchLoop()
    runs: list[float] = []

    def job() -> None:
        runs.append(loop.time())
        if len(runs) == 2:
            loop.armed = True  # the next reading, this run's finish, fails once

    async def main() -> None:
        async with AsyncScheduler() as sched:
            tid = sched.schedule(1, job, 1.0, mode=RepeatMode.FIXED_DELAY)
            await asyncio.sleep(10.5)
            stats = sched.stats()
            assert len(runs) >= 9 and stats.running == 0 and stats.pending == 1 and sched.errors == []
            assert sched.next_fire_time(tid) is not None

    run(main, loop)


def test_an_interrupt_while_waiting_runs_start_does_not_strand_the_rest() -> None:
    """An observer's KeyboardInterrupt raised while a waiting run starts (its job fails at once) leaves
    the runs behind it to start (they were left waiting for ever)."""
    raised: list[int] = []

    def observer(event: JobEvent) -> None:
        if event.error is not None and not raised:
            raised.append(event.task_id)
            raise KeyboardInterrupt

    loop = VirtualTimeLoop()
    ran: list[str] = []

    async def a() -> None:
        await asyncio.sleep(1)
        ran.append("a")

    async def b(missing: int) -> None:  # called without its argument: fails as it starts
        ran.append("b")

    async def c() -> None:
        ran.append("c")

    sched = AsyncScheduler(loop=loop, max_concurrency=1, observer=observer)
    sched.start()
    sched.schedule(0, a)
    sched.schedule(0, b)
    sched.schedule(0, c)
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(5))
    loop.run_until_complete(asyncio.sleep(5))
    assert ran == ["a", "c"] and sched.stats().queued == 0 and sched.stats().running == 0
    loop.run_until_complete(sched.close())
    loop.close()


def test_an_interrupt_as_a_coroutine_fixed_delay_run_finishes_leaves_it_armed() -> None:
    """An observer's KeyboardInterrupt as a FIXED_DELAY run finishes: the task is re-armed and the loop
    handle brought forward with it (it was re-armed, but the loop handle was not brought forward)."""
    raised: list[int] = []

    def observer(event: JobEvent) -> None:
        if not raised:
            raised.append(event.task_id)
            raise KeyboardInterrupt

    loop = VirtualTimeLoop()
    runs: list[float] = []

    async def job() -> None:
        runs.append(loop.time())

    sched = AsyncScheduler(loop=loop, observer=observer)
    sched.start()
    sched.schedule(1, job, 1.0, mode=RepeatMode.FIXED_DELAY)
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(5))
    loop.run_until_complete(asyncio.sleep(5))
    assert len(runs) >= 5
    loop.run_until_complete(sched.close())
    loop.close()


def test_calls_are_refused_after_the_loop_moved_to_another_thread() -> None:
    """The loop runs on the main thread first, then in a background thread: calls from the main thread
    are refused (they passed the cached thread check)."""
    loop = asyncio.new_event_loop()
    sched = AsyncScheduler(loop=loop)

    async def setup() -> TimerHandle:
        sched.start()
        return sched.call_later(60, print)

    handle = loop.run_until_complete(setup())  # the loop ran here, on this thread
    started = threading.Event()
    loop.call_soon(started.set)
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        assert started.wait(GENEROUS)
        for call in (lambda: handle.reset(5.0), lambda: sched.schedule(1, print), handle.cancel):
            with pytest.raises(RuntimeError, match="thread"):
                call()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(GENEROUS)
    assert sched.stats().pending == 0 and not handle.cancelled()
    loop.run_until_complete(sched.close())
    loop.close()


# -- callbacks of one wake that cancel, move or interrupt the others --------------------------------------


def test_a_timer_cancelled_or_moved_by_another_callback_of_the_same_wake_does_not_run() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seen: list[tuple[str, float]] = []
        async with AsyncScheduler() as sched:
            handles: list[TimerHandle] = []
            sched.call_at(t0 + 1, lambda: (handles[0].cancel(), handles[1].reset(5)))
            handles.append(sched.call_at(t0 + 1, lambda: seen.append(("b", loop.time() - t0))))
            handles.append(sched.call_at(t0 + 1, lambda: seen.append(("c", loop.time() - t0))))
            await sched.sleep(10)
            assert handles[0].cancelled()
        return seen

    assert run(main) == [("c", 6.0)]  # b cancelled, c moved: neither runs at +1, c runs once, at +6


def test_a_timeout_disabled_by_a_callback_of_the_same_wake_does_not_expire() -> None:
    async def main() -> str:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            try:
                async with sched.timeout(None) as cm:
                    sched.call_at(loop.time() + 1, cm.reschedule, None)  # added first: runs first at +1
                    cm.reschedule(loop.time() + 1)
                    await asyncio.sleep(2)
            except TimeoutError:
                return "timed out"
        return "not timed out"

    assert run(main) == "not timed out"


def test_keyboard_interrupt_from_a_callback_keeps_the_other_due_timers() -> None:
    loop = VirtualTimeLoop()
    seen: list[str] = []
    sched = AsyncScheduler(loop=loop)
    sched.start()

    def interrupt() -> None:
        raise KeyboardInterrupt

    sched.call_later(1, interrupt)
    later = sched.call_later(1, seen.append, "second")
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.sleep(5))
        loop.run_until_complete(asyncio.sleep(5))
        assert seen == ["second"] and not later.cancelled()
    finally:
        loop.run_until_complete(sched.close())
        loop.close()


# -- the idle loop handle; dues at -inf or huge, delays out of range --------------------------------------


def test_an_idle_scheduler_holds_no_loop_handle() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            handle = sched.call_later(3600, print)
            assert our_handles(loop, sched) == 1
            handle.cancel()
            assert our_handles(loop, sched) == 0
            async with sched.timeout(3600):
                assert our_handles(loop, sched) == 1
            assert our_handles(loop, sched) == 0
            task_id = sched.schedule(3600, print)
            assert our_handles(loop, sched) == 1
            sched.cancel(task_id)
            assert our_handles(loop, sched) == 0

    run(main)


def test_minus_infinity_runs_at_the_next_iteration_and_huge_ints_never() -> None:
    async def main(use_wheel: bool) -> list[str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        async with AsyncScheduler() as sched:
            call_at = sched.call_at if use_wheel else loop.call_at
            call_at(-math.inf, seen.append, "minus inf")
            call_at(10**400, seen.append, "never")
            await asyncio.sleep(1)
            if use_wheel:
                moved = sched.call_later(100, seen.append, "moved")
                assert moved.reschedule(-math.inf)
                reset = sched.call_later(100, seen.append, "reset")
                assert reset.reset(-math.inf)
                await asyncio.sleep(1)
                assert moved.when() == -math.inf
        return seen

    assert run(lambda: main(False)) == ["minus inf"]
    assert run(lambda: main(True)) == ["minus inf", "moved", "reset"]


def test_out_of_range_delays_name_the_argument() -> None:
    async def main() -> None:
        async with AsyncScheduler() as sched:
            task_id = sched.schedule(10, print)
            due = sched.next_fire_time(task_id)
            with pytest.raises(OverflowError, match=r"^delay"):
                sched.schedule(1e300, print)
            with pytest.raises(OverflowError, match=r"^when"):
                sched.schedule_at(1e300, print)
            with pytest.raises(OverflowError, match=r"^delay"):
                sched.reschedule(task_id, 1e300)
            assert sched.next_fire_time(task_id) == due and sched.stats().pending == 1

    run(main)


# -- runs waiting for a slot ------------------------------------------------------------------------------


def test_a_recurring_job_never_has_more_than_one_run_waiting() -> None:
    """Waiting for a slot must not pile up runs to replay in a burst (rule 3): extra fires are dropped."""

    async def main() -> tuple[list[float], int]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        starts: list[float] = []

        async def tick() -> None:
            starts.append(loop.time() - t0)

        async def hog() -> None:
            await asyncio.sleep(5)

        async with AsyncScheduler(max_concurrency=1) as sched:
            sched.schedule(0.1, hog)
            sched.schedule(0.5, tick, 1.0)  # due at 0.5, 1.5, ... 4.5 while the hog holds the one slot
            await sched.sleep(7)
            dropped = sched.stats().dropped
        return starts, dropped

    starts, dropped = run(main)
    assert starts == pytest.approx([5.1, 5.5, 6.5])  # one waiting run when the slot frees, then on the grid
    assert dropped == 4  # the fires at 1.5, 2.5, 3.5 and 4.5, while its run at 0.5 waited


def test_a_waiting_one_shot_coroutine_job_can_be_cancelled() -> None:
    async def main() -> None:
        ran: list[str] = []

        async def job(tag: str) -> None:
            ran.append(tag)
            await asyncio.sleep(5)

        async with AsyncScheduler(max_concurrency=1) as sched:
            sched.schedule(1, job, args=("first",))
            waiting = sched.schedule(1, job, args=("waiting",))
            await sched.sleep(2)
            assert (sched.stats().running, sched.stats().queued) == (1, 1)
            assert sched.cancel(waiting) is True
            assert sched.cancel(waiting) is False
            stats = sched.stats()
            assert (stats.running, stats.queued, stats.cancelled) == (1, 0, 1)
            await sched.sleep(10)
            assert ran == ["first"]

    run(main)


# -- the compiled drivers' fast paths ---------------------------------------------------------------------


def _sync_job() -> None:
    pass


async def _async_job() -> None:
    pass


class _AsyncCall:
    async def __call__(self) -> None:
        pass

    async def method(self) -> None:
        pass

    def plain(self) -> None:
        pass


class _SyncCall:
    def __call__(self) -> None:
        pass


def _with_attribute() -> None:
    pass


_with_attribute.tag = "x"  # type: ignore[attr-defined]  # a function with a __dict__ of its own


def _generator() -> Any:
    yield 1


async def _async_generator() -> Any:
    yield 1


def _coroutine_callables() -> list[tuple[str, Any, bool]]:
    import functools

    cases: list[tuple[str, Any, bool]] = [
        ("function", _sync_job, False),
        ("coroutine function", _async_job, True),
        ("lambda", lambda: None, False),
        ("function with attributes", _with_attribute, False),
        ("generator function", _generator, False),
        ("async generator function", _async_generator, False),
        ("partial of a function", functools.partial(_sync_job), False),
        ("partial of a coroutine function", functools.partial(_async_job), True),
        ("bound coroutine method", _AsyncCall().method, True),
        ("bound method", _AsyncCall().plain, False),
        ("object with async __call__", _AsyncCall(), True),
        ("object with __call__", _SyncCall(), False),
        ("builtin", len, False),
        ("class", _SyncCall, False),
    ]
    if sys.version_info >= (3, 12):
        import inspect

        def marked() -> Any:
            return _async_job()

        inspect.markcoroutinefunction(marked)  # type: ignore[attr-defined]
        cases.append(("function marked by inspect.markcoroutinefunction", marked, True))
    return cases


@pytest.mark.parametrize(
    ("what", "fn", "expected"), _coroutine_callables(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_which_callables_run_as_coroutine_jobs(what: str, fn: Any, expected: bool) -> None:
    """is_async (the drivers' check, with a fast path for plain functions) says what inspect says."""
    from timerwheel._drivers import is_async

    assert is_async(fn) is expected, what

    async def main() -> bool:
        async with AsyncScheduler() as sched:
            task_id = sched.schedule(1, fn)
            options = sched._engine._tasks[task_id].options
            return bool(options.coroutine)

    assert run(main) is expected, what


def test_the_engine_wakes_the_loop_handle_exactly_when_it_must() -> None:
    """The engine calls wake() only for a due before where the loop handle is armed (its copy of it):
    after any sequence of jobs, call_later handles and timeouts moved, cancelled and fired, the copy is
    the handle's due, the handle is armed at the next due, and every job and handle ran at its due."""
    import random

    rng = random.Random(1313)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[tuple[int, float, float]] = []  # (key, its due, the loop time it ran at)
        dues: dict[int, float] = {}  # key -> its due now

        def record(key: int) -> None:
            ran.append((key, dues.pop(key), loop.time()))

        async with AsyncScheduler() as sched:
            jobs: dict[int, int] = {}  # task id -> key
            handles: list[tuple[TimerHandle, int]] = []
            for step in range(400):
                now = loop.time()
                op = rng.random()
                delay = rng.choice([0.0, 0.5, 1.0, 3.0, 7.5, 20.0, 100.0]) * rng.random()
                if op < 0.3:
                    dues[step] = now + delay
                    jobs[sched.schedule(delay, record, args=(step,))] = step
                elif op < 0.45 and jobs:
                    task_id = rng.choice(list(jobs))
                    if sched.cancel(task_id):
                        del dues[jobs.pop(task_id)]
                elif op < 0.6 and jobs:
                    task_id = rng.choice(list(jobs))
                    if sched.reschedule(task_id, delay):
                        dues[jobs[task_id]] = now + delay
                elif op < 0.75:
                    dues[step] = now + delay
                    handles.append((sched.call_later(delay, record, step), step))
                elif op < 0.85 and handles:
                    handle, key = handles.pop(rng.randrange(len(handles)))
                    if key in dues:
                        handle.cancel()
                        del dues[key]
                elif op < 0.9 and handles:
                    handle, key = rng.choice(handles)
                    if key in dues and handle.reset(delay):
                        dues[key] = now + delay
                elif op < 0.93:  # everything cancelled: the loop handle is let go, and armed again later
                    for task_id in jobs:
                        sched.cancel(task_id)
                    for handle, _ in handles:
                        handle.cancel()
                    jobs, handles = {}, []
                    dues.clear()
                else:
                    await asyncio.sleep(rng.random() * 5)
                jobs = {task_id: key for task_id, key in jobs.items() if key in dues}
                assert sched._engine.wake_below == sched._armed, step
                due = sched._engine.next_due()
                if due is not None:
                    assert sched._armed <= due, step  # the loop handle comes no later than the next due
            await asyncio.sleep(200)
        assert not dues, dues  # every job and handle not cancelled ran
        wrong = [(key, due, at) for key, due, at in ran if at != due]
        assert not wrong, wrong[:5]  # each at its due exactly (virtual time jumps to the loop handle)
        assert len({key for key, _, _ in ran}) == len(ran)  # none twice

    run(main)


def test_call_later_s_fast_path_takes_and_refuses_what_the_general_path_does() -> None:
    """call_later() checks the common case inline (a finite float delay, no context, on the loop's
    thread, running); everything else takes the general path: the same handles, errors and order."""

    class Seconds(float):
        pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        sched = AsyncScheduler()
        with pytest.raises(NotStartedError):
            sched.call_later(1.0, ran.append, "x")
        sched.start()
        huge = sched.call_later(1e308, ran.append, "huge")  # beyond the store: pending, never fires
        assert huge.when() == loop.time() + 1e308 and not huge.cancelled()
        sched.call_later(-1e308, ran.append, "past")  # as asyncio: at the next iteration
        subclass = sched.call_later(Seconds(1.0), ran.append, "subclass")  # not a float: general path
        assert subclass.when() == loop.time() + 1.0
        with pytest.raises(ValueError, match="delay"):
            sched.call_later(math.nan, ran.append, "nan")
        with pytest.raises(TypeError, match="callback"):
            sched.call_later(1.0, "not callable")
        handle = sched.call_later(2.0, ran.append, "handle")
        errors: list[BaseException] = []

        def elsewhere() -> None:
            for call in (lambda: sched.call_later(1.0, ran.append, "thread"), handle.cancel):
                try:
                    call()
                except RuntimeError as exc:
                    errors.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(GENEROUS)
        assert len(errors) == 2 and not handle.cancelled()  # refused while the loop runs, nothing done
        await asyncio.sleep(3)
        assert ran == ["past", "subclass", "handle"]
        huge.cancel()
        assert huge.cancelled() and sched.timers == 0
        assert our_handles(loop, sched) == 0  # the last handle cancelled: the loop handle let go
        await sched.close()
        with pytest.raises(Exception, match="closed"):
            sched.call_later(1.0, ran.append, "closed")

    run(main)


# -- stats(): running and waiting runs, and each kind of timer --------------------------------------------


@pytest.mark.parametrize("policy", [Backpressure.BLOCK, Backpressure.DROP])
def test_stats_running_counts_the_jobs_executing_now_and_queued_the_waiting_ones(
    policy: Backpressure,
) -> None:
    """With max_concurrency=2 and five runs due, stats().running counts the two jobs executing; the other
    three are queued (BLOCK) or dropped (DROP), not counted as running (runs waiting for a slot were)."""

    async def main() -> None:
        release = asyncio.Event()
        started: list[int] = []

        async def job(i: int) -> None:
            started.append(i)
            await release.wait()

        async with AsyncScheduler(max_concurrency=2, backpressure=policy) as sched:
            for i in range(5):
                sched.schedule(1, job, args=(i,))
            await sched.sleep(2)
            stats = sched.stats()
            if policy is Backpressure.BLOCK:
                assert (stats.running, stats.queued, stats.dropped) == (2, 3, 0)
            else:
                assert (stats.running, stats.queued, stats.dropped) == (2, 0, 3)
            release.set()
            await sched.sleep(1)
            stats = sched.stats()
            assert (stats.running, stats.queued) == (0, 0)
            assert len(started) == (5 if policy is Backpressure.BLOCK else 2)

    run(main)


def test_stats_count_handles_timeouts_and_sleeps_apart() -> None:
    """stats() counts AsyncScheduler's call_later handles, timeouts and sleeps (they were invisible in
    it). Each kind is counted while armed on the wheel: a move (reset, reschedule) changes no count; a
    cancel, a fire, an exit or an expiry takes it off."""

    def kinds(sched: AsyncScheduler) -> tuple[int, int, int, int, int]:
        stats = sched.stats()
        return (stats.timers, stats.handles, stats.timeouts, stats.sleeps, stats.keys + stats.deadlines)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            boxes: list[Any] = []

            async def guarded() -> None:
                async with sched.timeout(30) as cm:
                    boxes.append(cm)
                    await asyncio.sleep(100)

            first = sched.call_later(10, print)
            sched.call_at(loop.time() + 20, print)
            sched.call_later(math.inf, print)  # never: not on the wheel
            tasks = [loop.create_task(sched.sleep(5)) for _ in range(2)]
            tasks.append(loop.create_task(guarded()))
            await asyncio.sleep(0)
            assert kinds(sched) == (5, 2, 1, 2, 0)
            assert first.reset(15.0) and kinds(sched) == (5, 2, 1, 2, 0)
            first.cancel()
            assert kinds(sched) == (4, 1, 1, 2, 0)
            await asyncio.sleep(6)  # (the loop's own sleep) the two sleeps are over
            assert kinds(sched) == (2, 1, 1, 0, 0)
            boxes[0].reschedule(loop.time() + 40)
            assert kinds(sched) == (2, 1, 1, 0, 0)
            await asyncio.sleep(15)  # the handle at 20 fires
            assert kinds(sched) == (1, 0, 1, 0, 0)
            with pytest.raises(TimeoutError):
                await tasks[2]  # expires at 46
            assert kinds(sched) == (0, 0, 0, 0, 0)
            async with sched.timeout(5):
                assert kinds(sched) == (1, 0, 1, 0, 0)
            assert kinds(sched) == (0, 0, 0, 0, 0)  # exited: disarmed
            sched.call_later(50, print)
        assert kinds(sched) == (0, 0, 0, 0, 0)  # closed: on the loop's own timers now

    run(main)


# -- a failing loop clock, and the driver's own checks ---------------------------------------------------


class ClockDownForUs(VirtualTimeLoop):
    """A virtual loop whose time() fails while `fail` is set, when timerwheel reads it (asyncio's own
    machinery, which runs the handles, still reads it)."""

    fail = False

    def time(self) -> float:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if self.fail and caller.startswith("timerwheel.") and caller != "timerwheel.testing":
            raise OSError("clock down")
        return super().time()


class ClockDownButForAsyncio(VirtualTimeLoop):
    """time() fails while `fail` is set, except for asyncio's own machinery (which runs the handles)."""

    fail = False

    def time(self) -> float:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if self.fail and caller not in ("asyncio.base_events", "timerwheel.testing"):
            raise OSError("clock down")
        return super().time()


def test_cancelling_the_last_task_while_a_clock_retry_is_armed_clears_the_fault() -> None:
    """The loop's clock fails once: the driver arms a retry and refuses new work; then the last task is
    cancelled before the retry fires. The retry still fires and clears the fault (disarming the idle
    driver took the retry off the loop, so the fault was never cleared and every later schedule() raised
    ClockError though the clock worked again)."""
    loop = ClockDownForUs()
    results: list[object] = []

    async def main() -> None:
        sched = AsyncScheduler()
        sched.start()
        task = sched.schedule(1, lambda: None)
        loop.fail = True
        await asyncio.sleep(1.5)  # our handle fires at 1: the clock fails, a retry is armed
        loop.fail = False
        assert sched._fault is not None, "the clock failure was not seen"
        sched.cancel(task)  # the last task, while the retry is armed
        await asyncio.sleep(5)  # the retry fires now and finds the clock working
        for _ in range(3):
            try:
                results.append(sched.schedule(1, lambda: None) > 0)
            except ClockError as exc:
                results.append(f"ClockError: {exc}")
            await asyncio.sleep(2)
        await sched.close()

    run(main, loop)
    assert results == [True, True, True], "schedule() still refused after the clock recovered"


@pytest.mark.parametrize("via_call_later", [False, True], ids=["job", "call_later"])
@pytest.mark.parametrize("far_task", [False, True], ids=["alone", "far-task"])
def test_a_clock_fault_seen_inside_a_job_is_retried(far_task: bool, via_call_later: bool) -> None:
    """A job (or a call_later callback) whose schedule() saw the loop's clock fail left the fault set with
    no retry armed (the driver was dispatching, so its wake armed nothing): schedule() was refused for
    ever, or until the next task's due an hour later, though the clock worked again. Now a retry is armed
    and the next schedule() is accepted."""
    loop = ClockDownButForAsyncio()
    seen: list[str] = []

    async def main() -> None:
        sched = AsyncScheduler()
        sched.start()

        def job() -> None:
            loop.fail = True
            try:
                sched.schedule(1, print)
            except ClockError:
                seen.append("refused")
            loop.fail = False

        if via_call_later:
            sched.call_later(1, job)
        else:
            sched.schedule(1, job)
        if far_task:
            sched.schedule(3600, print)
        await asyncio.sleep(5)  # well within one back-off (at most 1 s) of the failure
        try:
            sched.schedule(1, print)
            seen.append("accepted")
        except ClockError:
            seen.append("still refused")
        await sched.close()

    run(main, loop)
    assert seen == ["refused", "accepted"]


def test_a_subclass_check_of_the_caller_is_called_by_every_entry() -> None:
    """An AsyncScheduler subclass that overrides _check_caller() is asked by call_later(float) and
    TimerHandle.cancel() too (their inline thread check stood in for it), as by schedule() and cancel()."""

    class Picky(AsyncScheduler):
        calls = 0

        def _check_caller(self) -> None:
            Picky.calls += 1
            super()._check_caller()

    failures: list[str] = []

    async def main() -> None:
        sched = Picky()
        sched.start()
        for name, call in [
            ("call_later(1.0)", lambda: sched.call_later(1.0, print)),
            ("handle.cancel()", lambda: sched.call_later(1.0, print).cancel()),
            ("schedule", lambda: sched.schedule(1.0, print)),
            ("cancel", lambda: sched.cancel(1)),
        ]:
            before = Picky.calls
            call()
            if Picky.calls == before:
                failures.append(f"{name} did not call the subclass's _check_caller")
        await sched.close()

    run(main)
    assert not failures


def test_an_uninitialised_async_scheduler_cannot_be_closed() -> None:
    """close() of an AsyncScheduler whose __init__ never ran raises AttributeError, as in the pure-Python
    build (the compiled one closed it, and it then said "closed")."""
    blank = AsyncScheduler.__new__(AsyncScheduler)
    with pytest.raises(AttributeError):
        run(blank.close)


class CallAtReadsTime(VirtualTimeLoop):
    """A virtual loop whose call_at() reads its own time(), as uvloop's does, and whose time() fails while
    `fail` is set."""

    fail = False

    def time(self) -> float:
        if self.fail:
            raise OSError("loop clock broke")
        return super().time()

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        self.time()
        return super().call_at(when, callback, *args, context=context)


def _uvloop_reading_a_failing_clock() -> asyncio.AbstractEventLoop:
    assert uvloop is not None

    class Flaky(uvloop.Loop):  # type: ignore[misc,name-defined]
        fail = False

        def time(self) -> float:
            if self.fail:
                raise OSError("loop clock broke")
            return super().time()

    return Flaky()


@pytest.mark.parametrize(
    "kind",
    [
        "virtual",
        ON_UVLOOP,
    ],
)
def test_a_loop_whose_call_at_reads_a_failing_clock(kind: str) -> None:
    """On a loop whose call_at() reads its own failing time() (uvloop's does), schedule() raises
    ClockError, not the loop's OSError, and the loop handle armed before is kept: once the clock works
    again, the task armed before the failure runs (it was cancelled with no new one armed, and nothing
    ever ran). On uvloop time is real: the wait is bounded (2 s at most) and ends as soon as the task has
    run."""
    loop: Any = CallAtReadsTime() if kind == "virtual" else _uvloop_reading_a_failing_clock()

    async def main() -> None:
        sched = AsyncScheduler()
        sched.start()
        ran: list[str] = []
        sched.schedule(0.05, lambda: ran.append("armed before"))
        loop.fail = True
        try:
            sched.schedule(0.01, print)
        except ClockError:
            pass
        except OSError as exc:
            pytest.fail(f"schedule() raised the loop's {exc!r}, not ClockError")
        finally:
            loop.fail = False
        for _ in range(100):
            await asyncio.sleep(0.02)
            if ran:
                break
        assert ran == ["armed before"], "the task armed before the failure never ran"
        await sched.close()

    run(main, loop)


# -- the compiled common paths of reset, reschedule and entering a timeout: the same results as the rest --


class _RefusingLoop(VirtualTimeLoop):
    """A virtual loop whose call_at() raises OverflowError once when told to; whose time() fails when told."""

    refuse = False
    broken = False

    def call_at(self, when: float, callback: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
        if self.refuse:
            self.refuse = False
            raise OverflowError("call_at refused")
        return super().call_at(when, callback, *args, **kwargs)

    def time(self) -> float:
        if self.broken:
            raise OSError("clock broken")
        return super().time()


def test_a_reset_whose_loop_handle_cannot_be_armed_raises_and_the_timer_stays_moved() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, _RefusingLoop)
        async with AsyncScheduler() as sched:
            handle = sched.call_later(10.0, print)
            loop.refuse = True
            with pytest.raises(OverflowError, match="call_at refused"):
                handle.reset(1.0)  # earlier than the loop handle: arming it fails
            assert handle.when() == loop.time() + 1.0
            async with sched.timeout(20.0) as cm:
                loop.refuse = True
                with pytest.raises(OverflowError, match="call_at refused"):
                    cm.reschedule(loop.time() + 0.5)
                assert cm.when() == loop.time() + 0.5
            handle.cancel()

    run(main, _RefusingLoop())


def test_entering_a_timeout_whose_loop_handle_cannot_be_armed_leaves_no_stray_entry() -> None:
    """Arming the loop handle fails as the timeout is entered: the wheel entry is still the timeout's, so
    disabling the deadline takes it out, and nothing fires later."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, _RefusingLoop)
        async with AsyncScheduler() as sched:
            start = loop.time()
            loop.refuse = True
            async with sched.timeout(5.0) as cm:
                assert len(sched._engine.store) == 1
                cm.reschedule(None)
                assert len(sched._engine.store) == 0
                await asyncio.sleep(10)
            return loop.time() - start

    assert run(main, _RefusingLoop()) == 10.0


def test_a_reset_of_a_handle_that_is_not_pending_does_not_read_the_clock() -> None:
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, _RefusingLoop)
        async with AsyncScheduler() as sched:
            cancelled = sched.call_later(10.0, print)
            cancelled.cancel()
            ran = sched.call_later(0.0, print)
            await asyncio.sleep(1)
            loop.broken = True
            try:
                return cancelled.reset(1.0), ran.reset(1.0)
            finally:
                loop.broken = False

    assert run(main, _RefusingLoop()) == (False, False)


@pytest.mark.skipif(uvloop is None, reason="uvloop is not installed (it is in the compare extra)")
def test_on_uvloop_a_timeout_entered_on_another_loop_is_refused() -> None:
    """The scheduler's uvloop loop has stopped; a task of another loop, on the same thread, enters one of
    its timeouts: refused, as from another thread (uvloop records no thread of its own to compare)."""
    assert uvloop is not None
    ours = uvloop.new_event_loop()
    sched = AsyncScheduler(loop=ours)

    async def start() -> None:
        sched.start()

    ours.run_until_complete(start())

    async def main() -> None:
        with pytest.raises(RuntimeError, match="on its event loop"):
            async with sched.timeout_at(ours.time() + 60.0):
                pass

    try:
        asyncio.run(main())
    finally:
        ours.run_until_complete(sched.close())
        ours.close()


def test_a_handle_reset_to_never_and_back_fires_once_at_its_last_due() -> None:
    """reset(math.inf) takes a handle out of the wheel (pending, never due) and a finite reset puts it back:
    the request-deadline pattern, two resets per request. It fires once, at its last due, never early; the
    stats count it only while it is on the wheel."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncScheduler() as sched:
            fired: list[float] = []
            handle = sched.call_later(5.0, lambda: fired.append(loop.time()))
            t0 = loop.time()
            for _ in range(3):
                assert handle.reset(math.inf) and handle.when() == math.inf
                assert sched.stats().handles == 0 and not handle.cancelled()
                await asyncio.sleep(10)
                assert fired == []
                assert handle.reset(5.0) and handle.when() == loop.time() + 5.0
                assert sched.stats().handles == 1
            last = handle.when()
            await asyncio.sleep(4.0)
            assert handle.reset(math.inf)
            await asyncio.sleep(100)
            assert fired == [] and last == t0 + 35.0
            assert handle.reset(2.0)
            await asyncio.sleep(10)
            assert fired == [t0 + 136.0]
            assert not handle.reset(1.0) and not handle.reset(math.inf)  # it ran: nothing moves
            assert sched.stats().handles == 0

    run(main)
