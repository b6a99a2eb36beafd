"""The PostgreSQL store's two threads: the keeper, which renews this process's lease every lease/3
seconds (one row, whatever the number of keys it holds), reconciles what it holds with what the database
says, and gives back or claims keys up to a fair share (keys / live processes); and the listener, which
hears of the other processes' changes (LISTEN) and tells the KeyedScheduler of those that touch its keys.
Both call the KeyedScheduler as a SharedHolder."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..protocols import SharedHolder
from ..rows import StoredFire, StoreError, decode_key, encode_key, fire_row, key_row
from .database import Database
from .schema import CHANNEL, CLAIM_ID, COLUMNS, HELD, held_row

logger = logging.getLogger("timerwheel")

# Every how many rounds the keeper reads the whole list of keys the database says this process holds (in
# between it reads their count): a key leaves a process only by another's claim once its lease lapsed (its
# renewal, or a take, then finds the lease lapsed, or a take finds the key held elsewhere, and the next
# round reads the list), or by a change that the listener hears of (and reads again after a
# reconnection); the periodic read is a safety net for a notification lost all the same.
RECONCILE_EVERY = 10
# The most keys one claim takes (one transaction, one adopt); a round that took that many, short of its
# share, is followed by the next at once: a dead process's keys are taken over in chunks, back to back.
CLAIM_CHUNK = 10_000


class Keeper:
    """A PostgreSQL store's keeper and listener threads, for one process (`owner_id`)."""

    def __init__(self, db: Database, owner_id: str, lease: float) -> None:
        self.db = db
        self.owner_id = owner_id
        self.lease = lease
        self.holder: SharedHolder | None = None  # the KeyedScheduler, once attached (its start())
        self.detached = False  # its KeyedScheduler closed: renew what runs, claim nothing
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._valid_until = 0.0  # monotonic: when the leases held lapse unless renewed
        self._lost_said = False
        self._unreadable: set[tuple[str, str]] = set()  # (table, stored key) of rows said to be unreadable
        # Stored keys it gave back as claimed, unreadable: not claimed again until the next full round
        # (they would fill every claim ahead of the keys it can read; a row mended meanwhile is claimed
        # then).
        self._passed_over: set[str] = set()
        self._rounds = 0  # rounds since the last full read of the keys held (0: the next round reads them)
        # A take found its lease lapsed, or a key it holds held elsewhere: the next round reads the keys
        # it holds in full (another process may have claimed some of them).
        self.recheck = False

    def stop(self) -> None:
        """Stop the threads, and wait for them (but for the calling thread, if it is one of them)."""
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    def attach(self, holder: SharedHolder) -> None:
        """Start sharing: the keeper thread claims and renews keys for `holder`, the listener thread tells
        it of the others' changes."""
        self.holder = holder
        self._valid_until = time.monotonic() + self.lease  # (what its upserts hold, until a renewal)
        for target, name in ((self.keep, "keeper"), (self.listen, "listener")):
            thread = threading.Thread(target=target, name=f"timerwheel-postgres-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def keep(self) -> None:
        conn: Any = None
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self.db.connect()
                # (the first round after a failure renews and claims nothing: after an outage of the
                # database every process takes its own keys back before any takes another's)
                if failures:
                    self._rounds = 0  # (after a failure: what is held is read again in full)
                more = self.one_round(conn, started, claim=failures == 0)
                failures = 0
                self._lost_said = False
            except Exception as exc:
                more = False
                failures += 1
                if conn is not None and (conn.closed or conn.broken):
                    conn = None
                if failures == 1:
                    logger.error(
                        "timerwheel: the %s cannot renew its leases (%r); retrying", self.db.name, exc
                    )
                if time.monotonic() >= self._valid_until and not self._lost_said and self.holder is not None:
                    self._lost_said = True
                    logger.error(
                        "timerwheel: the %s lost its leases (the database was unreachable for %.1f s, the "
                        "lease): other processes may take its keys over; none fires here until it reaches "
                        "the database again, and then it keeps those that nobody took",
                        self.db.name,
                        self.lease,
                    )
                    self.holder.lost()
            period = min(0.1, self.lease / 3) if failures else self.lease / 3  # (back soon after an outage)
            if not more:
                self._stop.wait(max(0.0, period - (time.monotonic() - started)))
        if conn is not None:
            conn.close()

    def one_round(self, conn: Any, started: float, claim: bool = True) -> bool:
        """One round of the keeper: renew its lease (and count), reconcile, then give back or claim up to a
        share. True if it claimed a whole chunk (CLAIM_CHUNK) short of its share: the next round comes at
        once."""
        holder = self.holder
        if holder is None:
            return False
        self.db.measure_offset(conn)
        if self.detached:  # (closing: only the lease, for the runs still going, until close())
            conn.execute(
                "UPDATE timerwheel_leases SET lease_until = clock_timestamp() + make_interval(secs => %s) "
                "WHERE id = %s",
                (self.lease, self.owner_id),
            )
            return False
        # (the stamp before the count: a key this process stores after it may be missing from the count,
        # and the shed leaves it alone; so is a shed on its way: nothing is shed on this count)
        stamp = holder.stamp()
        shedding = holder.shedding()
        # The renewal: one row, this process's lease, whatever the number of keys it holds; and whether
        # the lease had lapsed (another process may have claimed some of its keys meanwhile). A statement
        # of its own: the row is not held while the keys are counted (a take waits for it).
        renewal = conn.execute(
            "UPDATE timerwheel_leases AS l SET lease_until = clock_timestamp() + make_interval(secs => %s) "
            "FROM (SELECT lease_until AS old FROM timerwheel_leases WHERE id = %s) AS o WHERE l.id = %s "
            "RETURNING o.old < clock_timestamp()",
            (self.lease, self.owner_id, self.owner_id),
        ).fetchone()
        renewed, lapsed = renewal is not None, bool(renewal and renewal[0])
        live, total, count = conn.execute(
            "SELECT (SELECT count(*) FROM timerwheel_leases WHERE lease_until > clock_timestamp() "
            "AND sharing AND id <> %s) + 1, (SELECT count(*) FROM timerwheel_keys), "
            "(SELECT count(*) FROM timerwheel_keys WHERE owner = %s)",
            (self.owner_id, self.owner_id),
        ).fetchone()
        if not renewed:
            # Its row is gone: its lease lapsed a day ago (a process stopped that long), or a hand
            # deleted it. Made again, under the lock that claims share, taken alone and without waiting
            # (a claim that runs meanwhile must not read the leases as they were before the row is back;
            # a claim that holds the lock long must not hold up everyone behind a waiting return): the
            # keys that still name this process are its own again.
            with conn.transaction():
                if not conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (CLAIM_ID,)).fetchone()[0]:
                    raise StoreError(f"the {self.db.name} cannot renew its lease while claims run: retrying")
                conn.execute(
                    "INSERT INTO timerwheel_leases (id, lease_until) VALUES (%s, clock_timestamp() + "
                    "make_interval(secs => %s)) ON CONFLICT (id) DO UPDATE SET lease_until = "
                    "EXCLUDED.lease_until",
                    (self.owner_id, self.lease),
                )
        if lapsed or not renewed or self.recheck:
            self.recheck = False
            self._rounds = 0
        full = self._rounds % RECONCILE_EVERY == 0
        self._rounds += 1
        if full:
            held = conn.execute(
                f"SELECT {HELD} FROM timerwheel_keys WHERE owner = %s", (self.owner_id,)
            ).fetchall()
            count = len(held)
        self._valid_until = started + self.lease
        if full:
            read = self.readable(held, held_row, "timerwheel_keys")[0]
            holder.reconcile({k: g for k, g, _, _ in read}, stamp)
            holder.paused({k: p for k, _, p, _ in read}, stamp)  # (a pause or a resume not heard of)
            holder.triggered({k: t for k, _, _, t in read if t is not None}, stamp)  # (one not heard of)
            self._passed_over.clear()
        share = -(-total // live)
        if count > share:
            if not shedding:
                holder.shed(count - share, stamp)
        elif count < share and claim:
            holder.flush()  # (ends of runs not recorded yet: recorded before any claim)
            stamp = holder.stamp()
            with conn.transaction():
                if self.detached:  # (its KeyedScheduler closed during this round: claim nothing)
                    return False
                # Claims share a lock that making a lease row again takes alone (see above). The leases
                # that lapsed are locked (FOR SHARE) to the end of the claim, their owners' keys then
                # anyone's: a take of such an owner waits for the claim, and sees the keys claimed gone;
                # an owner whose row is locked (its take in flight renewing its lease) is skipped. Rows a
                # day lapsed go (their keys: anyone's too).
                conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (CLAIM_ID,))
                conn.execute(
                    "DELETE FROM timerwheel_leases WHERE id IN (SELECT id FROM timerwheel_leases WHERE "
                    "lease_until < clock_timestamp() - interval '1 day' FOR UPDATE SKIP LOCKED)"
                )
                dead = [
                    row[0]
                    for row in conn.execute(
                        "SELECT id FROM timerwheel_leases WHERE lease_until < clock_timestamp() "
                        "AND id <> %s FOR SHARE SKIP LOCKED",
                        (self.owner_id,),
                    ).fetchall()
                ]
                rows = conn.execute(
                    f"UPDATE timerwheel_keys SET owner = %s WHERE key IN (SELECT key FROM timerwheel_keys k "
                    f"WHERE (owner IS NULL OR owner = ANY(%s) OR NOT EXISTS (SELECT 1 FROM timerwheel_leases "
                    f"l WHERE l.id = k.owner)) AND key <> ALL(%s) ORDER BY next_run_at NULLS LAST LIMIT %s "
                    f"FOR UPDATE SKIP LOCKED) RETURNING {COLUMNS}",
                    (self.owner_id, dead, sorted(self._passed_over), min(share - count, CLAIM_CHUNK)),
                ).fetchall()
                # Every row checked as it is read: one this timerwheel cannot read (written by hand, by
                # another program) is given back at once, exactly as it is, and the others go on.
                keys, unreadable = self.readable(rows, key_row, "timerwheel_keys")
                fires: list[StoredFire] = []
                if keys:
                    fires, bad = self.readable(
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
                        "UPDATE timerwheel_keys SET owner = NULL WHERE key = ANY(%s) AND owner = %s",
                        (sorted(unreadable), self.owner_id),
                    )
                    self._passed_over |= unreadable
            if keys:
                holder.adopt(keys, fires, stamp)
            # (a whole chunk: each such round takes up keys, or finds rows it passes over from then on)
            return bool(len(rows) == CLAIM_CHUNK < share - count)
        return False

    def readable(
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
                        self.db.name,
                        row[0],
                        table,
                        exc,
                    )
        return good, bad

    def listen(self) -> None:
        conn: Any = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self.db.connect()
                    conn.execute(f"LISTEN {CHANNEL}")
                    if self.holder is not None:  # what was said while we were not listening
                        self.heard(conn, None)
                # (taken first, then handled: the connection cannot run a query while it yields them)
                for note in list(conn.notifies(timeout=0.25, stop_after=1)):
                    self.heard(conn, note.payload)
            except Exception as exc:
                if conn is not None and (conn.closed or conn.broken):
                    conn = None
                logger.debug("timerwheel: the %s listener: %r; reconnecting", self.db.name, exc)
                self._stop.wait(0.25)
        if conn is not None:
            conn.close()

    def heard(self, conn: Any, payload: str | None) -> None:
        """Another process changed keys: tell the holder what the database says of those it holds."""
        holder = self.holder
        if holder is None or self.detached:
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
            rows = self.readable(
                conn.execute(
                    f"SELECT {HELD} FROM timerwheel_keys WHERE owner = %s", (self.owner_id,)
                ).fetchall(),
                held_row,
                "timerwheel_keys",
            )[0]
            if payload is None or not note.get("p"):
                holder.reconcile({k: g for k, g, _, _ in rows}, stamp)
            holder.paused({k: p for k, _, p, _ in rows}, stamp)
            holder.triggered({k: t for k, _, _, t in rows if t is not None}, stamp)
            return
        keys = [k for k in note.get("k", ()) if isinstance(k, str)]
        if note.get("t"):  # (triggered: what the database says of those held here)
            rows = conn.execute(
                f"SELECT {HELD} FROM timerwheel_keys WHERE key = ANY(%s) AND owner = %s "
                "AND triggered IS NOT NULL",
                (keys, self.owner_id),
            ).fetchall()
            read = self.readable(rows, held_row, "timerwheel_keys")[0]
            holder.triggered({k: t for k, _, _, t in read}, stamp)
            return
        if note.get("p"):  # (paused or resumed: what the database says of those held here)
            rows = conn.execute(
                "SELECT key, paused FROM timerwheel_keys WHERE key = ANY(%s) AND owner = %s",
                (keys, self.owner_id),
            ).fetchall()
            holder.paused({decode_key(k): p for k, p in rows}, stamp)
            return
        rows = conn.execute(
            "SELECT key, generation, owner FROM timerwheel_keys WHERE key = ANY(%s)", (keys,)
        ).fetchall()
        found = {k: (g, o) for k, g, o in rows}
        changes = {}
        for k in keys:
            g, o = found.get(k, (None, None))
            changes[decode_key(k)] = g if o == self.owner_id else None
        holder.changed(changes, stamp, {decode_key(k) for k in keys if k not in found})
