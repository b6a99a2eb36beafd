"""The PostgreSQL store's connections to its database: made with a lock timeout and a statement timeout,
one statement at a time each, made again when lost, and refused in a child that inherited them through
fork; its statements repeated after a lost connection, a deadlock or a serialization failure; and the
database's clock."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..rows import StoreError


def redacted(dsn: str) -> str:
    """The DSN without its password (for messages and repr)."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = conninfo_to_dict(dsn)
    except Exception:
        return "<dsn>"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


class Connection:
    """One of a store's connections, used by one statement at a time, and made again when it was lost."""

    __slots__ = ("conn", "db", "lock")

    def __init__(self, db: Database) -> None:
        self.db = db
        self.lock = threading.Lock()
        self.conn: Any = None

    def get(self) -> Any:
        self.db.check_own()
        if self.db.closed:
            raise StoreError(f"the {self.db.name} is closed")
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.drop()
            self.conn = self.db.connect()
        return self.conn

    def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class Database:
    """A PostgreSQL store's way to its database. Two connections, each one statement at a time: the main
    one (fires taken and ended, keys given back) and one for users' changes (upsert, replace_all,
    remove), so that a change that waits for a row another session holds locked never holds up the
    fires of the other keys. The keeper and the listener make connections of their own (connect)."""

    def __init__(
        self,
        dsn: str,
        name: str,
        application: str,
        lock_timeout: float,
        statement_timeout: float,
        idle_timeout: float,
    ) -> None:
        try:
            import psycopg
        except ImportError:
            raise ImportError("PostgresStore needs psycopg 3: pip install 'timerwheel[postgres]'") from None
        self.psycopg: Any = psycopg
        self.dsn = dsn
        self.name = name
        self._application = application  # (pg_stat_activity shows it)
        self.lock_timeout = lock_timeout
        self.statement_timeout = statement_timeout
        self.idle_timeout = idle_timeout  # seconds a transaction may stay open and idle (the lease)
        self.offset = 0.0  # the database's clock minus this machine's (time.time())
        self._pid = os.getpid()
        self.closed = False
        self.main = Connection(self)
        self.changes = Connection(self)

    def connect(self) -> Any:
        self.check_own()
        conn = self.psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=10,
            application_name=self._application,
            keepalives=1,  # (a half-open connection is noticed in about 15 s, not in hours)
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=5,
        )
        try:
            # For the session: no statement waits for a lock, or runs, without bound; and a transaction
            # left open by a process that stopped in it (SIGSTOP, a host gone) holds its locks for at
            # most idle_timeout seconds, or until the server's keepalives find the host gone (about
            # 15 s): the server ends the session.
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false), "
                "set_config('idle_in_transaction_session_timeout', %s, false), "
                "set_config('tcp_keepalives_idle', '5', false), "
                "set_config('tcp_keepalives_interval', '2', false), "
                "set_config('tcp_keepalives_count', '5', false)",
                (_ms(self.lock_timeout), _ms(self.statement_timeout), _ms(self.idle_timeout)),
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def check_own(self) -> None:
        """StoreError in a child process that inherited the store through fork: its connections are the
        parent's sessions (a statement from here would mix into them), and it has none of its threads.
        (Nothing of the child closes them: close() does nothing there, and psycopg never ends a session
        from a process that did not open it.)"""
        if self._pid != os.getpid():
            raise StoreError(
                f"the {self.name} was inherited through fork: it belongs to the parent process; make a new "
                "PostgresStore (and KeyedScheduler) in the child"
            )

    def do(self, work: Callable[[Any], Any], what: str, on: Connection | None = None) -> Any:
        """Run `work(connection)` on the main connection (or `on`); again on a fresh connection if the
        first one was lost, and again after a deadlock or a serialization failure (every statement of the
        store may be repeated: see timerwheel_take_fires). What the database raises comes out as a
        StoreError that says what could not be done (`what`) and why: a row another session holds
        locked, a statement past its timeout, a database that cannot be reached."""
        try:
            return self._attempts(work, on or self.main)
        except self.psycopg.Error as exc:
            errors = self.psycopg.errors
            if isinstance(exc, errors.LockNotAvailable):
                why = "a row it needs is locked by another session"
            elif isinstance(exc, errors.QueryCanceled):
                why = f"a statement took longer than its timeout ({self.statement_timeout} s)"
            else:
                why = "the database failed"
            raise StoreError(f"the {self.name} could not {what}: {why} ({exc})") from exc

    def _attempts(self, work: Callable[[Any], Any], on: Connection) -> Any:
        errors = self.psycopg.errors
        with on.lock:
            for attempt in range(1, 5):
                conn = on.get()
                try:
                    return work(conn)
                except (errors.DeadlockDetected, errors.SerializationFailure):
                    if attempt == 4:
                        raise
                    time.sleep(0.01 * attempt)
                except self.psycopg.OperationalError:
                    if attempt >= 2 or not (conn.closed or conn.broken):
                        raise
                    on.drop()
            raise AssertionError("unreachable")

    def measure_offset(self, conn: Any) -> None:
        before = time.time()
        db = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
        after = time.time()
        offset = db - (before + after) / 2
        if abs(offset - self.offset) > 0.005:  # (not a step of the wall clock at every measurement)
            self.offset = offset

    def wall(self) -> float:
        """The database's clock, as POSIX seconds (this machine's clock plus the offset measured at every
        lease renewal): give it to the scheduler as its wall_clock."""
        return time.time() + self.offset


def _ms(seconds: float) -> str:
    """A timeout for PostgreSQL, in whole milliseconds and at least 1 (0 would mean none)."""
    return f"{max(1, math.ceil(seconds * 1000))}ms"
