"""Shared fixtures: every core test runs against both backends (one fixture, as aio-libs' packages do)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

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
        return importlib.import_module("timerwheel._core_c")
    except ImportError:
        return None


BACKENDS = {"python": importlib.import_module("timerwheel._core_py"), "cython": _c_module()}


@pytest.fixture(params=["cython", "python"])
def core(request: pytest.FixtureRequest) -> ModuleType:
    """The backend module under test: timerwheel._core_c or timerwheel._core_py."""
    module = BACKENDS[request.param]
    if module is None:
        # Only reachable with TIMERWHEEL_NO_EXTENSIONS=1 or a broken build; test_backend.py fails loudly
        # on the latter, so this cannot hide a missing extension.
        pytest.skip("the Cython backend is disabled (TIMERWHEEL_NO_EXTENSIONS) or not built")
    return module
