"""PostgresStore: what a KeyedScheduler calls (the KeyStore protocol), each call one statement or one
transaction on the database (see database.py), fenced by the key's owner and generation."""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from ..._validate import seconds as _seconds
from ..protocols import SharedHolder
from ..rows import (
    TAKE_PAUSED,
    FinishedFire,
    Put,
    StoredEntry,
    StoredFire,
    StoredKey,
    StoreError,
    decode_key,
    encode_key,
    entry_row,
    key_row,
    stored_key,
)
from .database import Database, redacted
from .keeper import Keeper
from .schema import (
    ABOVE_FLOOR,
    CHANNEL,
    COLUMNS,
    IN_ORDER,
    MAX_LEASE,
    RAISE_FLOOR,
    REPLACE_ID,
    ROW_WAIT,
    array_literal,
    clean_fire,
    clean_row,
    clean_text,
    key_text,
    migrate,
)

logger = logging.getLogger("timerwheel")


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
        share: False for a store that holds no key (an operator's: the keys command): from its first
            commit, it counts for no share of the keys, so that no process gives keys up to it.

    Raises:
        TypeError: dsn is not a str; lease, lock_timeout or statement_timeout is not a number.
        ValueError: lease is not between 0.3 s and a year; a timeout is not > 0 (and at most a day).
        StoreError: the database cannot be reached, or holds a timerwheel schema of a newer version.
        ImportError: psycopg is not installed.
    """

    durable = True
    shared = True

    def __init__(
        self,
        dsn: str,
        *,
        lease: float = 30.0,
        lock_timeout: float = 1.0,
        statement_timeout: float = 30.0,
        share: bool = True,
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, not {type(dsn).__name__}")
        lease = _seconds(lease, "lease")
        if not 0.3 <= lease <= MAX_LEASE:
            raise ValueError(f"lease must be between 0.3 and {MAX_LEASE:.0f} seconds, got {lease!r}")
        self.lock_timeout = _seconds(lock_timeout, "lock_timeout")
        self._row_wait = min(self.lock_timeout, ROW_WAIT)  # what a fire's take waits for its key's row
        self.statement_timeout = _seconds(statement_timeout, "statement_timeout")
        for name, value in (
            ("lock_timeout", self.lock_timeout),
            ("statement_timeout", self.statement_timeout),
        ):
            if not 0 < value <= 86400:
                raise ValueError(f"{name} must be > 0 seconds (and at most a day), got {value!r}")
        self.dsn = dsn
        self.lease = lease
        self.name = f"PostgreSQL store {redacted(dsn)!r}"
        token = uuid.uuid4().hex[:12]
        self.owner_id = f"{socket.gethostname()}:{os.getpid()}:{token}"
        self._db = Database(
            dsn,
            self.name,
            f"timerwheel {os.getpid()} {token}",
            self.lock_timeout,
            self.statement_timeout,
            lease,
        )
        self._keeper = Keeper(self._db, self.owner_id, lease)
        self._pid = os.getpid()
        db = self._db
        try:
            with db.main.lock:
                migrate(db.main.get(), self.name)
                db.measure_offset(db.main.get())
                # Its lease (the owner row that every key it holds names): what it upserts before its
                # KeyedScheduler starts is held for a lease from now; the keeper renews it from then on.
                db.main.get().execute(
                    "INSERT INTO timerwheel_leases (id, lease_until, sharing) VALUES (%s, "
                    "clock_timestamp() + make_interval(secs => %s), %s)",
                    (self.owner_id, lease, bool(share)),
                )
        except StoreError:
            db.main.drop()
            raise
        except db.psycopg.Error as exc:
            db.main.drop()
            raise StoreError(f"cannot use the {self.name}: {exc}") from None

    def __repr__(self) -> str:
        return f"PostgresStore({redacted(self.dsn)!r}, lease={self.lease!r})"

    def wall(self) -> float:
        """The database's clock, as POSIX seconds (this machine's clock plus the offset measured at every
        lease renewal): give it to the scheduler as its wall_clock."""
        return self._db.wall()

    # -- what a KeyedScheduler calls (KeyStore) -------------------------------------------------------

    def load(self) -> tuple[Iterable[StoredKey], list[StoredFire]]:
        """Nothing up front: a shared store's keys are claimed after start() (see attach)."""
        return [], []

    def put(self, row: StoredKey) -> Put:
        """A user's change of a key (upsert): stored as a new generation (one above any stored), held by
        this process from now on; the others are notified. Returns the generation stored, and the key's
        count of runs (which the database keeps: row.runs is not written)."""
        k = key_text(row.key)
        row = clean_row(row)
        payload = json.dumps({"o": self.owner_id, "k": [k]})

        def work(conn: Any) -> Put:
            return Put(
                *conn.execute(
                    "WITH p AS (INSERT INTO timerwheel_keys AS t (key, data, generation, state, next_run_at, "
                    "last_scheduled_for, last_error, options, owner) VALUES "
                    f"(%s, %s, {ABOVE_FLOOR}, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO UPDATE SET "
                    "data = EXCLUDED.data, generation = GREATEST(EXCLUDED.generation, t.generation + 1), "
                    "state = EXCLUDED.state, next_run_at = EXCLUDED.next_run_at, last_scheduled_for = "
                    "COALESCE(EXCLUDED.last_scheduled_for, t.last_scheduled_for), last_error = "
                    "EXCLUDED.last_error, options = EXCLUDED.options, triggered = NULL, "
                    "owner = EXCLUDED.owner "
                    "RETURNING generation, runs) SELECT generation, runs, pg_notify(%s, %s) FROM p",
                    (k, *row[1:7], row.options, self.owner_id, CHANNEL, payload),
                ).fetchone()[:2]
            )

        put: Put = self._db.do(work, f"store key {row.key!r}", self._db.changes)
        return put

    def replace(self, rows: list[StoredKey], removed: Iterable[Hashable] | None) -> list[Put]:
        """replace_all(): every row stored as a new generation and held by this process, and every other
        key deleted (`removed` is not needed: the database knows them), in one transaction; the others
        are notified. Returns the generations stored, with each key's count of runs (Put), in the order
        of rows."""
        order = [key_text(r.key) for r in rows]
        rows = [clean_row(r) for r in rows]
        rows = sorted(
            rows, key=lambda r: key_text(r.key)
        )  # (rows locked in one order: no deadlock between two)
        keys = [key_text(r.key) for r in rows]
        columns: list[Any] = (
            list(zip(*((*r[1:7], r.options) for r in rows), strict=True)) if rows else [[]] * 7
        )
        payload = json.dumps({"o": self.owner_id, "all": True})

        def work(conn: Any) -> dict[str, Put]:
            with conn.transaction():
                # Locks taken in the order every other statement takes them, so that none waits in a
                # cycle: replace_all() calls of several processes one after the other (each sees every
                # key the one before stored); then every key's row, in key order; then the fires; the
                # generation floor last, when nothing more is waited for.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (REPLACE_ID,))
                conn.execute("SELECT 1 FROM timerwheel_keys ORDER BY key FOR UPDATE").fetchall()
                conn.execute("DELETE FROM timerwheel_fires WHERE NOT (key = ANY(%s))", (keys,))
                conn.execute("DELETE FROM timerwheel_history WHERE NOT (key = ANY(%s))", (keys,))
                deleted = conn.execute(
                    "WITH d AS (DELETE FROM timerwheel_keys WHERE NOT (key = ANY(%s)) RETURNING generation) "
                    "SELECT max(generation) FROM d",
                    (keys,),
                ).fetchone()[0]
                result = conn.execute(
                    "INSERT INTO timerwheel_keys AS t (key, data, generation, state, next_run_at, "
                    "last_scheduled_for, last_error, options, owner) SELECT u.key, u.data, "
                    f"{ABOVE_FLOOR.replace('%s', 'u.generation')}, u.state, u.next_run_at, "
                    "u.last_scheduled_for, u.last_error, u.options, %s FROM unnest(%s::text[], "
                    "%s::text[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[], %s::text[], "
                    "%s::text[]) AS u(key, data, generation, state, next_run_at, last_scheduled_for, "
                    "last_error, options) ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data, "
                    "generation = GREATEST(EXCLUDED.generation, t.generation + 1), state = EXCLUDED.state, "
                    "next_run_at = EXCLUDED.next_run_at, last_scheduled_for = "
                    "COALESCE(EXCLUDED.last_scheduled_for, t.last_scheduled_for), last_error = "
                    "EXCLUDED.last_error, options = EXCLUDED.options, triggered = NULL, "
                    "owner = EXCLUDED.owner RETURNING key, generation, runs",
                    (self.owner_id, keys, *[list(c) for c in columns]),
                ).fetchall()
                if deleted is not None:
                    conn.execute("WITH d(generation) AS (VALUES (%s::bigint)) " + RAISE_FLOOR, (deleted,))
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            return {k: Put(int(g), int(r)) for k, g, r in result}

        stored = self._db.do(work, f"replace the keys with {len(rows)} key(s)", self._db.changes)
        return [stored[k] for k in order]

    def save(self, rows: list[StoredKey], finished: Iterable[FinishedFire] = ()) -> None:
        """Write the state of keys this process holds, at their generation (fenced: a key another process
        took over, or a newer generation, is left as it is), and mark fires finished, in one
        transaction."""
        fires = [
            (f.finished_at, clean_text(f.error), encode_key(f.key), f.generation, f.scheduled_for)
            for f in finished
        ]
        rows = [clean_row(r) for r in rows]
        if not rows and not fires:
            return
        rows = sorted(rows, key=lambda r: key_text(r.key))
        keys = [key_text(r.key) for r in rows]
        columns = [list(c) for c in zip(*(r[2:7] for r in rows), strict=True)] if rows else [[]] * 5

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
                        f"AND t.key IN ({IN_ORDER})",
                        (keys, *columns, self.owner_id, keys),
                    )
                if fires:
                    conn.cursor().executemany(
                        "UPDATE timerwheel_fires SET finished_at = %s, error = %s "
                        "WHERE key = %s AND generation = %s AND scheduled_for = %s",
                        fires,
                    )

        self._db.do(work, f"write the state of {len(rows)} key(s)")

    def delete(self, key: Hashable) -> bool:
        """Delete a key and its fires, wherever it is held (the others are notified). True if it existed.
        A key this store cannot hold is refused as put() refuses it (TypeError or ValueError naming key)."""
        return self._delete(key_text(key), f"delete key {key!r}", notify=True)

    def delete_row(self, stored: str) -> bool:
        """Delete the row whose stored key (its JSON text, as rows() gives it) is `stored`, with its fires
        and history: for a row this timerwheel cannot read, which the holders pass over (they are told
        only if the text is a key they could hold). True if it existed."""
        try:
            stored_key(stored)
        except ValueError:
            return self._delete(stored, f"delete the row of key {stored!r}", notify=False)
        return self._delete(stored, f"delete the row of key {stored!r}", notify=True)

    def _delete(self, k: str, what: str, notify: bool) -> bool:
        payload = json.dumps({"o": self.owner_id, "k": [k]})

        def work(conn: Any) -> bool:
            with conn.transaction():
                # (the key's row first, then its fires, as every statement that locks both does: no
                # deadlock with a replace_all() or a take)
                conn.execute("SELECT 1 FROM timerwheel_keys WHERE key = %s FOR UPDATE", (k,)).fetchall()
                conn.execute("DELETE FROM timerwheel_fires WHERE key = %s", (k,))
                conn.execute("DELETE FROM timerwheel_history WHERE key = %s", (k,))
                gone = conn.execute(
                    f"WITH d AS (DELETE FROM timerwheel_keys WHERE key = %s RETURNING generation) "
                    f"{RAISE_FLOOR} RETURNING 1",
                    (k,),
                ).rowcount
                if gone and notify:
                    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            return bool(gone)

        return bool(self._db.do(work, what, self._db.changes))

    def start_fire(self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool) -> int:
        """Take the fire (key, generation, scheduled_for), write the key's row and renew this process's
        lease, in one transaction, if this process holds the key at that generation: the fire's attempt
        (1, more for a rerun); 0 (nothing written) otherwise, or if the fire was taken already.
        StoreError, at once, if another session holds the key's row locked, or if this process has no
        lease (its store closed, or its lease lapsed a day ago and its keeper has not renewed it yet)."""
        result = self.start_fires([(row, scheduled_for, started_at, rerun)])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def start_fires(self, takes: list[tuple[StoredKey, int, int, bool]]) -> list[int | StoreError]:
        """start_fire() for many fires in one round trip and one transaction (the KeyedScheduler's writer
        hands over every take queued behind the first): for each, in the order given, its attempt, 0, or
        the StoreError start_fire() would raise (its key's row locked by another session: that fire
        alone; this process without a lease: every fire). A StoreError raised instead (the database
        unreachable) is every fire's."""
        if not takes:
            return []
        takes = [(clean_row(row), at, started, rerun) for row, at, started, rerun in takes]
        # (rows locked in key order, as every statement that locks several keys' rows locks them)
        order = sorted(range(len(takes)), key=lambda i: key_text(takes[i][0].key))
        rows = [takes[i] for i in order]
        columns = (
            array_literal([key_text(row.key) for row, *_ in rows]),
            array_literal([row.generation for row, *_ in rows]),
            array_literal([scheduled_for for _, scheduled_for, _, _ in rows]),
            array_literal([started_at for _, _, started_at, _ in rows]),
            self.owner_id,
            array_literal([rerun for *_, rerun in rows]),
            self.lease,
            array_literal([row.state for row, *_ in rows]),
            array_literal([row.next_run_at for row, *_ in rows]),
            array_literal([row.last_error for row, *_ in rows]),
            self._row_wait,
        )
        what = f"take a fire of key {rows[0][0].key!r}" if len(rows) == 1 else f"take {len(rows)} fires"
        got = self._db.do(
            lambda conn: conn.execute(
                "SELECT timerwheel_take_fires(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s, "
                "%s::boolean[], %s, %s::text[], %s::bigint[], %s::text[], %s)",
                columns,
            ).fetchone()[0],
            what,
        )
        if got[-1] or 0 in got[:-1] or TAKE_PAUSED in got[:-1]:  # (its lease had lapsed, or a fire was
            # refused: another process may have claimed some of its keys, or resumed a key since it was
            # refused as paused; its keeper reads what it holds, in full, at its next round)
            self._keeper.recheck = True
        results: list[int | StoreError] = [0] * len(takes)
        for i, attempt in zip(order, got[:-1], strict=True):
            key = takes[i][0].key
            if attempt == -1:
                results[i] = StoreError(
                    f"the {self.name} could not take a fire of key {key!r}: this process has no lease (it "
                    "lapsed a day ago, or the store is closed); tried again once its keeper renews it"
                )
            elif attempt == TAKE_PAUSED:
                results[i] = TAKE_PAUSED
            elif attempt == -2:
                results[i] = StoreError(
                    f"the {self.name} could not take a fire of key {key!r}: a row it needs is locked by "
                    f"another session (waited {self._row_wait} s)"
                )
            else:
                results[i] = int(attempt)
        return results

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
        self.finish_fires([(row, FinishedFire(key, generation, scheduled_for, finished_at, error))])

    def finish_fires(self, ends: list[tuple[StoredKey | None, FinishedFire]]) -> None:
        """finish_fire() for many runs' ends in one statement (the KeyedScheduler's writer hands over every
        end queued behind the first). Of two rows of one key, the later one is written."""
        if not ends:
            return
        ends = [(None if row is None else clean_row(row), clean_fire(fire)) for row, fire in ends]
        # (fire rows locked in key order, as every statement that locks several keys' rows locks them)
        fires = sorted((fire for _, fire in ends), key=lambda f: (encode_key(f.key), f.scheduled_for))
        latest = {key_text(row.key): row for row, _ in ends if row is not None}
        rows = [latest[k] for k in sorted(latest)]
        what = (
            f"record the end of a run of key {fires[0].key!r}"
            if len(fires) == 1
            else f"record the ends of {len(fires)} runs"
        )
        self._db.do(
            lambda conn: conn.execute(
                "SELECT timerwheel_finish_fires(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], "
                "%s::text[], %s, %s::text[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[], "
                "%s::text[])",
                (
                    array_literal([encode_key(f.key) for f in fires]),
                    array_literal([f.generation for f in fires]),
                    array_literal([f.scheduled_for for f in fires]),
                    array_literal([f.finished_at for f in fires]),
                    array_literal([f.error for f in fires]),
                    self.owner_id,
                    array_literal([key_text(row.key) for row in rows]),
                    array_literal([row.generation for row in rows]),
                    array_literal([row.state for row in rows]),
                    array_literal([row.next_run_at for row in rows]),
                    array_literal([row.last_scheduled_for for row in rows]),
                    array_literal([row.last_error for row in rows]),
                ),
            ),
            what,
        )

    def add_history(self, entries: Sequence[StoredEntry], keep: int) -> None:
        """Add entries to their keys' histories, in one transaction, then drop each of those keys'
        entries but the `keep` newest (the KeyedScheduler's writer hands over every entry queued)."""
        if not entries:
            return
        columns = [
            array_literal([encode_key(e.key) for e in entries]),
            array_literal([e.at for e in entries]),
            array_literal([e.scheduled_for for e in entries]),
            array_literal([e.outcome for e in entries]),
            array_literal([e.attempt for e in entries]),
            array_literal([e.duration for e in entries]),
            array_literal([clean_text(e.error) for e in entries]),
        ]
        keys = array_literal(sorted({encode_key(e.key) for e in entries}))

        def work(conn: Any) -> None:
            with conn.transaction():
                conn.execute(
                    # (of the keys there: an entry queued before its key's delete is not written after it;
                    # the key's row locked against a delete meanwhile, as a delete locks it; a row another
                    # session holds locked is skipped, never waited for: the writer's other work goes on)
                    "INSERT INTO timerwheel_history (key, at, scheduled_for, outcome, attempt, duration, "
                    "error) SELECT u.* FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[], "
                    "%s::integer[], %s::bigint[], %s::text[]) AS u(key, at, scheduled_for, outcome, "
                    "attempt, duration, error) WHERE u.key IN (SELECT key FROM timerwheel_keys "
                    "WHERE key = ANY(%s::text[]) ORDER BY key FOR SHARE SKIP LOCKED)",
                    [*columns, keys],
                )
                conn.execute(
                    "DELETE FROM timerwheel_history AS h WHERE h.key = ANY(%s::text[]) AND h.id <= (SELECT "
                    "id FROM timerwheel_history WHERE key = h.key ORDER BY id DESC LIMIT 1 OFFSET %s)",
                    (keys, keep),
                )

        self._db.do(work, f"record {len(entries)} history entr{'y' if len(entries) == 1 else 'ies'}")

    def history(self, key: Hashable) -> list[StoredEntry]:
        """The key's history, newest first (every process's entries). StoreError naming the row for an
        entry this timerwheel cannot read."""
        k = encode_key(key)
        found = self._db.do(
            lambda conn: conn.execute(
                "SELECT at, scheduled_for, outcome, attempt, duration, error FROM timerwheel_history "
                "WHERE key = %s ORDER BY id DESC",
                (k,),
            ).fetchall(),
            f"read the history of key {key!r}",
        )
        try:
            return [entry_row(key, *row) for row in found]
        except ValueError as exc:
            raise StoreError(
                f"the {self.name} has a row that this timerwheel cannot read: the history of key {key!r} "
                f"in timerwheel_history: {exc}"
            ) from None

    def set_paused(self, keys: list[Hashable] | None, paused: bool) -> list[Hashable]:
        """Pause or resume `keys` (None: every key), wherever they are held (the others are notified;
        their holders hear of it): a take of a paused key's fire is refused from the commit on. Returns
        the keys the database has, or (None) those whose flag changed."""
        texts = None if keys is None else sorted({key_text(k) for k in keys})

        def work(conn: Any) -> list[str]:
            with conn.transaction():
                # (a pause drops a trigger not run yet)
                flag = "paused = %s, triggered = CASE WHEN paused OR %s THEN NULL ELSE triggered END"
                if texts is None:  # (rows locked in key order, as every statement that locks many)
                    found = conn.execute(
                        f"UPDATE timerwheel_keys SET {flag} WHERE key IN (SELECT key FROM "
                        "timerwheel_keys WHERE paused <> %s ORDER BY key FOR UPDATE) RETURNING key",
                        (paused, paused, paused),
                    ).fetchall()
                else:
                    found = conn.execute(
                        f"UPDATE timerwheel_keys SET {flag} WHERE key IN ({IN_ORDER}) RETURNING key",
                        (paused, paused, texts),
                    ).fetchall()
                if found:
                    note: dict[str, Any] = {"o": self.owner_id, "p": True}
                    if texts is None or len(texts) > 100:
                        note["all"] = True
                    else:
                        note["k"] = [k for (k,) in found]
                    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(note)))
            return [k for (k,) in found]

        what = f"{'pause' if paused else 'resume'} " + (
            "every key" if keys is None else f"{len(keys)} key(s)"
        )
        return [decode_key(k) for k in self._db.do(work, what, self._db.changes)]

    def trigger(self, key: Hashable, restart: bool, overlap: str | None) -> tuple[str, bool] | None:
        """A trigger of `key` (KeyedScheduler.trigger) committed, at the database's clock, unless one not
        run yet is there (it is that one); the key's holder is notified (its keeper reads it at its full
        reads too, and a process that claims the key finds it). Returns the trigger as stored and whether
        this process holds the key, or None: the key is not stored, or paused."""
        k = key_text(key)
        payload = json.dumps({"o": self.owner_id, "t": True, "k": [k]})

        def work(conn: Any) -> tuple[str, bool] | None:
            row = conn.execute(
                "WITH t AS (UPDATE timerwheel_keys SET triggered = COALESCE(triggered, json_build_object("
                "'at', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 'restart', %s::boolean, "
                "'overlap', %s::text)::text) WHERE key = %s AND NOT paused RETURNING triggered, owner) "
                "SELECT triggered, owner, pg_notify(%s, %s) FROM t",
                (restart, overlap, k, CHANNEL, payload),
            ).fetchone()
            return None if row is None else (row[0], row[1] == self.owner_id)

        return self._db.do(work, f"trigger key {key!r}", self._db.changes)  # type: ignore[no-any-return]

    def release(self, keys: Mapping[Hashable, int]) -> None:
        """Give keys back (held by this process no more), each at the generation given (a key that a
        change of this process stored again meanwhile, at a newer generation, stays held): any process
        may claim them at once."""
        pairs = sorted((key_text(k), g) for k, g in keys.items())
        if not pairs:
            return
        self._db.do(
            lambda conn: conn.execute(
                "UPDATE timerwheel_keys AS t SET owner = NULL "
                "FROM unnest(%s::text[], %s::bigint[]) AS u(key, generation) WHERE t.owner = %s "
                f"AND t.key = u.key AND t.generation = u.generation AND t.key IN ({IN_ORDER})",
                ([k for k, _ in pairs], [g for _, g in pairs], self.owner_id, [k for k, _ in pairs]),
            ),
            f"give {len(pairs)} key(s) back",
        )

    def detach(self, running: list[Hashable]) -> None:
        """The KeyedScheduler closes: claim nothing more, give back every key held but those whose runs
        are still going (its lease is renewed until close()), and count no more among the processes that
        share the keys."""
        self._keeper.detached = True
        self._give_back("UPDATE timerwheel_leases SET sharing = false WHERE id = %s", running)

    def close(self) -> None:
        """Stop the store's threads, give back every key this process holds (the others take them over at
        their next claim, without waiting for the lease), and close the connections. Idempotent. In a
        child that inherited the store through fork, it does nothing (the parent's store goes on)."""
        if self._db.closed or self._pid != os.getpid():
            return
        self._keeper.stop()
        self._give_back("DELETE FROM timerwheel_leases WHERE id = %s", [])
        for connection in (self._db.main, self._db.changes):
            with connection.lock:
                self._db.closed = True
                connection.drop()
        self._keeper.holder = None

    def _give_back(self, lease: str, running: list[Hashable]) -> None:
        """At close: `lease` (a statement on this process's lease row), then every key held but those in
        `running` given back, in one transaction (the lease row first, then the keys' rows in key order,
        as a take and a claim lock them). A failure is logged: the lease lapses by itself."""
        keep = [key_text(k) for k in running]

        def give_back(conn: Any) -> None:
            with conn.transaction():
                conn.execute(lease, (self.owner_id,))
                conn.execute(
                    "UPDATE timerwheel_keys SET owner = NULL WHERE key IN (SELECT key FROM timerwheel_keys "
                    "WHERE owner = %s AND NOT (key = ANY(%s)) ORDER BY key FOR UPDATE) AND owner = %s",
                    (self.owner_id, keep, self.owner_id),
                )

        try:
            self._db.do(give_back, "give its keys back")
        except Exception as exc:  # unreachable: the lease lapses by itself
            logger.warning("timerwheel: the %s could not give its keys back at close (%r)", self.name, exc)

    def attach(self, holder: SharedHolder) -> None:
        """Start sharing (KeyedScheduler.start() calls it): the keeper thread claims and renews keys for
        `holder`, the listener thread tells it of the others' changes."""
        self._keeper.attach(holder)

    # -- for tests and operators ----------------------------------------------------------------------

    def rows(self) -> list[tuple[str, StoredKey | StoreError, str | None, bool]]:
        """Every key's row in key order: its stored key (the JSON text), the row, the process that holds
        it (its owner id, or None) and whether that process's lease is live: what `python -m timerwheel
        keys list` shows. A row this timerwheel cannot read is, in its place, a StoreError naming it: the
        holders pass over it and leave it as it is."""
        found = self._db.do(
            lambda conn: conn.execute(
                f"SELECT {COLUMNS}, owner, EXISTS (SELECT 1 FROM timerwheel_leases l WHERE l.id = k.owner "
                "AND l.lease_until > clock_timestamp()) FROM timerwheel_keys k ORDER BY key"
            ).fetchall(),
            "read the keys",
        )
        out: list[tuple[str, StoredKey | StoreError, str | None, bool]] = []
        for *columns, owner, live in found:
            row: StoredKey | StoreError
            try:
                row = key_row(*columns)
            except ValueError as exc:
                row = StoreError(
                    f"the {self.name} has a row that this timerwheel cannot read: the row of key "
                    f"{columns[0]!r} in timerwheel_keys: {exc}"
                )
            out.append((columns[0], row, owner, bool(live)))
        return out

    def held(self) -> int:
        """How many keys the database says this process holds."""
        return int(
            self._db.do(
                lambda conn: conn.execute(
                    "SELECT count(*) FROM timerwheel_keys WHERE owner = %s", (self.owner_id,)
                ).fetchone()[0],
                "count the keys it holds",
            )
        )
