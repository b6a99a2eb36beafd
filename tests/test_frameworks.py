"""timerwheel in the frameworks: an ASGI app (FastAPI on a real uvicorn server, called by a real httpx
client) whose lifespan starts and closes its schedulers, and a Django project whose management command
runs the KeyedScheduler as a worker. Each skips, saying so, without its framework (the test extra
installs them)."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import KeyedScheduler, KeyState
from timerwheel.asgi import lifespan


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.01)


@pytest.mark.realtime
def test_an_asgi_app_starts_its_schedulers_with_it_and_its_handlers_use_their_timeouts() -> None:
    """A real uvicorn server on 127.0.0.1: the lifespan's schedulers run while it serves (a handler's
    timeout expires on the wheel; a trigger runs the key) and are closed when it stops. Tolerances: 10 s
    for a loaded machine to start and stop the server, 5 s to run a trigger."""
    fastapi = pytest.importorskip("fastapi", reason="pip install fastapi (the test extra has it)")
    uvicorn = pytest.importorskip("uvicorn", reason="pip install uvicorn (the test extra has it)")
    httpx = pytest.importorskip("httpx", reason="pip install httpx (the test extra has it)")
    runs: list[Any] = []
    made: list[KeyedScheduler] = []

    def make(sched: Any) -> KeyedScheduler:
        keyed = KeyedScheduler(
            sched, lambda now, key, data: now + timedelta(hours=1), lambda k, d: runs.append(k)
        )
        keyed.upsert("nightly")
        made.append(keyed)
        return keyed

    app = fastapi.FastAPI(lifespan=lifespan(make))

    @app.get("/slow")
    async def slow(request: fastapi.Request) -> dict[str, Any]:
        try:
            async with request.app.state.scheduler.timeout(0.05):
                await asyncio.sleep(30)
        except TimeoutError:
            return {"timed_out": True}
        return {"timed_out": False}

    @app.post("/run/{key}")
    async def run_now(key: str, request: fastapi.Request) -> dict[str, Any]:
        at = request.app.state.keyed.trigger(key)
        return {"at": None if at is None else at.isoformat()}

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10.0, "the server starts")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.get("/slow").json() == {"timed_out": True}
            assert client.post("/run/nightly").json()["at"] is not None
            wait_for(lambda: runs == ["nightly"], 5.0, "the trigger runs")
            assert client.post("/run/other").json() == {"at": None}
        assert made[0].get("nightly").state is KeyState.PENDING  # type: ignore[union-attr]
    finally:
        server.should_exit = True
        thread.join(10)
    assert not thread.is_alive()
    assert made[0].get("nightly").state is KeyState.DISABLED  # type: ignore[union-attr]  (closed)


def test_a_lifespan_that_cannot_make_its_keyed_scheduler_closes_what_it_started() -> None:
    class App:
        class state:
            pass

    def fails(sched: Any) -> KeyedScheduler:
        raise RuntimeError("no jobs today")

    async def main() -> None:
        with pytest.raises(RuntimeError, match="no jobs today"):
            async with lifespan(fails)(App()):
                pass

    asyncio.run(main())
    with pytest.raises(TypeError, match="make must be a callable"):
        lifespan(42)  # type: ignore[arg-type]

    async def wrong(sched: Any) -> Any:  # (a coroutine function is awaited: here it gives a wrong type)
        return sched

    async def main2() -> None:
        with pytest.raises(TypeError, match="gave a AsyncScheduler, not a KeyedScheduler"):
            async with lifespan(wrong)(App()):
                pass

    asyncio.run(main2())


def test_a_lifespan_awaits_an_async_make() -> None:
    class App:
        class state:
            pass

    async def make(sched: Any) -> KeyedScheduler:
        return KeyedScheduler(sched, lambda now, key, data: now + timedelta(hours=1), lambda k, d: None)

    async def main() -> None:
        async with lifespan(make)(App()):
            assert isinstance(App.state.keyed, KeyedScheduler) and App.state.keyed.get("x") is None

    asyncio.run(main())


SETTINGS = """
SECRET_KEY = "test"
INSTALLED_APPS = ["timerwheel.django"]
DATABASES = {}
USE_TZ = True
TIMERWHEEL_KEYED = "tw_jobs.make_keyed"
"""

JOBS = """
from datetime import datetime, timezone

from timerwheel import KeyedScheduler, ThreadedScheduler


def every_tenth(now, key, data):
    return datetime.fromtimestamp((int(now.timestamp() * 10) + 1) / 10, timezone.utc)


def make_keyed():
    keyed = KeyedScheduler(ThreadedScheduler(), every_tenth, lambda key, data: print("ran", key, flush=True))
    keyed.upsert("k")
    return keyed
"""


def _django(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "tw_settings.py").write_text(SETTINGS)
    (tmp_path / "tw_jobs.py").write_text(JOBS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "DJANGO_SETTINGS_MODULE": "tw_settings",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "django", "timerwheel_worker", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.realtime
def test_the_django_worker_runs_the_keyed_scheduler_until_sigterm(tmp_path: Path) -> None:
    """The management command starts the project's KeyedScheduler (a key every 0.1 s), and closes it on
    SIGTERM. Tolerance: 1 s of runs (ten fires) must show at least one, on a loaded machine."""
    pytest.importorskip("django", reason="pip install django (the test extra has it)")
    with _django(tmp_path) as worker:
        assert worker.stdout is not None
        first = worker.stdout.readline()
        assert first.startswith("timerwheel worker: 1 keys held at start"), first + (
            worker.stderr.read() if worker.stderr else ""
        )
        time.sleep(1.0)  # (real time: the runs it makes)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert out.count("ran k") >= 1 and "timerwheel worker: stopped after" in out


def test_the_django_worker_says_what_is_missing(tmp_path: Path) -> None:
    pytest.importorskip("django", reason="pip install django (the test extra has it)")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "DJANGO_SETTINGS_MODULE": "tw_settings",
    }

    def worker(settings: str, jobs: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "tw_settings.py").write_text(settings)
        (tmp_path / "tw_jobs.py").write_text(jobs)
        return subprocess.run(
            [sys.executable, "-m", "django", "timerwheel_worker", "--seconds", "0"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = worker(SETTINGS.replace('TIMERWHEEL_KEYED = "tw_jobs.make_keyed"', ""), JOBS)
    assert done.returncode == 1 and "settings.TIMERWHEEL_KEYED must name a factory" in done.stderr
    started = worker(SETTINGS, JOBS.replace("    return keyed", "    keyed.start()\n    return keyed"))
    assert started.returncode == 1 and "could not start" in started.stderr  # (a factory that started it)
