"""The load generator of the echo server (timerwheel.bench.server): N connections on 127.0.0.1, and the load
on them, in a process of its own (uvloop if it is installed).

    python -m timerwheel.bench.loadgen --ports 40001,40002 --conns 10000

It opens the connections (each sends one message), prints one JSON line, then takes commands on stdin:
`saturate` (each connection one message in flight, sent again as soon as its echo is back), `rate R A`
(R messages per second in all, round-robin over the first A connections), `pause`, `count`, `latency`
(the round trips' p50 and p99 since the last `latency`, in microseconds), `quit`. It stops by itself
after --max-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from time import perf_counter
from typing import Any, cast

from .server import LOOPS, MESSAGE, Commands, new_loop, raise_fd_limit, say

__all__ = ["Generator", "main"]


def percentiles(seconds: list[float]) -> dict[str, Any]:
    """The median and the 99th percentile of round trips, in microseconds (None: there were none)."""
    if not seconds:
        return {"round_trips": 0, "p50_us": None, "p99_us": None}
    ordered = sorted(seconds)
    at = min(len(ordered) - 1, int(0.99 * len(ordered)))
    return {
        "round_trips": len(ordered),
        "p50_us": ordered[len(ordered) // 2] * 1e6,
        "p99_us": ordered[at] * 1e6,
    }


class _Client(asyncio.Protocol):
    """One client connection: sends MESSAGE, waits for all of its echo."""

    __slots__ = ("gen", "index", "received", "sent_at", "transport", "waiting")

    def __init__(self, gen: Generator, index: int) -> None:
        self.gen, self.index = gen, index
        self.transport: asyncio.Transport | None = None
        self.waiting = False  # a message in flight
        self.received = 0
        self.sent_at = 0.0  # (perf_counter() as the message in flight was sent: its round trip's start)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)

    def send(self) -> None:
        assert self.transport is not None
        self.waiting = True
        self.sent_at = perf_counter()
        self.transport.write(MESSAGE)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received >= len(MESSAGE):
            self.received -= len(MESSAGE)
            self.waiting = False
            self.gen.round_trips.append(perf_counter() - self.sent_at)
            self.gen.echoed(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gen.lost += 1
        self.waiting = True  # never again: the generator skips it


class Generator:
    """N connections to the server's ports, and the load on them: saturated or at a fixed rate."""

    TICK = 0.005  # seconds between two rate ticks

    def __init__(self, loop: asyncio.AbstractEventLoop, ports: list[int], conns: int) -> None:
        self.loop, self.ports, self.conns = loop, ports, conns
        self.clients: list[_Client] = []
        self.mode = "pause"
        self.echoes = self.lost = self.failed = 0
        self.rate = 0.0
        self.active = 0
        self.cursor = 0
        self.sent = 0
        self.rate_start = 0.0
        self.ticker: asyncio.TimerHandle | None = None
        self.round_trips: list[float] = []  # (seconds, since the last `latency` command)

    async def connect(self, host: str = "127.0.0.1", at_once: int = 256) -> None:
        """Open the connections, `at_once` at a time; each sends one message (its first)."""

        async def one(index: int) -> None:
            try:
                port = self.ports[index % len(self.ports)]
                _, client = await self.loop.create_connection(lambda: _Client(self, index), host, port)
            except OSError:
                self.failed += 1
                return
            self.clients.append(client)
            client.send()

        for start in range(0, self.conns, at_once):
            await asyncio.gather(*(one(i) for i in range(start, min(start + at_once, self.conns))))

    def echoed(self, client: _Client) -> None:
        self.echoes += 1
        if self.mode == "saturate":
            client.send()

    def set_mode(self, mode: str, rate: float = 0.0, active: int = 0) -> None:
        self.mode = mode
        if self.ticker is not None:
            self.ticker.cancel()
            self.ticker = None
        if mode == "saturate":
            for client in self.clients:
                if not client.waiting:
                    client.send()
        elif mode == "rate":
            self.rate, self.active = rate, max(1, min(active or len(self.clients), len(self.clients)))
            self.cursor = self.sent = 0
            self.rate_start = self.loop.time()
            self._tick()

    def _tick(self) -> None:
        """Send what the rate owes since the phase began, round-robin over the active connections: at most
        two ticks' worth, so that a late tick (a busy loop) does not turn the load into bursts."""
        owed = int((self.loop.time() - self.rate_start) * self.rate) - self.sent
        due = min(owed, int(2 * self.TICK * self.rate) + 1)
        self.sent += owed - due  # dropped: the rate is a ceiling, not a debt
        clients, active = self.clients, self.active
        tries = 0
        while due > 0 and tries < active:  # bounded: one pass over the active connections at most
            client = clients[self.cursor]
            self.cursor = (self.cursor + 1) % active
            tries += 1
            if not client.waiting:
                client.send()
                due -= 1
                self.sent += 1
        self.sent += due  # what could not be sent (all in flight) is dropped too
        self.ticker = self.loop.call_later(self.TICK, self._tick)


async def _load_main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    gen = Generator(loop, [int(p) for p in args.ports.split(",")], args.conns)
    done = loop.create_future()

    def command(line: str) -> None:
        words = line.split()
        if not words:
            return
        if words[0] == "saturate":
            gen.set_mode("saturate")
        elif words[0] == "rate":
            gen.set_mode("rate", float(words[1]), int(words[2]) if len(words) > 2 else 0)
        elif words[0] == "pause":
            gen.set_mode("pause")
        elif words[0] == "count":
            say({"echoes": gen.echoes, "lost": gen.lost})
        elif words[0] == "latency":  # the round trips since the last `latency`: percentiles, in us
            say(percentiles(gen.round_trips))
            gen.round_trips = []
        elif words[0] == "quit" and not done.done():
            done.set_result(None)

    try:
        async with asyncio.timeout(args.max_seconds):
            await gen.connect()
            say({"connected": len(gen.clients), "failed": gen.failed, "fd_limit": args.fd_limit})
            commands = Commands(loop, command)
            await asyncio.wait([done, commands.done], return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        say({"error": f"the load generator ran out of time ({args.max_seconds} s)"})
    finally:
        gen.set_mode("pause")
        for client in gen.clients:
            if client.transport is not None:
                client.transport.close()


def main(argv: list[str] | None = None) -> int:
    """The load generator's process."""
    parser = argparse.ArgumentParser(prog="python -m timerwheel.bench.loadgen")
    parser.add_argument("--ports", required=True)
    parser.add_argument("--conns", type=int, required=True)
    parser.add_argument("--loop", choices=LOOPS, default=None, help="default: uvloop if installed")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    args.fd_limit = raise_fd_limit(args.conns + 256)
    if args.loop is None:
        try:
            import uvloop  # noqa: F401

            args.loop = "uvloop"
        except ImportError:
            args.loop = "asyncio"
    loop, _ = new_loop(args.loop)
    try:
        loop.run_until_complete(_load_main(args))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
