"""The echo server of the benchmarks (timerwheel.bench.server): every pattern's timers do what they claim.

An idle connection is closed at its deadline, pushed back by each message, never before; a request that
outlives its deadline is aborted at it; `none` keeps no timers. Real sockets on 127.0.0.1, on a
virtual-time loop (the deadlines are tens of seconds, and take no time) and on uvloop. How fast anything is
belongs in benchmarks/echo_server.py, never in a test.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from timerwheel.bench.scenario import Phase, format_server_report, run_server, summarize
from timerwheel.bench.server import MESSAGE, PATTERNS, STRATEGIES, EchoServer, in_process
from timerwheel.testing import VirtualTimeLoop

try:
    import uvloop
except ImportError:
    uvloop = None

T = TypeVar("T")
TIMED = [p for p in PATTERNS if p != "none"]
IDLE, REQUEST = 30.0, 5.0


def _virtual(main: Callable[[], Awaitable[T]]) -> T:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(asyncio.wait_for(main(), 3600.0))  # virtual seconds
    finally:
        loop.close()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(MESSAGE)
    assert await reader.readexactly(len(MESSAGE)) == MESSAGE


@pytest.mark.parametrize("pattern", TIMED)
def test_an_idle_connection_is_closed_at_its_deadline_pushed_back_by_each_message(pattern: str) -> None:
    async def main() -> tuple[EchoServer, float, float]:
        server = EchoServer(pattern, idle=IDLE, request=REQUEST)
        (port,) = await server.start()
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(3):  # 60 s in all, each gap inside the idle deadline
                await _echo(reader, writer)
                await asyncio.sleep(IDLE - 10.0)
            last = loop.time()  # before the last message: the server's deadline is after it
            await _echo(reader, writer)
            assert await reader.read() == b""  # the server closed it
            return server, last, loop.time()
        finally:
            writer.close()
            await server.stop()

    server, last, closed = _virtual(main)
    assert server.stats["idle_closed"] == 1 and server.stats["request_closed"] == 0
    assert server.stats["early"] == 0 and len(server.lateness) == 1
    assert 0.0 <= server.lateness[0] < 1e-3
    assert closed >= last + IDLE
    assert server.messages == 4


@pytest.mark.parametrize("pattern", TIMED)
def test_a_request_past_its_deadline_is_aborted_at_it(pattern: str) -> None:
    async def main() -> tuple[EchoServer, float, float]:
        server = EchoServer(pattern, idle=IDLE, request=REQUEST, work=2 * REQUEST)  # too slow to answer
        (port,) = await server.start()
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            sent = loop.time()
            writer.write(MESSAGE)
            with pytest.raises(ConnectionError):  # aborted, or closed with nothing echoed
                if await reader.read() == b"":
                    raise ConnectionResetError("closed")
            return server, sent, loop.time()
        finally:
            writer.close()
            await server.stop()

    server, sent, closed = _virtual(main)
    assert server.stats["request_closed"] == 1 and server.stats["idle_closed"] == 0
    assert server.stats["early"] == 0 and 0.0 <= server.lateness[0] < 1e-3
    assert sent + REQUEST <= closed < sent + 2 * REQUEST
    assert server.messages == 0  # never echoed


def test_without_timers_a_silent_connection_stays_open() -> None:
    async def main() -> EchoServer:
        server = EchoServer("none", idle=IDLE, request=REQUEST)
        (port,) = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await _echo(reader, writer)
        await asyncio.sleep(10 * IDLE)
        await _echo(reader, writer)  # still open
        writer.close()
        await server.stop()
        return server

    server = _virtual(main)
    assert server.stats["idle_closed"] == server.stats["request_closed"] == 0 and server.messages == 2


class _Handle:
    def __init__(self, when: float) -> None:
        self._when = when

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        pass


class _SoonHandle:
    """What uvloop's call_at returns for a due less than a millisecond away: a plain Handle, no when()."""

    def cancel(self) -> None:
        pass


class _EarlyLoop:
    """Stands in for a loop that runs a timer before its due: the time is `now`, set by the test, and the
    test runs the timers' callbacks itself (`fire`). As uvloop does, a timer due within a millisecond is
    made a call_soon handle, which has no when()."""

    def __init__(self) -> None:
        self.now = 0.0
        self.armed: list[float] = []
        self.calls: dict[str, tuple[Callable[..., None], tuple[Any, ...]]] = {}

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Any:
        return self.call_at(self.now + delay, callback, *args)

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> Any:
        self.armed.append(when)
        self.calls[callback.__name__] = (callback, args)
        return _SoonHandle() if when - self.now < 1e-3 else _Handle(when)

    def fire(self, name: str) -> None:
        callback, args = self.calls[name]
        callback(*args)


@pytest.mark.parametrize("pattern", ["call_later", "hand-kept"])
def test_a_loop_timer_that_fires_early_re_arms_instead_of_closing(pattern: str) -> None:
    """asyncio runs a timer up to its clock resolution early, uvloop up to a millisecond (or by one ulp of
    its float due, the first time): the patterns on the loop's own timers check the time when theirs fires,
    and wait for the rest, even when the loop's re-armed timer is a handle with no when()."""

    class Conn:
        def __init__(self, loop: Any) -> None:
            self.loop = loop
            self.due: list[tuple[str, float]] = []

        def idle_due(self, deadline: float) -> None:
            self.due.append(("idle", deadline))

        def request_due(self, deadline: float) -> None:
            self.due.append(("request", deadline))

    fake = _EarlyLoop()
    conn = Conn(fake)
    timers: Any = STRATEGIES[pattern](conn, IDLE, REQUEST)  # type: ignore[arg-type]
    timers.arm_idle()
    timers.start_request()
    for early in (1e-4, 1e-5):  # the request's timer runs early, and the re-armed one again
        fake.now = REQUEST - early
        fake.fire("_request_fired")
        assert conn.due == [] and fake.armed[-1] == REQUEST  # armed again at the deadline
    fake.now = REQUEST
    fake.fire("_request_fired")
    for early in (1e-4, 1e-5):
        fake.now = IDLE - early
        fake.fire("_idle_fired")
        assert conn.due == [("request", REQUEST)] and fake.armed[-1] == IDLE
    fake.now = IDLE
    fake.fire("_idle_fired")
    assert conn.due == [("request", REQUEST), ("idle", IDLE)]
    timers.close()


# Real time (uvloop has no virtual clock): an idle deadline of 0.2 s, checked to pass never early; the
# request deadline (5 s) only has to outlast one echo's handling, even on a loaded machine.
@pytest.mark.realtime
@pytest.mark.skipif(uvloop is None, reason="uvloop is not installed (it is in the compare extra)")
def test_on_uvloop_every_pattern_closes_an_idle_connection_and_none_early() -> None:
    idle = 0.2

    async def one(pattern: str) -> EchoServer:
        server = EchoServer(pattern, idle=idle, request=5.0)
        (port,) = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await _echo(reader, writer)
            assert await reader.read() == b""
        finally:
            writer.close()
            await server.stop()
        return server

    async def main() -> list[EchoServer]:
        return await asyncio.wait_for(asyncio.gather(*(one(p) for p in TIMED)), 30.0)

    assert uvloop is not None
    loop = uvloop.new_event_loop()
    try:
        servers = loop.run_until_complete(main())
    finally:
        loop.close()
    for pattern, server in zip(TIMED, servers, strict=True):
        assert server.stats["idle_closed"] == 1, pattern
        # asyncio.timeout is asyncio's own code: on uvloop it may expire up to a millisecond early
        floor = -1e-3 if pattern == "asyncio.timeout" else 0.0
        assert server.lateness[0] >= floor, (pattern, server.lateness)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_in_process_measures_the_server_s_own_work(pattern: str) -> None:
    async def main() -> tuple[float, EchoServer]:
        server = EchoServer(pattern)
        await server.start()
        try:
            return await in_process(server, 20, 3, batches=2), server
        finally:
            await server.stop()

    us, server = _virtual(main)
    assert us > 0 and math.isfinite(us)
    assert server.stats["connections"] == 0 and server.messages == 0  # not counted as the server's


def test_a_bad_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="pattern must be one of"):
        EchoServer("heapq")


@pytest.mark.parametrize("loop", ["asyncio", "timerwheel.loop"])
def test_one_run_measures_the_server_s_cpu_per_message_its_latency_and_memory(loop: str) -> None:
    """A tiny real run: a server process and a load generator process on 127.0.0.1."""
    phases = [Phase("saturated", None, 0.05, 0.2), Phase("moderate", 500.0, 0.05, 0.2)]
    record = run_server("timerwheel", loop, 20, phases, in_process=(10, 2), max_seconds=60.0)
    assert record["connected"] == 20
    for name in ("saturated", "moderate"):
        result = record["phases"][name]
        assert result["messages"] > 0 and result["us_per_message"] > 0
        assert result["iterations"] > 0  # counted on the selector loops
        assert 0 < result["p50_us"] <= result["p99_us"] and result["server_mb"] > 1
    assert record["phases"]["in-process"]["us_per_message"] > 0
    assert record["closed"]["early"] == 0 and record["closed"]["connections"] == 20
    rows = summarize([record, {**record, "pattern": "none"}])
    assert {r["phase"] for r in rows} == {"saturated", "moderate", "in-process"}
    assert all(r["timer_share"] == 0.0 for r in rows if r["pattern"] == "timerwheel")
    assert "timerwheel" in format_server_report(rows, 20)
    assert "timerwheel" in format_server_report(summarize([record], "p99_us"), 20, "p99_us")
