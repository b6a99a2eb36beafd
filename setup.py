"""Build the Cython extensions, or fall back to the pure-Python modules when they cannot be built.

Everything else about the package lives in pyproject.toml. Set TIMERWHEEL_NO_EXTENSIONS=1 to skip the
extension on purpose. A build that fails (no C compiler, no Cython) is reported and the install goes on
without it: the pure-Python twin of the core is always installed.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning instead of a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # DistutilsPlatformError, CCompilerError, ...: no usable compiler
            self._warn(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._warn(exc)

    @staticmethod
    def _warn(exc: Exception) -> None:
        print(
            "\n*** timerwheel: the Cython extension could not be built "
            f"({type(exc).__name__}: {exc}).\n"
            "*** Installing the pure-Python backend instead: same behaviour, slower.\n",
            file=sys.stderr,
        )


def extensions() -> list[Extension]:
    if os.environ.get("TIMERWHEEL_NO_EXTENSIONS") or sys.implementation.name != "cpython":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("*** timerwheel: Cython is not installed; installing the pure-Python backend.", file=sys.stderr)
        return []
    core = Extension("timerwheel._core._wheel_c", ["src/timerwheel/_core/_wheel_c.pyx"])
    # The job engine, compiled from its own source: _engine/scheduler.py is the pure-Python engine and,
    # built by Cython with the C types of _engine/_scheduler_c.pxd (found by the module's name), the module
    # _engine._scheduler_c (one source, two builds). Annotations are documentation only: the types are all
    # in the .pxd.
    engine = Extension("timerwheel._engine._scheduler_c", ["src/timerwheel/_engine/scheduler.py"])
    # the same, for the drivers' base
    drivers = Extension("timerwheel._drivers._base_c", ["src/timerwheel/_drivers/base.py"])
    # nonecheck: a typed field that is None (a Run made by hand, a Scheduler whose __init__ has not run)
    # raises AttributeError, as in Python, instead of crashing the interpreter.
    directives = {"language_level": "3", "annotation_typing": False, "binding": True}
    # Cython tracks the .pxd of a .pyx by its name, not the .pxd that the engine's module name finds:
    # regenerate the engine's C when either .pxd is newer than it.
    pxds = ["src/timerwheel/_engine/_scheduler_c.pxd", "src/timerwheel/_core/_wheel_c.pxd"]
    stale = _newer("src/timerwheel/_engine/scheduler.c", *pxds)
    drivers_pxds = ["src/timerwheel/_drivers/_base_c.pxd", "src/timerwheel/_engine/__init__.pxd", *pxds]
    stale_drivers = _newer("src/timerwheel/_drivers/base.c", *drivers_pxds)
    checked = {**directives, "nonecheck": True}
    return [
        *cythonize([core], compiler_directives=directives),
        *cythonize([engine], compiler_directives=checked, force=stale),
        *cythonize([drivers], compiler_directives=checked, force=stale_drivers),
    ]


def _newer(target: str, *sources: str) -> bool:
    """Whether a source is newer than the generated `target` (or `target` is missing)."""
    if not os.path.exists(target):
        return True
    return any(os.path.getmtime(source) > os.path.getmtime(target) for source in sources)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
