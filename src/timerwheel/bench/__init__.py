"""The benchmark registry: what `python -m timerwheel bench` runs, and what the pytest-benchmark files in
benchmarks/ measure. One definition of each workload (workloads), one class per competitor
(competitors.COMPETITORS), one way to measure time and memory (measure), one JSON format and one report
(report). Each competitor runs in its own process in the CLI, so that one's garbage, heap or event loop
cannot slow another; the garbage collector is off while timing. An echo server on plain Protocols, with
its load generator in another process (server, loadgen, scenario), measures each way of keeping a server's
timers by the server's CPU time per message, the garbage collector on.
"""

from __future__ import annotations

from .competitors import COMPETITORS, PYPI_WHEELS, Competitor
from .measure import median_per_op, memory, worker, worker_main
from .report import format_report, from_pytest_benchmark, load, machine, plot, run_bench
from .workloads import OPERATIONS, Unsupported, delays, noop

__all__ = [
    "COMPETITORS",
    "OPERATIONS",
    "PYPI_WHEELS",
    "Competitor",
    "Unsupported",
    "delays",
    "format_report",
    "from_pytest_benchmark",
    "load",
    "machine",
    "median_per_op",
    "memory",
    "noop",
    "plot",
    "run_bench",
    "worker",
    "worker_main",
]
