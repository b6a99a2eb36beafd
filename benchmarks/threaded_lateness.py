"""How late do timers fire on a real clock, and does an idle driver sleep? ThreadedScheduler against sched.

1. Lateness: `--near` one-shot no-op timers due uniformly over `--span` seconds (starting `--lead` s after
   setup), while `--far` other timers are pending, due 1000-2000 s away (they never fire during the run):
     - timerwheel.ThreadedScheduler(workers=0): jobs run on its driver thread; lateness from the observer's
       JobEvent (started_at - scheduled_for, time.monotonic, taken unclamped here);
     - sched.scheduler(time.monotonic, <Event.wait: a sleep that can be woken>) run() on a thread, the same
       near + far events (enterabs, one heappush each); lateness = time.monotonic() at job start - the due;
     - threading.Timer, one thread per timer, only `--timers` (1000) near timers and no far ones: a million
       pending Timers would be a million OS threads (see the report).
   Setup = the time to schedule everything (far + near). Every wait is bounded in time.
2. Idle: a ThreadedScheduler holding one timer due in an hour; its driver-loop passes (counted by
   wrapping its `_pass`), the driver thread's voluntary context switches (/proc) and the process CPU
   time over `--idle` seconds.

Each competitor runs in its own fresh interpreter, one after the other, so none disturbs another.

    python benchmarks/threaded_lateness.py [--near 100000] [--far 1000000] [--span 10] [--timers 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import resource
import sched
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SEED = 20240611
FAR_LOW, FAR_HIGH = 1000.0, 2000.0  # seconds ahead: the far timers never fire during a run
GRACE = 10.0  # seconds past the last due after which a child stops waiting for stragglers
CHILD_TIMEOUT = 150.0  # seconds: a child that takes longer is killed


def count_passes(s: Any) -> list[int]:
    """Count a ThreadedScheduler driver's loop passes (each wake-up is one), from now on."""
    passes = [0]
    original = s._pass

    def counting() -> Any:
        passes[0] += 1
        return original()

    s._pass = counting
    return passes


def noop() -> None:
    """The job of every far timer (never called during the run)."""


def offsets(n: int, low: float, high: float, seed: int) -> list[float]:
    """`n` offsets uniform in [low, high), unsorted (timers are not scheduled in due order), seeded."""
    rnd = random.Random(seed).random
    return [low + (high - low) * rnd() for _ in range(n)]


class GcWatch:
    """Counts the cyclic-GC collections (and their longest pause) while `on` is true."""

    def __init__(self) -> None:
        self.on = False
        self.count = [0, 0, 0]
        self.longest = 0.0
        self._start = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.longest = max(self.longest, time.perf_counter() - self._start)


def summary(late: list[float], dues: list[float] | None = None, first: float = 0.0) -> dict[str, Any]:
    """Median, p99 (nearest rank), max and min of lateness samples in seconds, reported in ms.

    With `dues` (the due of each sample), also when the worst one was due, in seconds after `first`.
    """
    if not late:
        return {"fired": 0}
    s = sorted(late)
    n = len(s)
    worst = {}
    if dues is not None:
        worst = {"worst_due_s": dues[max(range(n), key=late.__getitem__)] - first}
    return {
        **worst,
        "fired": n,
        "median_ms": s[(n - 1) // 2] * 1e3,
        "p99_ms": s[min(n - 1, int(0.99 * n))] * 1e3,
        "max_ms": s[-1] * 1e3,
        "min_ms": s[0] * 1e3,
        "early": sum(1 for x in s if x < 0),
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- the competitors (each in its own child process) ----------------------------------------------------


def run_threaded(near: int, far: int, span: float, lead: float) -> dict[str, Any]:
    from timerwheel import BACKEND, JobEvent, ThreadedScheduler

    far_offsets = offsets(far, FAR_LOW, FAR_HIGH, SEED)
    near_offsets = offsets(near, 0.0, span, SEED + 1)
    late: list[float] = []
    dues: list[float] = []
    record, record_due = late.append, dues.append
    done = threading.Event()

    def observer(event: JobEvent) -> None:
        record(event.started_at - event.scheduled_for)  # JobEvent.lateness is clamped at 0: unclamped here
        record_due(event.scheduled_for)
        if len(late) >= near:
            done.set()

    watch = GcWatch()
    sched_ = ThreadedScheduler(observer=observer)
    passes = count_passes(sched_)
    sched_.start()
    schedule_at = sched_.schedule_at
    t0 = time.perf_counter()
    base = time.monotonic()
    for off in far_offsets:
        schedule_at(base + off, noop)
    first = time.monotonic() + lead
    for off in near_offsets:
        schedule_at(first + off, noop)
    setup = time.perf_counter() - t0
    margin = first - time.monotonic()
    watch.on = True
    done.wait(max(0.0, first + span + GRACE - time.monotonic()))
    watch.on = False
    stats = sched_.stats()
    wakeups = passes[0]
    t1 = time.perf_counter()
    sched_.close()
    return {
        "name": f"ThreadedScheduler (workers=0, {BACKEND})",
        "near": near,
        "far": far,
        "setup_s": setup,
        "margin_s": margin,
        "teardown_s": time.perf_counter() - t1,
        "pending_after": stats.pending,
        "driver_passes": wakeups,
        "gc": watch.count,
        "gc_longest_ms": watch.longest * 1e3,
        "rss_mb": peak_rss_mb(),
        **summary(late, dues, first),
    }


class _Stopped(Exception):
    """Raised by the wakeable sleep to get out of sched.scheduler.run()."""


def run_sched(near: int, far: int, span: float, lead: float) -> dict[str, Any]:
    far_offsets = offsets(far, FAR_LOW, FAR_HIGH, SEED)
    near_offsets = offsets(near, 0.0, span, SEED + 1)
    late: list[float] = []
    dues: list[float] = []
    record, record_due = late.append, dues.append
    done = threading.Event()
    stop = threading.Event()
    monotonic = time.monotonic

    def job(due: float) -> None:
        record(monotonic() - due)
        record_due(due)
        if len(late) >= near:
            done.set()

    def sleep(seconds: float) -> None:
        """A sleep that stop.set() interrupts; run() calls it with 0 after every event."""
        if seconds > 0:
            stop.wait(seconds)
        if stop.is_set():
            raise _Stopped

    def drive() -> None:
        with contextlib.suppress(_Stopped):
            s.run()

    watch = GcWatch()
    s = sched.scheduler(time.monotonic, sleep)
    enterabs = s.enterabs
    t0 = time.perf_counter()
    base = time.monotonic()
    for off in far_offsets:
        enterabs(base + off, 0, noop)
    first = time.monotonic() + lead
    for off in near_offsets:
        due = first + off
        enterabs(due, 0, job, (due,))
    setup = time.perf_counter() - t0
    margin = first - time.monotonic()
    driver = threading.Thread(target=drive, name="sched-driver", daemon=True)
    driver.start()  # after the setup: run() would not notice an event entered before the one it sleeps for
    watch.on = True
    done.wait(max(0.0, first + span + GRACE - time.monotonic()))
    watch.on = False
    stop.set()
    driver.join(5.0)
    return {
        "name": "sched.scheduler + thread (Event.wait sleep)",
        "near": near,
        "far": far,
        "setup_s": setup,
        "margin_s": margin,
        "pending_after": len(s._queue),  # .queue would sort a million events
        "gc": watch.count,
        "gc_longest_ms": watch.longest * 1e3,
        "rss_mb": peak_rss_mb(),
        **summary(late, dues, first),
    }


class _Timer(threading.Timer):
    """A threading.Timer that notes when its thread began run(): its interval counts from there."""

    made = 0.0
    gap = 0.0

    def run(self) -> None:
        self.gap = time.monotonic() - self.made
        super().run()


def run_timer(near: int, far: int, span: float, lead: float) -> dict[str, Any]:
    del far  # a pending Timer is a thread: no million far ones
    near_offsets = offsets(near, 0.0, span, SEED + 1)
    late: list[float] = []
    dues: list[float] = []
    done = threading.Event()
    monotonic = time.monotonic
    lock = threading.Lock()

    def job(due: float) -> None:
        t = monotonic()
        with lock:  # each job runs on its own thread
            late.append(t - due)
            dues.append(due)
            if len(late) >= near:
                done.set()

    watch = GcWatch()
    timers = []
    t0 = time.perf_counter()
    first = time.monotonic() + lead
    for off in near_offsets:
        due = first + off
        timer = _Timer(due - monotonic(), job, (due,))
        timer.daemon = True
        timer.made = monotonic()
        timer.start()
        timers.append(timer)
    setup = time.perf_counter() - t0
    margin = first - time.monotonic()
    threads_peak = threading.active_count()
    watch.on = True
    done.wait(max(0.0, first + span + GRACE - time.monotonic()))
    watch.on = False
    for timer in timers:
        timer.cancel()
        timer.join(1.0)
    gaps = sorted(timer.gap for timer in timers)
    return {
        "name": "threading.Timer (a thread per timer)",
        "near": near,
        "far": 0,
        "setup_s": setup,
        "margin_s": margin,
        "threads_peak": threads_peak,
        "start_gap_median_ms": gaps[(len(gaps) - 1) // 2] * 1e3,
        "start_gap_p99_ms": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] * 1e3,
        "start_gap_max_ms": gaps[-1] * 1e3,
        "gc": watch.count,
        "gc_longest_ms": watch.longest * 1e3,
        "rss_mb": peak_rss_mb(),
        **summary(late, dues, first),
    }


def voluntary_switches(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return -1


def run_idle(seconds: float) -> dict[str, Any]:
    from timerwheel import ThreadedScheduler

    with ThreadedScheduler() as s:
        s.schedule(3600.0, noop)
        time.sleep(0.2)  # let the driver reach its sleep
        passes = count_passes(s)
        w0 = passes[0]
        native = s._driver.native_id
        assert native is not None
        v0 = voluntary_switches(native)
        c0 = time.process_time()
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        w1 = passes[0]
        v1 = voluntary_switches(native)
        c1 = time.process_time()
    return {
        "name": "ThreadedScheduler idle (one timer due in 1 h)",
        "seconds": elapsed,
        "wakeups_at_start": w0,
        "wakeups": w1 - w0,
        "wakeups_per_s": (w1 - w0) / elapsed,
        "driver_ctx_switches": v1 - v0,
        "cpu_ms": (c1 - c0) * 1e3,
    }


CHILDREN: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "threaded": lambda a: run_threaded(a.near, a.far, a.span, a.lead),
    "sched": lambda a: run_sched(a.near, a.far, a.span, a.lead),
    "timer": lambda a: run_timer(a.timers, 0, a.span, a.timer_lead),
    "idle": lambda a: run_idle(a.idle),
}


# -- the parent: one child per competitor, then the tables ---------------------------------------------


def child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name]
    for opt in ("near", "far", "span", "lead", "timer_lead", "timers", "idle"):
        cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"timed out after {CHILD_TIMEOUT:.0f} s"}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"name": name, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def lateness_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| competitor | timers due / pending far | setup (s) | median (ms) | p99 (ms) | max (ms) "
        "| fired | early | GC gen0/1/2 in window (longest ms) | peak RSS (MB) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['name']} | error: {r['error']} |" + " |" * 8)
            continue
        gcs = "/".join(str(c) for c in r["gc"])
        warn = " (setup overran the lead!)" if r["margin_s"] < 0 else ""
        out.append(
            f"| {r['name']} | {r['near']:,} / {r['far']:,} | {r['setup_s']:.2f}{warn} "
            f"| {r.get('median_ms', 0):.3f} "
            f"| {r.get('p99_ms', 0):.3f} | {r.get('max_ms', 0):.2f} | {r['fired']:,} | {r.get('early', 0)} "
            f"| {gcs} ({r['gc_longest_ms']:.1f}) | {r['rss_mb']:.0f} |"
        )
    return "\n".join(out)


def idle_table(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"idle: error: {r['error']}"
    return "\n".join(
        [
            "| idle driver | seconds | passes at start | passes in window | wake-ups/s | driver voluntary "
            "ctx switches | process CPU (ms) |",
            "|---|--:|--:|--:|--:|--:|--:|",
            f"| {r['name']} | {r['seconds']:.2f} | {r['wakeups_at_start']} | {r['wakeups']} "
            f"| {r['wakeups_per_s']:.2f} | {r['driver_ctx_switches']} | {r['cpu_ms']:.1f} |",
            "| a polling driver at a 1 ms tick (not built) | | | | 1000 | ~1000/s | |",
        ]
    )


def timer_slack_us() -> str:
    """The kernel's timer slack for this thread: how late it may end a timed sleep to batch wake-ups."""
    try:
        with open("/proc/self/timerslack_ns") as f:
            return f"{int(f.read()) / 1e3:.0f}"
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--near", type=int, default=100_000, help="timers due during the run")
    parser.add_argument("--far", type=int, default=1_000_000, help="timers pending, due 1000-2000 s away")
    parser.add_argument("--span", type=float, default=10.0, help="seconds the near dues are spread over")
    parser.add_argument("--lead", type=float, default=1.0, help="seconds from setup's end to the first due")
    parser.add_argument(
        "--timer-lead",
        type=float,
        default=3.0,
        help="the same for threading.Timer, whose dues are fixed before its setup (slow: a thread each)",
    )
    parser.add_argument("--timers", type=int, default=1000, help="threading.Timer timers (one thread each)")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the idle measurement")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return
    load = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f} at start; switch interval {sys.getswitchinterval() * 1e3:.0f} ms; "
        f"timer slack {timer_slack_us()} us\n",
        flush=True,
    )
    started = time.monotonic()
    rows = [child(name, args) for name in ("threaded", "sched", "timer")]
    idle = child("idle", args)
    print(lateness_table(rows))
    print()
    print(idle_table(idle))
    extra = [
        f"{r['name']}: setup ended {r['margin_s']:.2f} s before the first due; min lateness "
        f"{r.get('min_ms', 0):.3f} ms"
        + (f"; driver passes {r['driver_passes']:,}" if "driver_passes" in r else "")
        + (f"; close() {r['teardown_s']:.2f} s" if "teardown_s" in r else "")
        + (f"; worst due {r['worst_due_s']:.2f} s into the span" if "worst_due_s" in r else "")
        + (f"; threads at peak {r['threads_peak']}" if "threads_peak" in r else "")
        + (
            f"; thread start (Timer made -> its run() began) median {r['start_gap_median_ms']:.3f} ms, "
            f"p99 {r['start_gap_p99_ms']:.3f} ms, max {r['start_gap_max_ms']:.2f} ms"
            if "start_gap_p99_ms" in r
            else ""
        )
        for r in rows
        if "error" not in r
    ]
    print()
    print("\n".join(f"- {line}" for line in extra))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
