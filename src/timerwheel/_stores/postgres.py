"""PostgresStore: one schedule shared by many processes (on one machine or many) through PostgreSQL, each
fire run once across all of them.

How it works (docs/shared.md says it for users):

- Every process's KeyedScheduler *holds* a share of the keys: a key's row names its owner and the
  owner's lease (`lease_until`, on the database's clock). A process arms in its wheel only the keys it
  holds. A keeper thread of the store, with a connection of its own, renews the leases every lease/3
  seconds, claims keys that nobody holds (or whose lease expired) with `SELECT ... FOR UPDATE SKIP
  LOCKED` up to a fair share (keys / live processes), and gives back what it holds beyond that share.
- A fire is taken by one statement that checks the key's owner and generation and inserts the fire-log
  row (unique on key, generation, scheduled_for) in the same transaction: a process that no longer
  holds the key, or holds an older generation, cannot take it, whatever its own clock or wheel says.
  A completion is fenced the same way: only the holder of that generation writes the key's row.
- upsert() and replace_all() from any process take the keys over (the new generation is armed where it
  was computed) and NOTIFY the others, whose listener thread drops what they held of the older
  generation (and cancels its running run, with cancel_running_on_replace / _on_remove) at once.
- A process that dies stops renewing: the others take its keys over within lease + lease/3 seconds, and
  apply the same recover and catch-up rules as a restart on SQLite (the fires it had started and not
  finished: recover=; those missed meanwhile: catch_up=), once, in the process that claimed the key.
- The schema is created and migrated by the store itself, under an advisory lock: versioned, and safe
  when many processes start at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from .._validate import seconds as _seconds
from .protocols import SharedHolder
from .rows import (
    FinishedFire,
    StoredFire,
    StoredKey,
    StoreError,
    decode_key,
    encode_key,
    fire_row,
    key_row,
    stored_key,
)

__all__ = ["PostgresStore"]

logger = logging.getLogger("timerwheel")

# (3: timerwheel_start_fire refuses a new fire before a later one of its generation; 4: a rerun taken
# again after a lost answer keeps its attempt, and a rerun of an older fire keeps the latest started one)
SCHEMA_VERSION = 4
CHANNEL = "timerwheel"
_LOCK_ID = 0x74696D6572  # the advisory lock that serialises schema creation and migration ("timer")
_REPLACE_ID = _LOCK_ID + 1  # the advisory lock that serialises replace_all() across processes

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS timerwheel_meta (name text PRIMARY KEY, value text NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS timerwheel_keys (
        key text PRIMARY KEY,
        data text NOT NULL,
        generation bigint NOT NULL,
        state text NOT NULL,
        next_run_at bigint,
        last_scheduled_for bigint,
        last_error text,
        owner text,
        lease_until timestamptz
    )""",
    """CREATE INDEX IF NOT EXISTS timerwheel_keys_owner ON timerwheel_keys (owner)""",
    """CREATE TABLE IF NOT EXISTS timerwheel_fires (
        key text NOT NULL,
        generation bigint NOT NULL,
        scheduled_for bigint NOT NULL,
        started_at bigint NOT NULL,
        finished_at bigint,
        error text,
        attempts integer NOT NULL DEFAULT 1,
        owner text NOT NULL,
        PRIMARY KEY (key, generation, scheduled_for)
    )""",
    """CREATE INDEX IF NOT EXISTS timerwheel_fires_unfinished ON timerwheel_fires (key)
        WHERE finished_at IS NULL""",
    """CREATE TABLE IF NOT EXISTS timerwheel_owners (
        id text PRIMARY KEY,
        lease_until timestamptz NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    # Version 1 had a start_fire that returned a boolean: a function's result type cannot be replaced.
    """DROP FUNCTION IF EXISTS timerwheel_start_fire(text, bigint, bigint, bigint, text, boolean,
        double precision, text, bigint, text)""",
    # A fire taken in one round trip: the key must be held (owner, generation) by the caller; the fire
    # must be new, or an unfinished one of the caller's (a retry after a lost connection), or, for a
    # rerun, any unfinished one (the interrupted fire of a process that died). It waits for the key's
    # row at most p_lock_wait seconds (a keeper renewing its leases holds the rows it renews for the
    # length of that statement): a row locked longer by another session (an operator's open
    # transaction) raises lock_not_available, and the fire is tried again later while the other keys go
    # on. Returns the fire's attempt (1, more for a rerun; the same take again of a rerun, its answer
    # lost, has the same owner and started_at, and the same attempt), or 0 if it was not taken. The key's
    # latest started fire does not go back for a rerun of an older one.
    """CREATE OR REPLACE FUNCTION timerwheel_start_fire(
        p_key text, p_generation bigint, p_scheduled_for bigint, p_started_at bigint, p_owner text,
        p_rerun boolean, p_lease double precision, p_state text, p_next_run_at bigint,
        p_last_error text, p_lock_wait double precision) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        v_attempts integer;
    BEGIN
        PERFORM set_config('lock_timeout', (ceil(p_lock_wait * 1000))::bigint || 'ms', true);
        PERFORM 1 FROM timerwheel_keys
            WHERE key = p_key AND generation = p_generation AND owner = p_owner FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
        -- A new fire at or before a later one of its generation in the log is a stale one (a process
        -- that held the key before, and holds it again, asking for a fire its plan had before it lost
        -- the key): the later one started, so this one ran, or was decided about, already.
        IF NOT EXISTS (SELECT 1 FROM timerwheel_fires WHERE key = p_key AND generation = p_generation
                AND scheduled_for = p_scheduled_for)
            AND EXISTS (SELECT 1 FROM timerwheel_fires WHERE key = p_key AND generation = p_generation
                AND scheduled_for > p_scheduled_for) THEN
            RETURN 0;
        END IF;
        INSERT INTO timerwheel_fires AS f (key, generation, scheduled_for, started_at, owner)
            VALUES (p_key, p_generation, p_scheduled_for, p_started_at, p_owner)
            ON CONFLICT (key, generation, scheduled_for) DO UPDATE
            SET attempts = f.attempts + (CASE WHEN p_rerun AND NOT (f.owner = EXCLUDED.owner
                    AND f.started_at = EXCLUDED.started_at) THEN 1 ELSE 0 END),
                started_at = EXCLUDED.started_at, owner = EXCLUDED.owner
            WHERE f.finished_at IS NULL AND (p_rerun OR f.owner = EXCLUDED.owner)
            RETURNING attempts INTO v_attempts;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
        DELETE FROM timerwheel_fires
            WHERE key = p_key AND finished_at IS NOT NULL AND scheduled_for < p_scheduled_for;
        UPDATE timerwheel_keys SET state = p_state, next_run_at = p_next_run_at,
            last_scheduled_for = CASE WHEN p_rerun THEN GREATEST(last_scheduled_for, p_scheduled_for)
                ELSE p_scheduled_for END,
            last_error = p_last_error,
            lease_until = clock_timestamp() + make_interval(secs => p_lease)
            WHERE key = p_key;
        RETURN v_attempts;
    END $$""",
    # (version 2 before its release had a timerwheel_finish_fire: a run's end is one statement now)
    """DROP FUNCTION IF EXISTS timerwheel_finish_fire(text, bigint, bigint, bigint, text, text, boolean,
        text, bigint, bigint, text, double precision)""",
]


def _held_row(key: Any, generation: int) -> tuple[Hashable, int]:
    """A key held and its generation, its key checked as key_row checks it."""
    return stored_key(key), generation


_COLUMNS = "key, data, generation, state, next_run_at, last_scheduled_for, last_error"
_ROW_WAIT = 0.1  # seconds a fire's take or end waits for its key's row (see timerwheel_start_fire)
# A key's generation never goes back, across a delete too: the highest generation of any key deleted is
# kept (timerwheel_meta 'generation_floor'), and a key stored anew starts above it.
_ABOVE_FLOOR = "GREATEST(%s, (SELECT value::bigint + 1 FROM timerwheel_meta WHERE name = 'generation_floor'))"
_RAISE_FLOOR = (  # (after `WITH d AS (DELETE ... RETURNING generation)`)
    "INSERT INTO timerwheel_meta AS m (name, value) SELECT 'generation_floor', max(generation)::text FROM d "
    "HAVING max(generation) IS NOT NULL ON CONFLICT (name) DO UPDATE "
    "SET value = GREATEST(m.value::bigint, EXCLUDED.value::bigint)::text"
)
# Rows of the keys given (%s: a text[]) locked in key order, as replace_all() locks them: two statements
# that lock many rows never wait for one another in a cycle.
_IN_ORDER = "SELECT key FROM timerwheel_keys WHERE key = ANY(%s) ORDER BY key FOR UPDATE"
_MAX_LEASE = 366 * 86400.0  # seconds: a year (a timestamptz holds it; beyond, nothing is gained)
MAX_KEY = 1000  # characters of a key's JSON: it travels in NOTIFY payloads (8000 bytes) and an index


def _key(key: Any) -> str:
    """A key as stored (see encode_key), and not longer than MAX_KEY characters: ValueError naming key."""
    k = encode_key(key)
    if len(k) > MAX_KEY:
        raise ValueError(f"key: at most {MAX_KEY} characters (as JSON) with a PostgresStore, got {len(k)}")
    return k


def _redacted(dsn: str) -> str:
    """The DSN without its password (for messages and repr)."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = conninfo_to_dict(dsn)
    except Exception:
        return "<dsn>"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


class _Connection:
    """One of a store's connections, used by one statement at a time, and made again when it was lost."""

    __slots__ = ("conn", "lock", "store")

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.conn: Any = None

    def get(self) -> Any:
        self.store._check_own()
        if self.store._closed:
            raise StoreError(f"the {self.store.name} is closed")
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.drop()
            self.conn = self.store._connect()
        return self.conn

    def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class PostgresStore:
    """Keys shared by every KeyedScheduler on the same PostgreSQL database (psycopg 3; install the
    extra `timerwheel[postgres]`): each (key, generation, scheduled_for) fire runs once across all of
    them, and the keys spread over the processes. See docs/shared.md for the guarantees and the schema.

    Each process makes its own store (one per KeyedScheduler) with the same dsn, and gives its
    scheduler the store's clock, so that due times are read from the database's clock:
    `ThreadedScheduler(wall_clock=store.wall)`.

    No statement waits on the database with the scheduler's lock held, or on an event loop's thread:
    the KeyedScheduler's writes go through a thread of its own, and a fire's take never waits for a
    key's row that another session holds locked (an operator's open transaction, a migration): that
    key is tried again every second, while the others go on. Every statement of the store's
    connections has a lock timeout and a statement timeout.

    Args:
        dsn: a libpq connection string or URI.
        lease: seconds a process holds the keys it claimed without renewing them (renewed every
            lease/3 s by a thread of the store); a process that dies has its keys taken over within
            lease + lease/3 seconds.
        lock_timeout: seconds a statement may wait for a lock (PostgreSQL's lock_timeout).
        statement_timeout: seconds a statement may take (PostgreSQL's statement_timeout).

    Raises:
        TypeError: dsn is not a str; lease, lock_timeout or statement_timeout is not a number.
        ValueError: lease is not between 0.3 s and a year; a timeout is not > 0 (and at most a day).
        StoreError: the database cannot be reached, or holds a timerwheel schema of a newer version.
        ImportError: psycopg is not installed.
    """

    durable = True
    shared = True

    def __init__(
        self, dsn: str, *, lease: float = 30.0, lock_timeout: float = 1.0, statement_timeout: float = 30.0
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, not {type(dsn).__name__}")
        lease = _seconds(lease, "lease")
        if not 0.3 <= lease <= _MAX_LEASE:
            raise ValueError(f"lease must be between 0.3 and {_MAX_LEASE:.0f} seconds, got {lease!r}")
        self.lock_timeout = _seconds(lock_timeout, "lock_timeout")
        self._row_wait = min(self.lock_timeout, _ROW_WAIT)  # what a fire's take waits for its key's row
        self.statement_timeout = _seconds(statement_timeout, "statement_timeout")
        for name, value in (
            ("lock_timeout", self.lock_timeout),
            ("statement_timeout", self.statement_timeout),
        ):
            if not 0 < value <= 86400:
                raise ValueError(f"{name} must be > 0 seconds (and at most a day), got {value!r}")
        try:
            import psycopg
        except ImportError:
            raise ImportError("PostgresStore needs psycopg 3: pip install 'timerwheel[postgres]'") from None
        self._psycopg = psycopg
        self.dsn = dsn
        self.lease = lease
        self.name = f"PostgreSQL store {_redacted(dsn)!r}"
        token = uuid.uuid4().hex[:12]
        self.owner_id = f"{socket.gethostname()}:{os.getpid()}:{token}"
        self._application = f"timerwheel {os.getpid()} {token}"  # (pg_stat_activity shows it)
        self._offset = 0.0  # the database's clock minus this machine's (time.time())
        # Two connections, each one statement at a time: the main one (fires taken and ended, keys given
        # back) and one for users' changes (upsert, replace_all, remove), so that a change that waits for
        # a row another session holds locked never holds up the fires of the other keys.
        self._main = _Connection(self)
        self._changes = _Connection(self)
        self._pid = os.getpid()
        self._closed = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._holder: SharedHolder | None = None  # the KeyedScheduler, once attached (start)
        self._valid_until = 0.0  # monotonic: when the leases held lapse unless renewed
        self._lost_said = False
        self._detached = False  # its KeyedScheduler closed: renew what runs, claim nothing
        self._unreadable: set[tuple[str, str]] = set()  # (table, stored key) of rows said to be unreadable
        try:
            with self._main.lock:
                self._migrate(self._main.get())
                self._measure_offset(self._main.get())
        except StoreError:
            self._main.drop()
            raise
        except self._psycopg.Error as exc:
            self._main.drop()
            raise StoreError(f"cannot use the {self.name}: {exc}") from None

    def __repr__(self) -> str:
        return f"PostgresStore({_redacted(self.dsn)!r}, lease={self.lease!r})"

    # -- connections ----------------------------------------------------------------------------------

    def _connect(self) -> Any:
        self._check_own()
        conn = self._psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=10,
            application_name=self._application,
            keepalives=1,  # (a half-open connection is noticed in about 15 s, not in hours)
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=5,
        )
        try:  # (for the session: no statement waits for a lock, or runs, without bound)
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
                (f"{round(self.lock_timeout * 1000)}ms", f"{round(self.statement_timeout * 1000)}ms"),
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_own(self) -> None:
        """StoreError in a child process that inherited the store through fork: its connections are the
        parent's sessions (a statement from here would mix into them), and it has none of its threads.
        (Nothing of the child closes them: close() does nothing there, and psycopg never ends a session
        from a process that did not open it.)"""
        if self._pid != os.getpid():
            raise StoreError(
                f"the {self.name} was inherited through fork: it belongs to the parent process; make a new "
                "PostgresStore (and KeyedScheduler) in the child"
            )

    def _do(self, work: Callable[[Any], Any], what: str, on: _Connection | None = None) -> Any:
        """Run `work(connection)` on the main connection (or `on`); again on a fresh connection if the
        first one was lost, and again after a deadlock or a serialization failure (every statement of the
        store may be repeated: see timerwheel_start_fire). What the database raises comes out as a
        StoreError that says what could not be done (`what`) and why: a row another session holds
        locked, a statement past its timeout, a database that cannot be reached."""
        try:
            return self._attempts(work, on or self._main)
        except self._psycopg.Error as exc:
            errors = self._psycopg.errors
            if isinstance(exc, errors.LockNotAvailable):
                why = "a row it needs is locked by another session"
            elif isinstance(exc, errors.QueryCanceled):
                why = f"a statement took longer than its timeout ({self.statement_timeout} s)"
            else:
                why = "the database failed"
            raise StoreError(f"the {self.name} could not {what}: {why} ({exc})") from exc

    def _attempts(self, work: Callable[[Any], Any], on: _Connection) -> Any:
        errors = self._psycopg.errors
        with on.lock:
            for attempt in range(1, 5):
                conn = on.get()
                try:
                    return work(conn)
                except (errors.DeadlockDetected, errors.SerializationFailure):
                    if attempt == 4:
                        raise
                    time.sleep(0.01 * attempt)
                except self._psycopg.OperationalError:
                    if attempt >= 2 or not (conn.closed or conn.broken):
                        raise
                    on.drop()
            raise AssertionError("unreachable")

    def _migrate(self, conn: Any) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
            exists = conn.execute("SELECT to_regclass('timerwheel_meta') IS NOT NULL").fetchone()[0]
            version = None
            if exists:
                row = conn.execute("SELECT value FROM timerwheel_meta WHERE name = 'schema'").fetchone()
                version = None if row is None else int(row[0])
            if version is not None and version > SCHEMA_VERSION:
                raise StoreError(
                    f"the {self.name} has timerwheel schema version {version}; this version of timerwheel "
                    f"reads versions up to {SCHEMA_VERSION}"
                )
            if version == SCHEMA_VERSION:
                return
            for statement in _SCHEMA:  # (version None: a new database; migrations from older go here)
                conn.execute(statement)
            conn.execute(
                "INSERT INTO timerwheel_meta VALUES ('schema', %s) "
                "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                (str(SCHEMA_VERSION),),
            )

    def _measure_offset(self, conn: Any) -> None:
        before = time.time()
        db = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
        after = time.time()
        offset = db - (before + after) / 2
        if abs(offset - self._offset) > 0.005:  # (not a step of the wall clock at every measurement)
            self._offset = offset

    def wall(self) -> float:
        """The database's clock, as POSIX seconds (this machine's clock plus the offset measured at every
        lease renewal): give it to the scheduler as its wall_clock."""
        return time.time() + self._offset

    # -- what a KeyedScheduler calls (KeyStore) ---------------------------------------------------------

    def load(self) -> tuple[Iterable[StoredKey], list[StoredFire]]:
        """Nothing up front: a shared store's keys are claimed after start() (see attach)."""
        return [], []

    def put(self, row: StoredKey) -> int:
        """A user's change of a key (upsert): stored as a new generation (one above any stored), held by
        this process from now on; the others are notified. Returns the generation stored."""
        k = _key(row.key)
        payload = json.dumps({"o": self.owner_id, "k": [k]})

        def work(conn: Any) -> int:
            return int(
                conn.execute(
                    "WITH p AS (INSERT INTO timerwheel_keys AS t (key, data, generation, state, next_run_at, "
                    "last_scheduled_for, last_error, owner, lease_until) VALUES "
                    f"(%s, %s, {_ABOVE_FLOOR}, %s, %s, %s, %s, %s, clock_timestamp() + "
                    "make_interval(secs => %s)) ON CONFLICT (key) DO UPDATE SET "
                    "data = EXCLUDED.data, generation = GREATEST(EXCLUDED.generation, t.generation + 1), "
                    "state = EXCLUDED.state, next_run_at = EXCLUDED.next_run_at, last_scheduled_for = "
                    "COALESCE(EXCLUDED.last_scheduled_for, t.last_scheduled_for), last_error = "
                    "EXCLUDED.last_error, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until "
                    "RETURNING generation) SELECT generation, pg_notify(%s, %s) FROM p",
                    (k, *row[1:], self.owner_id, self.lease, CHANNEL, payload),
                ).fetchone()[0]
            )

        return int(self._do(work, f"store key {row.key!r}", self._changes))

    def replace(self, rows: list[StoredKey], removed: Iterable[Hashable] | None) -> list[int]:
        """replace_all(): every row stored as a new generation and held by this process, and every other
        key deleted (`removed` is not needed: the database knows them), in one transaction; the others
        are notified. Returns the generations stored, in the order of rows."""
        order = [_key(r.key) for r in rows]
        rows = sorted(rows, key=lambda r: _key(r.key))  # (rows locked in one order: no deadlock between two)
        keys = [_key(r.key) for r in rows]
        columns = list(zip(*(r[1:] for r in rows), strict=True)) if rows else [[]] * 6
        payload = json.dumps({"o": self.owner_id, "all": True})

        def work(conn: Any) -> dict[str, int]:
            with conn.transaction():
                # Locks taken in the order every other statement takes them, so that none waits in a
                # cycle: replace_all() calls of several processes one after the other (each sees every
                # key the one before stored); then every key's row, in key order; then the fires; the
                # generation floor last, when nothing more is waited for.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_REPLACE_ID,))
                conn.execute("SELECT 1 FROM timerwheel_keys ORDER BY key FOR UPDATE").fetchall()
                conn.execute("DELETE FROM timerwheel_fires WHERE NOT (key = ANY(%s))", (keys,))
                deleted = conn.execute(
                    "WITH d AS (DELETE FROM timerwheel_keys WHERE NOT (key = ANY(%s)) RETURNING generation) "
                    "SELECT max(generation) FROM d",
                    (keys,),
                ).fetchone()[0]
                result = conn.execute(
                    "INSERT INTO timerwheel_keys AS t (key, data, generation, state, next_run_at, "
                    "last_scheduled_for, last_error, owner, lease_until) SELECT u.key, u.data, "
                    f"{_ABOVE_FLOOR.replace('%s', 'u.generation')}, u.state, u.next_run_at, "
                    "u.last_scheduled_for, u.last_error, %s, clock_timestamp() + "
                    "make_interval(secs => %s) FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::text[], "
                    "%s::bigint[], %s::bigint[], %s::text[]) AS u(key, data, generation, state, next_run_at, "
                    "last_scheduled_for, last_error) ON CONFLICT (key) DO UPDATE SET "
                    "data = EXCLUDED.data, generation = GREATEST(EXCLUDED.generation, t.generation + 1), "
                    "state = EXCLUDED.state, next_run_at = EXCLUDED.next_run_at, last_scheduled_for = "
                    "COALESCE(EXCLUDED.last_scheduled_for, t.last_scheduled_for), last_error = "
                    "EXCLUDED.last_error, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until "
                    "RETURNING key, generation",
                    (self.owner_id, self.lease, keys, *[list(c) for c in columns]),
                ).fetchall()
                if deleted is not None:
                    conn.execute("WITH d(generation) AS (VALUES (%s::bigint)) " + _RAISE_FLOOR, (deleted,))
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            return dict(result)

        generations = self._do(work, f"replace the keys with {len(rows)} key(s)", self._changes)
        return [int(generations[k]) for k in order]

    def save(self, rows: list[StoredKey], finished: Iterable[FinishedFire] = ()) -> None:
        """Write the state of keys this process holds, at their generation (fenced: a key another process
        took over, or a newer generation, is left as it is), and mark fires finished, in one
        transaction."""
        fires = [(f.finished_at, f.error, encode_key(f.key), f.generation, f.scheduled_for) for f in finished]
        if not rows and not fires:
            return
        rows = sorted(rows, key=lambda r: _key(r.key))
        keys = [_key(r.key) for r in rows]
        columns = [list(c) for c in zip(*(r[2:] for r in rows), strict=True)] if rows else [[]] * 5

        def work(conn: Any) -> None:
            with conn.transaction():
                # (keys' rows first, in key order, then fires, as every statement that locks both)
                if keys:
                    conn.execute(
                        "UPDATE timerwheel_keys AS t SET state = u.state, next_run_at = u.next_run_at, "
                        "last_scheduled_for = u.last_scheduled_for, last_error = u.last_error "
                        "FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[], "
                        "%s::text[]) AS u(key, generation, state, next_run_at, last_scheduled_for, "
                        "last_error) WHERE t.key = u.key AND t.generation = u.generation AND t.owner = %s "
                        f"AND t.key IN ({_IN_ORDER})",
                        (keys, *columns, self.owner_id, keys),
                    )
                if fires:
                    conn.cursor().executemany(
                        "UPDATE timerwheel_fires SET finished_at = %s, error = %s "
                        "WHERE key = %s AND generation = %s AND scheduled_for = %s",
                        fires,
                    )

        self._do(work, f"write the state of {len(rows)} key(s)")

    def delete(self, key: Hashable) -> bool:
        """Delete a key and its fires, wherever it is held (the others are notified). True if it existed.
        A key this store cannot hold is refused as put() refuses it (TypeError or ValueError naming key)."""
        k = _key(key)
        payload = json.dumps({"o": self.owner_id, "k": [k]})

        def work(conn: Any) -> bool:
            with conn.transaction():
                # (the key's row first, then its fires, as every statement that locks both does: no
                # deadlock with a replace_all() or a take)
                conn.execute("SELECT 1 FROM timerwheel_keys WHERE key = %s FOR UPDATE", (k,)).fetchall()
                conn.execute("DELETE FROM timerwheel_fires WHERE key = %s", (k,))
                gone = conn.execute(
                    f"WITH d AS (DELETE FROM timerwheel_keys WHERE key = %s RETURNING generation) "
                    f"{_RAISE_FLOOR} RETURNING 1",
                    (k,),
                ).rowcount
                if gone:
                    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            return bool(gone)

        return bool(self._do(work, f"delete key {key!r}", self._changes))

    def start_fire(self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool) -> int:
        """Take the fire (key, generation, scheduled_for) and write the key's row, in one transaction, if
        this process holds the key at that generation: the fire's attempt (1, more for a rerun); 0
        (nothing written) otherwise, or if the fire was taken already. StoreError, at once, if another
        session holds the key's row locked."""
        k = _key(row.key)
        return int(
            self._do(
                lambda conn: conn.execute(
                    "SELECT timerwheel_start_fire(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        k,
                        row.generation,
                        scheduled_for,
                        started_at,
                        self.owner_id,
                        rerun,
                        self.lease,
                        row.state,
                        row.next_run_at,
                        row.last_error,
                        self._row_wait,
                    ),
                ).fetchone()[0],
                f"take a fire of key {row.key!r}",
            )
        )

    def finish_fire(
        self,
        row: StoredKey | None,
        key: Hashable,
        generation: int,
        scheduled_for: int,
        finished_at: int,
        error: str | None,
    ) -> None:
        """Mark the fire finished; write the key's row (unless None) if this process still holds it at
        that generation and no other session holds the row locked just now (SKIP LOCKED: never waited
        for; the row is left as it is, and the fire log says the run ended, which is what a later owner's
        start reads; the key's next take writes the row anyway)."""
        k = _key(key)
        fire = (
            "UPDATE timerwheel_fires SET finished_at = %s, error = %s "
            "WHERE key = %s AND generation = %s AND scheduled_for = %s"
        )
        args: tuple[Any, ...] = (finished_at, error, k, generation, scheduled_for)
        if row is None:
            statement = fire
        else:
            statement = (
                f"WITH f AS ({fire}), h AS (SELECT key FROM timerwheel_keys WHERE key = %s "
                "AND generation = %s AND owner = %s FOR UPDATE SKIP LOCKED) UPDATE timerwheel_keys AS t "
                "SET state = %s, next_run_at = %s, last_scheduled_for = %s, last_error = %s "
                "FROM h WHERE t.key = h.key"
            )
            args += (k, generation, self.owner_id, row.state, row.next_run_at, row.last_scheduled_for)
            args += (row.last_error,)
        self._do(lambda conn: conn.execute(statement, args), f"record the end of a run of key {key!r}")

    def release(self, keys: Mapping[Hashable, int]) -> None:
        """Give keys back (held by this process no more), each at the generation given (a key that a
        change of this process stored again meanwhile, at a newer generation, stays held): any process
        may claim them at once."""
        pairs = sorted((_key(k), g) for k, g in keys.items())
        if not pairs:
            return
        self._do(
            lambda conn: conn.execute(
                "UPDATE timerwheel_keys AS t SET owner = NULL, lease_until = NULL "
                "FROM unnest(%s::text[], %s::bigint[]) AS u(key, generation) WHERE t.owner = %s "
                f"AND t.key = u.key AND t.generation = u.generation AND t.key IN ({_IN_ORDER})",
                ([k for k, _ in pairs], [g for _, g in pairs], self.owner_id, [k for k, _ in pairs]),
            ),
            f"give {len(pairs)} key(s) back",
        )

    def detach(self, running: list[Hashable]) -> None:
        """The KeyedScheduler closes: claim nothing more, give back every key held but those whose runs
        are still going (their leases are renewed until close())."""
        self._detached = True
        keep = [_key(k) for k in running]
        try:
            self._do(
                lambda conn: conn.execute(
                    "UPDATE timerwheel_keys SET owner = NULL, lease_until = NULL WHERE key IN (SELECT key "
                    "FROM timerwheel_keys WHERE owner = %s AND NOT (key = ANY(%s)) ORDER BY key FOR UPDATE)",
                    (self.owner_id, keep),
                ),
                "give its keys back",
            )
        except Exception as exc:  # unreachable: the leases lapse by themselves
            logger.warning("timerwheel: the %s could not give its keys back at close (%r)", self.name, exc)

    def close(self) -> None:
        """Stop the store's threads, give back every key this process holds (the others take them over at
        their next claim, without waiting for the lease), and close the connections. Idempotent. In a
        child that inherited the store through fork, it does nothing (the parent's store goes on)."""
        if self._closed or self._pid != os.getpid():
            return
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        try:
            self._do(
                lambda conn: conn.execute(
                    "WITH r AS (UPDATE timerwheel_keys SET owner = NULL, lease_until = NULL WHERE key IN "
                    "(SELECT key FROM timerwheel_keys WHERE owner = %s ORDER BY key FOR UPDATE) "
                    "AND owner = %s) DELETE FROM timerwheel_owners WHERE id = %s",
                    (self.owner_id, self.owner_id, self.owner_id),
                ),
                "give its keys back",
            )
        except Exception as exc:  # unreachable: the leases lapse by themselves
            logger.warning("timerwheel: the %s could not give its keys back at close (%r)", self.name, exc)
        for connection in (self._main, self._changes):
            with connection.lock:
                self._closed = True
                connection.drop()
        self._holder = None

    # -- sharing: the keeper and the listener threads -------------------------------------------------

    def attach(self, holder: SharedHolder) -> None:
        """Start sharing (KeyedScheduler.start() calls it): the keeper thread claims and renews keys for
        `holder`, the listener thread tells it of the others' changes."""
        self._holder = holder
        self._valid_until = time.monotonic() + self.lease  # (what its upserts hold, until a renewal)
        for target, name in ((self._keep, "keeper"), (self._listen, "listener")):
            thread = threading.Thread(target=target, name=f"timerwheel-postgres-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _keep(self) -> None:
        conn: Any = None
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                # (the first round after a failure renews and claims nothing: after an outage of the
                # database every process takes its own keys back before any takes another's)
                self._pass(conn, started, claim=failures == 0)
                failures = 0
                self._lost_said = False
            except Exception as exc:
                failures += 1
                if conn is not None and (conn.closed or conn.broken):
                    conn = None
                if failures == 1:
                    logger.error("timerwheel: the %s cannot renew its leases (%r); retrying", self.name, exc)
                if time.monotonic() >= self._valid_until and not self._lost_said and self._holder is not None:
                    self._lost_said = True
                    logger.error(
                        "timerwheel: the %s lost its leases (the database was unreachable for %.1f s, the "
                        "lease): other processes may take its keys over; none fires here until it reaches "
                        "the database again, and then it keeps those that nobody took",
                        self.name,
                        self.lease,
                    )
                    self._holder.lost()
            period = min(0.1, self.lease / 3) if failures else self.lease / 3  # (back soon after an outage)
            self._stop.wait(max(0.0, period - (time.monotonic() - started)))
        if conn is not None:
            conn.close()

    def _pass(self, conn: Any, started: float, claim: bool = True) -> None:
        """One round of the keeper: heartbeat, renew, reconcile, then give back or claim up to a share."""
        holder = self._holder
        if holder is None:
            return
        self._measure_offset(conn)
        if self._detached:  # (closing: only the leases of the runs still going, until close())
            conn.execute(
                "UPDATE timerwheel_keys SET lease_until = clock_timestamp() + make_interval(secs => %s) "
                "WHERE owner = %s",
                (self.lease, self.owner_id),
            )
            return
        # (the stamp before the count: a key this process stores after it may be missing from the count,
        # and the shed leaves it alone)
        stamp = holder.stamp()
        live, total = conn.execute(
            "WITH h AS (INSERT INTO timerwheel_owners (id, lease_until) VALUES (%s, clock_timestamp() + "
            "make_interval(secs => %s)) ON CONFLICT (id) DO UPDATE SET lease_until = EXCLUDED.lease_until), "
            "d AS (DELETE FROM timerwheel_owners WHERE lease_until < clock_timestamp() - interval '1 day') "
            "SELECT (SELECT count(*) FROM timerwheel_owners WHERE lease_until > clock_timestamp() "
            "AND id <> %s) + 1, (SELECT count(*) FROM timerwheel_keys)",
            (self.owner_id, self.lease, self.owner_id),
        ).fetchone()
        # Renewed without waiting for a row another session holds locked (an operator's open transaction):
        # that key is renewed at a later round; what is held is read, not locked (a plain read waits for
        # no lock), so that a locked row is not taken for a key lost.
        held = conn.execute(
            "WITH r AS (UPDATE timerwheel_keys "
            "SET lease_until = clock_timestamp() + make_interval(secs => %s) WHERE key IN "
            "(SELECT key FROM timerwheel_keys WHERE owner = %s FOR UPDATE SKIP LOCKED) AND owner = %s) "
            "SELECT key, generation FROM timerwheel_keys WHERE owner = %s",
            (self.lease, self.owner_id, self.owner_id, self.owner_id),
        ).fetchall()
        self._valid_until = started + self.lease
        holder.reconcile(dict(self._readable(held, _held_row, "timerwheel_keys")[0]), stamp)
        share = -(-total // live)
        if len(held) > share:
            holder.shed(len(held) - share, stamp)
        elif len(held) < share and claim:
            holder.flush()  # (ends of runs not recorded yet: recorded before any claim)
            stamp = holder.stamp()
            with conn.transaction():
                if self._detached:  # (its KeyedScheduler closed during this round: claim nothing)
                    return
                rows = conn.execute(
                    f"UPDATE timerwheel_keys SET owner = %s, lease_until = clock_timestamp() + "
                    f"make_interval(secs => %s) WHERE key IN (SELECT key FROM timerwheel_keys WHERE owner IS "
                    f"NULL OR lease_until IS NULL OR lease_until < clock_timestamp() ORDER BY next_run_at "
                    f"NULLS LAST LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING {_COLUMNS}",
                    (self.owner_id, self.lease, min(share - len(held), 10_000)),
                ).fetchall()
                # Every row checked as it is read: one this timerwheel cannot read (written by hand, by
                # another program) is given back at once, exactly as it is, and the others go on.
                keys, unreadable = self._readable(rows, key_row, "timerwheel_keys")
                fires: list[StoredFire] = []
                if keys:
                    fires, bad = self._readable(
                        conn.execute(
                            "SELECT key, generation, scheduled_for, attempts FROM timerwheel_fires "
                            "WHERE finished_at IS NULL AND key = ANY(%s) ORDER BY key, scheduled_for",
                            ([encode_key(row.key) for row in keys],),
                        ).fetchall(),
                        fire_row,
                        "timerwheel_fires",
                    )
                    if bad:  # (a key with a fire it cannot read is left as it is, with its fires)
                        keys = [row for row in keys if encode_key(row.key) not in bad]
                        fires = [fire for fire in fires if encode_key(fire.key) not in bad]
                        unreadable |= bad
                if unreadable:
                    conn.execute(
                        "UPDATE timerwheel_keys SET owner = NULL, lease_until = NULL "
                        "WHERE key = ANY(%s) AND owner = %s",
                        (sorted(unreadable), self.owner_id),
                    )
            if keys:
                holder.adopt(keys, fires, stamp)

    def _readable(
        self, rows: list[tuple[Any, ...]], read: Callable[..., Any], table: str
    ) -> tuple[list[Any], set[str]]:
        """Rows checked as they are read (key_row, fire_row): those it can read, and the stored keys of
        those it cannot, each logged once (a StoreError's message naming the database and the row)."""
        good, bad = [], set()
        for row in rows:
            try:
                good.append(read(*row))
            except ValueError as exc:
                bad.add(row[0])
                if (table, row[0]) not in self._unreadable:
                    self._unreadable.add((table, row[0]))
                    logger.error(
                        "timerwheel: the %s has a row that this timerwheel cannot read: the row of key %r "
                        "in %s: %s; the key is left as it is, and the others go on",
                        self.name,
                        row[0],
                        table,
                        exc,
                    )
        return good, bad

    def _listen(self) -> None:
        conn: Any = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                    conn.execute(f"LISTEN {CHANNEL}")
                    if self._holder is not None:  # what was said while we were not listening
                        self._heard(conn, None)
                # (taken first, then handled: the connection cannot run a query while it yields them)
                for note in list(conn.notifies(timeout=0.25, stop_after=1)):
                    self._heard(conn, note.payload)
            except Exception as exc:
                if conn is not None and (conn.closed or conn.broken):
                    conn = None
                logger.debug("timerwheel: the %s listener: %r; reconnecting", self.name, exc)
                self._stop.wait(0.25)
        if conn is not None:
            conn.close()

    def _heard(self, conn: Any, payload: str | None) -> None:
        """Another process changed keys: tell the holder what the database says of those it holds."""
        holder = self._holder
        if holder is None or self._detached:
            return
        if payload is not None:
            try:
                note = json.loads(payload)
            except ValueError:
                return
            if note.get("o") == self.owner_id:
                return
        stamp = holder.stamp()
        if payload is None or note.get("all"):
            rows = conn.execute(
                "SELECT key, generation FROM timerwheel_keys WHERE owner = %s", (self.owner_id,)
            ).fetchall()
            holder.reconcile({decode_key(k): g for k, g in rows}, stamp)
            return
        keys = [k for k in note.get("k", ()) if isinstance(k, str)]
        rows = conn.execute(
            "SELECT key, generation, owner FROM timerwheel_keys WHERE key = ANY(%s)", (keys,)
        ).fetchall()
        found = {k: (g, o) for k, g, o in rows}
        changes = {}
        for k in keys:
            g, o = found.get(k, (None, None))
            changes[decode_key(k)] = g if o == self.owner_id else None
        holder.changed(changes, stamp, {decode_key(k) for k in keys if k not in found})

    # -- for tests and operators --------------------------------------------------------------------

    def held(self) -> int:
        """How many keys the database says this process holds."""
        return int(
            self._do(
                lambda conn: conn.execute(
                    "SELECT count(*) FROM timerwheel_keys WHERE owner = %s", (self.owner_id,)
                ).fetchone()[0],
                "count the keys it holds",
            )
        )
