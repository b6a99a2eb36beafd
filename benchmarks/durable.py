"""KeyedScheduler on SQLiteStore: the figures of issue 15, and APScheduler 3.11 on SQLite side by side.

    python benchmarks/durable.py [--keys N] [--aps-jobs M] [--repeat R]

Each figure is the median of R runs, each in a fresh temporary directory (and, for memory, a fresh process):

- upsert of a new key, committed (one transaction each): keys per second;
- replace_all of N keys (one transaction);
- start with N stored keys: a new KeyedScheduler on the file (loaded) and start() (catch-up decided, armed);
- resident bytes per stored key: the growth of the resident set size over loading and starting N keys;
- with a cheap next_run (an interval from the data: the figures are the store's and the bookkeeping's) and
  with a cron one (Cron.next_after, on cronsim: its own cost shown apart, "next_run of every key alone");
- against APScheduler 3.11 (BackgroundScheduler, SQLAlchemyJobStore on SQLite, default job defaults), M cron
  jobs ("* * * * *"): add them, restart (shut down, a new scheduler on the file started paused), modify each
  (timerwheel: upsert with new data; APScheduler: modify_job with new kwargs), remove each; per job, and
  the ratios;
- what each does after a 10-minute stop with those cron jobs (10 fires missed each): how many runs, how many
  missed fires reported. timerwheel's wall clock is set 10 minutes ahead at the restart; APScheduler's
  stored next run times are moved 10 minutes back, which is the same thing from its point of view.

Both use the file as they ship: timerwheel with WAL and synchronous=NORMAL, APScheduler with SQLAlchemy's
defaults (SQLite's rollback journal, synchronous=FULL): the figures compare the products as a user gets
them, not the two file formats at equal settings (see the --synchronous option for timerwheel's FULL).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from timerwheel import Cron, KeyedScheduler, Scheduler, SQLiteStore

CRONS: dict[str, Cron] = {}


def cron_next_run(now: datetime, key: Any, data: Any) -> datetime | None:
    """next_run from the key's data: {"cron": "* * * * *", ...} (the Crons are kept, not parsed again)."""
    expr = data["cron"]
    cron = CRONS.get(expr)
    if cron is None:
        cron = CRONS[expr] = Cron(expr)
    return cron.next_after(now)


def interval_next_run(now: datetime, key: Any, data: Any) -> datetime | None:
    """next_run from the key's data: {"every": seconds} after now (the cheap kind: the figures are then
    of the store and the bookkeeping)."""
    return now + timedelta(seconds=data["every"])


NEXT_RUNS = {"interval": interval_next_run, "cron": cron_next_run}
DATA = {"interval": {"every": 3600}, "cron": {"cron": "* * * * *"}}


def noop(*args: Any, **kwargs: Any) -> None:
    """The job."""


def keyed(path: Path, synchronous: str, kind: str = "cron", **kwargs: Any) -> KeyedScheduler:
    return KeyedScheduler(
        Scheduler(**kwargs), NEXT_RUNS[kind], noop, store=SQLiteStore(path, synchronous=synchronous)
    )


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timerwheel_figures(n: int, synchronous: str, kind: str) -> dict[str, float]:
    data = DATA[kind]
    next_run = NEXT_RUNS[kind]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.db"
        k = keyed(path, synchronous, kind)
        k.start()
        count = 5000
        t = time.perf_counter()
        for i in range(count):
            k.upsert(f"new{i}", data)
        upserts_per_s = count / (time.perf_counter() - t)
        mapping = {f"key{i}": data for i in range(n)}
        now = datetime.now(UTC)
        t = time.perf_counter()
        for key, value in mapping.items():
            next_run(now, key, value)
        next_run_s = time.perf_counter() - t
        t = time.perf_counter()
        k.replace_all(mapping)
        replace_all_s = time.perf_counter() - t
        k.close()
        t = time.perf_counter()
        again = keyed(path, synchronous, kind)
        again.start()
        start_s = time.perf_counter() - t
        assert len(again) == n + count - count  # (replace_all removed the others)
        again.close()
    return {
        f"{kind}: upserts_per_s": upserts_per_s,
        f"{kind}: next_run of every key alone, s": next_run_s,
        f"{kind}: replace_all_s": replace_all_s,
        f"{kind}: start_s": start_s,
    }


def memory_child(n: int) -> None:
    """In a fresh process: the resident bytes per stored key that loading and starting n keys adds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.db"
        k = keyed(path, "NORMAL", "interval")
        k.replace_all({f"key{i}": DATA["interval"] for i in range(n)})
        k.close()
        del k
        import gc

        gc.collect()
        before = rss()
        again = keyed(path, "NORMAL", "interval")
        again.start()
        print(json.dumps({"rss_bytes_per_key": (rss() - before) / n}))
        again.close()


def aps_scheduler(url: str) -> Any:
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    sched = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=url)}, timezone="UTC")
    return sched


def side_by_side(m: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.db"
        k = keyed(path, "NORMAL")
        k.start()
        t = time.perf_counter()
        for i in range(m):
            k.upsert(f"job{i}", {"cron": "* * * * *"})
        out["tw_add_us"] = (time.perf_counter() - t) / m * 1e6
        k.close()
        t = time.perf_counter()
        k = keyed(path, "NORMAL")
        k.start()
        out["tw_restart_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(m):
            k.upsert(f"job{i}", {"cron": "* * * * *", "v": 2})
        out["tw_modify_us"] = (time.perf_counter() - t) / m * 1e6
        t = time.perf_counter()
        for i in range(m):
            k.remove(f"job{i}")
        out["tw_remove_us"] = (time.perf_counter() - t) / m * 1e6
        k.close()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'aps.db'}"
        a = aps_scheduler(url)
        a.start(paused=True)
        t = time.perf_counter()
        for i in range(m):
            a.add_job(noop, "cron", minute="*", id=f"job{i}")
        out["aps_add_us"] = (time.perf_counter() - t) / m * 1e6
        a.shutdown(wait=True)
        t = time.perf_counter()
        a = aps_scheduler(url)
        a.start(paused=True)
        assert len(a.get_jobs()) == m
        out["aps_restart_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(m):
            a.modify_job(f"job{i}", kwargs={"v": 2})
        out["aps_modify_us"] = (time.perf_counter() - t) / m * 1e6
        t = time.perf_counter()
        for i in range(m):
            a.remove_job(f"job{i}")
        out["aps_remove_us"] = (time.perf_counter() - t) / m * 1e6
        a.shutdown(wait=True)
    return out


APS_RUNS: list[int] = []


def aps_record(i: int) -> None:
    """APScheduler's job in the 10-minute stop (a module-level function: its store keeps a reference)."""
    APS_RUNS.append(i)


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def ten_minute_stop(jobs: int) -> dict[str, Any]:
    """Cron jobs every minute, a 10-minute stop: runs after the restart, and missed fires reported."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.db"
        k = keyed(path, "NORMAL")
        k.start()
        for i in range(jobs):
            k.upsert(f"job{i}", {"cron": "* * * * *"})
        k.close()
        runs: list[Any] = []
        reported: list[int] = []
        later = Scheduler(wall_clock=lambda: time.time() + 600)  # the restart, 10 minutes on
        k = KeyedScheduler(
            later,
            cron_next_run,
            lambda key, data: runs.append(key),
            store=SQLiteStore(path),
            on_missed=lambda key, data, count, first, last: reported.append(count),
        )
        k.start()
        for _ in range(10):
            later.run_pending()
        out["timerwheel"] = {
            "runs": len(runs),
            "missed_reported": sum(reported),
            "keys_reporting": len(reported),
        }
        k.close()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'aps.db'}"
        a = aps_scheduler(url)
        a.start(paused=True)
        for i in range(jobs):
            a.add_job(aps_record, "cron", minute="*", id=f"job{i}", args=[i])
        a.shutdown(wait=True)
        handler = Counter()
        logging.getLogger("apscheduler").addHandler(handler)
        a = aps_scheduler(url)
        a.start(paused=True)  # the restart, its jobs' next run times 10 minutes past (it has no clock to
        past = datetime.now(UTC) - timedelta(minutes=10)  # inject: they are moved instead), then resumed
        for i in range(jobs):
            a.modify_job(f"job{i}", next_run_time=past)
        a.resume()
        time.sleep(3)  # its own thread processes the due jobs (real time)
        a.shutdown(wait=True)
        logging.getLogger("apscheduler").removeHandler(handler)
        missed = [r for r in handler.records if "was missed by" in r]
        out["apscheduler"] = {"runs": len(APS_RUNS), "missed_warnings": len(missed)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10**5)
    parser.add_argument("--aps-jobs", type=int, default=10**4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--synchronous", default="NORMAL", choices=["NORMAL", "FULL"])
    parser.add_argument("--memory-child", type=int)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    logging.getLogger("timerwheel").setLevel(logging.ERROR)
    if args.repeat == 0:  # only the 10-minute stop
        print(json.dumps(ten_minute_stop(100), indent=2))
        return
    result: dict[str, Any] = {}
    for kind in ("interval", "cron"):
        runs = [timerwheel_figures(args.keys, args.synchronous, kind) for _ in range(args.repeat)]
        result.update({k: statistics.median(r[k] for r in runs) for k in runs[0]})
        print(json.dumps(result), file=sys.stderr, flush=True)
    mems = [
        json.loads(
            subprocess.run(
                [sys.executable, __file__, "--memory-child", str(args.keys)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )["rss_bytes_per_key"]
        for _ in range(args.repeat)
    ]
    result["rss_bytes_per_key"] = statistics.median(mems)
    sides = [side_by_side(args.aps_jobs) for _ in range(args.repeat)]
    side = {k: statistics.median(s[k] for s in sides) for k in sides[0]}
    result.update(side)
    for op in ("add", "modify", "remove"):
        result[f"aps/tw {op}"] = side[f"aps_{op}_us"] / side[f"tw_{op}_us"]
    result["aps/tw restart"] = side["aps_restart_s"] / side["tw_restart_s"]
    result["ten_minute_stop"] = ten_minute_stop(100)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
