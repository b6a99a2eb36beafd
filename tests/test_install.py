"""The install without a C compiler: built from a copy of this checkout with a compiler that fails, after
an earlier build left compiled modules in its build directory (as a checkout built once before does).
The wheel is pure Python, none of the earlier compiled modules is in it, it keeps the reason, and the
install it makes runs the pure-Python backend and says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _copy(to: Path) -> None:
    """This checkout's sources (with the C that Cython generated, if any: the build does not redo it)."""
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, to / name)
    shutil.copytree(
        ROOT / "src",
        to / "src",
        ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "build-failed.txt"),
    )


@pytest.mark.skipif(sys.platform == "win32", reason="a compiler that fails is set through CC")
def test_a_build_without_a_compiler_installs_the_pure_python_backend_and_says_why(tmp_path: Path) -> None:
    pytest.importorskip("Cython", reason="Cython builds the extension: pip install 'timerwheel[test]'")
    pytest.importorskip("setuptools.command.bdist_wheel", reason="setuptools >= 70.1 builds the wheel")
    src = tmp_path / "checkout"
    src.mkdir()
    _copy(src)
    stale = src / "build" / "lib.stale" / "timerwheel" / "_core"
    platlib = next(iter(sorted((ROOT / "src" / "timerwheel" / "_core").glob("_wheel_c*.so"))), None)
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    env.pop("TIMERWHEEL_NO_EXTENSIONS", None)
    if platlib is not None:  # (a compiled module of an earlier build, where this build puts its own)
        import sysconfig

        plat = f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
        stale = src / "build" / plat / "timerwheel" / "_core"
        stale.mkdir(parents=True)
        shutil.copy2(platlib, stale / platlib.name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", "dist", "."],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (src / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name  # (in the line pip prints)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert not [n for n in names if n.endswith((".so", ".pyd"))]
        reason = archive.read("timerwheel/_core/build-failed.txt").decode()
    assert reason.strip()
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import timerwheel, timerwheel._core as c; print(timerwheel.BACKEND); print(c.REASON)",
        ],
        env={**env, "PYTHONPATH": str(target)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    backend, why = shown.stdout.splitlines()
    assert backend == "python"
    assert why.startswith("the Cython extension could not be built when timerwheel was installed")


@pytest.mark.skipif(sys.platform == "win32", reason="the test copies a Linux or macOS compiled module")
def test_a_build_without_extensions_removes_the_compiled_modules_an_earlier_build_left(
    tmp_path: Path,
) -> None:
    """TIMERWHEEL_NO_EXTENSIONS=1: the compiled modules an earlier build left in build/ (a wheel would ship
    them) and in src/ (an editable install would import them) are removed; the wheel is pure Python."""
    pytest.importorskip("setuptools.command.bdist_wheel", reason="setuptools >= 70.1 builds the wheel")
    src = tmp_path / "checkout"
    src.mkdir()
    _copy(src)
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    plat = f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
    stale = [
        src / "src" / "timerwheel" / "_core" / f"_wheel_c{suffix}",
        src / "build" / plat / "timerwheel" / "_engine" / f"_scheduler_c{suffix}",
    ]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not a module")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", "dist", "."],
        cwd=src,
        env={**os.environ, "TIMERWHEEL_NO_EXTENSIONS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (src / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if n.endswith((".so", ".pyd"))]
    assert not [path for path in stale if path.exists()]
