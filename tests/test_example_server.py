"""examples/idle_timeout_server.py on 127.0.0.1 with real client connections, for both kinds of timers."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path
from types import ModuleType

import pytest

try:
    import uvloop
except ImportError:
    uvloop = None

IDLE = 0.3


def _example() -> ModuleType:
    path = Path(__file__).parent.parent / "examples" / "idle_timeout_server.py"
    spec = importlib.util.spec_from_file_location("idle_timeout_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _scenario(timers: str) -> dict[str, float]:
    server = _example().IdleTimeoutServer(IDLE, timers)
    port = await server.start()
    seen: dict[str, float] = {}

    async def idle_client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        sent = time.monotonic()
        assert await reader.readexactly(5) == b"hello"
        assert await reader.read() == b""  # the server closed it
        seen["idle"] = time.monotonic() - sent
        writer.close()

    async def silent_client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        opened = time.monotonic()
        assert await reader.read() == b""
        seen["silent"] = time.monotonic() - opened
        writer.close()

    async def busy_client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        last = 0.0
        for i in range(20):  # 20 messages, 50 ms apart: 1 s of activity, each gap well inside IDLE
            if i:
                await asyncio.sleep(0.05)
            writer.write(b"%03d" % i)
            last = time.monotonic()
            assert await reader.readexactly(3) == b"%03d" % i  # still open and echoing
        assert await reader.read() == b""
        seen["busy"] = time.monotonic() - last
        writer.close()

    try:
        await asyncio.wait_for(asyncio.gather(idle_client(), silent_client(), busy_client()), 10)
        await asyncio.sleep(0.05)
        assert server.stats["idle_closed"] == 3 and server.stats["open"] == 0
        assert server.stats["messages"] == 21
        # Never early. The wheel's timers promise it exactly; uvloop runs asyncio's own timers up to a
        # rounding of loop.time() early (seen: -2.8e-14 s), which is not this example's to fix.
        assert len(server.lateness) == 3
        assert min(server.lateness) >= (0.0 if timers == "wheel" else -1e-9)
    finally:
        await server.stop()
    return seen


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop if uvloop is not None else None}


# Real sockets and the real clock. A connection must not close before IDLE after its last message (a strict
# bound: the server resets on receipt, after the send), and must close within 0.5 s after that: the wheel
# fires at the exact deadline, so only a loaded machine's scheduling delay can add to it, and 0.5 s is
# more than 100x the median delay seen here. The busy client's gaps (50 ms) are 6x inside IDLE.
@pytest.mark.realtime
@pytest.mark.parametrize("loop_name", sorted(LOOPS))
@pytest.mark.parametrize("timers", ["wheel", "asyncio"])
def test_idle_connections_close_on_time_and_busy_ones_stay_open(timers: str, loop_name: str) -> None:
    make_loop = LOOPS[loop_name]
    if make_loop is None:
        pytest.skip("uvloop is not installed (pip install 'timerwheel[compare]'; not on Windows)")
    loop = make_loop()
    try:
        seen = loop.run_until_complete(_scenario(timers))
    finally:
        loop.close()
    for name in ("idle", "silent", "busy"):
        assert IDLE - 0.001 <= seen[name] <= IDLE + 0.5, (name, seen)


def test_the_switch_is_checked() -> None:
    with pytest.raises(ValueError, match="timers"):
        _example().IdleTimeoutServer(IDLE, "heap")
