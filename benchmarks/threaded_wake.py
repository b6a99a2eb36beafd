"""ThreadedScheduler's schedule + cancel when each new task comes before every pending one, so that each
schedule() would wake the driver's thread: the cost of the wake-up path, which callgrind cannot count
(it serialises the threads). Called from the main thread while the driver's thread runs, 10,000 tasks
pending far ahead; prints the median of 9 rounds of 20,000 operations.

    python benchmarks/threaded_wake.py
    PYTHONPATH=/path/to/other/checkout/src python benchmarks/threaded_wake.py   # another version

Run the two versions alternately, several times each, and compare the medians: the machine is noisy.
"""

from __future__ import annotations

import statistics
import time

import timerwheel
from timerwheel import ThreadedScheduler


def noop() -> None:
    pass


def main() -> None:
    sched = ThreadedScheduler(workers=0)
    sched.start()
    try:
        for i in range(10_000):
            sched.schedule(1000 + i, noop)
        schedule, cancel = sched.schedule, sched.cancel

        def per_op(k: int) -> float:
            start = time.perf_counter_ns()
            for _ in range(k):
                cancel(schedule(0.001, noop))
            return (time.perf_counter_ns() - start) / k

        per_op(1000)  # warm-up
        median = statistics.median(per_op(20_000) for _ in range(9))
        print(f"{timerwheel.__file__} ({timerwheel.BACKEND}): {median:,.0f} ns per schedule + cancel")
    finally:
        sched.close()


if __name__ == "__main__":
    main()
