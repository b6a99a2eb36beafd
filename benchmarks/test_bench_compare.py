r"""Everything `python -m timerwheel bench` measures, as pytest-benchmark functions: every competitor of
the registry (timerwheel.bench), operation and size up to 10**6, in this one process (one competitor at a
time; the previous one's timers are released first).

    python -m pytest benchmarks/test_bench_compare.py --benchmark-only \
        --benchmark-json=benchmarks/.build/compare.json
    python -m timerwheel bench --report benchmarks/.build/compare.json

Competitors that are not installed (uvloop, Twisted) are skipped, saying so. 10**7 is left to the
command, which runs it for the wheel and the heaps only.
"""

from __future__ import annotations

from typing import Any

import pytest

from timerwheel.bench import COMPETITORS

SIZES = [10**3, 10**4, 10**5, 10**6]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("op", ["schedule_cancel", "reset", "next_due"])
@pytest.mark.parametrize("name", list(COMPETITORS))
def test_compare(measure: Any, name: str, op: str, size: int) -> None:
    measure(name, op, size, rounds=7)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(COMPETITORS))
def test_compare_expire(measure: Any, name: str, size: int) -> None:
    measure(name, "schedule_expire", size, rounds=3 if size >= 10**6 else 7)
