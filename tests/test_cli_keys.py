"""`python -m timerwheel keys --store URL COMMAND`: run as a subprocess, as an operator runs it, against a
real SQLite file and a real PostgreSQL (the session's server, conftest.py), on keys that a KeyedScheduler
made. On PostgreSQL the keys' holder runs meanwhile and hears of the command's changes."""

from __future__ import annotations

import collections
import itertools
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from timerwheel import KeyedScheduler, KeyState, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

from .test_shared import Node, every, wait_for

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC).timestamp()

JOBS = """
from datetime import timedelta


def every_minute(now, key, data):
    return now.replace(second=0, microsecond=0) + timedelta(minutes=data["every"])
"""


def keys(store: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "timerwheel", "keys", "--store", store, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def every_minute(now: datetime, key: Any, data: Any) -> datetime:
    return now.replace(second=0, microsecond=0) + timedelta(minutes=data["every"])


def life(path: Path, clock: ManualClock, ran: list[Any] | None = None) -> KeyedScheduler:
    """A KeyedScheduler on the file, on the clock (its Scheduler: `.sched`, run by hand)."""
    sched = Scheduler(clock)
    run = (lambda key, data: None) if ran is None else (lambda key, data: ran.append((key, clock.wall())))
    keyed = KeyedScheduler(sched, every_minute, run, store=SQLiteStore(path))
    keyed.sched = sched  # type: ignore[attr-defined]
    return keyed


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, str, ManualClock]:
    """A SQLite file with two keys ("report" every 5 minutes, 7 every minute) that ran a while."""
    path = tmp_path / "jobs.db"
    clock = ManualClock(0.0, wall=T0)
    keyed = life(path, clock)
    keyed.upsert("report", {"every": 5})
    keyed.upsert(7, {"every": 1})
    keyed.start()
    for _ in range(3):
        clock.advance(60)
        keyed.sched.run_pending()  # type: ignore[attr-defined]
    keyed.close()
    return path, f"sqlite:///{path}", clock


def test_list_shows_each_key_in_a_table_and_as_json(db: tuple[Path, str, ManualClock]) -> None:
    _, url, _ = db
    shown = keys(url, "list")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["KEY", "STATE", "NEXT", "RUN", "LAST", "STARTED", "OWNER"]
    assert lines[1].startswith("report ") and "pending" in lines[1]
    assert lines[2].startswith("7 ") and "2026-01-05 09:04:00 UTC" in lines[2]
    listed = json.loads(keys(url, "list", "--json").stdout)
    assert [(k["key"], k["state"], k["next_run_at"]) for k in listed] == [
        ("report", "pending", "2026-01-05T09:05:00+00:00"),
        (7, "pending", "2026-01-05T09:04:00+00:00"),  # (an int key stays an int)
    ]
    assert listed[1]["last_started"] == "2026-01-05T09:03:00+00:00" and listed[1]["runs"] == 3


def test_show_prints_a_key_with_its_history(db: tuple[Path, str, ManualClock]) -> None:
    _, url, _ = db
    shown = keys(url, "show", "7")
    assert shown.returncode == 0, shown.stderr
    assert "generation    1" in shown.stdout and "history (newest first, 3 entries)" in shown.stdout
    data = json.loads(keys(url, "show", "7", "--json").stdout)
    assert [(e["scheduled_for"], e["outcome"]) for e in data["history"]] == [
        ("2026-01-05T09:03:00+00:00", "ran"),
        ("2026-01-05T09:02:00+00:00", "ran"),
        ("2026-01-05T09:01:00+00:00", "ran"),
    ]


def test_pause_resume_and_remove_are_what_the_next_process_finds(db: tuple[Path, str, ManualClock]) -> None:
    path, url, clock = db
    assert keys(url, "pause", "report").stdout == "paused report\n"
    assert json.loads(keys(url, "list", "--json").stdout)[0]["state"] == "paused"
    assert keys(url, "remove", "7").stdout == "removed 7\n"
    keyed = life(path, clock)
    assert keyed.get("report").state is KeyState.PAUSED  # type: ignore[union-attr]
    assert keyed.get(7) is None
    keyed.close()
    assert keys(url, "resume", "report").returncode == 0
    keyed = life(path, clock)
    assert keyed.get("report").state is KeyState.PENDING  # type: ignore[union-attr]
    keyed.close()


def test_a_trigger_is_stored_and_run_by_the_next_process(db: tuple[Path, str, ManualClock]) -> None:
    path, url, clock = db
    answer = json.loads(keys(url, "trigger", "report", "--json").stdout)
    at = datetime.fromisoformat(answer["triggered"])
    again = json.loads(keys(url, "trigger", "report", "--json").stdout)  # (one not run yet: that one)
    assert again["triggered"] == answer["triggered"]
    ran: list[Any] = []
    clock.set_wall(at.timestamp() + 1)
    keyed = life(path, clock, ran)
    keyed.start()
    for _ in range(3):  # (the keys' catch-ups, then the trigger)
        keyed.sched.run_pending()  # type: ignore[attr-defined]
        clock.advance(0.01)
    ran_at = [e.scheduled_for for e in keyed.history("report") if e.outcome == "ran"]
    assert ran_at.count(at) == 1
    keyed.close()
    assert json.loads(keys(url, "list", "--json").stdout)[0]["triggered_at"] is None


def test_preview_runs_the_key_by_the_next_run_it_is_given(db: tuple[Path, str, ManualClock]) -> None:
    path, url, _ = db
    (path.parent / "jobs.py").write_text(JOBS)
    shown = keys(
        url, "preview", "report", "--next-run", "jobs:every_minute", "--hours", "1", "--json", cwd=path.parent
    )
    assert shown.returncode == 0, shown.stderr
    entries = json.loads(shown.stdout)
    times = [datetime.fromisoformat(e["scheduled_for"]) for e in entries]
    assert len(times) == 12 and {b - a for a, b in itertools.pairwise(times)} == {timedelta(minutes=5)}
    assert {e["outcome"] for e in entries} == {"ran"}
    missing = keys(url, "preview", "report", cwd=path.parent)
    assert missing.returncode == 2 and "--next-run" in missing.stderr


def test_unknown_keys_bad_urls_and_a_file_in_use_are_refused_saying_why(
    db: tuple[Path, str, ManualClock], tmp_path: Path
) -> None:
    path, url, clock = db
    unknown = keys(url, "pause", "nothing")
    assert unknown.returncode == 1 and unknown.stdout == "nothing: no such key\n"
    assert json.loads(keys(url, "show", "nothing", "--json").stdout) == {
        "key": "nothing",
        "error": "no such key",
    }
    nofile = keys(f"sqlite:///{tmp_path / 'none.db'}", "list")
    assert nofile.returncode == 1 and "there is no SQLite file" in nofile.stderr
    assert not (tmp_path / "none.db").exists()  # (not created)
    bad = keys("mysql://somewhere", "list")
    assert bad.returncode == 2 and "--store must be" in bad.stderr
    assert keys(url, "show").returncode == 2  # (a KEY is needed)
    keyed = life(path, clock)  # a process runs the file: it is not opened behind its back
    busy = keys(url, "pause", "report")
    assert (
        busy.returncode == 1 and "owned by another store" in busy.stderr and "stop the process" in busy.stderr
    )
    keyed.close()
    assert keys(url, "pause", "report").returncode == 0


def test_an_int_key_is_named_by_the_digits_str_writes_and_no_other_spelling(
    db: tuple[Path, str, ManualClock],
) -> None:
    _, url, _ = db
    assert keys(url, "show", "7").returncode == 0
    for spelling in ("07", "+7", " 7", "7 ", "\u0667"):  # (int() reads each; none names key 7)
        assert keys(url, "pause", spelling).stdout == f"{spelling}: no such key\n"
    assert json.loads(keys(url, "list", "--json").stdout)[1]["state"] == "pending"


def test_with_json_a_failure_is_json_on_stdout_as_well_as_on_stderr(
    db: tuple[Path, str, ManualClock], tmp_path: Path
) -> None:
    path, url, clock = db
    nofile = keys(f"sqlite:///{tmp_path / 'none.db'}", "list", "--json")
    assert nofile.returncode == 1 and "there is no SQLite file" in json.loads(nofile.stdout)["error"]
    keyed = life(path, clock)  # (the file is in use: the command is refused)
    busy = keys(url, "show", "report", "--json")
    keyed.close()
    assert busy.returncode == 1 and "owned by another store" in json.loads(busy.stdout)["error"]
    assert "owned by another store" in busy.stderr


def test_a_table_shows_each_key_on_one_line_escaped_and_cuts_a_long_one(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    clock = ManualClock(0.0, wall=T0)
    keyed = life(path, clock)
    odd, long = "two\nlines\x1b[31m", "k" * 200
    keyed.upsert(odd, {"every": 1})
    keyed.upsert(long, {"every": 1})
    keyed.close()
    url = f"sqlite:///{path}"
    lines = keys(url, "list").stdout.splitlines()
    assert len(lines) == 3 and "\x1b" not in "".join(lines)
    assert lines[1].startswith("k" * 57 + "... ") and lines[2].startswith("two\\nlines\\x1b[31m ")
    assert [k["key"] for k in json.loads(keys(url, "list", "--json").stdout)] == [long, odd]  # (whole)
    assert keys(url, "show", odd).stdout.startswith("key " + " " * 10 + "two\\nlines\\x1b[31m\n")


def test_on_postgres_a_row_it_cannot_read_is_listed_as_such_and_the_other_keys_still_work(
    pg_dsn: str,
) -> None:
    """As the holders do, the command passes over a row it cannot read: listed "unreadable" with the
    reason, refused for a pause or a trigger, removable; the keys beside it are listed and changed."""
    import psycopg

    a = Node(pg_dsn, collections.Counter(), next_run=every(3600))
    a.keyed.upsert("bad", {"every": 1})
    a.keyed.upsert("good", {"every": 1})
    a.close()
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("UPDATE timerwheel_keys SET data = 'not json' WHERE key = %s", ('"bad"',))
    listed = json.loads(keys(pg_dsn, "list", "--json").stdout)
    assert [(k["key"], k["state"]) for k in listed] == [("bad", "unreadable"), ("good", "pending")]
    assert "the row of key '\"bad\"' in timerwheel_keys: its data is not JSON" in listed[0]["last_error"]
    assert "unreadable" in keys(pg_dsn, "list").stdout.splitlines()[1]
    assert keys(pg_dsn, "pause", "good").returncode == 0
    refused = keys(pg_dsn, "trigger", "bad")
    assert refused.returncode == 1 and "remove the key, or correct its row" in refused.stderr
    assert keys(pg_dsn, "show", "bad").returncode == 0
    assert keys(pg_dsn, "remove", "bad").stdout == "removed bad\n"
    assert [(k["key"], k["state"]) for k in json.loads(keys(pg_dsn, "list", "--json").stdout)] == [
        ("good", "paused")
    ]


def test_a_file_whose_name_has_a_hash_or_a_question_mark_is_opened_and_nothing_else_is_made(
    db: tuple[Path, str, ManualClock], tmp_path: Path
) -> None:
    path, _, _ = db
    for name in ("my#jobs.db", "jobs?v=2.db"):
        other = tmp_path / "odd" / name
        other.parent.mkdir(exist_ok=True)
        other.write_bytes(path.read_bytes())
        listed = keys(f"sqlite:///{other}", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [k["key"] for k in json.loads(listed.stdout)] == ["report", 7]
    made = [p.name for p in (tmp_path / "odd").iterdir()]  # (the files and their -wal and -shm: no "my")
    assert made and all(name.startswith(("my#jobs.db", "jobs?v=2.db")) for name in made), made


def test_a_key_named_with_bytes_the_terminal_cannot_write_is_said_escaped(
    db: tuple[Path, str, ManualClock],
) -> None:
    import os

    _, url, _ = db
    done = subprocess.run(
        [sys.executable, "-m", "timerwheel", "keys", "--store", url, "pause", os.fsdecode(b"nokey\xff")],
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert done.returncode == 1 and done.stdout == b"nokey\\udcff: no such key\n", done.stderr


def test_on_postgres_a_name_two_rows_share_is_refused_and_a_key_too_long_is_an_error(pg_dsn: str) -> None:
    """A row written by hand whose stored key is `abc` (not the JSON timerwheel writes) beside the key
    "abc": `remove abc` names both, so it is refused and removes nothing; a row whose key is longer
    than the store takes is an error, not a traceback."""
    import psycopg

    a = Node(pg_dsn, collections.Counter(), next_run=every(3600))
    a.keyed.upsert("abc", {"every": 1})
    a.close()
    with psycopg.connect(pg_dsn) as conn:
        columns = "data, generation, state, next_run_at, last_scheduled_for, last_error"
        for raw in ("abc", json.dumps("L" * 1200)):
            conn.execute(
                f"INSERT INTO timerwheel_keys (key, {columns}) SELECT %s, {columns} FROM timerwheel_keys "
                "WHERE key = %s",
                (raw, '"abc"'),
            )
    refused = keys(pg_dsn, "remove", "abc")
    assert refused.returncode == 1 and "names 2 rows" in refused.stderr
    assert "abc" in [
        k["key"] for k in json.loads(keys(pg_dsn, "list", "--json").stdout) if k["state"] == "pending"
    ]
    long = keys(pg_dsn, "pause", "L" * 1200, "--json")
    assert long.returncode == 1 and "at most 1000 characters" in json.loads(long.stdout)["error"]
    assert "Traceback" not in long.stderr


def test_an_operators_store_counts_for_no_share_from_its_first_commit(pg_dsn: str) -> None:
    from timerwheel import PostgresStore

    store = PostgresStore(pg_dsn, share=False)
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT sharing FROM timerwheel_leases").fetchall() == [(False,)]
    store.close()


def test_on_postgres_the_holder_hears_a_pause_and_runs_a_trigger_while_it_runs(pg_dsn: str) -> None:
    """A process holds the key and runs it; the command lists it with its owner, pauses it (the holder
    shows it PAUSED), resumes it and triggers it (the holder runs the trigger's fire). Tolerances: 5 s
    for a loaded CI machine to hear a NOTIFY and run."""
    runs: collections.Counter[Any] = collections.Counter()
    a = Node(pg_dsn, runs, next_run=every(3600))
    a.keyed.upsert("k", {"every": 60})
    try:
        listed = json.loads(keys(pg_dsn, "list", "--json").stdout)
        assert [(k["key"], k["owner"], k["owner_live"]) for k in listed] == [("k", a.store.owner_id, True)]
        assert keys(pg_dsn, "pause", "k").returncode == 0
        wait_for(lambda: a.keyed.get("k").state is KeyState.PAUSED, 5.0, "the holder hears the pause")  # type: ignore[union-attr]
        assert json.loads(keys(pg_dsn, "trigger", "k", "--json").stdout)["triggered"] is None  # (paused)
        assert keys(pg_dsn, "resume", "k").returncode == 0
        wait_for(lambda: a.keyed.get("k").state is KeyState.PENDING, 5.0, "the holder hears the resume")  # type: ignore[union-attr]
        at = datetime.fromisoformat(json.loads(keys(pg_dsn, "trigger", "k", "--json").stdout)["triggered"])
        wait_for(lambda: runs[("k", round(at.timestamp(), 6))] == 1, 5.0, "the holder runs the trigger")
        shown = json.loads(keys(pg_dsn, "show", "k", "--json").stdout)
        assert shown["owner"] == a.store.owner_id and shown["data"] == {"every": 60}
        assert keys(pg_dsn, "remove", "k").returncode == 0
        wait_for(lambda: a.keyed.get("k") is None, 5.0, "the holder forgets the key")
        assert keys(pg_dsn, "list").stdout.splitlines()[1:] == []
    finally:
        a.close()


def test_preview_of_a_paused_or_spent_key_runs_nothing_and_a_failing_next_run_is_an_error(
    db: tuple[Path, str, ManualClock],
) -> None:
    path, url, clock = db
    (path.parent / "jobs.py").write_text(
        JOBS + "\n\ndef broken(now, key, data):\n    raise RuntimeError('no')\n\nNUMBER = 4\n"
    )
    assert keys(url, "pause", "report").returncode == 0
    paused = keys(url, "preview", "report", "--next-run", "jobs:every_minute", "--json", cwd=path.parent)
    assert paused.returncode == 0 and json.loads(paused.stdout) == []
    keyed = life(path, clock)
    keyed.upsert(7, {"every": 1}, max_runs=3)  # (it ran 3 times already: none left)
    keyed.close()
    spent = keys(url, "preview", "7", "--next-run", "jobs:every_minute", "--json", cwd=path.parent)
    assert spent.returncode == 0 and json.loads(spent.stdout) == []
    assert keys(url, "resume", "report").returncode == 0
    failing = keys(url, "preview", "report", "--next-run", "jobs:broken", cwd=path.parent)
    assert failing.returncode == 1 and "RuntimeError" in failing.stderr
    number = keys(url, "preview", "report", "--next-run", "jobs:NUMBER", cwd=path.parent)
    assert number.returncode == 2 and "not callable" in number.stderr


def test_the_command_makes_no_store_of_a_file_or_a_database_that_is_not_one(
    tmp_path: Path, pg_dsn: str
) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    refused = keys(f"sqlite:///{empty}", "list")
    assert refused.returncode == 1 and "not a timerwheel store" in refused.stderr
    assert empty.read_bytes() == b""
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id int)")
    app = keys(pg_dsn, "list")
    assert app.returncode == 1 and "no timerwheel keys" in app.stderr
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT to_regclass('timerwheel_keys')").fetchone() == (None,)
