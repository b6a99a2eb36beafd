"""Loopback load on examples/idle_timeout_server.py: wheel timeouts against asyncio's, under the same load.

Each run starts the server in its own process (stdlib loop, --monitor) and drives it from this process:
CONNS connections, each sending a 16-byte message about once a second (and reading the echo) for a random
2 to ACTIVE seconds, then going silent until the server closes it for idleness. Runs alternate between the
two kinds of timers. Reported per kind, as the median over the runs:

- server CPU: user + system seconds of the server process, whole run;
- longest stall: the longest time the server loop was busy between two waits for I/O;
- timer upkeep: the longest single dispatch of our wheel, or rebuild of asyncio's timer heap;
- timer handles: the most timer handles on the server loop at once;
- lateness: how long after its deadline the server closed each idle connection (median, p99, max, and
  how many more than 100 ms late); and how long after (last message sent + IDLE) the client saw the
  close, which adds the client's own delays (one Python process serving 10k connections), and how many
  closed before that deadline (must be none).

Everything stays on 127.0.0.1; every loop is bounded in count and time.

    python benchmarks/idle_server_load.py              # 10k connections, 3 runs per kind (~2 minutes)
    python benchmarks/idle_server_load.py --conns 2000 --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "examples" / "idle_timeout_server.py"
LATE_MS = 100.0


async def _client(
    port: int, active: float, idle: float, rng: random.Random, out: dict[str, list[float]]
) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        out["refused"].append(1)
        return
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + rng.uniform(2.0, active)
    next_send = loop.time() + rng.uniform(0.0, 1.0)
    last_send = loop.time()
    message = b"0123456789abcdef"
    try:
        last_send = loop.time()  # read before the write: the server's deadline is after it, strictly
        writer.write(message)  # at once: the idle clock started at accept
        await reader.readexactly(len(message))
        for _ in range(int(active) + 2):  # bounded: about one message a second while active
            if next_send >= stop_at:
                break
            await asyncio.sleep(max(0.0, next_send - loop.time()))
            last_send = loop.time()
            writer.write(message)
            await reader.readexactly(len(message))
            next_send += rng.uniform(0.5, 1.5)
        tail = await asyncio.wait_for(reader.read(), idle + 30.0)  # silent now: wait for the server's close
        closed = loop.time() - last_send - idle
        out["lateness" if tail == b"" else "errors"].append(closed)
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        out["errors"].append(loop.time() - last_send - idle)  # closed while active, reset, or never closed
    finally:
        writer.close()


async def _drive(port: int, conns: int, active: float, idle: float, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out: dict[str, list[float]] = {"lateness": [], "errors": [], "refused": []}
    clients = []
    for i in range(conns):
        clients.append(asyncio.ensure_future(_client(port, active, idle, rng, out)))
        if i % 200 == 199:
            await asyncio.sleep(0.02)  # a gentle ramp: the accept backlog never overflows
    await asyncio.wait_for(asyncio.gather(*clients), active + idle + 120.0)
    return out


def _run(kind: str, conns: int, active: float, idle: float, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, str(SERVER), "--port", "0", "--idle", str(idle), "--timers", kind]
    cmd += ["--monitor", "--stdin-control"]
    server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdin is not None
        line = server.stdout.readline()
        port = int(line.split()[2].rsplit(":", 1)[1])
        start = time.monotonic()
        out = asyncio.run(_drive(port, conns, active, idle, seed))
        wall = time.monotonic() - start
        server.stdin.close()
        figures: dict[str, Any] = json.loads(server.stdout.readline())
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
    late = sorted(out["lateness"])
    figures["wall_seconds"] = round(wall, 1)
    figures["client_lateness_ms"] = {
        "median": round(late[len(late) // 2] * 1e3, 2) if late else None,
        "p99": round(late[int(len(late) * 0.99)] * 1e3, 2) if late else None,
        "max": round(late[-1] * 1e3, 2) if late else None,
    }
    figures["closed_late"] = sum(1 for x in late if x * 1e3 > LATE_MS)
    figures["closed_early"] = sum(1 for x in late if x < 0)
    figures["errors"] = len(out["errors"]) + len(out["refused"])
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--conns", type=int, default=10_000)
    parser.add_argument("--active", type=float, default=10.0, help="longest active time of a connection")
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3, help="runs per kind of timers")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / ".build" / "idle_server.json")
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    runs: dict[str, list[dict[str, Any]]] = {"wheel": [], "asyncio": []}
    for i in range(args.runs):
        for kind in ("wheel", "asyncio") if i % 2 == 0 else ("asyncio", "wheel"):
            figures = _run(kind, args.conns, args.active, args.idle, seed=i)
            runs[kind].append(figures)
            print(json.dumps(figures), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(runs, indent=1))

    def med(kind: str, key: str, sub: str | None = None) -> float:
        values = [r[key][sub] if sub else r[key] for r in runs[kind]]
        return float(statistics.median(v for v in values if v is not None))

    print(f"\n{args.conns} connections, {args.runs} runs per kind, medians (python {sys.version.split()[0]})")
    print("| | wheel | asyncio |\n|---|---|---|")
    rows = [
        ("server CPU, s", "cpu_seconds", None),
        ("longest loop stall, ms", "longest_busy_ms", None),
        ("longest timer upkeep, ms", "longest_timer_upkeep_ms", None),
        ("longest GC pause, ms", "longest_gc_pause_ms", None),
        ("most timer handles on the loop", "most_timer_handles", None),
        ("close lateness at the server, median, ms", "lateness_ms", "median"),
        ("close lateness at the server, p99, ms", "lateness_ms", "p99"),
        ("close lateness at the server, max, ms", "lateness_ms", "max"),
        ("closed > 100 ms late, at the server", "closed_over_100ms_late", None),
        ("close seen by the client, median, ms", "client_lateness_ms", "median"),
        ("close seen by the client, p99, ms", "client_lateness_ms", "p99"),
        (f"close seen by the client > {LATE_MS:.0f} ms late", "closed_late", None),
        ("closed before the deadline, seen by the client", "closed_early", None),
        ("client errors", "errors", None),
    ]
    for label, key, sub in rows:
        print(f"| {label} | {med('wheel', key, sub):g} | {med('asyncio', key, sub):g} |")
    ratio = med("asyncio", "cpu_seconds") / med("wheel", "cpu_seconds")
    print(f"\nserver CPU, asyncio / wheel: {ratio:.3f}x")


if __name__ == "__main__":
    main()
