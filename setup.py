"""Build the Cython extensions, or fall back to the pure-Python modules when they cannot be built.

Everything else about the package lives in pyproject.toml. Set TIMERWHEEL_NO_EXTENSIONS=1 to skip the
extension on purpose. A build that fails (no C compiler, no Cython) is reported and the install goes on
without it: the pure-Python twin of the core is always installed.
"""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:  # (setuptools 70.1 and later; the build's own environment has it: pyproject.toml's build-system)
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # an older setuptools, in an environment built without isolation
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]


#: Written beside the pure-Python core when the extension could not be built: why (python -m timerwheel
#: prints it). Removed by a build that succeeds.
FAILED = os.path.join("timerwheel", "_core", "build-failed.txt")


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning instead of a failed install. If any extension
    fails, none is installed (not even one built by an earlier build of this checkout, from older
    sources): the install is wholly the pure-Python backend, and says so."""

    def run(self) -> None:
        self.failure: str | None = None
        try:
            super().run()
        except Exception as exc:  # DistutilsPlatformError, CCompilerError, ...: no usable compiler
            self.failure = self.failure or f"{type(exc).__name__}: {exc}"  # (the first: the cause)
        self._settle()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self.failure = self.failure or f"{type(exc).__name__}: {exc}"

    def _settle(self) -> None:
        """After the build: every extension, or none (and why, in FAILED); and a failure told."""
        root = "src" if self.inplace else self.build_lib
        failed = os.path.join(root, FAILED)
        if self.failure is None:
            if os.path.exists(failed):
                os.remove(failed)
            return
        for ext in self.extensions:
            built = self.get_ext_fullpath(ext.name)
            if os.path.exists(built):
                os.remove(built)
        os.makedirs(os.path.dirname(failed), exist_ok=True)
        with open(failed, "w", encoding="utf-8") as out:
            out.write(self.failure + "\n")
        self.distribution.timerwheel_failure = self.failure  # type: ignore[attr-defined]
        self.distribution.ext_modules = []  # (installed as pure Python: the root of the wheel)
        _warn(self.failure)


class PureIfNotBuilt(bdist_wheel):
    """bdist_wheel whose wheel is pure Python (py3-none-any, in its name on pip's output) when the
    extension could not be built: a wheel tagged for one platform would claim code it does not have."""

    def run(self) -> None:
        if not self.skip_build:
            self.reinitialize_command("build_ext").inplace = False  # type: ignore[attr-defined]
            self.run_command("build")
            self.skip_build = True
        if getattr(self.distribution, "timerwheel_failure", None):
            self.root_is_pure = True
        super().run()


def _warn(failure: str) -> None:
    """Say it where a user sees it: pip shows a build's output only with -v, so the terminal too."""
    short = failure if len(failure) <= 160 else failure[:157] + "..."
    message = (
        f"\n*** timerwheel: the Cython extension could not be built ({short}).\n"
        "*** Installing the pure-Python backend instead: same behaviour, slower. `python -m timerwheel` "
        "says which backend is in use, and why.\n"
    )
    print(message, file=sys.stderr)
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:  # (none: a CI log, where -v shows stderr)
            tty.write(message)
    except OSError:
        pass


def extensions() -> list[Extension]:
    if os.environ.get("TIMERWHEEL_NO_EXTENSIONS") or sys.implementation.name != "cpython":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
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


#: The compiled modules, as paths without their platform suffix (`.cpython-311-x86_64-linux-gnu.so`).
BUILT = ("timerwheel/_core/_wheel_c", "timerwheel/_engine/_scheduler_c", "timerwheel/_drivers/_base_c")


def remove_built() -> None:
    """A build without the extension (TIMERWHEEL_NO_EXTENSIONS, no Cython, not CPython) removes the
    compiled modules an earlier build of this checkout left: in build/ (a wheel would ship them) and in
    src/ (an editable install would import them)."""
    for root in ["src", *glob.glob(os.path.join("build", "lib*"))]:
        for name in BUILT:
            for path in glob.glob(os.path.join(root, name + ".*")):
                if path.endswith((".so", ".pyd")):
                    os.remove(path)


def _newer(target: str, *sources: str) -> bool:
    """Whether a source is newer than the generated `target` (or `target` is missing)."""
    if not os.path.exists(target):
        return True
    return any(os.path.getmtime(source) > os.path.getmtime(target) for source in sources)


EXTENSIONS = extensions()
if not EXTENSIONS:
    remove_built()
setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": OptionalBuildExt, "bdist_wheel": PureIfNotBuilt})
