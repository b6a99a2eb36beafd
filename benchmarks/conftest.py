"""Fixtures of the benchmarks: the garbage collector off while timing, and the Cython floor built on the fly.

Independent of tests/conftest.py. Run with: python -m pytest benchmarks/ --benchmark-only
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
    """per_op(target, obj, ops, rounds, setup=None): time `rounds` calls of target(obj, ops).

    One warm-up call first; `setup` runs untimed before each call. The figures are per call: extra_info["ops"]
    is what to divide them by (report.py does). Returns the last call's result.
    """

    def run(target: Callable[[Any, int], Any], obj: Any, ops: int, rounds: int, setup: Any = None) -> Any:
        benchmark.extra_info["ops"] = ops
        return benchmark.pedantic(target, args=(obj, ops), setup=setup, rounds=rounds, warmup_rounds=1)

    return run
