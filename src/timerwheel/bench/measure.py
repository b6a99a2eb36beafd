"""How the registry measures: time per operation (median of rounds, the collector off) and memory per
pending timer (tracemalloc). The one method of each, for the CLI's worker processes and for benchmarks/.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

from .competitors import COMPETITORS, Competitor
from .workloads import Unsupported

__all__ = ["median_per_op", "memory", "timed", "worker", "worker_main"]


def timed(fn: Callable[[int], Any], k: int) -> float:
    """Nanoseconds that fn(k) takes."""
    start = time.perf_counter_ns()
    fn(k)
    return float(time.perf_counter_ns() - start)


def median_per_op(fn: Callable[[int], Any], max_ops: int, rounds: int, budget: float) -> tuple[float, int]:
    """Median ns per operation over `rounds` rounds of k operations, k chosen to fit `budget` seconds."""
    per_op = max(timed(fn, 1), 1.0)  # one call first: a warm-up, and a first estimate
    k = max(1, min(max_ops, int(budget * 1e9 / per_op)))
    per_op = timed(fn, k) / k  # a second estimate, on a real batch
    k = max(1, min(max_ops, int(budget * 1e9 / max(per_op, 1.0))))
    return statistics.median(timed(fn, k) / k for _ in range(rounds)), k


def memory(cls: type[Competitor], n: int) -> float:
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
                        ns, k = median_per_op(getattr(competitor, op), 10_000, rounds, budget)
                        yield {"competitor": name, "op": op, "size": size, "ns": ns, "ops_per_round": k}
                    except Unsupported as exc:
                        yield {"competitor": name, "op": op, "size": size, "unsupported": str(exc)}
            finally:
                gc.enable()
                competitor.close()
                del competitor
                gc.collect()
        if "schedule_expire" in ops:
            yield _expire(cls, name, size, rounds)
        if "memory" in ops:
            yield {"competitor": name, "op": "memory", "size": size, "bytes": memory(cls, size)}


def _expire(cls: type[Competitor], name: str, size: int, rounds: int) -> dict[str, Any]:
    """The schedule_expire record of one size: the median over rounds, or why it is not measured."""
    samples = []
    for _ in range(1 if size >= 10**7 else 3 if size >= 10**6 else rounds):
        competitor = cls()
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter_ns()
            ran = competitor.schedule_expire(size)
            samples.append((time.perf_counter_ns() - start) / size)
        except Unsupported as exc:
            return {"competitor": name, "op": "schedule_expire", "size": size, "unsupported": str(exc)}
        finally:
            gc.enable()
        if ran != size:
            raise RuntimeError(f"{name}: schedule_expire ran {ran} of {size} callbacks")
    return {"competitor": name, "op": "schedule_expire", "size": size, "ns": statistics.median(samples)}


def worker_main(name: str, sizes: list[int], ops: list[str], rounds: int, budget: float) -> int:
    """The worker process: print one JSON line per record."""
    for record in worker(name, sizes, ops, rounds, budget):
        print(json.dumps(record), flush=True)
    return 0
