"""APScheduler 4 (its pre-release, 4.0.0a6) on the workload of benchmarks/shared.py, on the same kind of
PostgreSQL server: its SQLAlchemyDataStore (psycopg 3, asyncio) and PsycopgEventBroker, N processes each
an AsyncScheduler (role both: schedules and runs jobs), K schedules with an IntervalTrigger every P
seconds, started on the same staggered grid as timerwheel's keys. Every job journals its schedule id and
scheduled fire time when it starts, so fires per second, lateness and duplicate runs are counted as for
timerwheel (tests/_shared_child.py's Journal).

    pip install "apscheduler==4.0.0a6" "sqlalchemy[asyncio]>=2.0.24" "psycopg[binary]>=3.2" sniffio .
    python benchmarks/shared_apscheduler4.py [--keys K] [--period P] [--seconds S]

(A separate virtual environment is simplest: APScheduler 4 and 3 cannot be installed side by side;
timerwheel is needed only for the grid of the keys and the journal's checks.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

JOURNAL_FD: int | None = None
NAME = ""


def tick(key: str) -> None:
    """The job: journal its start (the same line format as tests/_shared_child.py)."""
    from apscheduler import current_job

    job = current_job.get()
    at = round(job.scheduled_fire_time.timestamp() * 1_000_000)
    assert JOURNAL_FD is not None
    os.write(JOURNAL_FD, f"S {key} {at} {NAME} {round(time.time() * 1_000_000)}\n".encode())


def urls(port: int, name: str) -> tuple[str, str]:
    return (
        f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}",
        f"host=127.0.0.1 port={port} user=postgres dbname={name}",
    )


async def scheduler(url: str, conninfo: str) -> Any:
    from apscheduler import AsyncScheduler
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from apscheduler.eventbrokers.psycopg import PsycopgEventBroker
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    return AsyncScheduler(
        SQLAlchemyDataStore(engine), PsycopgEventBroker(conninfo), max_concurrent_jobs=100, lease_duration=2
    )


async def seed(url: str, conninfo: str, keys: int, period: float) -> None:
    from apscheduler import ConflictPolicy
    from apscheduler.triggers.interval import IntervalTrigger
    from tests._shared_child import grid

    start = datetime.fromtimestamp(time.time() + 3, UTC)
    async with await scheduler(url, conninfo) as sched:
        for i in range(keys):
            first = grid(period)(start, f"k{i}", None)
            await sched.add_schedule(
                tick,
                IntervalTrigger(seconds=period, start_time=first),
                id=f"k{i}",
                args=[f"k{i}"],
                conflict_policy=ConflictPolicy.replace,
            )


async def child(url: str, conninfo: str) -> None:
    sched = await scheduler(url, conninfo)
    async with sched:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(sched.stop()))
        await sched.run_until_stopped()


def run(port: int, processes: int, keys: int, period: float, seconds: float) -> dict[str, Any]:
    from tests._shared_child import Journal

    name = f"a_{uuid.uuid4().hex[:10]}"
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url, conninfo = urls(port, name)
    asyncio.run(seed(url, conninfo, keys, period))
    journal = Path(tempfile.mkdtemp()) / "journal"
    journal.touch()
    children = [
        subprocess.Popen([sys.executable, __file__, "--child", url, conninfo, str(journal), f"p{i}"])
        for i in range(processes)
    ]
    began = time.time()
    time.sleep(seconds)
    ended = time.time()
    for p in children:
        p.send_signal(signal.SIGTERM)
    for p in children:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
    j = Journal(journal)
    window = [fire for fire in j.starts if began + 4 <= j.started_at[fire] / 1e6 <= ended - 1]  # (run then)
    late = sorted(j.late_of[fire] for fire in window)
    twice = [fire for fire in window if len(j.starts[fire]) > 1]
    return {
        "processes": processes,
        "demanded": keys / period,
        "fires_per_s": len(window) / (ended - 1 - began - 4),
        "p50_ms": 1000 * late[len(late) // 2] if late else float("nan"),
        "p99_ms": 1000 * late[int(len(late) * 0.99)] if late else float("nan"),
        "twice": len(twice),
    }


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        global JOURNAL_FD, NAME
        url, conninfo, journal, NAME = sys.argv[2:6]
        JOURNAL_FD = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        asyncio.run(child(url, conninfo))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--period", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=14.0)
    args = parser.parse_args()
    import importlib.util

    from tests import _pg

    spec = importlib.util.spec_from_file_location("shared", Path(__file__).with_name("shared.py"))
    assert spec is not None and spec.loader is not None
    shared = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shared)
    server = _pg.Server()
    try:
        print("| processes | scheduler | fires/s demanded | fires/s run | lateness p50 | p99 | run twice |")
        print("|---|---|---|---|---|---|---|")
        for n in (1, 2, 4):
            for label, r in (
                ("timerwheel", shared.sustained(server, n, args.keys, args.period, args.seconds)),
                ("APScheduler 4.0.0a6", run(server.port, n, args.keys, args.period, args.seconds)),
            ):
                print(
                    f"| {n} | {label} | {r['demanded']:.0f} | {r['fires_per_s']:.0f} | "
                    f"{r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {r['twice']} |",
                    flush=True,
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
