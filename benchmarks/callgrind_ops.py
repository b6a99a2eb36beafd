"""Instructions per operation of the engine's and the drivers' hot paths, counted by callgrind: repeatable
on a noisy machine, where times are not. Each workload runs its operation N times in a loop with 1,000
timers pending (scheduler-expire: N one-shot tasks scheduled, then run; keyed-*: 1,000 keys, on a
ManualClock); the script runs it under
`valgrind --tool=callgrind` at N = 10,000 and 20,000 and prints the difference per operation (so set-up
and interpreter start-up cancel out; the loop itself is counted).

    python benchmarks/callgrind_ops.py                      # every workload, ~2 minutes
    python benchmarks/callgrind_ops.py async-jobs threaded  # some of them
    PYTHONPATH=/path/to/other/checkout/src python benchmarks/callgrind_ops.py   # another version

Needs valgrind. The figures in docs/performance.md come from it.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any


def noop() -> None:
    pass


def scheduler_schedule_cancel(n: int) -> None:
    from timerwheel import Scheduler

    s = Scheduler()
    for i in range(1000):
        s.schedule(1000 + i, noop)
    schedule, cancel = s.schedule, s.cancel
    for _ in range(n):
        cancel(schedule(5.0, noop))


def scheduler_reschedule(n: int) -> None:
    from timerwheel import Scheduler

    s = Scheduler()
    ids = [s.schedule(1000 + i, noop) for i in range(1000)]
    reschedule = s.reschedule
    for i in range(n):
        reschedule(ids[i % 1000], 3000.0 + i)


def scheduler_expire(n: int) -> None:
    """n one-shot tasks due within a second, then run_pending() as a ManualClock moves through it."""
    from timerwheel import Scheduler
    from timerwheel.testing import ManualClock

    clock = ManualClock()
    s = Scheduler(clock)
    schedule, run_pending = s.schedule, s.run_pending
    for i in range(n):
        schedule((i % 1000) / 1000, noop)
    for step in range(1, 101):
        clock.set(step / 100)
        run_pending()


def threaded_schedule_cancel(n: int) -> None:
    """New tasks due after every pending one: the driver is not woken (that is measured elsewhere)."""
    from timerwheel import ThreadedScheduler

    s = ThreadedScheduler(workers=0)
    s.start()
    for i in range(1000):
        s.schedule(1000 + i, noop)
    schedule, cancel = s.schedule, s.cancel
    for _ in range(n):
        cancel(schedule(5000.0, noop))
    s.stop()


def threaded_reschedule(n: int) -> None:
    from timerwheel import ThreadedScheduler

    s = ThreadedScheduler(workers=0)
    s.start()
    ids = [s.schedule(1000 + i, noop) for i in range(1000)]
    reschedule = s.reschedule
    for i in range(n):
        reschedule(ids[i % 1000], 3000.0 + i)
    s.stop()


def _on_loop(body: Callable[..., None], n: int) -> None:
    from timerwheel import AsyncScheduler

    async def main() -> None:
        s = AsyncScheduler()
        s.start()
        done = body(s, n)
        if asyncio.iscoroutine(done):
            await done
        await s.close()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()


def _async_jobs(s: object, n: int) -> None:
    for i in range(1000):
        s.schedule(1000 + i, noop)  # type: ignore[attr-defined]
    schedule, cancel = s.schedule, s.cancel  # type: ignore[attr-defined]
    for _ in range(n):
        cancel(schedule(5.0, noop))  # each new task the earliest


def _async_reschedule(s: object, n: int) -> None:
    ids = [s.schedule(1000 + i, noop) for i in range(1000)]  # type: ignore[attr-defined]
    reschedule = s.reschedule  # type: ignore[attr-defined]
    for i in range(n):
        reschedule(ids[i % 1000], 3000.0 + i)


def _async_call_later(s: object, n: int) -> None:
    for i in range(1000):
        s.call_later(1000 + i, noop)  # type: ignore[attr-defined]
    call_later = s.call_later  # type: ignore[attr-defined]
    for _ in range(n):
        call_later(5000.0, noop).cancel()


def _async_reset(s: object, n: int) -> None:
    handles = [s.call_later(1000 + i, noop) for i in range(1000)]  # type: ignore[attr-defined]
    for i in range(n):
        handles[i % 1000].reset(3000.0)


def _reset_never_and_back(s: object, n: int) -> None:
    """A request deadline kept on a handle: reset(inf) when a request ends, reset(d) when the next starts
    (one operation is the pair)."""
    handles = [s.call_later(1000 + i, noop) for i in range(1000)]  # type: ignore[attr-defined]
    never = float("inf")
    for i in range(n):
        handle = handles[i % 1000]
        handle.reset(never)
        handle.reset(3000.0)


class _Conn:
    """A connection that keeps its own idle deadline, as aiohttp's keep-alive does."""

    __slots__ = ("close_at",)

    def __init__(self) -> None:
        self.close_at = 0.0


def _hand_kept(s: object, n: int) -> None:
    """aiohttp's hand-kept deadline: a reset only stores loop.time() + idle (one loop timer, not counted,
    re-arms itself when it fires early)."""
    loop = asyncio.get_running_loop()
    conns = [_Conn() for _ in range(1000)]
    for i in range(n):
        conns[i % 1000].close_at = loop.time() + 3000.0


def _asyncio_reset(s: object, n: int) -> None:
    """asyncio's keep-alive reset: cancel the handle, call_later anew."""
    loop = asyncio.get_running_loop()
    handles = [loop.call_later(1000 + i, noop) for i in range(1000)]
    for i in range(n):
        j = i % 1000
        handles[j].cancel()
        handles[j] = loop.call_later(3000.0, noop)


def _timeout_reschedule(s: object, n: int, timeout: Callable[[float], Any]) -> None:
    loop = asyncio.get_running_loop()
    cms = [timeout(1000.0 + i) for i in range(1000)]
    for cm in cms:
        cm._state = asyncio.timeouts._State.ENTERED  # entered, as `async with` leaves it (no task needed)
        cm._task = asyncio.current_task()
        cm.reschedule(cm.when())
    for i in range(n):
        cms[i % 1000].reschedule(loop.time() + 3000.0)
    for cm in cms:
        cm.reschedule(None)


async def _timeout_enter(s: object, n: int, timeout: Callable[[float], Any]) -> None:
    """`async with timeout(d): pass`, a deadline that never fires, entered and left by the running task,
    with 1,000 timers pending after it on the loop's timers (asyncio's) or the wheel (ours)."""
    call_later = asyncio.get_running_loop().call_later if timeout is asyncio.timeout else s.call_later  # type: ignore[attr-defined]
    for i in range(1000):
        call_later(1000 + i, noop)
    for _ in range(n):
        async with timeout(50.0):
            pass


def _keyed(every: float) -> tuple[Any, Any, Any]:
    """A started KeyedScheduler with 1,000 keys, each due `every` seconds, on a ManualClock (which stands
    still unless moved: on the real clock a step of the wall clock seen between two reads under
    valgrind refiles every key's timer, and the count would depend on the machine's load)."""
    from datetime import timedelta

    from timerwheel import KeyedScheduler, Scheduler
    from timerwheel.testing import ManualClock

    clock = ManualClock()
    s = Scheduler(clock)
    k = KeyedScheduler(s, lambda now, key, data: now + timedelta(seconds=every), lambda key, data: None)
    k.start()
    for i in range(1000):
        k.upsert(i, 0)
    return clock, s, k


def keyed_upsert(n: int) -> None:
    """Upserts of a known key (new data each time): its timer moved."""
    upsert = _keyed(3600.0)[2].upsert
    for j in range(n):
        upsert(j % 1000, j + 1)


def keyed_next_run(n: int) -> None:
    """What an upsert cannot do without: the wall clock read, the datetime of now (rounded down to the
    microsecond, as upsert makes it), the workloads' next_run called, and the timestamp of what it
    returned (the baseline that "beyond next_run" subtracts)."""
    from timerwheel._clock import utc_not_after

    _, s, k = _keyed(3600.0)
    wall, next_run = s.wall_clock, k._table.next_run
    for j in range(n):
        next_run(utc_not_after(wall()), j % 1000, j + 1).timestamp()


def keyed_upsert_new(n: int) -> None:
    """Upserts of new keys: a record made, its timer added."""
    upsert = _keyed(3600.0)[2].upsert
    for j in range(1000, 1000 + n):
        upsert(j, j)


def keyed_upsert_new_remove(n: int) -> None:
    """Upserts of new keys, then their removal: printed less keyed-upsert-new, the cost of a remove."""
    k = _keyed(3600.0)[2]
    upsert, remove = k.upsert, k.remove
    for j in range(1000, 1000 + n):
        upsert(j, j)
    for j in range(1000, 1000 + n):
        remove(j)


def keyed_get(n: int) -> None:
    get = _keyed(3600.0)[2].get
    for j in range(n):
        get(j % 1000)


def keyed_fire(n: int) -> None:
    """Fires of keys due every second: each handed over, run and ended, its next run planned."""
    clock, s, _ = _keyed(1.0)
    for _ in range(n // 1000):
        clock.advance(1)
        s.run_pending()


WORKLOADS: dict[str, Callable[[int], None]] = {
    "scheduler": scheduler_schedule_cancel,
    "scheduler-reschedule": scheduler_reschedule,
    "scheduler-expire": scheduler_expire,
    "threaded": threaded_schedule_cancel,
    "threaded-reschedule": threaded_reschedule,
    "async-jobs": lambda n: _on_loop(_async_jobs, n),
    "async-jobs-reschedule": lambda n: _on_loop(_async_reschedule, n),
    "async-call-later": lambda n: _on_loop(_async_call_later, n),
    "async-handle-reset": lambda n: _on_loop(_async_reset, n),
    "async-handle-never-and-back": lambda n: _on_loop(_reset_never_and_back, n),
    "async-hand-kept": lambda n: _on_loop(_hand_kept, n),
    "async-asyncio-reset": lambda n: _on_loop(_asyncio_reset, n),
    "async-timeout-reschedule": lambda n: _on_loop(lambda s, n: _timeout_reschedule(s, n, s.timeout), n),
    "async-asyncio-timeout": lambda n: _on_loop(lambda s, n: _timeout_reschedule(s, n, asyncio.timeout), n),
    "async-timeout-enter": lambda n: _on_loop(lambda s, n: _timeout_enter(s, n, s.timeout), n),
    "async-asyncio-timeout-enter": lambda n: _on_loop(lambda s, n: _timeout_enter(s, n, asyncio.timeout), n),
    "keyed-next-run": keyed_next_run,
    "keyed-upsert": keyed_upsert,
    "keyed-upsert-new": keyed_upsert_new,
    "keyed-remove": keyed_upsert_new_remove,
    "keyed-get": keyed_get,
    "keyed-fire": keyed_fire,
}
# Workloads whose operation is counted as the difference from another's: (that workload, what is printed).
LESS: dict[str, str] = {"keyed-remove": "keyed-upsert-new"}


def count(name: str, n: int) -> int:
    """Instructions of the whole process running workload `name` n times."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--run",
            name,
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts each run: repeatable counts
    )
    match = re.search(r"refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise SystemExit(f"no instruction count from valgrind for {name}:\n{done.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--run"]:
        WORKLOADS[argv[1]](int(argv[2]))
        return
    names = argv or list(WORKLOADS)
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}")
    import timerwheel
    import timerwheel._engine as engine

    print(f"timerwheel {timerwheel.__file__} ({timerwheel.BACKEND}, engine {engine.ENGINE})")
    counted: dict[str, float] = {}

    def per_op(name: str) -> float:
        if name not in counted:
            counted[name] = (count(name, 20_000) - count(name, 10_000)) / 10_000
        return counted[name]

    for name in names:
        less = LESS.get(name)
        ops = per_op(name) - (per_op(less) if less else 0.0)
        print(f"{name:24} {ops:9,.0f} instructions per operation" + (f" (less {less})" if less else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
