r"""The comparison of `python -m timerwheel bench`, as pytest-benchmark functions: the same competitors,
operations and code (timerwheel._bench), one benchmark per operation x competitor x size.

    python -m pytest benchmarks/test_bench_compare.py --benchmark-only \
        --benchmark-json=benchmarks/.build/compare.json
    python benchmarks/report.py benchmarks/.build/compare.json

Unlike the command, every competitor runs in this one process (one at a time; the previous one's timers
are released first). Competitors that are not installed (uvloop, Twisted) are skipped, saying so. The
number of operations per round is calibrated to about 50 ms (sched's O(n) cancel gets few); report.py
divides by it. 10**7 is left to the command, which runs it for the wheel and the heap only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from timerwheel._bench import COMPETITORS, Competitor, Unsupported, _median_per_op

SIZES = {"1e3": 10**3, "1e4": 10**4, "1e5": 10**5, "1e6": 10**6}
ROUNDS = 7


@pytest.fixture(scope="module")
def built() -> Iterator[dict[tuple[str, int], Competitor]]:
    made: dict[tuple[str, int], Competitor] = {}
    yield made
    for competitor in made.values():
        competitor.close()


def _competitor(built: dict[tuple[str, int], Competitor], name: str, size: int) -> Competitor:
    key = (name, size)
    if key not in built:
        for competitor in built.values():  # one at a time: 10**6 timers of one competitor are ~100s of MB
            competitor.close()
        built.clear()
        competitor = COMPETITORS[name]()
        try:
            competitor.version()
        except Exception as exc:
            pytest.skip(f"{name} is not usable here: {exc}")
        competitor.build(size)
        built[key] = competitor
    return built[key]


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("op", ["schedule_cancel", "reset", "next_due"])
@pytest.mark.parametrize("name", list(COMPETITORS))
def test_compare(
    benchmark: Any, built: dict[tuple[str, int], Competitor], name: str, op: str, size: str
) -> None:
    benchmark.group = f"compare {op} @{size}"
    competitor = _competitor(built, name, SIZES[size])
    fn = getattr(competitor, op)
    try:
        _, ops = _median_per_op(fn, 10_000, 1, 0.05)  # calibrates the operations per round
    except Unsupported as exc:
        pytest.skip(f"{name}: {exc}")
    benchmark.extra_info["ops"] = ops
    benchmark.pedantic(fn, args=(ops,), rounds=ROUNDS, warmup_rounds=1)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(COMPETITORS))
def test_compare_expire(benchmark: Any, name: str, size: str) -> None:
    benchmark.group = f"compare schedule_expire @{size}"
    competitor = COMPETITORS[name]()
    try:
        competitor.version()
    except Exception as exc:
        pytest.skip(f"{name} is not usable here: {exc}")
    n = SIZES[size]
    benchmark.extra_info["ops"] = n
    ran = benchmark.pedantic(competitor.schedule_expire, args=(n,), rounds=3 if n >= 10**6 else ROUNDS)
    assert ran == n
