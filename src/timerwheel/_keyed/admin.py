"""A store's keys operated from outside the processes that run them: what `python -m timerwheel keys`
does. Every change goes through the store's own statements, as a KeyedScheduler's would, never by editing
rows behind them: on PostgreSQL while the keys' holders run (they hear of it as of any process's change);
a SQLite file has one owner at a time, so it is opened only while no process holds it (the next process
to open it does what was stored: a pause holds, a trigger runs)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Hashable
from datetime import UTC, datetime
from typing import Any, NamedTuple
from urllib.parse import quote

from .._stores import PostgresStore, SQLiteStore, StoredKey, StoreError, stored_key
from .keys import HistoryEntry, entry_of

__all__ = ["UNREADABLE", "KeyView", "StoreKeys", "store_from_url"]

UNREADABLE = "unreadable"  # the state of a row this timerwheel cannot read


class KeyView(NamedTuple):
    """A key as its store has it (not as a process's memory has it): for operators."""

    key: Hashable
    state: str  # a KeyState's value, "paused", or UNREADABLE (last_error says why)
    next_run_at: datetime | None
    last_started: datetime | None  # the scheduled time of its latest fire taken to run
    last_error: str | None
    generation: int
    runs: int
    data: Any
    options: dict[str, Any] | None
    triggered_at: datetime | None  # a trigger not run yet
    owner: str | None  # the process that holds it (a shared store), or None
    owner_live: bool  # whether that process's lease is live


def store_from_url(url: str) -> SQLiteStore | PostgresStore:
    """The store a URL names: `sqlite:///path.db` (relative; `sqlite:////abs/path.db` absolute) for an
    existing SQLite file, or a PostgreSQL DSN (`postgresql://...`, `postgres://...`, or libpq's
    `key=value` form). ValueError for a URL it does not know, StoreError for a store it cannot open."""
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        if not path.startswith("/") or path == "/":
            raise ValueError(f"a SQLite URL is sqlite:///relative.db or sqlite:////absolute.db, not {url!r}")
        path = path[1:]
        if not os.path.isfile(path):
            raise StoreError(f"there is no SQLite file {path!r}")
        if not _a_store_file(path):  # (opening it would make it one: the command creates no store)
            raise StoreError(f"the SQLite file {path!r} is not a timerwheel store (it has no keys table)")
        try:
            return SQLiteStore(path)
        except StoreError as exc:
            if "is owned by another store" in str(exc):  # (one owner at a time: the process running it)
                raise StoreError(
                    f"{exc} (stop the process that runs it to read or change its keys)"
                ) from None
            raise
    if url.startswith(("postgresql://", "postgres://")) or ("=" in url and "://" not in url):
        _has_keys(url)
        store = PostgresStore(url, share=False)  # (an operator's: it holds no key, counts for no share)
        store.detach([])
        return store
    raise ValueError(f"--store must be sqlite:///path.db or a PostgreSQL DSN (postgresql://...), not {url!r}")


def _a_store_file(path: str) -> bool:
    """Whether the SQLite file has timerwheel's tables (read only; a file of another kind: False)."""
    import sqlite3

    try:
        # (a URI: a '?', '#' or '%' in the name is quoted, or SQLite would read it as the URI's query or
        # fragment, and open another file read-write, creating it)
        db = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'timerwheel_keys'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return True  # (locked by its owner, or damaged: the store's own open says which)
    return found is not None


def _has_keys(dsn: str) -> None:
    """StoreError unless the database has timerwheel's tables: the command never creates them in an
    application's database."""
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(f"psycopg is needed for a PostgreSQL store: {exc}") from None
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            found = conn.execute("SELECT to_regclass('timerwheel_keys')").fetchone()
    except psycopg.Error as exc:
        message = str(exc).strip()
        try:
            from psycopg.conninfo import conninfo_to_dict

            secret = conninfo_to_dict(dsn).get("password")
        except psycopg.Error:
            secret = None
        if secret:  # (libpq may quote the whole URI)
            message = message.replace(str(secret), "***")
        raise StoreError(f"cannot use the PostgreSQL store: {message}") from None
    if found is None or found[0] is None:
        raise StoreError("the PostgreSQL database has no timerwheel keys (no timerwheel_keys table)")


class StoreKeys:
    """The keys of the store at `url` (see store_from_url), read and changed by their store's rules."""

    def __init__(self, url: str) -> None:
        self.store = store_from_url(url)
        self.shared = isinstance(self.store, PostgresStore)
        self._stored: dict[Hashable, list[str]] = {}  # an unreadable row's key -> its stored key text

    def close(self) -> None:
        self.store.close()

    def keys(self) -> list[KeyView]:
        """Every key, in key order (str keys, then int keys). A PostgreSQL row this timerwheel cannot
        read is a key in state "unreadable" with the reason as its last_error (its holders pass over it);
        a SQLite file with one is refused whole, as a KeyedScheduler refuses it (a StoreError)."""
        self._stored.clear()
        if isinstance(self.store, PostgresStore):
            views = []
            for text, row, owner, live in self.store.rows():
                view = _view(row, owner, live, text)
                if view.state == UNREADABLE:
                    self._stored.setdefault(view.key, []).append(text)
                views.append(view)
        else:
            views = [_view(row, None, False) for row in self.store.load()[0]]
        return sorted(views, key=lambda v: (type(v.key) is int, v.key))

    def find(self, text: str) -> KeyView | None:
        """The stored key a command line's KEY names: the str key, or else the int key those digits
        write (as str(key) does: "7", "-7", never "07" or "+7"); None: no such key. A StoreError if the
        name is two rows' (a key, and a row this timerwheel cannot read whose stored key reads the same)."""
        found: dict[Hashable, list[KeyView]] = {}
        for view in self.keys():
            found.setdefault(view.key, []).append(view)
        name: Hashable = text
        if text not in found:
            try:
                name = int(text)
            except ValueError:
                return None
            if str(name) != text or name not in found:
                return None
        views = found[name]
        if len(views) > 1:
            stored = ", ".join(repr(t) for t in self._stored.get(name, []))
            raise StoreError(
                f"{text!r} names {len(views)} rows, some of which this timerwheel cannot read (stored keys "
                f"{stored}): delete those with SQL (DELETE FROM timerwheel_keys WHERE key = ...)"
            )
        return views[0]

    def history(self, key: Hashable) -> list[HistoryEntry]:
        """The key's history, newest first."""
        return [entry_of(e) for e in self.store.history(key)]

    def set_paused(self, key: Hashable, paused: bool) -> bool:
        """Pause or resume the key (as KeyedScheduler.pause and resume do); False: no such key. A SQLite
        key resumed is unpaused only: the next process to open the file decides its missed fires."""
        if isinstance(self.store, PostgresStore):
            return bool(self.store.set_paused([key], paused))
        row = self._row(key)
        if row is None:
            return False
        if row.paused != paused:  # (a pause drops a trigger not run yet)
            self.store.save([row._replace(paused=paused, triggered=None if paused else row.triggered)])
        return True

    def trigger(self, key: Hashable) -> datetime | None:
        """Run the key now, outside its schedule (KeyedScheduler.trigger): its holder runs it (a SQLite
        file: the next process to open it). The time of the trigger's fire, or None: no such key, or
        paused. A trigger not run yet is the key's trigger: its time is returned, none is added."""
        if isinstance(self.store, PostgresStore):
            found = self.store.trigger(key, False, None)
            return None if found is None else _at(json.loads(found[0])["at"])
        row = self._row(key)
        if row is None or row.paused:
            return None
        if row.triggered is not None:
            return _at(json.loads(row.triggered)["at"])
        us = math.floor(time.time() * 1_000_000)  # (after its latest started fire: a new fire)
        if row.last_scheduled_for is not None and us <= row.last_scheduled_for:
            us = row.last_scheduled_for + 1
        text = json.dumps({"at": us, "restart": False, "overlap": None})
        self.store.save([row._replace(triggered=text)])
        return _at(us)

    def remove(self, view: KeyView) -> bool:
        """Remove the key (KeyedScheduler.remove), or the row this timerwheel cannot read; False: no such
        key."""
        if isinstance(self.store, PostgresStore) and view.state == UNREADABLE:
            (stored,) = self._stored[view.key]
            return self.store.delete_row(stored)
        return bool(self.store.delete(view.key))

    def _row(self, key: Hashable) -> StoredKey | None:
        assert isinstance(self.store, SQLiteStore)
        return next((row for row in self.store.load()[0] if row.key == key), None)


def _at(us: int | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1_000_000, UTC)


def _view(row: StoredKey | StoreError, owner: str | None, live: bool, text: str | None = None) -> KeyView:
    if isinstance(row, StoreError):  # (its stored key decoded if it can be, or else as stored)
        try:
            key: Hashable = stored_key(text)
        except ValueError:
            key = text
        return KeyView(key, UNREADABLE, None, None, str(row), 0, 0, None, None, None, owner, live)
    return KeyView(
        row.key,
        "paused" if row.paused else row.state,
        None if row.paused else _at(row.next_run_at),
        _at(row.last_scheduled_for),
        row.last_error,
        row.generation,
        row.runs,
        json.loads(row.data),
        None if row.options is None else json.loads(row.options),
        None if row.triggered is None else _at(json.loads(row.triggered)["at"]),
        owner,
        live,
    )
