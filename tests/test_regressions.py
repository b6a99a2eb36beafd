"""The reproducers of the hostile reviews not yet moved to the test module of their subject, each a
script in tests/regressions/ that exits 0 when the behaviour it checks holds (and printed FAIL, exit 1,
on the code it was written against): pNN_* from the review of PostgresStore (each starts a PostgreSQL
server of its own with tests/_pg.py). Each runs in a process of its own; the backend is the one under
test (TIMERWHEEL_NO_EXTENSIONS is inherited)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import _pg

HERE = Path(__file__).parent / "regressions"
SCRIPTS = sorted(HERE.glob("p[0-9]*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_reproducer_of_a_review_finding_holds(script: Path, tmp_path: Path) -> None:
    if script.name.startswith("p") and _pg.bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, f"{script.name}:\n{done.stdout}\n{done.stderr}"
    assert "FAIL" not in done.stdout
