"""An echo server on plain asyncio Protocols, with one way of keeping its timers per pattern.

The server (one process, the stdlib loop or uvloop) echoes 16-byte messages. Each connection has an idle
deadline, pushed back on every message, and each message (a request) a deadline of its own. The only thing
that differs between patterns is a small strategy object per connection, `Timers`, with five operations:
arm the idle deadline, push it back (each message), start and end the request deadline, close.

    none             no timers: the baseline (the timers' share of the server's CPU is (pattern - none) /
                     pattern)
    call_later       cancel + loop.call_later per message (uvicorn's keep-alive); request deadline by
                     call_later + cancel
    asyncio.timeout  asyncio.timeout around the connection, rescheduled per message; one per request
    hand-kept        aiohttp's: close_at = loop.time() + idle per message, one loop timer per connection that
                     re-arms itself when it fires early; the request deadline likewise
    timerwheel       an AsyncScheduler: a call_later handle moved by handle.reset(idle) per message, and
                     sched.timeout() per request (the library's asyncio.timeout)
    timerwheel-handles  the same idle handle, and one more handle per connection for the request deadline:
                     reset(request) when a request starts, reset(inf) when it ends (nothing allocated)

asyncio.timeout needs a coroutine, so every pattern runs the same way: each connection has one task that
awaits its next message (the Protocol hands it over through a future), pushes the idle deadline back, and
handles the message inside `async with timers.request()`; callback patterns make that an `async with` of
their own start/end calls. A deadline that passes closes the connection (the idle one) or aborts it and
cancels its task (the request's); none closes anything before its deadline: a loop timer that fires early
re-arms itself (the wheel never fires early).

`python -m timerwheel.bench.server --pattern P --loop L` is the server process: it prints its ports as a
JSON line, then answers commands on stdin (`mark`: its CPU time and messages so far; `in-process N R`: the
CPU per message of N more connections driven R rounds without sockets; `quit`), each with one JSON line.
timerwheel.bench.scenario drives it and the load generator (timerwheel.bench.loadgen).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import selectors
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = [
    "LOOPS",
    "MESSAGE",
    "PATTERNS",
    "STRATEGIES",
    "Commands",
    "Connection",
    "EchoServer",
    "Timers",
    "cpu_seconds",
    "in_process",
    "new_loop",
    "peak_rss_kb",
    "raise_fd_limit",
    "say",
]

MESSAGE = b"0123456789abcdef"  # 16 bytes
PATTERNS = ("none", "call_later", "asyncio.timeout", "hand-kept", "timerwheel", "timerwheel-handles")
LOOPS = ("asyncio", "uvloop", "timerwheel.loop", "timerwheel.loop-uvloop")  # (the last two: wheel timers)
_INF = math.inf


# -- The timer strategies: one per pattern, one object per connection ------------------------------------


class _Scope:
    """`async with` over two plain calls: the request (or idle) deadline of a callback pattern."""

    __slots__ = ("enter", "exit")

    def __init__(self, enter: Callable[[], None], exit: Callable[[], None]) -> None:
        self.enter, self.exit = enter, exit

    async def __aenter__(self) -> None:
        self.enter()

    async def __aexit__(self, *exc: object) -> None:
        self.exit()


class Timers:
    """The timer strategy of one connection; this base class keeps no timer at all (the `none` pattern).

    idle() wraps the connection's life (entering arms the idle deadline, leaving closes the timers),
    push_idle() runs on every message, request() wraps the handling of one message. Subclasses fill in
    arm_idle, push_idle, start_request, end_request and close; a pattern whose deadlines are context
    managers of their own (asyncio.timeout) returns those from idle() and request() instead.
    """

    __slots__ = ("_idle", "_request", "conn", "idle_s", "loop", "request_s")

    def __init__(self, conn: Connection, idle: float, request: float) -> None:
        self.conn, self.idle_s, self.request_s = conn, idle, request
        self.loop = conn.loop
        self._idle = _Scope(self.arm_idle, self.close)
        self._request = _Scope(self.start_request, self.end_request)

    def idle(self) -> Any:
        return self._idle

    def request(self) -> Any:
        return self._request

    def arm_idle(self) -> None:
        pass

    def push_idle(self) -> None:
        pass

    def start_request(self) -> None:
        pass

    def end_request(self) -> None:
        pass

    def close(self) -> None:
        pass

    def expired(self) -> tuple[str, float] | None:
        """For a pattern whose deadlines raise TimeoutError: which one expired, and its deadline."""
        return None


class CallLaterTimers(Timers):
    """uvicorn's pattern: cancel the idle handle and add a new one on every message."""

    __slots__ = ("idle_handle", "request_handle")

    def arm_idle(self) -> None:
        self.idle_handle = self.loop.call_later(self.idle_s, self._idle_fired)

    def push_idle(self) -> None:
        self.idle_handle.cancel()
        self.idle_handle = self.loop.call_later(self.idle_s, self._idle_fired)

    def start_request(self) -> None:
        self.request_handle = self.loop.call_later(self.request_s, self._request_fired)

    def end_request(self) -> None:
        self.request_handle.cancel()

    def close(self) -> None:
        self.idle_handle.cancel()

    # A loop may run a timer a little early (uvloop's due is a float of whole milliseconds, so by one ulp):
    # never close before the deadline. The re-armed timer carries the deadline, since uvloop makes a
    # timer due within a millisecond a call_soon handle, which has no when().
    def _idle_fired(self, when: float | None = None) -> None:
        if when is None:
            when = self.idle_handle.when()
        if self.loop.time() < when:
            self.idle_handle = self.loop.call_at(when, self._idle_fired, when)
        else:
            self.conn.idle_due(when)

    def _request_fired(self, when: float | None = None) -> None:
        if when is None:
            when = self.request_handle.when()
        if self.loop.time() < when:
            self.request_handle = self.loop.call_at(when, self._request_fired, when)
        else:
            self.conn.request_due(when)


class AsyncioTimeoutTimers(Timers):
    """asyncio.timeout around the connection (rescheduled per message) and around each request."""

    __slots__ = ("idle_cm", "request_cm")

    def idle(self) -> Any:
        self.idle_cm = asyncio.timeout(self.idle_s)
        return self.idle_cm

    def push_idle(self) -> None:
        self.idle_cm.reschedule(self.loop.time() + self.idle_s)

    def request(self) -> Any:
        self.request_cm = cm = asyncio.timeout(self.request_s)
        return cm

    def expired(self) -> tuple[str, float] | None:
        for kind, name in (("request", "request_cm"), ("idle", "idle_cm")):
            cm = getattr(self, name, None)
            if cm is not None and cm.expired():
                return kind, cm.when()
        return None


class HandKeptTimers(Timers):
    """aiohttp's pattern: a message stores the new deadline; one loop timer per deadline kind re-arms
    itself at the stored deadline when it fires before it (and stops when no request is running)."""

    __slots__ = ("close_at", "idle_handle", "request_at", "request_handle")

    def arm_idle(self) -> None:
        self.close_at = self.loop.time() + self.idle_s
        self.idle_handle = self.loop.call_at(self.close_at, self._idle_fired)
        self.request_at = _INF
        self.request_handle: asyncio.TimerHandle | None = None

    def push_idle(self) -> None:
        self.close_at = self.loop.time() + self.idle_s

    def start_request(self) -> None:
        self.request_at = self.loop.time() + self.request_s
        if self.request_handle is None:
            self.request_handle = self.loop.call_at(self.request_at, self._request_fired)

    def end_request(self) -> None:
        self.request_at = _INF

    def close(self) -> None:
        self.idle_handle.cancel()
        if self.request_handle is not None:
            self.request_handle.cancel()

    def _idle_fired(self) -> None:
        if self.loop.time() < self.close_at:
            self.idle_handle = self.loop.call_at(self.close_at, self._idle_fired)
        else:
            self.conn.idle_due(self.close_at)

    def _request_fired(self) -> None:
        if self.request_at == _INF:  # no request running: no timer until the next one starts
            self.request_handle = None
        elif self.loop.time() < self.request_at:
            self.request_handle = self.loop.call_at(self.request_at, self._request_fired)
        else:
            self.conn.request_due(self.request_at)


class WheelTimers(Timers):
    """The library's pattern: an AsyncScheduler handle moved by reset() per message (O(1), nothing
    allocated) and sched.timeout() per request. The wheel never fires a timer before its due."""

    __slots__ = ("idle_handle", "request_cm", "sched")

    def __init__(self, conn: Connection, idle: float, request: float) -> None:
        super().__init__(conn, idle, request)
        self.sched = conn.server.sched

    def arm_idle(self) -> None:
        self.idle_handle = self.sched.call_later(self.idle_s, self._idle_fired)

    def push_idle(self) -> None:
        self.idle_handle.reset(self.idle_s)

    def request(self) -> Any:
        self.request_cm = cm = self.sched.timeout(self.request_s)
        return cm

    def close(self) -> None:
        self.idle_handle.cancel()

    def _idle_fired(self) -> None:
        self.conn.idle_due(self.idle_handle.when())

    def expired(self) -> tuple[str, float] | None:
        cm = getattr(self, "request_cm", None)
        return ("request", cm.when()) if cm is not None and cm.expired() else None


class WheelHandleTimers(WheelTimers):
    """As WheelTimers, with the request deadline on a second handle per connection: reset(request) when a
    request starts, reset(inf) when it ends (an infinite delay takes it out of the wheel)."""

    __slots__ = ("request_handle",)

    def arm_idle(self) -> None:
        super().arm_idle()
        self.request_handle = self.sched.call_later(_INF, self._request_fired)

    def request(self) -> Any:
        return self._request

    def start_request(self) -> None:
        self.request_handle.reset(self.request_s)

    def end_request(self) -> None:
        self.request_handle.reset(_INF)

    def close(self) -> None:
        self.idle_handle.cancel()
        self.request_handle.cancel()

    def _request_fired(self) -> None:
        self.conn.request_due(self.request_handle.when())

    def expired(self) -> tuple[str, float] | None:
        return None


STRATEGIES: dict[str, type[Timers]] = {
    "none": Timers,
    "call_later": CallLaterTimers,
    "asyncio.timeout": AsyncioTimeoutTimers,
    "hand-kept": HandKeptTimers,
    "timerwheel": WheelTimers,
    "timerwheel-handles": WheelHandleTimers,
}


# -- The server ------------------------------------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One connection: the Protocol hands each message to the connection's task, which echoes it."""

    def __init__(self, server: EchoServer) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.waiter: asyncio.Future[bytes | None] | None = None
        self.pending: collections.deque[bytes] = collections.deque()
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        self.server.stats["connections"] += 1
        self.server.stats["open"] += 1
        self.task = self.loop.create_task(self.serve())

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(data)
                return
        self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.stats["open"] -= 1
        self.eof = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> bytes | None:
        """The next message, or None once the peer has gone."""
        if self.pending:
            return self.pending.popleft()
        if self.eof:
            return None
        self.waiter = waiter = self.loop.create_future()
        data: bytes | None = await waiter
        return data

    async def serve(self) -> None:
        server = self.server
        timers = STRATEGIES[server.pattern](self, server.idle, server.request)
        try:
            async with timers.idle():
                while (data := await self.receive()) is not None:
                    timers.push_idle()
                    async with timers.request():
                        await self.handle(data)
        except TimeoutError:  # an asyncio.timeout-like deadline
            expired = timers.expired()
            if expired is not None:
                kind, deadline = expired
                server.record(kind, deadline)
        finally:
            assert self.transport is not None
            self.transport.close()

    async def handle(self, data: bytes) -> None:
        """The request: echo the message (after `work` seconds, when the server is given any)."""
        if self.server.work:
            await asyncio.sleep(self.server.work)
        assert self.transport is not None
        self.transport.write(data)
        self.server.stats["bytes"] += len(data)

    def idle_due(self, deadline: float) -> None:
        """The idle deadline passed (a callback pattern): close the connection."""
        self.server.record("idle", deadline)
        assert self.transport is not None
        self.transport.close()

    def request_due(self, deadline: float) -> None:
        """The request deadline passed (a callback pattern): abort the connection, cancel its task."""
        self.server.record("request", deadline)
        assert self.transport is not None and self.task is not None
        self.transport.abort()
        self.task.cancel()


_STAT_NAMES = ("connections", "open", "bytes", "idle_closed", "request_closed", "early")


@dataclass
class EchoServer:
    """The echo server with one timer pattern; start() listens, stop() closes everything.

    Args:
        pattern: one of PATTERNS. idle: seconds a connection may stay silent. request: seconds a message
        may take. work: seconds each message's handling waits before its echo (0: none; for tests).
    """

    pattern: str
    idle: float = 10.0
    request: float = 5.0
    work: float = 0.0
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_STAT_NAMES, 0))
    lateness: list[float] = field(default_factory=list)  # loop time of each close - its deadline, seconds
    sched: Any = None
    servers: list[asyncio.Server] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.pattern not in STRATEGIES:
            raise ValueError(f"pattern must be one of {', '.join(STRATEGIES)}, got {self.pattern!r}")

    async def start(self, listeners: int = 1, host: str = "127.0.0.1") -> list[int]:
        """Listen on `listeners` free ports of host; return them."""
        self.loop = asyncio.get_running_loop()
        if self.pattern.startswith("timerwheel"):
            from timerwheel import AsyncScheduler

            self.sched = AsyncScheduler()
            self.sched.start()
        for _ in range(listeners):
            server = await self.loop.create_server(lambda: Connection(self), host, 0, backlog=4096)
            self.servers.append(server)
        return [int(s.sockets[0].getsockname()[1]) for s in self.servers]

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        if self.sched is not None:
            await self.sched.close()

    def record(self, kind: str, deadline: float) -> None:
        """A deadline passed and closed a connection: count it, and how late the close was."""
        late = self.loop.time() - deadline
        self.stats[f"{kind}_closed"] += 1
        self.stats["early"] += late < 0
        self.lateness.append(late)

    @property
    def messages(self) -> int:
        return self.stats["bytes"] // len(MESSAGE)


class CountingSelector(selectors.DefaultSelector):
    """The stdlib loop's selector, counting its waits: one per loop iteration."""

    def __init__(self) -> None:
        super().__init__()
        self.iterations = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.iterations += 1
        return super().select(timeout)


def new_loop(kind: str) -> tuple[asyncio.AbstractEventLoop, CountingSelector | None]:
    """A new event loop of `kind` (one of LOOPS), and its counting selector (selector loops only)."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop(), None
    if kind == "timerwheel.loop-uvloop":
        from timerwheel.loop import new_event_loop

        return new_event_loop("uvloop"), None
    if kind not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {kind!r}")
    selector = CountingSelector()
    if kind == "timerwheel.loop":
        from timerwheel.loop import SelectorEventLoop

        return SelectorEventLoop(selector), selector
    return asyncio.SelectorEventLoop(selector), selector


def raise_fd_limit(need: int) -> int:
    """Raise this process's open-file limit towards `need` (the soft limit up to the hard one, and the hard
    one too where the process may); return the soft limit now in force."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return need
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            soft, hard = need, need
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return int(soft)


def cpu_seconds() -> float:
    """User + system CPU time of this process, in seconds (to the nanosecond where the system counts so:
    os.times() counts in clock ticks of 10 ms)."""
    return time.process_time()


def peak_rss_kb() -> int | None:
    """This process's peak resident memory so far, in KiB (None where the platform does not say)."""
    try:
        import resource
    except ImportError:  # (Windows)
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # (macOS counts bytes, Linux KiB)


class Commands:
    """Lines on stdin, read by the running loop: each one handed to `handle`; end of input calls `eof`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handle: Callable[[str], None]) -> None:
        self.loop, self.handle, self.buffer = loop, handle, b""
        self.done = loop.create_future()
        self.fd = sys.stdin.fileno()
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        chunk = os.read(self.fd, 4096)
        if not chunk:
            self.loop.remove_reader(self.fd)
            if not self.done.done():
                self.done.set_result(None)
            return
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.handle(line.decode().strip())


def say(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


class _NullTransport:
    """A transport that sends nothing: in_process() measures the server's own work per message."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def in_process(server: EchoServer, conns: int, rounds: int, batches: int = 3) -> float:
    """CPU microseconds per message of `conns` more connections of `server`, each handed a message per
    round, without sockets (a transport that sends nothing): the server's own work, its timers included,
    without the system's. The median of `batches` batches of `rounds` rounds; the server's other
    connections stay open meanwhile."""
    fakes = []
    for _ in range(conns):
        conn = Connection(server)
        conn.connection_made(cast(asyncio.Transport, _NullTransport()))
        fakes.append(conn)
    await asyncio.sleep(0)  # each connection's task starts, arms its idle deadline, waits for a message
    before = server.stats["bytes"]
    samples = []
    for _ in range(batches):
        bytes_, start = server.stats["bytes"], cpu_seconds()
        for _ in range(rounds):
            for conn in fakes:
                conn.data_received(MESSAGE)
            await asyncio.sleep(0)  # the tasks wake, echo, wait again
            await asyncio.sleep(0)
        messages = (server.stats["bytes"] - bytes_) // len(MESSAGE)
        samples.append((cpu_seconds() - start) / messages * 1e6 if messages else math.nan)
    for conn in fakes:
        conn.connection_lost(None)
    await asyncio.sleep(0)
    server.stats["connections"] -= conns  # these were not the load generator's
    server.stats["bytes"] = before
    return statistics.median(samples)


async def _serve_main(args: argparse.Namespace, selector: CountingSelector | None) -> None:
    server = EchoServer(args.pattern, idle=args.idle, request=args.request)
    ports = await server.start(args.listeners)
    loop = asyncio.get_running_loop()

    def command(line: str) -> None:
        if line == "mark":
            say(
                {
                    "cpu": cpu_seconds(),
                    "messages": server.messages,
                    "iterations": selector.iterations if selector is not None else None,
                    "time": loop.time(),
                    "max_rss_kb": peak_rss_kb(),
                    **server.stats,
                }
            )
        elif line.startswith("in-process"):
            _, conns, rounds = line.split()
            measure(int(conns), int(rounds))
        elif line == "quit" and not commands.done.done():
            commands.done.set_result(None)

    def measure(conns: int, rounds: int) -> None:
        task = loop.create_task(in_process(server, conns, rounds))
        task.add_done_callback(lambda t: say({"us_per_message": t.result()}))

    commands = Commands(loop, command)
    say({"ports": ports, "pid": os.getpid(), "fd_limit": args.fd_limit})
    try:
        await asyncio.wait_for(commands.done, args.max_seconds)
    except TimeoutError:
        pass
    finally:
        late = server.lateness
        say({"closed": server.stats, "max_lateness": max(late) if late else None})
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    """The server process."""
    parser = argparse.ArgumentParser(prog="python -m timerwheel.bench.server")
    parser.add_argument("--pattern", choices=PATTERNS, required=True)
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    parser.add_argument("--listeners", type=int, default=1)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--request", type=float, default=5.0)
    parser.add_argument("--fds", type=int, default=1024, help="open files needed")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    args.fd_limit = raise_fd_limit(args.fds)
    loop, selector = new_loop(args.loop)
    try:
        loop.run_until_complete(_serve_main(args, selector))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
