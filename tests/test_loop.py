"""timerwheel.loop: an asyncio event loop whose call_later and call_at are on the wheel. asyncio's own
promises, one by one, on a loop whose clock jumps to its next timer (no test sleeps); then CPython's own
asyncio tests, unmodified, on this loop (tests/peer_asyncio.py); then the ways to make it the loop."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import selectors
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

import timerwheel.loop
from timerwheel.loop import EventLoopPolicy, SelectorEventLoop, TimerHandle, install, new_event_loop

ROOT = Path(__file__).resolve().parent.parent


class _Jump(selectors.DefaultSelector):
    """A selector that, with nothing ready, moves its loop's clock by the wait instead of waiting."""

    def __init__(self, loop: Virtual) -> None:
        super().__init__()
        self.loop = loop
        self.waits: list[float | None] = []

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.waits.append(timeout)
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if not ready and timeout:
            self.loop.now += timeout
        return ready


class Virtual(SelectorEventLoop):
    """The wheel loop on a clock that jumps to the next timer."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.jump = _Jump(self)
        super().__init__(self.jump)

    def time(self) -> float:
        return self.now


@pytest.fixture
def loop() -> Any:
    made = Virtual()
    yield made
    made.close()


def _run(loop: Virtual, seconds: float) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def test_timers_run_in_the_order_of_their_when_ties_in_the_order_they_were_made(loop: Virtual) -> None:
    ran: list[tuple[str, float]] = []
    start = loop.time()
    for name, delay in [("c", 3.0), ("a1", 1.0), ("b", 2.0), ("a2", 1.0), ("a3", 1.0)]:
        loop.call_later(delay, lambda n=name: ran.append((n, loop.time() - start)))
    loop.call_at(start + 0.5, lambda: ran.append(("at", loop.time() - start)))
    _run(loop, 5)
    assert ran == [("at", 0.5), ("a1", 1.0), ("a2", 1.0), ("a3", 1.0), ("b", 2.0), ("c", 3.0)]
    assert loop._timers.next_due() is None


def test_a_timer_never_runs_before_its_when_and_the_loop_waits_for_the_earliest(loop: Virtual) -> None:
    seen: list[float] = []
    whens = [
        loop.call_later(delay, lambda: seen.append(loop.time())).when()
        for delay in (0.25, 7.0, 0.001, 86400.0 * 3)
    ]
    _run(loop, 86400.0 * 4)
    assert seen == sorted(whens)  # at their when exactly: each wait was the time to the earliest
    assert max(w for w in loop.jump.waits if w is not None) <= 86400.0  # (asyncio's longest select)


def test_a_cancelled_timer_does_not_run_and_leaves_the_wheel_at_once(loop: Virtual) -> None:
    ran: list[int] = []
    handles = [loop.call_later(1.0 + i, ran.append, i) for i in range(1000)]
    assert len(loop._timers.store) == 1000
    for handle in handles[::2]:
        handle.cancel()
        handle.cancel()  # (twice: nothing more)
    assert len(loop._timers.store) == 500 and all(h.cancelled() for h in handles[::2])
    _run(loop, 2000)
    assert ran == list(range(1, 1000, 2))
    assert not handles[1].cancelled() and "cancelled" in repr(handles[0])


def test_a_timer_cancelled_by_an_earlier_one_of_the_same_iteration_does_not_run(loop: Virtual) -> None:
    ran: list[str] = []
    second = None

    def first() -> None:
        ran.append("first")
        assert second is not None
        second.cancel()

    loop.call_later(1.0, first)
    second = loop.call_later(1.0, ran.append, "second")
    _run(loop, 2)
    assert ran == ["first"]


def test_an_exception_in_a_callback_goes_to_the_loops_exception_handler(loop: Virtual) -> None:
    told: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: told.append(context))
    handle = loop.call_later(1.0, lambda: 1 / 0)
    ran: list[int] = []
    loop.call_later(1.0, ran.append, 1)  # (the next callback still runs)
    _run(loop, 2)
    assert ran == [1] and len(told) == 1
    assert isinstance(told[0]["exception"], ZeroDivisionError) and told[0]["handle"] is handle
    assert told[0]["message"].startswith("Exception in callback")


def test_base_exceptions_propagate_out_of_the_loop_and_the_rest_stays_due(loop: Virtual) -> None:
    ran: list[int] = []

    def stop() -> None:
        raise KeyboardInterrupt

    loop.call_later(1.0, stop)
    loop.call_later(1.0, ran.append, 1)
    with pytest.raises(KeyboardInterrupt):
        _run(loop, 2)
    _run(loop, 2)
    assert ran == [1]


def test_a_callback_runs_in_its_context(loop: Virtual) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")
    seen: list[str] = []
    var.set("made")
    handle = loop.call_later(1.0, lambda: seen.append(var.get()))
    other = contextvars.Context()
    given = loop.call_later(2.0, lambda: seen.append(var.get()), context=other)
    var.set("changed")
    _run(loop, 3)
    assert seen == ["made", "none"]
    assert given.get_context() is other and handle.get_context() is not other


def test_debug_mode_keeps_where_a_timer_was_made_and_warns_of_a_slow_callback(
    loop: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    loop.set_debug(True)
    loop.slow_callback_duration = 0.5

    def slow() -> None:
        loop.now += 1.0  # (the callback takes a second of the loop's time)

    handle = loop.call_later(1.0, slow)  # the line the traceback ends at
    assert handle._source_traceback[-1].name == sys._getframe().f_code.co_name
    assert handle._source_traceback[-1].lineno == sys._getframe().f_lineno - 2
    later = loop.call_at(loop.time() + 1, slow)
    assert later._source_traceback[-1].name == sys._getframe().f_code.co_name
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        _run(loop, 3)
    assert [r.getMessage() for r in caplog.records if "Executing <TimerHandle" in r.getMessage()]
    assert "created at" in repr(handle)


def test_close_with_timers_pending_drops_them_and_refuses_new_ones() -> None:
    made = Virtual()
    ran: list[int] = []
    handle = made.call_later(1.0, ran.append, 1)
    made.close()
    assert not handle.cancelled() and not handle._scheduled  # (dropped, not cancelled: as asyncio)
    assert len(made._timers.store) == 0
    with pytest.raises(RuntimeError, match="closed"):
        made.call_later(1.0, ran.append, 2)
    handle.cancel()  # (harmless after close)
    assert ran == []


def test_a_when_the_wheel_cannot_hold_goes_on_asyncios_heap(loop: Virtual) -> None:
    ran: list[str] = []
    never = loop.call_at(math.inf, ran.append, "inf")
    far = loop.call_at(1e300, ran.append, "far")
    first = loop.call_at(-math.inf, ran.append, "-inf")
    loop.call_later(1.0, ran.append, "wheel")
    assert not isinstance(never, TimerHandle) and isinstance(never, asyncio.TimerHandle)
    assert not isinstance(far, TimerHandle) and not isinstance(first, TimerHandle)
    _run(loop, 2)
    assert ran == ["-inf", "wheel"]
    never.cancel()
    far.cancel()


def test_bad_arguments_are_refused_as_asyncio_refuses_them(loop: Virtual) -> None:
    with pytest.raises(TypeError):
        loop.call_later(None, print)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        loop.call_at(None, print)  # type: ignore[arg-type]
    loop.set_debug(True)
    with pytest.raises(TypeError, match="callable"):
        loop.call_later(1.0, "not callable")  # type: ignore[arg-type]
    assert len(loop._timers.store) == 0


def test_handles_compare_as_asyncios_by_their_when(loop: Virtual) -> None:
    a = loop.call_later(1.0, print)
    b = loop.call_later(2.0, print)
    assert a < b and b > a and a <= a and a == a and a != b and hash(a) == hash(a.when())
    a.cancel()
    b.cancel()


def test_asyncios_sleep_wait_for_and_timeout_run_on_the_wheel(loop: Virtual) -> None:
    async def main() -> list[str]:
        out = []
        try:
            async with asyncio.timeout(1.0):
                await asyncio.sleep(10)
        except TimeoutError:
            out.append("timeout")
        try:
            await asyncio.wait_for(asyncio.sleep(10), 1.0)
        except TimeoutError:
            out.append("wait_for")
        await asyncio.sleep(5)
        out.append("slept")
        return out

    start = loop.time()
    assert loop.run_until_complete(main()) == ["timeout", "wait_for", "slept"]
    assert loop.time() - start == pytest.approx(7.0)
    assert len(loop._timers.store) == 0  # (every timer they armed is gone: cancelled or run)


def test_new_event_loop_the_policy_and_install_make_the_wheel_loop() -> None:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        assert type(runner.get_loop()) is SelectorEventLoop
    with pytest.raises(ValueError, match="base"):
        new_event_loop("trio")
    with pytest.raises(ValueError, match="base"):
        EventLoopPolicy(base="trio")
    before = asyncio.get_event_loop_policy()
    try:
        install()
        assert isinstance(asyncio.get_event_loop_policy(), EventLoopPolicy)

        async def which() -> type:
            return type(asyncio.get_running_loop())

        assert asyncio.run(which()) is SelectorEventLoop
    finally:
        asyncio.set_event_loop_policy(before)


def test_on_uvloop_the_timers_are_on_the_wheel_behind_one_uvloop_timer() -> None:
    pytest.importorskip("uvloop", reason="uvloop is not installed: pip install 'timerwheel[uvloop]'")
    made = new_event_loop("uvloop")
    try:
        assert isinstance(made, timerwheel.loop.UVLoop) and type(made).__name__ == "UVLoop"
        ran: list[int] = []
        start = made.time()
        for i, delay in enumerate((0.03, 0.01, 0.02, 0.01)):
            made.call_later(delay, ran.append, i)
        made.call_later(0.015, ran.append, 99).cancel()
        told: list[dict[str, Any]] = []
        made.set_exception_handler(lambda _loop, context: told.append(context))
        made.call_later(0.005, lambda: 1 / 0)
        made.run_until_complete(asyncio.sleep(0.05))  # (wall-clock: uvloop's clock is the system's)
        assert ran == [1, 3, 2, 0] and made.time() - start >= 0.03
        assert len(told) == 1 and isinstance(told[0]["exception"], ZeroDivisionError)
        assert len(made._timers.store) == 0
    finally:
        made.close()


@pytest.mark.skipif(sys.platform == "win32", reason="the wheel loop is asyncio's selector loop")
def test_cpythons_own_asyncio_tests_pass_on_the_wheel_loop() -> None:
    """test_events, test_base_events, test_tasks, test_timeouts, test_waitfor of this very Python, run
    unmodified with this loop as asyncio's (tests/peer_asyncio.py; CI runs it on 3.12 and 3.13 too)."""
    _peer_suite("peer_asyncio.py")


def _peer_suite(script: str) -> None:
    """Run a peer suite's script (exit status 0 passed, 1 failed, 2 could not run: skipped, saying why)."""
    command = [sys.executable, str(ROOT / "tests" / script)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == 2:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "wheel loops made" in done.stdout or "wheel uvloops made" in done.stdout


class Recording(SelectorEventLoop):
    """The wheel loop, keeping every handle its call_later made (uvicorn makes it by name: see below)."""

    made: ClassVar[list[Any]] = []

    def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> Any:
        handle = super().call_later(delay, callback, *args, context=context)
        Recording.made.append(handle)
        return handle


@pytest.mark.realtime
def test_uvicorn_serves_on_the_wheel_loop_its_keep_alive_timer_on_the_wheel() -> None:
    """A real uvicorn server on 127.0.0.1 made with `loop="timerwheel.loop:new_event_loop"` (here a
    subclass that records its handles), called by a real httpx client: the app runs on the wheel loop (its
    sleep and asyncio.timeout too); after a response the connection's keep-alive timer (uvicorn's
    call_later) waits on the wheel, and leaves it, cancelled, when the next request comes. Tolerance: 10 s
    for a loaded machine to start and stop the server."""
    uvicorn = pytest.importorskip("uvicorn", reason="pip install uvicorn (the test extra has it)")
    httpx = pytest.importorskip("httpx", reason="pip install httpx (the test extra has it)")
    from .test_frameworks import _free_port, wait_for

    def keep_alive() -> list[Any]:
        return [
            h for h in Recording.made if getattr(h._callback, "__name__", "") == "timeout_keep_alive_handler"
        ]

    Recording.made = []
    port = _free_port()
    for name in ("timerwheel.loop:new_event_loop", f"{__name__}:Recording"):
        assert uvicorn.Config(_asgi, loop=name).get_loop_factory() is not None  # (both forms load)
    config = uvicorn.Config(
        _asgi, host="127.0.0.1", port=port, loop=f"{__name__}:Recording", log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10.0, "the server starts")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.get("/").text == "Recording"
            wait_for(lambda: len(keep_alive()) == 1, 5.0, "the keep-alive timer is armed")
            (first,) = keep_alive()
            assert isinstance(first, TimerHandle) and first._scheduled and first.id is not None
            assert client.get("/").text == "Recording"
            assert first.cancelled() and not first._scheduled and first.id is None  # (out of the wheel)
    finally:
        server.should_exit = True
        thread.join(10)
    assert not thread.is_alive()


async def _asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app that answers with the class of the loop it runs on, after a sleep and a timeout."""
    if scope["type"] != "http":
        return
    await asyncio.sleep(0.001)
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)
    except TimeoutError:
        pass
    body = type(asyncio.get_running_loop()).__qualname__.encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.realtime
def test_hypercorn_serves_on_the_wheel_loop() -> None:
    """A real hypercorn server on 127.0.0.1, in asyncio.Runner(loop_factory=new_event_loop), called by a
    real httpx client. Tolerance: 10 s for a loaded machine to start and stop the server."""
    hypercorn = pytest.importorskip("hypercorn", reason="pip install hypercorn (the test extra has it)")
    httpx = pytest.importorskip("httpx", reason="pip install httpx (the test extra has it)")
    import hypercorn.asyncio  # noqa: F811

    from .test_frameworks import _free_port, wait_for

    port = _free_port()
    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{port}"]
    stop: list[asyncio.Event] = []

    async def serve() -> None:
        stop.append(asyncio.Event())
        await hypercorn.asyncio.serve(_asgi, config, shutdown_trigger=stop[0].wait)  # type: ignore[arg-type]

    runner = asyncio.Runner(loop_factory=new_event_loop)
    thread = threading.Thread(target=runner.run, args=(serve(),), daemon=True)
    thread.start()
    try:
        wait_for(lambda: _answers(httpx, port), 10.0, "the server starts")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text == "SelectorEventLoop"
    finally:
        runner.get_loop().call_soon_threadsafe(stop[0].set)
        thread.join(10)
    assert not thread.is_alive()
    runner.close()


def _answers(httpx: Any, port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    except httpx.TransportError:
        return False
    return True


AIOHTTP_APP = """
import asyncio, sys
from aiohttp import web
import timerwheel.loop

async def hello(request):
    await asyncio.sleep(0.001)
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)
    except TimeoutError:
        pass
    return web.Response(text=type(asyncio.get_running_loop()).__qualname__)

app = web.Application()
app.router.add_get("/", hello)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), loop=timerwheel.loop.new_event_loop(), print=None)
"""


@pytest.mark.realtime
def test_aiohttps_run_app_serves_on_the_wheel_loop(tmp_path: Path) -> None:
    """aiohttp's web.run_app(app, loop=timerwheel.loop.new_event_loop()) in a process of its own (it
    handles signals), called by a real httpx client, stopped by SIGINT. Tolerance: 10 s for a loaded
    machine to start and stop the server."""
    pytest.importorskip("aiohttp", reason="pip install aiohttp (the test extra has it)")
    httpx = pytest.importorskip("httpx", reason="pip install httpx (the test extra has it)")
    import signal

    from .test_frameworks import _free_port, wait_for

    (tmp_path / "serve.py").write_text(AIOHTTP_APP)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(tmp_path / "serve.py"), str(port)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: server.poll() is not None or _answers(httpx, port), 10.0, "the server starts")
        assert server.poll() is None, server.communicate()[1]
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text == "SelectorEventLoop"
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=10)
    assert server.returncode == 0, err


# -- what a hostile review found: each pinned -------------------------------------------------------------


def test_a_clock_that_goes_back_never_runs_a_timer_before_its_when(loop: Virtual) -> None:
    ran: list[str] = []
    start = loop.time()
    loop.call_at(start + 100, ran.append, "at 100")
    loop.call_at(start + 50, ran.append, "at 50")
    loop.call_at(start + 200, ran.append, "at 200")
    loop.now = start + 100
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert ran == ["at 50", "at 100"]
    loop.now = start  # (the clock went back: the wheel has passed 100, and 60 is not due)
    loop.call_at(start + 60, ran.append, "at 60")
    loop.call_at(start - 1, ran.append, "at -1")
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert ran == ["at 50", "at 100", "at -1"]
    loop.now = start + 199
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert ran == ["at 50", "at 100", "at -1", "at 60"] and loop._timers.next_due() == start + 200


def test_a_loop_whose_clock_reads_fields_set_after_init_is_made(loop: Virtual) -> None:
    class Late(SelectorEventLoop):
        def __init__(self) -> None:
            super().__init__()
            self.t = 5.0

        def time(self) -> float:
            return self.t

    made = Late()
    try:
        ran: list[int] = []
        made.call_at(4.0, ran.append, 1)
        made.call_soon(made.stop)
        made.run_forever()
        assert ran == [1]
    finally:
        made.close()


def test_a_nan_when_runs_at_once_as_on_asyncio_and_the_loop_does_not_spin(loop: Virtual) -> None:
    ran: list[str] = []
    loop.call_at(math.nan, ran.append, "nan")
    loop.call_soon(ran.append, "soon")
    _run(loop, 1)
    assert ran == ["soon", "nan"]
    assert loop.jump.waits.count(0) < 10  # (no spin: the second's wait is one wait, not thousands)


def test_timers_of_the_wheel_and_of_asyncios_heap_run_in_the_order_of_their_when(loop: Virtual) -> None:
    class Seconds(float):
        pass

    ran: list[str] = []
    start = loop.time()
    loop.call_at(start + 2, ran.append, "float 2")
    loop.call_at(-math.inf, ran.append, "-inf")  # (asyncio's heap)
    loop.call_at(Seconds(start + 1), ran.append, "float subclass 1")
    loop.call_at(True, ran.append, "bool (past)")
    loop.call_at(-(10**400), ran.append, "int below any float (past)")
    loop.call_later(Seconds(4), ran.append, "call_later(float subclass) 4")
    _run(loop, 5)
    assert ran == [
        "-inf",
        "int below any float (past)",
        "bool (past)",
        "float subclass 1",
        "float 2",
        "call_later(float subclass) 4",
    ]


def test_call_later_goes_through_an_overridden_or_a_patched_call_at(loop: Virtual) -> None:
    from unittest import mock

    seen: list[float] = []

    class Counting(Virtual):
        def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
            seen.append(when)
            return super().call_at(when, callback, *args, context=context)

    made = Counting()
    try:
        made.call_later(1.0, print)
        assert len(seen) == 1
    finally:
        made.close()
    with mock.patch.object(loop, "call_at", wraps=loop.call_at) as patched:
        loop.call_later(1.0, print)
    assert patched.call_count == 1


def test_in_debug_mode_a_timer_of_the_heap_keeps_the_stack_of_its_caller(loop: Virtual) -> None:
    loop.set_debug(True)
    handle = loop.call_at(math.inf, print)
    assert handle._source_traceback[-1].name == sys._getframe().f_code.co_name
    later = loop.call_later(math.inf, print)
    assert later._source_traceback[-1].name == sys._getframe().f_code.co_name
    handle.cancel()
    later.cancel()


def _uvloop() -> Any:
    pytest.importorskip("uvloop", reason="uvloop is not installed: pip install 'timerwheel[uvloop]'")
    return new_event_loop("uvloop")


def test_on_uvloop_a_keyboard_interrupt_loses_none_of_the_timers_due_with_it() -> None:
    made = _uvloop()
    try:
        ran: list[str] = []

        def interrupt() -> None:
            ran.append("interrupt")
            raise KeyboardInterrupt

        for callback in (lambda: ran.append("a"), interrupt, lambda: ran.append("b")):
            made.call_at(made.time() - 1, callback)  # (all due at the same wake)
        with pytest.raises(KeyboardInterrupt):
            made.run_until_complete(asyncio.sleep(0.01))
        made.run_until_complete(asyncio.sleep(0.01))  # (wall-clock: uvloop's clock is the system's)
        assert ran == ["a", "interrupt", "b"]
    finally:
        made.close()


def test_on_uvloop_a_timer_never_runs_early_and_the_loop_does_not_spin_to_it() -> None:
    made = _uvloop()
    try:
        wakes = [0]
        wake = made._on_wake

        def counted() -> None:
            wakes[0] += 1
            wake()

        made._on_wake = counted
        early: list[float] = []
        for i in range(20):
            when = made.time() + 0.0004 + i * 0.0013  # (between uvloop's whole milliseconds)
            made.call_at(when, lambda w=when: early.append(made.time() - w) if made.time() < w else None)
        made.run_until_complete(asyncio.sleep(0.04))  # (wall-clock: uvloop's clock is the system's)
        assert early == [] and wakes[0] <= 40  # (a wake per timer at most, and a few more: no spin)
    finally:
        made.close()


def test_on_uvloop_debug_mode_gives_each_timer_uvloops_own_checks_and_reports() -> None:
    made = _uvloop()
    try:
        made.set_debug(True)
        failed: list[BaseException] = []

        def elsewhere() -> None:
            try:
                made.call_later(60, print)
            except RuntimeError as exc:
                failed.append(exc)

        async def main() -> None:
            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join()

        made.run_until_complete(main())
        assert failed and "Non-thread-safe" in str(failed[0])
        handle = made.call_later(60, print)
        assert handle._source_traceback[-1].name == sys._getframe().f_code.co_name
        handle.cancel()
    finally:
        made.close()


def test_on_uvloop_close_cancels_the_timers_pending_as_uvloop_does() -> None:
    made = _uvloop()
    handle = made.call_later(60, print)
    made.close()
    assert handle.cancelled() and len(made._timers.store) == 0


def test_uvloops_own_tests_pass_on_the_wheel_loops() -> None:
    """uvloop's test modules of its installed version (from its sdist on PyPI), run unmodified with
    UVLoop as uvloop's loop and the wheel SelectorEventLoop as asyncio's (tests/peer_uvloop.py)."""
    pytest.importorskip("uvloop", reason="uvloop is not installed: pip install 'timerwheel[uvloop]'")
    _peer_suite("peer_uvloop.py")
