"""Fixtures of the benchmarks: the garbage collector off while timing, the Cython floor built on the fly, and
`measure`, which times a competitor of the registry (timerwheel.bench) the way the CLI does.

Independent of tests/conftest.py. Run with: python -m pytest benchmarks/ --benchmark-only
--benchmark-json=FILE, then read the figures with python -m timerwheel bench --report FILE.
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).parent
BUILD = HERE / ".build"  # git-ignored (benchmarks/.gitignore)


@pytest.fixture(autouse=True)
def no_gc() -> Iterator[None]:
    """Collect once, then keep the cyclic garbage collector off for the whole benchmark."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def build_floor() -> ModuleType:
    """Cythonize and compile _floor.pyx into benchmarks/.build (as setup.py builds the wheel), then import it.

    The directives are the first line of _floor.pyx, copied from src/timerwheel/_core_c.pyx; the C compiler
    and its flags are setuptools' defaults, as for the wheel. Up-to-date builds are reused.
    """
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    BUILD.mkdir(exist_ok=True)
    pyx = shutil.copy2(HERE / "_floor.pyx", BUILD)  # the generated C file stays in BUILD, beside its source
    dist = Distribution({"ext_modules": cythonize([Extension("_floor", [str(pyx)])], quiet=True)})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = str(BUILD)
    cmd.build_temp = str(BUILD / "tmp")
    cmd.ensure_finalized()
    cmd.run()
    spec = importlib.util.spec_from_file_location("_floor", cmd.get_ext_fullpath("_floor"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def floor() -> type:
    """The Floor class of _floor.pyx; skips (saying why) without Cython or a working C compiler."""
    try:
        return build_floor().Floor  # type: ignore[no-any-return]
    except Exception as exc:  # ImportError (no Cython), CompileError, DistutilsPlatformError, ...
        pytest.skip(f"cannot build benchmarks/_floor.pyx (needs Cython and a C compiler): {exc!r}")


@pytest.fixture
def per_op(benchmark: Any) -> Callable[..., Any]:
    """per_op(target, obj, ops, rounds, setup=None, record=None): time `rounds` calls of target(obj, ops).

    One warm-up call first; `setup` runs untimed before each call. The figures are per call: extra_info["ops"]
    is what to divide them by. Returns the last call's result. (For benchmarks outside the registry.)
    """

    def run(
        target: Callable[[Any, int], Any],
        obj: Any,
        ops: int,
        rounds: int,
        setup: Any = None,
        record: tuple[str, str, int] | None = None,
    ) -> Any:
        benchmark.extra_info["ops"] = ops
        if record is not None:  # (competitor, operation, size): a figure that --report shows
            benchmark.extra_info.update(competitor=record[0], op=record[1], size=record[2])
        return benchmark.pedantic(target, args=(obj, ops), setup=setup, rounds=rounds, warmup_rounds=1)

    return run


class _Built:
    """The competitor built last (one at a time: 10**7 timers of one are gigabytes), kept between the
    benchmarks of a module that measure it at the same size."""

    def __init__(self) -> None:
        self.key: tuple[Any, int] | None = None
        self.competitor: Any = None

    def get(self, cls: Any, size: int) -> Any:
        if self.key != (cls, size):
            self.close()
            competitor = cls()
            try:
                competitor.version()
            except Exception as exc:  # not installed, or not usable here
                pytest.skip(f"{cls.name} is not usable here: {exc}")
            gc.collect()
            competitor.build(size)
            self.key, self.competitor = (cls, size), competitor
        return self.competitor

    def close(self) -> None:
        if self.competitor is not None:
            self.competitor.close()
        self.key = self.competitor = None
        gc.collect()


@pytest.fixture(scope="module")
def built() -> Iterator[_Built]:
    cache = _Built()
    yield cache
    cache.close()


@pytest.fixture
def measure(benchmark: Any, built: _Built, floor_competitor: Any) -> Callable[..., None]:
    """measure(name, op, size, rounds=30): one figure of the registry, as pytest-benchmark measures it.

    `name` is a competitor of timerwheel.bench.COMPETITORS, or "floor" (two empty Cython calls: add and
    cancel). The operations per round are calibrated to about 50 ms (at most 10,000), as in the CLI;
    schedule_expire does `size` timers per round. extra_info names the competitor, operation, size and
    operations per round: what `python -m timerwheel bench --report` reads.
    """
    from timerwheel.bench import COMPETITORS, Unsupported, median_per_op

    def run(name: str, op: str, size: int, rounds: int = 30) -> None:
        cls = floor_competitor if name == "floor" else COMPETITORS[name]
        benchmark.group = f"{op} @{size:.0e}"
        benchmark.extra_info.update(competitor=name, op=op, size=size)
        if op == "schedule_expire":
            competitor = cls()
            try:
                competitor.version()
            except Exception as exc:
                pytest.skip(f"{name} is not usable here: {exc}")
            benchmark.extra_info["ops"] = size
            try:
                ran = benchmark.pedantic(competitor.schedule_expire, args=(size,), rounds=rounds)
            except Unsupported as exc:
                pytest.skip(f"{name}: {exc}")
            assert ran == size
            return
        fn = getattr(built.get(cls, size), op)
        try:
            _, ops = median_per_op(fn, 10_000, 1, 0.05)  # calibrates the operations per round
        except Unsupported as exc:
            pytest.skip(f"{name}: {exc}")
        benchmark.extra_info["ops"] = ops
        benchmark.pedantic(fn, args=(ops,), rounds=rounds, warmup_rounds=1)

    return run


@pytest.fixture(scope="session")
def floor_competitor() -> Any:
    """The floor as a competitor of the registry: the wheel's schedule_cancel loop on _floor.Floor."""
    from timerwheel.bench.competitors import Wheel

    class Floor(Wheel):
        name, title, big = "floor", "two empty Cython calls (add, cancel)", True

        def version(self) -> str:
            self._class()
            return "-"

        def _class(self) -> Any:
            try:
                return build_floor().Floor
            except Exception as exc:  # ImportError (no Cython), CompileError, DistutilsPlatformError, ...
                raise RuntimeError(f"cannot build benchmarks/_floor.pyx: {exc!r}") from exc

        def build(self, n: int) -> None:
            self.wheel = self._class()()
            self.items = []

    return Floor
