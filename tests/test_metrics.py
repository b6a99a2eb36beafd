"""timerwheel.metrics: the schedulers' figures for Prometheus (scraped from a real /metrics endpoint on
127.0.0.1) and OpenTelemetry (read by the SDK's in-memory reader), and the counters behind them."""

from __future__ import annotations

import asyncio
import urllib.request
from datetime import datetime
from typing import Any

import pytest

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore, StoreError
from timerwheel.metrics import register_opentelemetry, register_prometheus, samples
from timerwheel.testing import ManualClock, VirtualTimeLoop

T0 = 1_800_000_000.0


def every_10s(now: datetime, key: Any, data: Any) -> datetime:
    return datetime.fromtimestamp((now.timestamp() // 10 + 1) * 10, now.tzinfo)


def running(**kwargs: Any) -> tuple[ManualClock, Scheduler, KeyedScheduler]:
    """Two keys every 10 s; the second run of each began 0.5 s late, the first on time."""
    clock = ManualClock(0.0, wall=T0)
    sched = Scheduler(clock)
    keyed = KeyedScheduler(sched, every_10s, lambda key, data: None, **kwargs)
    keyed.upsert("a")
    keyed.upsert("b")
    keyed.start()
    clock.advance(10)
    sched.run_pending()
    clock.advance(10.5)
    sched.run_pending()
    return clock, sched, keyed


def test_a_real_metrics_endpoint_serves_the_keys_and_the_engine() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    _, sched, keyed = running()
    registry = prometheus_client.CollectorRegistry()
    register_prometheus({"jobs": keyed, "engine": sched}, registry=registry)
    server, thread = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
        thread.join(10)
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    jobs = (("scheduler", "jobs"),)
    assert found[("timerwheel_key_runs_started_total", jobs)] == 4
    assert found[("timerwheel_key_runs_finished_total", jobs)] == 4
    assert found[("timerwheel_keys", jobs)] == 2
    assert found[("timerwheel_keys_by_state", (("scheduler", "jobs"), ("state", "pending")))] == 2
    lateness = "timerwheel_key_run_lateness_seconds"
    assert found[(f"{lateness}_bucket", (("le", "0.001"), ("scheduler", "jobs")))] == 2  # on time
    assert found[(f"{lateness}_bucket", (("le", "0.1"), ("scheduler", "jobs")))] == 2
    assert found[(f"{lateness}_bucket", (("le", "0.5"), ("scheduler", "jobs")))] == 4  # half a second late
    assert found[(f"{lateness}_count", jobs)] == 4 and found[(f"{lateness}_sum", jobs)] == pytest.approx(1.0)
    engine = (("scheduler", "engine"),)
    assert found[("timerwheel_runs_started_total", engine)] == 4
    assert found[("timerwheel_timers_pending", (("kind", "keys"), ("scheduler", "engine")))] == 2
    assert not [name for name, labels in found if any(k == "key" for k, _ in labels)]  # (no per-key series)


def test_per_key_series_only_on_request() -> None:
    _, _, keyed = running()
    per_key = [s for s in samples({"jobs": keyed}, per_key=True) if "key" in s.labels]
    assert {(s.name, s.labels["key"]) for s in per_key} == {
        (name, key)
        for name in ("timerwheel_key_next_run_timestamp_seconds", "timerwheel_key_runs")
        for key in "ab"
    }
    assert next(s.value for s in per_key if s.name == "timerwheel_key_next_run_timestamp_seconds") == T0 + 30


def test_asyncio_timeouts_are_counted_by_kind() -> None:
    from timerwheel import AsyncScheduler

    async def main() -> list[Any]:
        sched = AsyncScheduler()
        sched.start()
        try:
            async with sched.timeout(60):
                return [s for s in samples({"loop": sched}) if s.name == "timerwheel_timers_pending"]
        finally:
            await sched.aclose()

    loop = VirtualTimeLoop()
    try:
        pending = loop.run_until_complete(main())
    finally:
        loop.close()
    assert {s.labels["kind"]: s.value for s in pending}["timeouts"] == 1


def test_opentelemetry_reads_the_same_figures() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    _, sched, keyed = running()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    register_opentelemetry(provider.get_meter("test"), {"jobs": keyed, "engine": sched})
    data = reader.get_metrics_data()
    points = {
        (metric.name, tuple(sorted(point.attributes.items()))): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    assert points[("timerwheel_key_runs_started", (("scheduler", "jobs"),))] == 4
    assert points[("timerwheel_key_run_lateness_seconds_count", (("scheduler", "jobs"),))] == 4
    assert points[("timerwheel_key_run_lateness_seconds_sum", (("scheduler", "jobs"),))] == pytest.approx(1.0)
    assert points[("timerwheel_tasks_pending", (("scheduler", "engine"),))] == 0
    provider.shutdown()


def test_a_store_that_fails_is_counted(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "keys.db")
    clock, sched, keyed = running(store=store)

    def fails(*args: Any) -> int:
        raise StoreError("the disk is full")

    store.start_fire = fails  # type: ignore[method-assign]
    clock.advance(10)
    sched.run_pending()
    assert keyed.stats().store_errors == 2  # (each key's take; tried again later)
    del store.start_fire
    keyed.close()


def test_bad_arguments_are_refused_naming_them() -> None:
    pytest.importorskip("prometheus_client")
    with pytest.raises(TypeError, match="schedulers must be a non-empty mapping"):
        register_prometheus({})
    with pytest.raises(TypeError, match=r"schedulers\['x'\] has no stats"):
        register_prometheus({"x": object()})


def test_an_asyncio_scheduler_is_read_on_its_loop_when_scraped_from_another_thread() -> None:
    """A Prometheus server thread (or an OpenTelemetry exporter's) scrapes an AsyncScheduler, whose
    methods belong to its loop's thread: its stats are read there. (It used to fail the whole scrape.)"""
    prometheus_client = pytest.importorskip("prometheus_client")
    from timerwheel import AsyncScheduler

    async def main() -> str:
        sched = AsyncScheduler()
        sched.start()
        try:
            registry = prometheus_client.CollectorRegistry()
            register_prometheus({"loop": sched}, registry=registry)
            async with sched.timeout(60):
                text = await asyncio.get_running_loop().run_in_executor(
                    None, prometheus_client.generate_latest, registry
                )
            return text.decode()
        finally:
            await sched.aclose()

    text = asyncio.run(main())
    assert 'timerwheel_timers_pending{kind="timeouts",scheduler="loop"} 1.0' in text


def test_the_same_series_twice_are_refused_and_one_failing_scheduler_leaves_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    _, sched, keyed = running()
    registry = prometheus_client.CollectorRegistry()
    register_prometheus({"jobs": keyed}, registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        register_prometheus({"jobs": keyed}, registry=registry)
    with pytest.raises(ValueError, match="two names are the same"):
        register_prometheus({1: keyed, "1": sched})

    class Broken:
        def stats(self) -> Any:
            raise RuntimeError("its store is gone")

    found = samples({"jobs": keyed, "broken": Broken()})
    assert {s.labels["scheduler"] for s in found} == {"jobs"}
    assert "its store is gone" in caplog.text


def test_one_opentelemetry_collection_reads_the_schedulers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import timerwheel.metrics as metrics

    _, sched, keyed = running()
    reads = []
    real = metrics.samples
    monkeypatch.setattr(metrics, "samples", lambda *a, **k: reads.append(1) or real(*a, **k))
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.register_opentelemetry(provider.get_meter("test"), {"jobs": keyed, "engine": sched})
    reads.clear()
    monkeypatch.setattr(metrics.time, "monotonic", lambda: 1e9)  # (a collection a while later)
    reader.get_metrics_data()
    assert len(reads) == 1  # (not one per instrument: 27 of them)
    provider.shutdown()
