"""`python -m timerwheel bench`: timerwheel against the heap schedulers people use today, measured alike.

Each competitor runs in its own process (so that one's garbage, heap or event loop cannot slow another),
with the garbage collector off while timing, and reports the median of several rounds per operation and
size. The operations, on `size` pending timers (due 1000 to 2000 s ahead, so none fires):

    schedule_cancel  add a timer due in 50 s and cancel it: the timeout that never fires
    reset            move a pending timer later, past every other: the keep-alive reset (round-robin)
    next_due         move the earliest timer after all others, then ask when the next is due (the query a
                     driver makes after its earliest timer changed; where there is a public way to ask)
    schedule_expire  add `size` timers due over the next second (1000 distinct dues, 1 ms apart) and run
                     them all, moving time in 1 ms steps: per timer
    memory           bytes allocated per pending timer, with the handle or id a caller keeps

Competitors that need an event loop get one, and yield to it every 1000 operations, so that the loop's own
upkeep of its timers (asyncio pops cancelled handles and rebuilds its heap) is counted too.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["COMPETITORS", "OPERATIONS", "run_bench"]

OPERATIONS = ("schedule_cancel", "reset", "next_due", "schedule_expire", "memory")
BATCH = 1000  # operations between two yields to an event loop
FAR = 1000.0  # pending timers are due FAR to 2 * FAR seconds ahead
DELAY = 50.0  # what schedule_cancel adds: a short deadline among long idle timers
STEPS = [k / 1000 for k in range(1, 1001)]  # schedule_expire moves time in 1 ms steps
RESET = 3 * FAR  # reset moves a timer to RESET + k s from now, k growing by 1 per call: always later


class Unsupported(Exception):
    """The competitor has no public way to do this operation."""


def _noop() -> None:
    pass


class Competitor:
    """One implementation under test. Subclasses fill in the operations; `state` is built by build(n)."""

    name = ""
    title = ""
    module = ""  # what must be importable (its version is reported)
    big = False  # also measured with 10**7 pending
    note = ""  # a remark printed under the table

    def version(self) -> str:
        mod = importlib.import_module(self.module)
        return str(getattr(mod, "__version__", platform.python_version()))

    def build(self, n: int) -> None:
        raise NotImplementedError

    def schedule_cancel(self, ops: int) -> None:
        raise NotImplementedError

    def reset(self, ops: int) -> None:
        raise NotImplementedError

    def next_due(self, ops: int) -> None:
        raise Unsupported("no public way to ask for the next due")

    def schedule_expire(self, n: int) -> int:
        """Add n timers due within the next second, run them all; return how many callbacks ran."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _cursor(self, ops: int) -> Iterator[int]:
        """Indexes of the pending timers to reset, round-robin; each call also moves `later` on by 1 s.

        The pending timers start in due order and every reset moves one after all others, so the timer
        at the cursor is always the earliest: next_due moves it, then asks.
        """
        n = len(self.items)
        start = self.pos
        self.pos = (start + ops) % n
        self.later += 1.0
        for k in range(ops):
            yield (start + k) % n

    items: list[Any]
    pos = 0
    later = RESET  # the delay of the resets of the current call


# -- timerwheel ---------------------------------------------------------------------------------------------


class Wheel(Competitor):
    name, title, module, big = "timerwheel", "timerwheel TimerWheel (Cython)", "timerwheel", True

    def _class(self) -> Any:
        import timerwheel

        if timerwheel.BACKEND != "cython":
            raise RuntimeError("the Cython backend is not in use here")
        return timerwheel.TimerWheel

    def version(self) -> str:
        import timerwheel

        self._class()
        return timerwheel.__version__

    def build(self, n: int) -> None:
        self.wheel = wheel = self._class()()
        add_at = wheel.add_at
        self.items = [add_at(FAR + i * (FAR / n), _noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        add, cancel = self.wheel.add, self.wheel.cancel
        for _ in range(ops):
            cancel(add(DELAY, _noop))

    def reset(self, ops: int) -> None:
        items, reschedule = self.items, self.wheel.reschedule
        for i in self._cursor(ops):
            reschedule(items[i], self.later)

    def next_due(self, ops: int) -> None:
        items, reschedule, next_due = self.items, self.wheel.reschedule, self.wheel.next_due
        for i in self._cursor(ops):  # the cursor is always at the earliest timer (see Competitor._cursor)
            reschedule(items[i], self.later)
            next_due()

    def schedule_expire(self, n: int) -> int:
        wheel = self._class()()
        add_at, advance, ran = wheel.add_at, wheel.advance, _Counter()
        for i in range(n):
            add_at((i % 1000) / 1000, ran)
        for step in STEPS:
            for _, callback in advance(step):
                callback()
        return ran.count


class WheelPy(Wheel):
    name, title, big = "timerwheel-py", "timerwheel TimerWheel (pure Python)", False

    def _class(self) -> Any:
        from timerwheel._core_py import TimerWheel

        return TimerWheel


class _Counter:
    """A callback that counts its calls."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


class Engine(Competitor):
    name, title, module, big = "Scheduler", "timerwheel Scheduler (the job engine)", "timerwheel", True

    def _make(self) -> Any:
        from timerwheel import Scheduler
        from timerwheel.testing import ManualClock

        self.clock = ManualClock()
        return Scheduler(self.clock)

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__} ({timerwheel.BACKEND})"

    def build(self, n: int) -> None:
        self.sched = sched = self._make()
        schedule = sched.schedule
        self.items = [schedule(FAR + i * (FAR / n), _noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        schedule, cancel = self.sched.schedule, self.sched.cancel
        for _ in range(ops):
            cancel(schedule(DELAY, _noop))

    def reset(self, ops: int) -> None:
        items, reschedule = self.items, self.sched.reschedule
        for i in self._cursor(ops):
            reschedule(items[i], self.later)

    def next_due(self, ops: int) -> None:
        items, reschedule, next_run_in = self.items, self.sched.reschedule, self.sched.next_run_in
        for i in self._cursor(ops):
            reschedule(items[i], self.later)
            next_run_in()

    def schedule_expire(self, n: int) -> int:
        sched, ran = self._make(), _Counter()
        schedule, run_pending, clock = sched.schedule, sched.run_pending, self.clock
        for i in range(n):
            schedule((i % 1000) / 1000, ran)
        for step in STEPS:
            clock.set(step)
            run_pending()
        return ran.count


class Heap(Engine):
    name, title = "HeapScheduler", "timerwheel HeapScheduler (the same engine on heapq + dict)"

    def _make(self) -> Any:
        from timerwheel import HeapScheduler
        from timerwheel.testing import ManualClock

        self.clock = ManualClock()
        return HeapScheduler(self.clock)


# -- asyncio and friends ------------------------------------------------------------------------------------


class Loop(Competitor):
    """loop.call_later and TimerHandle.cancel on a running event loop; a reset is cancel + call_later."""

    name, title, module = "asyncio", "asyncio loop.call_later (stdlib loop)", "asyncio"
    note = "asyncio, uvloop, AsyncScheduler: no public way to ask for the next due."

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        if virtual:
            from timerwheel.testing import VirtualTimeLoop

            return VirtualTimeLoop(start=0.0)
        return asyncio.new_event_loop()

    def build(self, n: int) -> None:
        self.loop = loop = self._loop(virtual=True)
        call_later = loop.call_later
        self.items = [call_later(FAR + i * (FAR / n), _noop) for i in range(n)]

    def _run(self, body: Callable[[int], None], ops: int) -> None:
        async def batches() -> None:
            done = 0
            while done < ops:
                k = min(BATCH, ops - done)
                body(k)
                done += k
                await asyncio.sleep(0)

        self.loop.run_until_complete(batches())

    def schedule_cancel(self, ops: int) -> None:
        call_later = self.loop.call_later

        def body(k: int) -> None:
            for _ in range(k):
                call_later(DELAY, _noop).cancel()

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items, call_later = self.items, self.loop.call_later

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].cancel()
                items[i] = call_later(self.later, _noop)

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=True), _Counter()
        try:
            call_later = loop.call_later
            for i in range(n):
                call_later((i % 1000) / 1000, ran)
            loop.run_until_complete(asyncio.sleep(1.0))
        finally:
            loop.close()
        return ran.count

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            for handle in self.items:
                handle.cancel()
            loop.close()


class UvLoop(Loop):
    name, title, module = "uvloop", "uvloop loop.call_later", "uvloop"
    note = "uvloop: schedule_expire adds timers due now (no virtual time): they run at the next iteration."

    def version(self) -> str:
        if sys.platform == "win32":
            raise RuntimeError("uvloop does not run on Windows")
        return super().version()

    def _loop(self, virtual: bool) -> asyncio.AbstractEventLoop:
        import uvloop

        return uvloop.new_event_loop()

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=False), _Counter()
        try:
            done = loop.create_future()
            call_later = loop.call_later
            for _ in range(n):
                call_later(0, ran)
            call_later(0, done.set_result, None)
            loop.run_until_complete(done)
        finally:
            loop.close()
        return ran.count


class Async(Loop):
    name, title, module = "AsyncScheduler", "timerwheel AsyncScheduler.call_later (stdlib loop)", "timerwheel"
    note = "asyncio, AsyncScheduler: schedule_expire runs on a virtual-time loop (asyncio's own code)."

    def version(self) -> str:
        import timerwheel

        return f"{timerwheel.__version__} ({timerwheel.BACKEND})"

    def _start(self, loop: asyncio.AbstractEventLoop) -> Any:
        from timerwheel import AsyncScheduler

        sched = AsyncScheduler(loop=loop)
        sched.start()
        return sched

    def build(self, n: int) -> None:
        self.loop = self._loop(virtual=True)
        self.sched = sched = self._start(self.loop)
        call_later = sched.call_later
        self.items = [call_later(FAR + i * (FAR / n), _noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        call_later = self.sched.call_later

        def body(k: int) -> None:
            for _ in range(k):
                call_later(DELAY, _noop).cancel()

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items = self.items

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].reset(self.later)

        self._run(body, ops)

    def schedule_expire(self, n: int) -> int:
        loop, ran = self._loop(virtual=True), _Counter()
        try:
            sched = self._start(loop)
            call_later = sched.call_later
            for i in range(n):
                call_later((i % 1000) / 1000, ran)
            loop.run_until_complete(sched.sleep(1.0))
            loop.run_until_complete(sched.close())
        finally:
            loop.close()
        return ran.count

    def close(self) -> None:
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.run_until_complete(self.sched.close())
            loop.close()


# -- sched and Twisted --------------------------------------------------------------------------------------


class _Clock:
    """A settable clock for sched and Twisted."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sched(Competitor):
    name, title, module = "sched", "sched.scheduler (stdlib)", "sched"
    note = "sched: cancel is O(n) (list.remove, then heapify); a reset is cancel + enter."

    def _make(self) -> Any:
        import sched

        self.clock = _Clock()
        return sched.scheduler(self.clock, lambda _: None)

    def build(self, n: int) -> None:
        self.sched = s = self._make()
        enter = s.enter
        self.items = [enter(FAR + i * (FAR / n), 0, _noop) for i in range(n)]

    def schedule_cancel(self, ops: int) -> None:
        enter, cancel = self.sched.enter, self.sched.cancel
        for _ in range(ops):
            cancel(enter(DELAY, 0, _noop))

    def reset(self, ops: int) -> None:
        items, enter, cancel = self.items, self.sched.enter, self.sched.cancel
        for i in self._cursor(ops):
            cancel(items[i])
            items[i] = enter(self.later, 0, _noop)

    def next_due(self, ops: int) -> None:
        items, enter, cancel, run = self.items, self.sched.enter, self.sched.cancel, self.sched.run
        for i in self._cursor(ops):
            cancel(items[i])
            items[i] = enter(self.later, 0, _noop)
            run(blocking=False)  # runs what is due (nothing) and returns the delay to the next event

    def schedule_expire(self, n: int) -> int:
        s, ran = self._make(), _Counter()
        enter, run, clock = s.enter, s.run, self.clock
        for i in range(n):
            enter((i % 1000) / 1000, 0, ran)
        for step in STEPS:
            clock.now = step
            run(blocking=False)
        return ran.count


class Twisted(Competitor):
    name, title, module = "twisted", "Twisted reactor.callLater", "twisted"
    note = "Twisted: a reset to later is lazy (O(1)); the reactor re-sorts the call when it comes up."

    def _reactor(self) -> Any:
        from twisted.internet import reactor

        self.clock = _Clock()
        setattr(reactor, "seconds", self.clock)  # noqa: B010  # time stands still unless we move it
        return reactor

    def build(self, n: int) -> None:
        self.reactor = r = self._reactor()
        call_later = r.callLater
        self.items = [call_later(FAR + i * (FAR / n), _noop) for i in range(n)]
        r.runUntilCurrent()

    def _run(self, body: Callable[[int], None], ops: int) -> None:
        upkeep = self.reactor.runUntilCurrent  # the reactor's own timer upkeep, once per loop iteration
        done = 0
        while done < ops:
            k = min(BATCH, ops - done)
            body(k)
            done += k
            upkeep()

    def schedule_cancel(self, ops: int) -> None:
        call_later = self.reactor.callLater

        def body(k: int) -> None:
            for _ in range(k):
                call_later(DELAY, _noop).cancel()

        self._run(body, ops)

    def reset(self, ops: int) -> None:
        items = self.items

        def body(k: int) -> None:
            for i in self._cursor(k):
                items[i].reset(self.later)

        self._run(body, ops)

    def next_due(self, ops: int) -> None:
        items, timeout = self.items, self.reactor.timeout
        for i in self._cursor(ops):
            items[i].reset(self.later)
            timeout()

    def schedule_expire(self, n: int) -> int:
        r, ran = self._reactor(), _Counter()
        clock, call_later, run = self.clock, r.callLater, r.runUntilCurrent
        for i in range(n):
            call_later((i % 1000) / 1000, ran)
        for step in STEPS:
            clock.now = step
            run()
        return ran.count

    def close(self) -> None:
        for call in getattr(self, "items", []):
            if call.active():
                call.cancel()
        if hasattr(self, "reactor"):
            self.reactor.runUntilCurrent()  # purges the cancelled calls from its heap


COMPETITORS: dict[str, type[Competitor]] = {
    c.name: c for c in (Wheel, WheelPy, Engine, Heap, Async, Loop, UvLoop, Sched, Twisted)
}

# Timer-wheel packages on PyPI, and why they are not measured (checked on CPython 3.11, 2026-11).
PYPI_WHEELS = {
    "timingwheel 0.4": "does not install: its setup.py imports the package, which fails (a circular import)",
    "bazaar-contrib-timer-wheel 0.3.0rc8": "does not install: requires Python >= 3.15",
    "timewheel-scheduler 0.3.0": "a crontab-style job scheduler polling once a second: no per-timer cancel",
    "millwheel 0.1.2": "a cron-like task runner on threads: no per-timer cancel or reset",
}


# -- measuring, in the worker process -----------------------------------------------------------------------


def _timed(fn: Callable[[int], Any], k: int) -> float:
    start = time.perf_counter_ns()
    fn(k)
    return float(time.perf_counter_ns() - start)


def _median_per_op(fn: Callable[[int], Any], max_ops: int, rounds: int, budget: float) -> tuple[float, int]:
    """Median ns per operation over `rounds` rounds of k operations, k chosen to fit `budget` seconds."""
    per_op = max(_timed(fn, 1), 1.0)  # one call first: a warm-up, and a first estimate
    k = max(1, min(max_ops, int(budget * 1e9 / per_op)))
    per_op = _timed(fn, k) / k  # a second estimate, on a real batch
    k = max(1, min(max_ops, int(budget * 1e9 / max(per_op, 1.0))))
    return statistics.median(_timed(fn, k) / k for _ in range(rounds)), k


def _memory(cls: type[Competitor], n: int) -> float:
    """Bytes per pending timer: (allocated by build(n) - by build(1)) / (n - 1), after a warm-up build, so
    that imports, event loops and other set-up are not counted."""

    def traced(k: int) -> int:
        competitor = cls()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            competitor.build(k)
            return tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
            competitor.close()

    warm = cls()
    warm.build(1)
    warm.close()
    if n < 2:
        return float(traced(n))
    return (traced(n) - traced(1)) / (n - 1)


def worker(
    name: str, sizes: list[int], ops: list[str], rounds: int, budget: float
) -> Iterator[dict[str, Any]]:
    """Measure one competitor: one record per (operation, size), or one record saying why it is skipped."""
    cls = COMPETITORS[name]
    try:
        version = cls().version()
    except Exception as exc:  # not installed, or not usable here
        yield {"competitor": name, "skipped": f"{type(exc).__name__}: {exc}"}
        return
    yield {"competitor": name, "version": version}
    for size in sizes:
        if size > 10**6 and not cls.big:
            continue
        timed = [op for op in ops if op in ("schedule_cancel", "reset", "next_due")]
        if timed:
            competitor = cls()
            competitor.build(size)
            gc.collect()
            gc.disable()
            try:
                for op in timed:
                    try:
                        ns, k = _median_per_op(getattr(competitor, op), 10_000, rounds, budget)
                        yield {"competitor": name, "op": op, "size": size, "ns": ns, "ops_per_round": k}
                    except Unsupported as exc:
                        yield {"competitor": name, "op": op, "size": size, "unsupported": str(exc)}
            finally:
                gc.enable()
                competitor.close()
                del competitor
                gc.collect()
        if "schedule_expire" in ops:
            samples = []
            for _ in range(1 if size >= 10**7 else 3 if size >= 10**6 else rounds):
                competitor = cls()
                gc.collect()
                gc.disable()
                try:
                    start = time.perf_counter_ns()
                    ran = competitor.schedule_expire(size)
                    samples.append((time.perf_counter_ns() - start) / size)
                finally:
                    gc.enable()
                if ran != size:
                    raise RuntimeError(f"{name}: schedule_expire ran {ran} of {size} callbacks")
            yield {
                "competitor": name,
                "op": "schedule_expire",
                "size": size,
                "ns": statistics.median(samples),
            }
        if "memory" in ops:
            yield {"competitor": name, "op": "memory", "size": size, "bytes": _memory(cls, size)}


def worker_main(name: str, sizes: list[int], ops: list[str], rounds: int, budget: float) -> int:
    """The worker process: print one JSON line per record."""
    for record in worker(name, sizes, ops, rounds, budget):
        print(json.dumps(record), flush=True)
    return 0


# -- the parent: a process per competitor, a progress bar, the table ----------------------------------------


def _machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": str(os.cpu_count()),
    }


class _Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        self.done = min(self.done + 1, self.total)
        width = 30
        filled = width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        line += f"  {time.monotonic() - self.start:.0f} s"
        if self.tty:
            sys.stderr.write("\r" + line[:100].ljust(100))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run_bench(
    competitors: list[str], sizes: list[int], ops: list[str], rounds: int, budget: float
) -> dict[str, Any]:
    """Run every competitor in its own process; return the machine, versions, results and skips."""
    steps = 0
    for name in competitors:
        for size in sizes:
            if size > 10**6 and not COMPETITORS[name].big:
                continue
            steps += len(ops)
    progress = _Progress(steps)
    report: dict[str, Any] = {
        "machine": _machine(),
        "sizes": sizes,
        "versions": {},
        "skipped": {},
        "results": [],
    }
    for name in competitors:
        cmd = [sys.executable, "-m", "timerwheel", "bench", "--worker", name, "--rounds", str(rounds)]
        cmd += ["--budget", str(budget), "--sizes", ",".join(str(s) for s in sizes), "--ops", ",".join(ops)]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                record = json.loads(line)
                if "skipped" in record:
                    report["skipped"][name] = record["skipped"]
                elif "version" in record:
                    report["versions"][name] = record["version"]
                else:
                    report["results"].append(record)
                    progress.step(f"{name} {record['op']} @{record['size']:.0e}")
        if proc.returncode and name not in report["skipped"]:
            report["skipped"][name] = f"its worker process failed (exit code {proc.returncode})"
    progress.end()
    return report


def format_report(report: dict[str, Any], baseline: str | None = None) -> str:
    """The results as tables (one per operation): ns per operation, and the ratio to the baseline (by
    default the Cython wheel, or the pure-Python one where the extension is not in use)."""
    if baseline is None:
        baseline = "timerwheel" if "timerwheel" in report["versions"] else "timerwheel-py"
    out = []
    machine = report["machine"]
    out.append(f"{machine['python']} on {machine['platform']}; {machine['cpu']} ({machine['cpus']} CPUs)")
    out.append("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    results = report["results"]
    sizes = sorted({r["size"] for r in results})
    names = [n for n in COMPETITORS if n in report["versions"]]
    for op in OPERATIONS:
        rows = [r for r in results if r["op"] == op]
        if not rows:
            continue
        unit = {"memory": "bytes per pending timer", "schedule_expire": "ns per timer"}.get(
            op, "ns per operation"
        )
        out.append(f"\n{op}: {unit}; in brackets, the ratio to {baseline}")
        out.append(f"  {'':<16}" + "".join(f"{_size(s):>24}" for s in sizes))
        base = {r["size"]: r.get("bytes", r.get("ns")) for r in rows if r["competitor"] == baseline}
        for name in names:
            cells = []
            for size in sizes:
                rec = next((r for r in rows if r["competitor"] == name and r["size"] == size), None)
                if rec is None:
                    cells.append("")
                elif "unsupported" in rec:
                    cells.append("n/a")
                else:
                    value = rec.get("bytes", rec.get("ns"))
                    ratio = f" ({_ratio(value / base[size])})" if base.get(size) else ""
                    cells.append(f"{value:,.0f}{ratio}")
            out.append(f"  {name:<16}" + "".join(f"{c:>24}" for c in cells))
    ran = {r["op"] for r in results}
    notes = [
        note
        for note in dict.fromkeys(COMPETITORS[n].note for n in names)
        if note and ("next_due" in ran or "next due" not in note)
    ]
    small = [n for n in names if not COMPETITORS[n].big]
    if small and report.get("sizes") and max(report["sizes"]) > 10**6:
        notes.append(f"{', '.join(small)}: up to 10^6 pending only (10^7 is for the wheel and the heap).")
    if notes:
        out.append("\n" + "\n".join(notes))
    for name, why in report["skipped"].items():
        out.append(f"skipped {name}: {why}")
    out.append("Timer-wheel packages on PyPI, not measured:")
    out.extend(f"  {pkg}: {why}" for pkg, why in PYPI_WHEELS.items())
    return "\n".join(out)


def _ratio(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio < 100 else f"{ratio:,.0f}x"


def _size(size: int) -> str:
    exponent = round(math.log10(size))
    return f"10^{exponent}" if 10**exponent == size else f"{size:,}"


def plot(report: dict[str, Any], path: str) -> None:
    """One panel per operation: cost against pending timers, log-log, a line per competitor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [
        op
        for op in OPERATIONS
        if any(r["op"] == op and ("ns" in r or "bytes" in r) for r in report["results"])
    ]
    columns = min(3, len(ops) + 1)  # the last cell holds the legend
    rows_ = -(-(len(ops) + 1) // columns)
    fig, axes = plt.subplots(rows_, columns, figsize=(4.6 * columns, 3.9 * rows_), squeeze=False)
    cells = list(axes.flat)
    for ax, op in zip(cells, ops, strict=False):
        for index, name in enumerate(COMPETITORS):
            rows = sorted(
                (
                    r
                    for r in report["results"]
                    if r["competitor"] == name and r["op"] == op and "unsupported" not in r
                ),
                key=lambda r: r["size"],
            )
            if rows:
                ys = [r.get("bytes", r.get("ns")) for r in rows]
                style = (
                    "-o"
                    if name.startswith("timerwheel") or name in ("Scheduler", "AsyncScheduler")
                    else "--s"
                )
                ax.plot([r["size"] for r in rows], ys, style, label=name, markersize=4, color=f"C{index}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(op.replace("_", " + ") if op.startswith("schedule") else op.replace("_", " "))
        ax.set_xlabel("timers pending")
        ax.set_ylabel("bytes per timer" if op == "memory" else "ns per operation")
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = cells[0].get_legend_handles_labels()
    for ax in cells[len(ops) :]:
        ax.axis("off")
    cells[len(ops)].legend(
        handles, labels, loc="center", fontsize=9, title="solid: timerwheel; dashed: others"
    )
    fig.suptitle(f"timerwheel against heap schedulers ({report['machine']['python']}; lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
