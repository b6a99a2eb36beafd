"""Metrics of timerwheel's schedulers for Prometheus and OpenTelemetry.

Every figure is read from the schedulers' own `stats()` (and, for keys by state, `snapshot()`) when the
metrics are collected: the schedulers count nothing more for them, and nothing runs while no one
collects. Neither library is needed by timerwheel itself: `pip install "timerwheel[prometheus]"` or
`"timerwheel[opentelemetry]"`.

    from prometheus_client import start_http_server
    from timerwheel.metrics import register_prometheus

    register_prometheus({"jobs": keyed, "engine": sched})   # a `scheduler` label for each
    start_http_server(9108, addr="127.0.0.1")               # GET /metrics

    from opentelemetry import metrics
    from timerwheel.metrics import register_opentelemetry

    register_opentelemetry(metrics.get_meter("app"), {"jobs": keyed, "engine": sched})

Labels are few by default (`scheduler`, and `kind`, `state` where a metric is split): a key's own
series (its next run, its runs) only with `per_key=True`, for a few hundred keys at most.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._keyed import LATENESS_BUCKETS, KeyedScheduler, KeyedStats
from ._types import Stats

__all__ = ["PrometheusCollector", "register_opentelemetry", "register_prometheus", "samples"]

logger = logging.getLogger("timerwheel")

#: How long a collection waits for an AsyncScheduler's loop to read its stats (seconds)
LOOP_READ_TIMEOUT = 2.0

#: The kinds of plain timers Stats counts apart (the rest of Stats.timers is kind "other").
TIMER_KINDS = ("keys", "handles", "timeouts", "sleeps", "deadlines")

# (name, Stats or KeyedStats field, help): monotonic counts
_ENGINE_COUNTERS = [
    ("timerwheel_runs_started", "executed", "Runs started (the job called)."),
    ("timerwheel_runs_failed", "failed", "Runs that raised."),
    ("timerwheel_fires_dropped", "dropped", "Fires dropped by backpressure."),
    ("timerwheel_fires_skipped", "skipped", "Fires skipped: the task's previous run was still going."),
    ("timerwheel_tasks_cancelled", "cancelled", "Tasks cancelled."),
    ("timerwheel_clock_errors", "clock_errors", "Times the driver could not read its clock."),
]
_ENGINE_GAUGES = [
    ("timerwheel_tasks_pending", "pending", "Tasks armed, waiting for their due."),
    ("timerwheel_runs_running", "running", "Runs executing now."),
    ("timerwheel_runs_queued", "queued", "Runs due and waiting for a worker or a slot."),
]
_KEYED_COUNTERS = [
    ("timerwheel_key_runs_started", "started", "Runs of keys started."),
    ("timerwheel_key_runs_finished", "finished", "Runs of keys finished."),
    ("timerwheel_key_runs_failed", "failed", "Runs of keys that raised."),
    ("timerwheel_key_fires_missed", "missed", "Fires missed while down or paused, not run (on_missed)."),
    ("timerwheel_key_fires_caught_up", "caught_up", "Missed fires run at a start or a resume."),
    ("timerwheel_key_fires_recovered", "recovered", "Interrupted fires run again (Recover.RERUN)."),
    ("timerwheel_key_fires_abandoned", "abandoned", "Interrupted fires not run again (Recover.SKIP)."),
    ("timerwheel_key_fires_skipped", "skipped", "Fires not run: a run of the key was going (Overlap.SKIP)."),
    ("timerwheel_key_fires_late", "late", "Fires not begun late_grace seconds after they were due."),
    ("timerwheel_key_runs_retried", "retried", "Failed runs tried again (retry=)."),
    ("timerwheel_key_clock_errors", "clock_errors", "Times the wall clock could not be read for a key."),
    ("timerwheel_key_store_errors", "store_errors", "Writes and takes the store failed (each retried)."),
    ("timerwheel_keys_claimed", "claimed", "Keys taken up from a shared store (start, takeovers)."),
]


@dataclass
class Sample:
    """One figure: a metric's name (without Prometheus's `_total`), its kind ("counter", "gauge" or
    "histogram"), its help, its labels and its value (a histogram's: its cumulative bucket counts by
    upper bound, its sum and its count)."""

    name: str
    kind: str
    help: str
    labels: dict[str, str]
    value: float = 0.0
    buckets: list[tuple[float, int]] = field(default_factory=list)
    total: float = 0.0
    count: int = 0


def samples(schedulers: Mapping[str, Any], *, per_key: bool = False) -> list[Sample]:
    """Every figure of `schedulers` (a name, for the `scheduler` label, to a Scheduler, ThreadedScheduler,
    AsyncScheduler or KeyedScheduler), read now. O(1) per scheduler, but keys by state (and `per_key`):
    O(keys) for a KeyedScheduler."""
    out: list[Sample] = []
    for name, scheduler in schedulers.items():
        label = {"scheduler": str(name)}
        try:
            stats = _stats(scheduler)
            if isinstance(stats, KeyedStats):
                out += _keyed(scheduler, stats, label, per_key)
            elif isinstance(stats, Stats):
                out += _engine(stats, label)
            else:
                raise TypeError(f"stats() gave a {type(stats).__name__}, not Stats or KeyedStats")
        except Exception as exc:  # (the others' figures still go out: one scheduler's trouble is its own)
            logger.warning("timerwheel: the metrics of scheduler %r could not be read: %r", name, exc)
    return out


def _stats(scheduler: Any) -> Any:
    """Its stats(), read on its event loop's thread if it is an AsyncScheduler asked from another thread
    (its methods belong to its loop's thread: a Prometheus server thread, an OpenTelemetry exporter's)."""
    module = sys.modules.get("timerwheel._drivers.asyncio")  # (imported if any AsyncScheduler exists)
    if module is None or not isinstance(scheduler, module.AsyncScheduler):
        return scheduler.stats()
    import asyncio

    loop = module.loop_of(scheduler)
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:  # (no loop runs on this thread)
        here = None
    if here is loop or not loop.is_running():
        return scheduler.stats()
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def read() -> None:
        try:
            done.set_result(scheduler.stats())
        except BaseException as exc:
            done.set_exception(exc)

    loop.call_soon_threadsafe(read)
    return done.result(timeout=LOOP_READ_TIMEOUT)


def _engine(stats: Stats, label: dict[str, str]) -> list[Sample]:
    out = [Sample(n, "counter", h, label, getattr(stats, f)) for n, f, h in _ENGINE_COUNTERS]
    out += [Sample(n, "gauge", h, label, getattr(stats, f)) for n, f, h in _ENGINE_GAUGES]
    kinds = {kind: getattr(stats, kind) for kind in TIMER_KINDS}
    kinds["other"] = max(0, stats.timers - sum(kinds.values()))
    help_ = "Plain timers armed in the engine's wheel, by kind (keys, handles, timeouts, sleeps, ...)."
    out += [
        Sample("timerwheel_timers_pending", "gauge", help_, {**label, "kind": k}, v) for k, v in kinds.items()
    ]
    return out


def _keyed(keyed: KeyedScheduler, stats: KeyedStats, label: dict[str, str], per_key: bool) -> list[Sample]:
    out = [Sample(n, "counter", h, label, getattr(stats, f)) for n, f, h in _KEYED_COUNTERS]
    out.append(Sample("timerwheel_keys", "gauge", "Keys held.", label, stats.keys))
    states = {state.value: n for state, n in keyed.states().items()}
    help_ = "Keys held, by state."
    out += [
        Sample("timerwheel_keys_by_state", "gauge", help_, {**label, "state": s}, n)
        for s, n in states.items()
    ]
    cumulative, buckets = 0, []
    for bound, n in zip(LATENESS_BUCKETS, stats.lateness or [0] * len(LATENESS_BUCKETS), strict=True):
        cumulative += n
        buckets.append((bound, cumulative))
    help_ = "How late key runs began: the wall clock as the fire was taken, less the fire's time."
    out.append(
        Sample(
            "timerwheel_key_run_lateness_seconds",
            "histogram",
            help_,
            label,
            0.0,
            buckets,
            stats.lateness_sum,
            cumulative,
        )
    )
    if per_key:
        for key, info in keyed.snapshot().items():
            labels = {**label, "key": str(key), "key_type": type(key).__name__}  # (1 and "1": two keys)
            at = math.nan if info.next_run_at is None else info.next_run_at.timestamp()
            out.append(
                Sample("timerwheel_key_next_run_timestamp_seconds", "gauge", "A key's next run.", labels, at)
            )
            out.append(
                Sample("timerwheel_key_runs", "counter", "A key's fires taken to run.", labels, info.runs)
            )
    return out


class PrometheusCollector:
    """A prometheus_client collector of `schedulers` (see samples()): register it with a registry, or use
    register_prometheus(). Counters get Prometheus's `_total` suffix."""

    def __init__(self, schedulers: Mapping[str, Any], *, per_key: bool = False) -> None:
        _check(schedulers)
        self.schedulers = dict(schedulers)
        self.per_key = per_key

    def describe(self) -> list[Any]:
        """What it collects, read once at registration: a registry refuses a second collector of the
        same series (the same schedulers registered twice)."""
        return list(self.collect())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        families: dict[str, Any] = {}
        for s in samples(self.schedulers, per_key=self.per_key):
            names = list(s.labels)
            family: Any = families.get(s.name)
            if family is None:
                if s.kind == "counter":
                    family = CounterMetricFamily(s.name, s.help, labels=names)
                elif s.kind == "gauge":
                    family = GaugeMetricFamily(s.name, s.help, labels=names)
                else:
                    family = HistogramMetricFamily(s.name, s.help, labels=names)
                families[s.name] = family
            values = list(s.labels.values())
            if s.kind == "histogram":
                buckets = [("+Inf" if math.isinf(b) else repr(b), n) for b, n in s.buckets]
                family.add_metric(values, buckets, s.total)
            else:
                family.add_metric(values, s.value)
        yield from families.values()


def register_prometheus(
    schedulers: Mapping[str, Any], *, registry: Any = None, per_key: bool = False
) -> PrometheusCollector:
    """Register a PrometheusCollector of `schedulers` with `registry` (default: prometheus_client's
    REGISTRY, which its `start_http_server()` and `make_asgi_app()` serve); returns it (unregister it
    with `registry.unregister(collector)`). ImportError if prometheus_client is not installed."""
    from prometheus_client import REGISTRY

    collector = PrometheusCollector(schedulers, per_key=per_key)
    (REGISTRY if registry is None else registry).register(collector)
    return collector


def register_opentelemetry(meter: Any, schedulers: Mapping[str, Any], *, per_key: bool = False) -> None:
    """Observable instruments on an OpenTelemetry `meter` (opentelemetry-api's Meter) for `schedulers`:
    counters as observable counters, gauges as observable gauges, read at each collection. The lateness
    histogram is given as its count and sum (observable counters `..._count`, `..._sum`): OpenTelemetry
    has no observable histogram."""
    from opentelemetry.metrics import Observation

    _check(schedulers)
    first = samples(schedulers, per_key=per_key)
    lock = threading.Lock()
    cache: list[Any] = [time.monotonic(), first]

    def current() -> list[Sample]:
        """The figures of this collection: read once for all its instruments (their callbacks come one
        after another), at most every half a second."""
        with lock:
            if time.monotonic() - cache[0] > 0.5:
                cache[:] = [time.monotonic(), samples(schedulers, per_key=per_key)]
            return list(cache[1])

    def reader(name: str, part: str) -> Callable[[Any], Iterable[Any]]:
        def read(options: Any) -> Iterable[Any]:
            for s in current():
                if s.name == name:
                    value = s.value if part == "value" else s.total if part == "sum" else s.count
                    yield Observation(value, s.labels)

        return read

    made: set[str] = set()
    for s in first:
        if s.name in made:
            continue
        made.add(s.name)
        if s.kind == "histogram":
            meter.create_observable_counter(f"{s.name}_count", [reader(s.name, "count")], description=s.help)
            meter.create_observable_counter(
                f"{s.name}_sum", [reader(s.name, "sum")], unit="s", description=s.help
            )
        elif s.kind == "counter":
            meter.create_observable_counter(s.name, [reader(s.name, "value")], description=s.help)
        else:
            meter.create_observable_gauge(s.name, [reader(s.name, "value")], description=s.help)


def _check(schedulers: Mapping[str, Any]) -> None:
    if not isinstance(schedulers, Mapping) or not schedulers:
        raise TypeError("schedulers must be a non-empty mapping of names to schedulers, e.g. {'jobs': keyed}")
    if len({str(name) for name in schedulers}) < len(schedulers):
        raise ValueError(f"schedulers: two names are the same as labels: {sorted(map(str, schedulers))}")
    for name, scheduler in schedulers.items():
        if not callable(getattr(scheduler, "stats", None)):
            raise TypeError(f"schedulers[{name!r}] has no stats(): give a timerwheel scheduler")
