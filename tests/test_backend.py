"""Which backend is in use, and the public names of the package."""

from __future__ import annotations

import os
import subprocess
import sys
import weakref

import pytest

import timerwheel
from timerwheel import _engine
from timerwheel._core import wheel as _core_py
from timerwheel.testing import ManualClock

from .conftest import NO_EXTENSIONS


@pytest.mark.skipif(NO_EXTENSIONS, reason="the pure-Python run sets TIMERWHEEL_NO_EXTENSIONS on purpose")
def test_cython_backend_loaded() -> None:
    """A normal install must have built and loaded the extension: fails if the build silently fell back."""
    assert timerwheel.BACKEND == "cython"
    from timerwheel._core import _wheel_c as _core_c

    assert timerwheel.TimerWheel is _core_c.TimerWheel
    assert _core_c.__file__.endswith((".so", ".pyd"))


@pytest.mark.skipif(NO_EXTENSIONS, reason="the pure-Python run sets TIMERWHEEL_NO_EXTENSIONS on purpose")
def test_compiled_engine_loaded() -> None:
    """The job engine is compiled too (its own source, _scheduler.py, built by Cython): the user's
    schedule() and cancel() go straight into compiled code."""
    from timerwheel import _engine
    from timerwheel._engine import _scheduler_c

    assert _engine.ENGINE == "cython"
    assert timerwheel.Scheduler is _scheduler_c.Scheduler
    assert _scheduler_c.__file__.endswith((".so", ".pyd"))
    assert type(timerwheel.Scheduler.schedule).__name__ == "cython_function_or_method"  # not Python


@pytest.mark.skipif(NO_EXTENSIONS, reason="the pure-Python run sets TIMERWHEEL_NO_EXTENSIONS on purpose")
def test_compiled_driver_base_loaded() -> None:
    """The drivers' shared base is compiled too (_driver.py built by Cython): ThreadedScheduler's and
    AsyncScheduler's schedule(), cancel() and reschedule() are compiled code, and what they read is the
    hot record, an extension type whose fields are C fields (no instance dictionary)."""
    from timerwheel import _drivers, _engine
    from timerwheel._drivers import _base_c as _driver_c

    assert _drivers.DriverBase is _driver_c.DriverBase
    assert _driver_c.__file__.endswith((".so", ".pyd"))
    for driver in (timerwheel.ThreadedScheduler, timerwheel.AsyncScheduler):
        assert driver.__mro__[1] is _driver_c.DriverBase
        assert type(driver.schedule).__name__ == "cython_function_or_method"
    hot = timerwheel.ThreadedScheduler()._hot
    assert type(hot) is _driver_c._Hot and not hasattr(hot, "__dict__")
    assert type(hot.engine) is _engine.Scheduler


@pytest.mark.skipif(_engine.ENGINE != "cython", reason="the pure-Python engine's Scheduler is a plain class")
def test_the_compiled_scheduler_takes_weak_references_and_attributes() -> None:
    """The compiled engine makes Scheduler an extension type: it must keep __weakref__ and __dict__, as the
    pure-Python class has them (weakref.ref, WeakMethod(sched.run_pending), a WeakSet of schedulers, an
    attribute of the user's, a method monkeypatched per instance). The compiled engine had lost both."""
    sched = timerwheel.Scheduler(ManualClock())
    failures = []
    for what, op in [
        ("weakref.ref(sched)", lambda: weakref.ref(sched)),
        ("weakref.WeakMethod(sched.run_pending)", lambda: weakref.WeakMethod(sched.run_pending)),
        ("weakref.WeakSet().add(sched)", lambda: weakref.WeakSet().add(sched)),
        ("sched.name = 'x'", lambda: setattr(sched, "name", "x")),
        ("monkeypatch sched.now", lambda: setattr(sched, "now", lambda: 0.0)),
    ]:
        try:
            op()
        except (TypeError, AttributeError) as exc:
            failures.append(f"{what}: {type(exc).__name__}: {exc}")
    assert not failures


NONE_FIELDS = {
    "repr(Run())": "from timerwheel._engine import Run; repr(Run())",
    "Run().start()": "from timerwheel._engine import Run; Run().start()",
    "uninitialised .errors": "from timerwheel import Scheduler; Scheduler.__new__(Scheduler).errors",
    "uninitialised .calendar": "from timerwheel import Scheduler; Scheduler.__new__(Scheduler).calendar",
    "wall() before super().__init__()": (
        "from timerwheel import Scheduler\n"
        "class S(Scheduler):\n"
        "    def __init__(self, clock):\n"
        "        self.started = self.wall()\n"
        "        super().__init__(clock)\n"
        "S(None)"
    ),
}


@pytest.mark.skipif(
    _engine.ENGINE != "cython", reason="the pure-Python engine has no typed fields to crash on"
)
@pytest.mark.parametrize("case", NONE_FIELDS)
def test_the_compiled_engine_raises_on_unset_fields_instead_of_crashing(case: str) -> None:
    """A Run made by hand, or a Scheduler whose __init__ has not run (Scheduler.__new__, a subclass that
    calls a method before super().__init__()), has None where the compiled engine types a field (Run.task,
    Run._engine, Scheduler._reports, Scheduler._cal): it must raise, as the pure-Python engine does, not
    dereference None (the compiled engine died of SIGSEGV). Each case runs in a child process: a crash is
    the failure."""
    done = subprocess.run(
        [sys.executable, "-c", NONE_FIELDS[case]], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode >= 0, f"killed by signal {-done.returncode}\n{done.stderr[-3000:]}"


def test_env_var_selects_python() -> None:
    code = (
        "import timerwheel, timerwheel._engine as e, timerwheel._drivers as d; "
        "print(timerwheel.BACKEND, timerwheel.TimerWheel.__module__, e.ENGINE, "
        "timerwheel.Scheduler.__module__, d.DriverBase.__module__)"
    )
    env = dict(os.environ, TIMERWHEEL_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "python",
        "timerwheel._core.wheel",
        "python",
        "timerwheel._engine.scheduler",
        "timerwheel._drivers.base",
    ]


def test_the_pure_engine_needs_no_cython() -> None:
    """_scheduler.py imports cython only for the compiled build's decorators: where Cython is not
    installed (a wheel, or the sdist on another interpreter) the pure-Python engine runs without it."""
    code = (
        "import sys; sys.modules['cython'] = None\n"  # (an import of it now raises ImportError)
        "import timerwheel, timerwheel._engine as e\n"
        "from timerwheel.testing import ManualClock\n"
        "clock = ManualClock(); s = timerwheel.Scheduler(clock); ran = []\n"
        "s.schedule(1.0, ran.append, args=(1,)); s.schedule(1.0, ran.append, 2.0, args=(2,))\n"
        "clock.advance(1.0); s.run_pending(); print(e.ENGINE, ran)"
    )
    env = dict(os.environ, TIMERWHEEL_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["python", "[1,", "2]"]


def test_no_python_wrapper_on_the_hot_path() -> None:
    """wheel.add and friends are the backend's own methods: nothing sits between the user and the C code."""
    if timerwheel.BACKEND == "cython":
        from timerwheel._core import _wheel_c as _core_c

        assert timerwheel.TimerWheel is _core_c.TimerWheel
        assert type(timerwheel.TimerWheel().add).__name__ == "builtin_function_or_method"
    else:
        assert timerwheel.TimerWheel is _core_py.TimerWheel


PUBLIC = [
    "BACKEND",
    "AlreadyRunningError",
    "AnyOf",
    "AsyncScheduler",
    "Backpressure",
    "CatchUp",
    "Clock",
    "ClockError",
    "ClosedError",
    "Cron",
    "Every",
    "Excluding",
    "Fence",
    "HeapScheduler",
    "HistoryEntry",
    "JobContext",
    "JobEvent",
    "KeyInfo",
    "KeyState",
    "KeyedScheduler",
    "KeyedStats",
    "LeaseLapsed",
    "MemoryStore",
    "PostgresStore",
    "Missed",
    "NotStartedError",
    "Overlap",
    "Recover",
    "RepeatMode",
    "Reschedule",
    "Retry",
    "RunOptions",
    "SQLiteStore",
    "Scheduler",
    "Stats",
    "StoreError",
    "ThreadedScheduler",
    "TimerHandle",
    "TimerInfo",
    "TimerWheel",
    "TimerWheelError",
    "__version__",
]


def test_every_public_name_has_a_docstring() -> None:
    import timerwheel.testing

    names = [getattr(timerwheel, n) for n in PUBLIC if n not in ("BACKEND", "__version__")]
    names += [getattr(timerwheel.testing, n) for n in timerwheel.testing.__all__]
    import timerwheel.testing.simulate

    names += [getattr(timerwheel.testing.simulate, n) for n in timerwheel.testing.simulate.__all__]
    for obj in names:
        assert obj.__doc__ and obj.__doc__.strip(), obj
        for attr, member in vars(obj).items():
            if not attr.startswith("_") and callable(member):
                assert member.__doc__, f"{obj.__name__}.{attr}"


def test_public_names() -> None:
    assert sorted(timerwheel.__all__) == sorted(PUBLIC)
    for name in timerwheel.__all__:
        assert hasattr(timerwheel, name), name
    assert isinstance(timerwheel.__version__, str)


def test_stub_matches_the_python_twin() -> None:
    """_core_c.pyi declares the same public names and signatures as _core_py (which type checkers see)."""
    import ast
    import inspect
    from pathlib import Path

    stub = ast.parse((Path(_core_py.__file__).parent / "_wheel_c.pyi").read_text())
    stub_funcs = {n.name: n for n in stub.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in stub.body if isinstance(n, ast.ClassDef)}
    assert set(classes) == {n for n in _core_py.__all__ if isinstance(getattr(_core_py, n), type)}
    stub_class = classes["TimerWheel"]
    stub_methods = {n.name: n for n in stub_class.body if isinstance(n, ast.FunctionDef)}

    def params(node: ast.FunctionDef) -> list[str]:
        a = node.args
        return [p.arg for p in a.posonlyargs + a.args] + ["*"] + [p.arg for p in a.kwonlyargs]

    def py_params(fn: object) -> list[str]:
        sig = inspect.signature(fn)  # type: ignore[arg-type]
        pos = [n for n, p in sig.parameters.items() if p.kind is not p.KEYWORD_ONLY]
        return pos + ["*"] + [n for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY]

    for name in ("level_for", "slot_for", "rounds_for"):
        assert params(stub_funcs[name]) == py_params(getattr(_core_py, name)), name
    py_methods = {
        n: m for n, m in vars(_core_py.TimerWheel).items() if inspect.isfunction(m) and n != "__reduce__"
    }
    public = {n for n in py_methods if not n.startswith("_") or n in ("__init__", "__len__", "__contains__")}
    assert public <= set(stub_methods)
    for name in public:
        assert params(stub_methods[name]) == py_params(py_methods[name]), name
    props = {n for n, m in vars(_core_py.TimerWheel).items() if isinstance(m, property)}
    assert props <= set(stub_methods)
    constants = {
        n.target.id for n in stub.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert constants == {n for n in _core_py.__all__ if n.isupper()} | {
        "TICK_BITS",
        "ID_BITS",
        "ID_MASK",
        "FREE",
    }


def test_typed_usage_example_runs() -> None:
    """examples/typed_usage.py is what mypy --strict checks as a user's code; it must also run."""
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "typed_usage.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == [timerwheel.BACKEND, timerwheel.__version__]
