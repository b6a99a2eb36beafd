"""KeyedScheduler on PostgresStore: the figures of issue 16, on a PostgreSQL server this script starts
itself (tests/_pg.py: initdb and pg_ctl in a temporary directory, 127.0.0.1 only).

    python benchmarks/shared.py [--keys N] [--period P] [--seconds S] [--workers W] [--processes 1,2,4]

- fires per second sustained with 1, 2 and 4 processes (tests/_shared_child.py: N keys, each firing every
  P seconds on a grid of its own; what is demanded is N / P fires per second), with the lateness of the
  fires (start of the run minus its scheduled time, on the database's clock) at p50 and p99, the fires
  run twice and the fires lost (see tests/_shared_child.py's Journal), measured over the last S - 2 s;
  and the CPU spent per fire run over that span, in the processes and in the server (Linux: /proc);
- takeover: 4 processes, one SIGKILLed; how long its keys went without a fire (from the kill to the
  first fire of each of its keys by another process): median and max, against the lease (2 s here);
- how soon a remove() in one process is seen by the process that held the key (LISTEN/NOTIFY): median
  of 50.

The machine is shared by the children and the server: read the figures as what 2 cores give.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import _pg
from tests._shared_child import Journal, seed, spawn

from timerwheel import KeyedScheduler, PostgresStore, ThreadedScheduler


def cpu_seconds(pids: list[int] | None = None) -> float:
    """Seconds of CPU spent so far by the processes `pids`, or by those named postgres (the server and
    its sessions) if None; from /proc, so Linux only."""
    total = 0
    for pid in pids if pids is not None else [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if pids is not None or "(postgres)" in stat:
            fields = stat[stat.rfind(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def sustained(server: _pg.Server, processes: int, keys: int, period: float, seconds: float) -> dict[str, Any]:
    dsn = server.database("b")
    seed(dsn, keys, period)
    journal = Path(tempfile.mkdtemp()) / "journal"
    journal.touch()
    children = [spawn(dsn, journal, f"p{i}", 2.0, period) for i in range(processes)]
    pids = [child.pid for child in children]
    began = time.time()
    time.sleep(2)
    cpu = cpu_seconds(pids), cpu_seconds()
    time.sleep(seconds - 3)
    cpu = cpu_seconds(pids) - cpu[0], cpu_seconds() - cpu[1]  # (over the window measured)
    time.sleep(1)
    ended = time.time()
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        child.wait(timeout=120)
    j = Journal(journal)
    check = j.check(killed=set(), period=period)
    window = [fire for fire in j.starts if began + 2 <= j.started_at[fire] / 1e6 <= ended - 1]  # (run then)
    late = sorted(j.late_of[fire] for fire in window)
    return {
        "processes": processes,
        "demanded": keys / period,
        "fires_per_s": len(window) / (ended - 1 - began - 2),
        "p50_ms": 1000 * late[len(late) // 2],
        "p99_ms": 1000 * late[int(len(late) * 0.99)],
        "twice": len(check["twice"]),
        "lost": len(check["lost"]),
        "cpu_us": (1e6 * cpu[0] / max(1, len(window)), 1e6 * cpu[1] / max(1, len(window))),
    }


def killed_run(server: _pg.Server, keys: int, period: float) -> tuple[Path, float]:
    """4 processes sharing `keys` keys; p0 SIGKILLed after 5 s, the others stopped 6 s later: the journal
    and when p0 was killed."""
    dsn = server.database("b")
    seed(dsn, keys, period)
    journal = Path(tempfile.mkdtemp()) / "journal"
    journal.touch()
    children = [spawn(dsn, journal, f"p{i}", 2.0, period) for i in range(4)]
    time.sleep(5.0)
    killed_at = time.time()
    children[0].send_signal(signal.SIGKILL)
    children[0].wait()
    time.sleep(6.0)
    for child in children[1:]:
        child.send_signal(signal.SIGTERM)
    for child in children[1:]:
        child.wait(timeout=120)
    return journal, killed_at


def gaps(j: Journal, killed_at: float, victim: str = "p0") -> list[float]:
    """For each key whose last fire before the kill was started by the victim: how long after the kill its
    next fire started (in another process), in seconds. Keys that did not fire again are left out."""
    last: dict[str, tuple[int, str]] = {}
    after: dict[str, int] = {}
    for (key, _), who in j.starts.items():
        started = j.started_at[(key, _)]
        if started <= killed_at * 1e6:
            if key not in last or started > last[key][0]:
                last[key] = (started, who[-1])
        elif who[-1] != victim:
            after[key] = min(after.get(key, started), started)
    return [after[key] / 1e6 - killed_at for key, (_, who) in last.items() if who == victim and key in after]


def takeover(server: _pg.Server, keys: int, period: float) -> dict[str, Any]:
    journal, killed_at = killed_run(server, keys, period)
    j = Journal(journal)
    victims = {key for (key, _), who in j.starts.items() if who[-1] == "p0"}
    gap = gaps(j, killed_at)
    check = j.check(killed={"p0"}, period=period)
    return {
        "victim_keys": len(victims),
        "taken_over": len(gap),
        "median_s": statistics.median(gap) if gap else None,
        "max_s": max(gap) if gap else None,
        "twice": len(check["twice"]),
        "reruns": check["reruns"],
        "lost": len(check["lost"]),
    }


def notify_latency(server: _pg.Server) -> float:
    dsn = server.database("b")
    nodes = []
    for _ in range(2):
        store = PostgresStore(dsn, lease=2.0)
        keyed = KeyedScheduler(
            ThreadedScheduler(wall_clock=store.wall), lambda *_: None, lambda *_: None, store=store
        )
        keyed.start()
        nodes.append(keyed)
    a, b = nodes
    seen = []
    for i in range(50):
        a.upsert(i, None)
        began = time.monotonic()
        b.remove(i)
        while a.get(i) is not None:
            time.sleep(0.0002)
        seen.append(time.monotonic() - began)
    for keyed in nodes:
        keyed.close()
    return statistics.median(seen)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--period", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--workers", type=int, default=2, help="each process's ThreadedScheduler workers")
    parser.add_argument("--processes", default="1,2,4", help="the process counts, e.g. 1,2,4")
    parser.add_argument("--no-takeover", action="store_true", help="only the sustained rates")
    args = parser.parse_args()
    os.environ["WORKERS"] = str(args.workers)  # (the children's: tests/_shared_child.py)
    server = _pg.Server()
    try:
        print(
            "| processes | fires/s demanded | fires/s run | lateness p50 | p99 | run twice | lost "
            "| CPU per fire: processes | server |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for n in (int(p) for p in args.processes.split(",")):
            r = sustained(server, n, args.keys, args.period, args.seconds)
            print(
                f"| {n} | {r['demanded']:.0f} | {r['fires_per_s']:.0f} | {r['p50_ms']:.1f} ms | "
                f"{r['p99_ms']:.1f} ms | {r['twice']} | {r['lost']} | {r['cpu_us'][0]:.0f} us | "
                f"{r['cpu_us'][1]:.0f} us |",
                flush=True,
            )
        if args.no_takeover:
            return
        t = takeover(server, 1000, 0.5)
        print(
            f"\ntakeover after a SIGKILL (lease 2 s, renewal every 0.67 s): {t['taken_over']} of the "
            f"{t['victim_keys']} keys of the killed process fired again elsewhere after median "
            f"{t['median_s']:.2f} s, max {t['max_s']:.2f} s; run twice: {t['twice']} (reruns of its "
            f"interrupted fires: {t['reruns']}); lost: {t['lost']}"
        )
        print(f"remove() in one process seen by the holder: median {notify_latency(server) * 1000:.1f} ms")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
