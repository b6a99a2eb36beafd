"""Shared fixtures: every core test runs against both backends (one fixture, as aio-libs' packages do)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

NO_EXTENSIONS = bool(os.environ.get("TIMERWHEEL_NO_EXTENSIONS"))


def _c_module() -> ModuleType | None:
    if NO_EXTENSIONS:
        return None
    try:
        return importlib.import_module("timerwheel._core._wheel_c")
    except ImportError:
        return None


BACKENDS = {"python": importlib.import_module("timerwheel._core.wheel"), "cython": _c_module()}


@pytest.fixture(params=["cython", "python"])
def core(request: pytest.FixtureRequest) -> ModuleType:
    """The backend module under test: timerwheel._core._wheel_c or timerwheel._core.wheel."""
    module = BACKENDS[request.param]
    if module is None:
        # Only reachable with TIMERWHEEL_NO_EXTENSIONS=1 or a broken build; test_backend.py fails loudly
        # on the latter, so this cannot hide a missing extension.
        pytest.skip("the Cython backend is disabled (TIMERWHEEL_NO_EXTENSIONS) or not built")
    return module


@pytest.fixture(scope="session")
def compiled_core() -> ModuleType:
    """timerwheel._core._wheel_c, for the tests that hold it against the Python twin or test what only it has.

    Imported wherever it is built, TIMERWHEEL_NO_EXTENSIONS or not: the variable chooses the backend that
    timerwheel uses, and these tests do not go through that choice. Where it is not built, the test skips
    and says so: a comparison of the twin with itself would pass whatever either twin does.
    """
    try:
        return importlib.import_module("timerwheel._core._wheel_c")
    except ImportError as exc:
        pytest.skip(f"the compiled core (timerwheel._core._wheel_c) is not built: {exc}")


def _a_pg_server() -> Iterator[Any]:
    """A real PostgreSQL server (timerwheel.testing.PostgresServer), stopped and removed afterwards; the
    test skips, saying so, where no server binary exists."""
    from timerwheel.testing.postgres import PostgresServer, postgres_bindir

    if postgres_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A real PostgreSQL server for the session, started on first use."""
    yield from _a_pg_server()


@pytest.fixture
def pg_own_server() -> Iterator[Any]:
    """A PostgreSQL server of the test's own, for a test that stops and starts it (an outage: the
    session's server is the other tests')."""
    yield from _a_pg_server()


@pytest.fixture
def pg_dsn(pg_server: Any) -> str:
    """A fresh database of the session's PostgreSQL server."""
    return str(pg_server.database())
