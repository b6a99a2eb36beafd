"""An asyncio TCP echo server that closes connections idle for more than --idle seconds.

Each connection's idle timeout is reset on every read. With --timers wheel the timeouts live in a
timerwheel.AsyncScheduler (sched.timeout); with --timers asyncio they are asyncio.timeout, one TimerHandle
on the loop's heap per connection and a new one per reset. The code is otherwise the same: the swap is one
line.

    python examples/idle_timeout_server.py --port 8007 --idle 10 --timers wheel

With --monitor it measures the loop (the stdlib loop only: it wraps the loop's selector): the longest
time the loop was busy between two waits for I/O (a stall), the most timer handles on the loop, the
longest time spent in timer upkeep (ours: one dispatch of the wheel; asyncio's: one rebuild of its heap),
and the longest pause of the garbage collector (a stall that is not the timers').
On exit (Ctrl-C, SIGTERM, or end of stdin with --stdin-control) it prints its figures as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import heapq
import json
import signal
import sys
import time
from typing import Any

from timerwheel import AsyncScheduler


class IdleTimeoutServer:
    """The server: serve() until stop(); `stats` counts connections and idle closes."""

    def __init__(self, idle: float, timers: str) -> None:
        if timers not in ("wheel", "asyncio"):
            raise ValueError(f"timers must be 'wheel' or 'asyncio', got {timers!r}")
        self.idle = idle
        self.timers = timers
        self.sched: AsyncScheduler | None = None
        self.server: asyncio.Server | None = None
        self.stats = {"connections": 0, "open": 0, "idle_closed": 0, "messages": 0}
        self.lateness: list[float] = []  # how long after its deadline each idle connection was closed

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on host:port (0: any free port); return the port."""
        if self.timers == "wheel":
            self.sched = AsyncScheduler()
            self.sched.start()
        self.server = await asyncio.start_server(self._serve, host, port, backlog=4096)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, close every connection, close the scheduler."""
        if self.server is not None:
            self.server.close()
            if hasattr(self.server, "close_clients"):  # Python 3.13+
                self.server.close_clients()
        if self.sched is not None:
            await self.sched.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        self.stats["connections"] += 1
        self.stats["open"] += 1
        timeout = self.sched.timeout if self.sched is not None else asyncio.timeout  # the one-line swap
        idle = self.idle
        cm = None
        try:
            async with timeout(idle) as cm:
                while data := await reader.read(65536):
                    cm.reschedule(loop.time() + idle)  # the reset, on every read
                    self.stats["messages"] += 1
                    writer.write(data)
                    if writer.transport.get_write_buffer_size() > 65536:
                        await writer.drain()
        except TimeoutError:
            self.stats["idle_closed"] += 1
            deadline = cm.when() if cm is not None else None
            if deadline is not None:
                self.lateness.append(loop.time() - deadline)
        except (ConnectionError, OSError):
            pass
        finally:
            self.stats["open"] -= 1
            writer.close()


class LoopMonitor:
    """Measures a running stdlib event loop by wrapping its selector (asyncio's private attributes)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, server: IdleTimeoutServer) -> None:
        self.loop = loop
        self.longest_busy = 0.0  # the longest time between a return from select() and the next call
        self.most_handles = 0  # the most timer handles on the loop at once
        self.longest_upkeep = 0.0  # the longest single dispatch of our wheel, or rebuild of asyncio's heap
        self.longest_gc = 0.0  # the longest pause of the garbage collector: a stall that is not the timers'
        self._gc_start = 0.0
        self.iterations = 0
        self._returned: float | None = None
        selector = loop._selector  # type: ignore[attr-defined]
        select = selector.select

        def timed_select(timeout: float | None = None) -> Any:
            now = time.perf_counter()
            if self._returned is not None:
                self.longest_busy = max(self.longest_busy, now - self._returned)
            self.iterations += 1
            self.most_handles = max(self.most_handles, len(loop._scheduled))  # type: ignore[attr-defined]
            events = select(timeout)
            self._returned = time.perf_counter()
            return events

        selector.select = timed_select
        gc.callbacks.append(self._on_gc)
        if server.sched is not None:  # time each dispatch of the wheel
            sched = server.sched
            on_wake = sched._on_wake

            def timed_on_wake() -> None:
                start = time.perf_counter()
                on_wake()
                self.longest_upkeep = max(self.longest_upkeep, time.perf_counter() - start)

            sched._on_wake = timed_on_wake  # type: ignore[method-assign]
        else:  # time asyncio's heap rebuilds (the O(n) part of its upkeep; the pops are O(log n))
            heapify = heapq.heapify

            def timed_heapify(heap: list[Any]) -> None:
                start = time.perf_counter()
                heapify(heap)
                self.longest_upkeep = max(self.longest_upkeep, time.perf_counter() - start)

            shim = type(sys)("heapq")
            shim.__dict__.update(heapq.__dict__)
            setattr(shim, "heapify", timed_heapify)  # noqa: B010
            asyncio.base_events.heapq = shim  # type: ignore[attr-defined]

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.longest_gc = max(self.longest_gc, time.perf_counter() - self._gc_start)

    def report(self) -> dict[str, Any]:
        """The figures, in milliseconds where they are times."""
        return {
            "longest_busy_ms": round(self.longest_busy * 1e3, 3),
            "longest_timer_upkeep_ms": round(self.longest_upkeep * 1e3, 3),
            "longest_gc_pause_ms": round(self.longest_gc * 1e3, 3),
            "most_timer_handles": self.most_handles,
            "iterations": self.iterations,
        }


async def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8007)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of silence before a close")
    parser.add_argument("--timers", choices=("wheel", "asyncio"), default="wheel")
    parser.add_argument("--monitor", action="store_true", help="measure the loop (stdlib loop only)")
    parser.add_argument("--stdin-control", action="store_true", help="exit when stdin reaches its end")
    args = parser.parse_args(argv)

    with contextlib.suppress(ImportError, ValueError, OSError):  # many connections need many descriptors
        import resource  # not on Windows

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    loop = asyncio.get_running_loop()
    server = IdleTimeoutServer(args.idle, args.timers)
    port = await server.start(args.host, args.port)
    monitor = LoopMonitor(loop, server) if args.monitor else None
    cpu_start = time.process_time()  # CPU time of this process, user + system
    print(f"listening on {args.host}:{port} (timers: {args.timers}, idle: {args.idle} s)", flush=True)

    done = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C ends it with KeyboardInterrupt
            loop.add_signal_handler(sig, done.set)
    if args.stdin_control:

        def on_stdin() -> None:
            if not sys.stdin.readline():
                done.set()

        loop.add_reader(sys.stdin.fileno(), on_stdin)
    await done.wait()

    figures: dict[str, Any] = {
        "timers": args.timers,
        "cpu_seconds": round(time.process_time() - cpu_start, 3),
    }
    figures.update(server.stats)
    late = sorted(server.lateness)
    if late:
        figures["lateness_ms"] = {
            "median": round(late[len(late) // 2] * 1e3, 3),
            "p99": round(late[int(len(late) * 0.99)] * 1e3, 3),
            "max": round(late[-1] * 1e3, 3),
        }
        figures["closed_over_100ms_late"] = sum(1 for x in late if x > 0.1)
    if monitor is not None:
        figures.update(monitor.report())
    await server.stop()
    print(json.dumps(figures), flush=True)
    return figures


if __name__ == "__main__":
    asyncio.run(main())
