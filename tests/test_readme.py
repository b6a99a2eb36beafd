"""The Python examples of the README and of docs/ run as they are written, so they cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from timerwheel.testing.postgres import postgres_bindir

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    block
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
]


def test_readme_has_examples() -> None:
    assert BLOCKS


EXAMPLE_DSN = "host=db.internal dbname=app user=app"  # what the PostgresStore examples connect to


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, request: pytest.FixtureRequest) -> None:
    block = BLOCKS[index]
    if EXAMPLE_DSN in block:  # run against the test suite's own PostgreSQL server
        if postgres_bindir() is None:
            pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
        block = block.replace(EXAMPLE_DSN, request.getfixturevalue("pg_dsn"))
    exec(compile(block, f"README.md example {index + 1}", "exec"), {"__name__": "readme"})
