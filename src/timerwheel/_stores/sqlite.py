"""SQLiteStore: a KeyedScheduler's keys, their next runs and its fire log in one SQLite file, which
survives a restart and a crash at any instant. One process owns a file at a time (a lock beside it);
a forked child inherits neither the connection nor the lock."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from .rows import (
    FinishedFire,
    StoredEntry,
    StoredFire,
    StoredKey,
    StoreError,
    encode_key,
    entry_row,
    fire_row,
    key_row,
)

if sys.platform != "win32":
    import fcntl

# (2: a key may be paused: timerwheel_keys.paused; 3: a key's own options and its trigger not run yet:
# timerwheel_keys.options and .triggered; 4: a key's count of runs, timerwheel_keys.runs. A file of an
# older version is migrated as it is opened)
SCHEMA_VERSION = 5
_MIGRATIONS = {
    1: ["ALTER TABLE timerwheel_keys ADD COLUMN paused INTEGER NOT NULL DEFAULT 0"],
    2: [
        "ALTER TABLE timerwheel_keys ADD COLUMN options TEXT",
        "ALTER TABLE timerwheel_keys ADD COLUMN triggered TEXT",
    ],
    3: ["ALTER TABLE timerwheel_keys ADD COLUMN runs INTEGER NOT NULL DEFAULT 0"],
    4: [],  # (a table more: timerwheel_history, made by the schema)
}


def _floor_value(row: tuple[Any, ...] | None) -> int:
    """The generation floor as stored in timerwheel_meta (no row: 0)."""
    if row is None:
        return 0
    value = row[0]
    if type(value) is str and value.isascii() and value.isdigit():
        return int(value)
    raise ValueError(f"its value is {value!r}, not a generation (the digits of an int >= 0)")


# -- one owner per file, and what a forked child inherits -------------------------------------------------


def _read_only(path: str) -> str | None:
    """Why the store could not write its file or create the files beside it, or None. (access() with the
    effective ids: a process with privileges to write anyway is told it may.)"""
    effective = os.access in os.supports_effective_ids
    if os.path.exists(path) and not os.access(path, os.W_OK, effective_ids=effective):
        return "the file is read-only (its permissions, or its file system)"
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(directory) and not os.access(directory, os.W_OK, effective_ids=effective):
        return (
            f"its directory {directory!r} is read-only, and a store creates a file beside its file "
            "(the -wal journal)"
        )
    return None


if sys.platform == "win32":

    def _lock_owner(path: str, name: str) -> int | None:
        """Windows: no lock file. SQLite's own lock there (LockFileEx, locking_mode=EXCLUSIVE) belongs to
        the handle that took it, and no other open or close of the file in the process releases it."""
        return None

    def _unlock_owner(fd: int | None) -> None:
        """Nothing to release (see _lock_owner)."""

else:

    def _lock_owner(path: str, name: str) -> int | None:
        """Lock the database file itself (created if missing: SQLite takes an empty file for a new
        database) with flock, on a descriptor of its own, for the store's life; StoreError if another
        store holds it, in this process or another, under whatever name (a symlink, a hard link).

        SQLite's own lock is a POSIX (fcntl) lock, which the kernel drops as soon as the owning process
        closes any descriptor of the file (a shutil.copy of it, an open()): it cannot say who owns the
        file. A flock lock belongs to its open file description: only this descriptor's close (or the
        process's end) releases it, and a second descriptor, in this process too, is refused. (flock and
        POSIX locks do not meet; and this descriptor stays open while SQLite has the file, so that its
        close never drops SQLite's locks.)"""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # (not inherited by an exec)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or not os.path.exists(path):
                raise StoreError(f"cannot open the {name}: {exc.strerror}") from None
            fd = os.open(path, os.O_RDONLY)  # (flock needs no write; a read-only file is refused later)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)  # (another descriptor of the file: the owner's lock stays)
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise StoreError(_owned_message(name)) from None
            raise StoreError(f"cannot lock the {name}: {exc}") from None
        return fd

    def _unlock_owner(fd: int | None) -> None:
        """Release the owner lock (explicitly: a copy of the descriptor that a child made without the
        at-fork hook still holds must not keep the file owned), and close it."""
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def _owned_message(name: str) -> str:
    return (
        f"the {name} is owned by another store (in this process or another): one process owns a SQLite "
        "file; to share a schedule between processes, use PostgresStore"
    )


_live: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()  # the stores made in this process
_kept: list[sqlite3.Connection] = []  # connections a forked child inherited (see _keep_forever)


def _keep_forever(db: sqlite3.Connection) -> None:
    """Never close `db`, not even at exit: a connection inherited through fork must not be closed. (Its
    close would checkpoint the parent's WAL into the file and unlink it, and the parent would go on
    committing into an unlinked file.) A module's list is not enough: at exit the interpreter clears
    module dicts and the Connection's finalizer closes it; a reference nobody holds is."""
    _kept.append(db)
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(db))
    except (ImportError, AttributeError):  # (no ctypes: the list keeps it while the child runs)
        pass


def _after_fork_in_child() -> None:
    """os.fork() in a process with open stores: in the child, each becomes unusable (StoreError saying it
    was inherited) without closing anything the parent uses, whether the child exits, execs or crashes."""
    for store in list(_live):
        store._inherited_by_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS timerwheel_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS timerwheel_keys (
    key TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    generation INTEGER NOT NULL,
    state TEXT NOT NULL,
    next_run_at INTEGER,
    last_scheduled_for INTEGER,
    last_error TEXT,
    paused INTEGER NOT NULL DEFAULT 0,
    options TEXT,
    triggered TEXT,
    runs INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timerwheel_fires (
    key TEXT NOT NULL,
    generation INTEGER NOT NULL,
    scheduled_for INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (key, generation, scheduled_for)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS timerwheel_unfinished ON timerwheel_fires (key) WHERE finished_at IS NULL;
CREATE TABLE IF NOT EXISTS timerwheel_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    at INTEGER NOT NULL,
    scheduled_for INTEGER,
    outcome TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    duration INTEGER,
    error TEXT
);
CREATE INDEX IF NOT EXISTS timerwheel_history_key ON timerwheel_history (key, id);
"""

_HISTORY = (
    "INSERT INTO timerwheel_history (key, at, scheduled_for, outcome, attempt, duration, error) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_TRIM = (
    "DELETE FROM timerwheel_history WHERE key = ? AND id <= (SELECT id FROM timerwheel_history "
    "WHERE key = ? ORDER BY id DESC LIMIT 1 OFFSET ?)"
)

_PUT = (
    "INSERT OR REPLACE INTO timerwheel_keys (key, data, generation, state, next_run_at, last_scheduled_for, "
    "last_error, paused, options, triggered, runs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


_FINISH = (
    "UPDATE timerwheel_fires SET finished_at = ?, error = ? "
    "WHERE key = ? AND generation = ? AND scheduled_for = ?"
)

_FLOOR = "SELECT value FROM timerwheel_meta WHERE name = 'generation_floor'"


def _sqlite_error(name: str, exc: sqlite3.Error, opening: bool = False) -> StoreError:
    """An error of SQLite as the StoreError that says what it means for the file `name`."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # (the primary result code)
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc):
        return StoreError(_owned_message(name))
    if code == sqlite3.SQLITE_READONLY:
        return StoreError(f"the {name} is read-only ({exc}); a store writes to its file")
    if code == sqlite3.SQLITE_CORRUPT:
        return StoreError(f"the {name} is damaged: {exc}")
    if code == sqlite3.SQLITE_FULL:
        return StoreError(f"the {name} cannot grow: {exc}; nothing was written")
    if opening or code == sqlite3.SQLITE_NOTADB:
        return StoreError(f"the {name} is not a usable SQLite database: {exc}")
    return StoreError(f"the {name} failed: {exc}; nothing was written")


def _unreadable(name: str, table: str, key: Any, exc: ValueError) -> StoreError:
    return StoreError(
        f"the {name} has a row that this timerwheel cannot read (nothing was written): the row of key "
        f"{key!r} in {table}: {exc}"
    )


def _rollback(db: sqlite3.Connection, nested: bool) -> None:
    """Undo the transaction (or the savepoint). One that SQLite rolled back already (a full disk, an I/O
    error may) leaves nothing to undo: that is not a second error."""
    try:
        if nested:
            db.execute("ROLLBACK TO timerwheel_nested")
            db.execute("RELEASE timerwheel_nested")
        elif db.in_transaction:
            db.execute("ROLLBACK")
    except sqlite3.Error:
        if db.in_transaction and not nested:
            raise


def abandon(store: SQLiteStore) -> None:
    """The process died (a simulated kill): drop the store's connection and its owner lock, and write
    nothing (no rollback, no checkpoint: the file is as the kill left it). The store is unusable after."""
    db, store._db = store._db, None
    fd, store._owner_fd = store._owner_fd, None
    if db is not None:
        with contextlib.suppress(Exception):
            db.close()
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _write_history(db: sqlite3.Connection, entries: list[tuple[Any, ...]], keep: int) -> None:
    """Insert history entries, then drop each of their keys' entries but the `keep` newest."""
    db.executemany(_HISTORY, entries)
    for k in {e[0] for e in entries}:
        db.execute(_TRIM, (k, k, keep))


def _above_floor(db: sqlite3.Connection, values: list[tuple[Any, ...]], floor: int) -> list[tuple[Any, ...]]:
    """The rows (encoded) of a user's change (put, replace) as they are to be stored: a key that is not
    stored gets a generation above the floor; one that is stored, a generation not below the one stored.
    (The caller's row is one above what its memory holds, but the file may hold more: a put that raised
    after its commit, an I/O error on the way back, left the key there, at a generation above the floor
    or above the memory's. Written as it is, the row would take the key's generation back.)"""
    out = []
    for v in values:
        found = db.execute("SELECT generation FROM timerwheel_keys WHERE key = ?", (v[0],)).fetchone()
        low = floor + 1 if found is None else int(found[0])
        out.append(v if v[2] >= low else (*v[:2], low, *v[3:]))
    return out


class SQLiteStore:
    """Durable keys in one SQLite file, with the standard library's sqlite3 (WAL journal).

    When upsert(), replace_all() or remove() of a KeyedScheduler on it returns, the change is committed; a
    process killed at any instant loses no committed change and corrupts nothing. With WAL and
    synchronous=NORMAL (the default here) a power loss may lose the last transactions, never the file's
    integrity; `synchronous="FULL"` makes every commit survive a power loss too, at the cost of an fsync
    per commit.

    One process owns the file: the store locks the file itself (flock, on a descriptor of its own) when it
    is made and keeps the lock until close(), so a second SQLiteStore on the same file (in this process or
    another, under any name: a symlink, a hard link) is refused with StoreError. To share one schedule between
    processes, use PostgresStore. A child process that inherits the store through os.fork() never touches
    the file (whether it exits, execs or crashes); in the child, the store raises StoreError.

    Every row is checked as it is loaded, and the file's pages when it is opened: content this timerwheel
    cannot read is a StoreError naming the file (and the row), raised before anything is written. Every
    error of SQLite is a StoreError naming the file, and the transaction it ended changed nothing.

    Args:
        path: the database file (created if missing; its directory must exist).
        synchronous: "NORMAL" (default) or "FULL" (power-loss durability).

    Raises:
        TypeError: path is not a str or os.PathLike (of str); synchronous is not a str.
        ValueError: synchronous is neither "NORMAL" nor "FULL"; path is "" or ":memory:" (not durable).
        StoreError: the file cannot be opened, is read-only (or its directory is), is not an SQLite
            database, is damaged, is the database of another application (tables and none of
            timerwheel's) or a timerwheel store of a version this one does not read (such files are left
            as they were), or another store owns it.
    """

    durable = True
    shared = False

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
        if not isinstance(synchronous, str):
            raise TypeError(f"synchronous must be a str, not {type(synchronous).__name__}")
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = os.fspath(path)
        if isinstance(self.path, bytes):
            raise TypeError("path must be a str or os.PathLike of str, not bytes")
        if self.path in ("", ":memory:"):
            raise ValueError(f"path must name a file (an in-memory database is not durable), not {path!r}")
        self.name = f"SQLite file {self.path!r}"
        self._lock = threading.RLock()  # (a finalizer that calls back in nests: see _transaction)
        self._depth = 0
        self._db: sqlite3.Connection | None = None
        self._owner_fd: int | None = None
        self._pid = os.getpid()
        self._inherited = False
        self._floor = 0  # the highest generation ever deleted from the file (see put)
        # The fires this life took that are not finished yet (start_fire): a rerun of one of them with
        # the started_at it was taken with is the same take again
        self._taken: set[tuple[str, int, int]] = set()
        # History entries not written yet (add_history): they go with the next transaction, so that a
        # run's end and its entry are one commit (one fsync with synchronous=FULL)
        self._entries: list[tuple[Any, ...]] = []
        self._keep = 0
        if os.path.isdir(self.path):
            raise StoreError(f"cannot open the {self.name}: it is a directory")
        why = _read_only(self.path)
        if why is not None:
            raise StoreError(f"the {self.name} is read-only: {why}; a store writes to its file")
        _live.add(self)  # (first: a fork from another thread from now on closes the child's copy of the lock)
        self._owner_fd = _lock_owner(self.path, self.name)  # (before SQLite opens the file: see _lock_owner)
        try:
            self._db = self._open(synchronous.upper())
        except BaseException:
            _unlock_owner(self._owner_fd)
            self._owner_fd = None
            raise

    def _open(self, synchronous: str) -> sqlite3.Connection:
        """Connect, check the file, then set it up (WAL, the schema). A file refused is left as it was."""
        try:
            db = sqlite3.connect(self.path, timeout=0.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the {self.name}: {exc}") from None
        try:
            # SQLite's exclusive locking mode stays: with it no other SQLite program can use the file while
            # the store has it (as long as the process keeps SQLite's POSIX lock: see _lock_owner), and the
            # WAL index lives in the process's memory (no -shm file).
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            # Look before touching: a file of another application, of a newer schema, damaged, or with a
            # generation floor this one cannot read, is refused and left exactly as it was (nothing
            # written, its journal mode unchanged).
            db.execute("BEGIN EXCLUSIVE")  # take the file's lock now, and keep it (locking_mode)
            version = self._check(db)
            db.execute("COMMIT")
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"the {self.name} cannot use a WAL journal (journal_mode is {mode!r})")
            db.execute(f"PRAGMA synchronous={synchronous}")
            db.execute("BEGIN EXCLUSIVE")
            for older in range(version or SCHEMA_VERSION, SCHEMA_VERSION):  # (a file of an older version)
                for statement in _MIGRATIONS[older]:
                    db.execute(statement)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            if version != SCHEMA_VERSION:  # (a file of this version is not written to as it is opened)
                db.execute(
                    "INSERT OR REPLACE INTO timerwheel_meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
            db.execute("COMMIT")
        except BaseException as exc:
            db.close()
            if isinstance(exc, sqlite3.Error):
                raise _sqlite_error(self.name, exc, opening=True) from None
            raise
        return db

    def _check(self, db: sqlite3.Connection) -> int | None:
        """The file is empty, or a sound timerwheel store of this schema version or one it migrates:
        StoreError otherwise. Returns the file's version (None: a new file)."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "timerwheel_meta" not in tables:
            raise StoreError(
                f"the {self.name} is a database of another application (it has tables, none of "
                "timerwheel's): give timerwheel a file of its own"
            )
        if not tables:
            return None
        row = db.execute("SELECT value FROM timerwheel_meta WHERE name = 'schema'").fetchone()
        readable = [str(v) for v in (*_MIGRATIONS, SCHEMA_VERSION)]
        if row is not None and row[0] not in readable:
            raise StoreError(
                f"the {self.name} has timerwheel schema version {row[0]}; this version of "
                f"timerwheel reads versions {readable[0]} to {SCHEMA_VERSION}"
            )
        # Every page read once (some 20 ms for 10**5 keys): a damaged page anywhere is found now, not by a
        # fire's write some day later.
        problems = [r[0] for r in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            raise StoreError(f"the {self.name} is damaged: {problems[0]}{more}")
        try:
            self._floor = _floor_value(db.execute(_FLOOR).fetchone())
        except ValueError as exc:
            raise _unreadable(self.name, "timerwheel_meta", "generation_floor", exc) from None
        return None if row is None else int(row[0])

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def _conn(self) -> sqlite3.Connection:
        if self._pid != os.getpid() and not self._inherited:
            self._inherited_by_fork()  # (a fork that ran no at-fork hook: a C library's)
        if self._db is None:
            if self._inherited:
                raise StoreError(
                    f"the {self.name} was inherited through fork: a child process cannot use its parent's "
                    "store (one process owns the file; to share a schedule between processes, use "
                    "PostgresStore)"
                )
            raise StoreError(f"the {self.name} is closed")
        return self._db

    def _inherited_by_fork(self) -> None:
        """In a child process: the store is unusable from now on, and nothing of it is ever closed or
        released here (the parent owns the file). Takes no lock: a thread of the parent may have held it
        at the fork, and no thread of the parent runs in the child."""
        self._inherited = True
        self._lock = threading.RLock()
        self._depth = 0
        db, self._db = self._db, None
        if db is not None:
            _keep_forever(db)
        fd, self._owner_fd = self._owner_fd, None
        if fd is not None:
            # The child's copy of the descriptor: closing it leaves the parent's flock lock held (the lock
            # belongs to the open file description, which the parent's descriptor keeps), and a child
            # that lives on does not keep the file owned once the parent is gone. (Never LOCK_UN here.)
            os.close(fd)

    def _transaction(self, work: Any) -> Any:
        """`work(db)` in one transaction. A call nested in another on the same thread (a finalizer that
        the garbage collector ran during a write, calling back in) joins the outer transaction as a
        savepoint: it commits with it. An error of SQLite is a StoreError, and the transaction changed
        nothing."""
        with self._lock:
            db = self._conn()
            nested = self._depth > 0
            # Counted in before BEGIN and out after COMMIT: a finalizer that runs anywhere in between (at
            # any allocation) joins as a savepoint, and never begins or rolls back a transaction of its own
            # inside this one. Counted out before a rollback: one that runs during it fails, and says so
            # (as a savepoint, it would be undone with the rest after it returned).
            self._depth += 1
            counted = True
            entries, keep = ([], 0) if nested else (self._entries, self._keep)
            self._entries = [] if entries else self._entries
            try:
                db.execute("SAVEPOINT timerwheel_nested" if nested else "BEGIN IMMEDIATE")
                try:
                    if entries:  # (first: a delete in `work` takes a removed key's with it)
                        _write_history(db, entries, keep)
                    result = work(db)
                except BaseException:
                    self._depth -= 1
                    counted = False
                    _rollback(db, nested)
                    raise
                db.execute("RELEASE timerwheel_nested" if nested else "COMMIT")
                entries = []
            except sqlite3.Error as exc:
                if counted:
                    self._depth -= 1
                    counted = False
                if not nested and db.in_transaction:  # (a COMMIT that failed)
                    _rollback(db, nested)
                raise _sqlite_error(self.name, exc) from None
            finally:
                if counted:
                    self._depth -= 1
                if entries:  # (not written: they go with the next transaction)
                    self._entries[:0] = entries
            return result

    def add_history(self, entries: Sequence[StoredEntry], keep: int) -> None:
        """Add entries to their keys' histories, each kept to its `keep` newest. They are written with
        the next write (a run's end: in its transaction), or by history() or close(). A key's entries
        over `keep` are dropped as entries are written."""
        values = [(encode_key(e.key), *e[1:]) for e in entries]
        with self._lock:
            self._entries.extend(values)
            self._keep = keep

    def flush_history(self) -> None:
        """Write the history entries add_history gave that are not written yet (one transaction)."""
        with self._lock:
            if self._entries:
                self._transaction(lambda db: None)

    def history(self, key: Hashable) -> list[StoredEntry]:
        """The key's history, newest first (what add_history gave not written yet is written first).
        StoreError naming the file and the row for an entry this timerwheel cannot read."""
        k = encode_key(key)
        with self._lock:
            if self._entries:
                self._transaction(lambda db: None)
            try:
                found = (
                    self._conn()
                    .execute(
                        "SELECT at, scheduled_for, outcome, attempt, duration, error FROM timerwheel_history "
                        "WHERE key = ? ORDER BY id DESC",
                        (k,),
                    )
                    .fetchall()
                )
            except sqlite3.Error as exc:
                raise _sqlite_error(self.name, exc) from None
        try:
            return [entry_row(key, *row) for row in found]
        except ValueError as exc:
            raise _unreadable(self.name, "timerwheel_history", key, exc) from None

    def load(self) -> tuple[Iterable[StoredKey], list[StoredFire]]:
        """Every stored key (rows read as they are consumed: 10**5 keys need no list of 10**5 rows), and
        the fires started and never finished. Every row is checked: StoreError naming the file and the row
        for one this timerwheel cannot read."""
        with self._lock:
            try:
                raw = (
                    self._conn()
                    .execute(
                        "SELECT key, generation, scheduled_for, attempts FROM timerwheel_fires "
                        "WHERE finished_at IS NULL ORDER BY key, scheduled_for"
                    )
                    .fetchall()
                )
            except sqlite3.Error as exc:
                raise _sqlite_error(self.name, exc) from None
        fires = []
        for k, g, at, n in raw:
            try:
                fires.append(fire_row(k, g, at, n))
            except ValueError as exc:
                raise _unreadable(self.name, "timerwheel_fires", k, exc) from None
        return self._keys(), fires

    def _keys(self) -> Iterable[StoredKey]:
        with self._lock:
            try:
                cursor = self._conn().execute(
                    "SELECT key, data, generation, state, next_run_at, last_scheduled_for, last_error, "
                    "paused, options, triggered, runs FROM timerwheel_keys"
                )
            except sqlite3.Error as exc:
                raise _sqlite_error(self.name, exc) from None
        while True:
            with self._lock:  # (per batch, not across the yields: a consumer that stops may close)
                try:
                    rows = cursor.fetchmany(1000)
                except sqlite3.Error as exc:
                    raise _sqlite_error(self.name, exc) from None
            if not rows:
                return
            for row in rows:
                try:
                    yield key_row(*row)
                except ValueError as exc:
                    raise _unreadable(self.name, "timerwheel_keys", row[0], exc) from None

    @staticmethod
    def _row(row: StoredKey) -> tuple[Any, ...]:
        return (encode_key(row.key), *row[1:])

    def _delete(self, db: sqlite3.Connection, keys: list[str]) -> tuple[int, int]:
        """Delete the keys and their fires, and raise the floor to their generations: (how many keys were
        stored, the floor)."""
        deleted = []
        for k in keys:
            found = db.execute("SELECT generation FROM timerwheel_keys WHERE key = ?", (k,)).fetchone()
            if found is not None:
                deleted.append(found[0])
        db.executemany("DELETE FROM timerwheel_keys WHERE key = ?", [(k,) for k in keys])
        db.executemany("DELETE FROM timerwheel_fires WHERE key = ?", [(k,) for k in keys])
        db.executemany("DELETE FROM timerwheel_history WHERE key = ?", [(k,) for k in keys])
        floor = max(deleted, default=self._floor)
        if floor > self._floor:
            db.execute("INSERT OR REPLACE INTO timerwheel_meta VALUES ('generation_floor', ?)", (str(floor),))
        return len(deleted), max(floor, self._floor)

    def put(self, row: StoredKey) -> int:
        """Insert or replace a key's row (committed); returns the generation stored (see KeyStore.put)."""
        values = self._row(row)

        def work(db: sqlite3.Connection) -> int:
            (stored,) = _above_floor(db, [values], self._floor)
            db.execute(_PUT, stored)
            return int(stored[2])

        return int(self._transaction(work))

    def save(self, rows: list[StoredKey], finished: Iterable[FinishedFire] = ()) -> None:
        """Insert or replace every row and mark every fire of `finished` finished, in one transaction."""
        values = [self._row(row) for row in rows]
        fires = [(f.finished_at, f.error, encode_key(f.key), f.generation, f.scheduled_for) for f in finished]

        def work(db: sqlite3.Connection) -> None:
            db.executemany(_FINISH, fires)
            db.executemany(_PUT, values)

        self._transaction(work)
        self._taken.difference_update((k, g, s) for _, _, k, g, s in fires)

    def replace(self, rows: list[StoredKey], removed: Iterable[Hashable] | None) -> list[int]:
        """Delete every removed key and every other key not in rows, and put every row, in one
        transaction (see KeyStore). Every key the file has goes, not only those `removed` names: a key
        whose put raised after its commit (an I/O error on the way back) is in the file and not in the
        caller's memory. (A removed key in rows too is put back above the generation removed.)"""
        values = [self._row(row) for row in rows]
        keep = {v[0] for v in values}
        named = [encode_key(key) for key in removed or ()]

        def work(db: sqlite3.Connection) -> tuple[list[int], int]:
            others = [k for (k,) in db.execute("SELECT key FROM timerwheel_keys") if k not in keep]
            gone = list(dict.fromkeys([*named, *others]))
            floor = self._delete(db, gone)[1] if gone else self._floor
            stored = _above_floor(db, values, floor)
            db.executemany(_PUT, stored)
            return [int(v[2]) for v in stored], floor

        generations, floor = self._transaction(work)
        self._floor = max(self._floor, floor)  # (a finalizer's call nested in the work may have raised it)
        return list(generations)

    def delete(self, key: Hashable) -> bool:
        """Delete a key and its fires, raising the generation floor to its generation (committed). True if
        it was stored. TypeError or ValueError (naming key) for a key this store cannot hold."""
        k = encode_key(key)
        gone, floor = self._transaction(lambda db: self._delete(db, [k]))
        self._floor = max(self._floor, floor)
        return bool(gone)

    def start_fire(self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool) -> int:
        """Record the fire as started and write the key's row, in one transaction (see KeyStore): the
        attempt it is, or 0. The key's finished fires before this one are dropped from the log: the
        key's row says where it is."""
        values = self._row(row)
        k = values[0]
        fire = (k, row.generation, scheduled_for)

        def work(db: sqlite3.Connection) -> int:
            if rerun:
                # One more attempt (a rerun of a fire found unfinished, a retry of a failed run), but for
                # the same take again: a take of this life whose answer was lost (an error raised after
                # the commit) is asked again with the started_at of its first try, and taken at the
                # attempt it made. (The taker is the life: the next life's rerun is one more.)
                taken = db.execute(
                    "UPDATE timerwheel_fires SET attempts = attempts + "
                    "(CASE WHEN ? AND started_at = ? THEN 0 ELSE 1 END), started_at = ? "
                    "WHERE key = ? AND generation = ? AND scheduled_for = ? AND finished_at IS NULL",
                    (fire in self._taken, started_at, started_at, *fire),
                ).rowcount
                if not taken:
                    # A fire the log lost (a remove or a replacement of its key that raised after its
                    # commit, so that this life kept the key: for its caller, nothing changed): taken
                    # anew, as a rerun. One it finished stays finished, and one before a later fire of
                    # its generation in the log (that one started: this one ran, or was decided) is not.
                    taken = db.execute(
                        "INSERT INTO timerwheel_fires (key, generation, scheduled_for, started_at, "
                        "attempts) SELECT ?, ?, ?, ?, 2 WHERE NOT EXISTS (SELECT 1 FROM timerwheel_fires "
                        "WHERE key = ? AND generation = ? AND scheduled_for >= ?)",
                        (*fire, started_at, *fire),
                    ).rowcount
            else:
                # A fire new to the log, or an unfinished one: the same take again, after a commit whose
                # answer was lost (an error raised after it). The file has one owner, and a fire it
                # found unfinished at start is rerun (rerun=True) or marked finished, never taken anew.
                # A new fire before a later one of its generation is refused (see PostgresStore's).
                taken = db.execute(
                    "INSERT INTO timerwheel_fires (key, generation, scheduled_for, started_at) "
                    "SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM timerwheel_fires WHERE key = ? "
                    "AND generation = ? AND scheduled_for > ?) OR EXISTS (SELECT 1 FROM timerwheel_fires "
                    "WHERE key = ? AND generation = ? AND scheduled_for = ?) "
                    "ON CONFLICT (key, generation, scheduled_for) DO UPDATE "
                    "SET started_at = excluded.started_at WHERE finished_at IS NULL",
                    (*fire, started_at, *fire, *fire),
                ).rowcount
            if taken:
                (attempt,) = db.execute(
                    "SELECT attempts FROM timerwheel_fires "
                    "WHERE key = ? AND generation = ? AND scheduled_for = ?",
                    fire,
                ).fetchone()
            if not taken:
                return 0
            db.execute(
                "DELETE FROM timerwheel_fires "
                "WHERE key = ? AND finished_at IS NOT NULL AND scheduled_for < ?",
                (k, scheduled_for),
            )
            db.execute(_PUT, values)
            return int(attempt)

        attempt = int(self._transaction(work))
        if attempt:
            self._taken.add(fire)  # (committed: a take of this life)
        return attempt

    def finish_fire(
        self,
        row: StoredKey | None,
        key: Hashable,
        generation: int,
        scheduled_for: int,
        finished_at: int,
        error: str | None,
    ) -> None:
        """Mark the fire finished, and write the key's row (unless None), in one transaction."""
        k = encode_key(key)
        values = None if row is None else self._row(row)

        def work(db: sqlite3.Connection) -> None:
            db.execute(_FINISH, (finished_at, error, k, generation, scheduled_for))
            if values is not None:
                db.execute(_PUT, values)

        self._transaction(work)
        self._taken.discard((k, generation, scheduled_for))

    def integrity(self) -> str:
        """PRAGMA integrity_check's answer ("ok" for a sound file)."""
        with self._lock:
            try:
                return str(self._conn().execute("PRAGMA integrity_check").fetchone()[0])
            except sqlite3.Error as exc:
                raise _sqlite_error(self.name, exc) from None

    def close(self) -> None:
        """Release the file (idempotent): another store may own it from now on. (In a child process that
        inherited the store through fork: nothing to release, the parent owns it.)"""
        if self._pid != os.getpid() and not self._inherited:
            self._inherited_by_fork()  # (before the lock, which a thread of the parent may have held)
        with self._lock:
            if self._entries and self._db is not None and not self._inherited:
                with contextlib.suppress(StoreError):  # (history entries not written yet: written now)
                    self._transaction(lambda db: None)
            db, self._db = self._db, None
        if db is None:
            return
        try:
            db.close()
        except sqlite3.Error as exc:  # (the file may be in use still: the owner lock stays until exit)
            raise _sqlite_error(self.name, exc) from None
        fd, self._owner_fd = self._owner_fd, None
        _unlock_owner(fd)
