"""The PostgreSQL store's schema (versioned, created and migrated by the store itself under an advisory
lock) and the SQL that its statements share."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from ..rows import FinishedFire, StoredKey, StoreError, check_triggered, encode_key, stored_key

# (3: timerwheel_start_fire refuses a new fire before a later one of its generation; 4: a rerun taken
# again after a lost answer keeps its attempt, and a rerun of an older fire keeps the latest started one;
# 5: one lease per process, in timerwheel_leases (timerwheel_owners is gone), instead of one per key;
# fires are taken in batches by timerwheel_take_fires, which renews the taker's lease; 6: a key may be
# paused, and a take of its fires is refused; 7: a key's own options, set by a user's change, and its
# trigger not run yet, set by any process, cleared by the take of a fire at or after it; 8: a key's
# count of runs, counted by the take of each new fire, left by put and replace)
SCHEMA_VERSION = 9
CHANNEL = "timerwheel"
LOCK_ID = 0x74696D6572  # the advisory lock that serialises schema creation and migration ("timer")
REPLACE_ID = LOCK_ID + 1  # the advisory lock that serialises replace_all() across processes
# The advisory lock between claims (shared) and a lease row made again for a process whose row was
# deleted (exclusive, tried without waiting): a claim's statement never reads the leases as they were
# before such a row is made while it runs (see Keeper.one_round).
CLAIM_ID = LOCK_ID + 2

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS timerwheel_meta (name text PRIMARY KEY, value text NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS timerwheel_keys (
        key text PRIMARY KEY,
        data text NOT NULL,
        generation bigint NOT NULL,
        state text NOT NULL,
        next_run_at bigint,
        last_scheduled_for bigint,
        last_error text,
        owner text
    )""",
    # (version 4 and before: a lease per key; the lease is the owner's now, in timerwheel_leases)
    """ALTER TABLE timerwheel_keys DROP COLUMN IF EXISTS lease_until""",
    """CREATE INDEX IF NOT EXISTS timerwheel_keys_owner ON timerwheel_keys (owner)""",
    # (version 6) Paused by a user (set by set_paused only: the other writes leave it)
    """ALTER TABLE timerwheel_keys ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false""",
    # (version 7) A key's own options (JSON text; NULL: the KeyedScheduler's), set by put and replace
    """ALTER TABLE timerwheel_keys ADD COLUMN IF NOT EXISTS options text""",
    # (version 7) A trigger of the key not run yet (JSON text {"at", "restart", "overlap"}; NULL: none)
    """ALTER TABLE timerwheel_keys ADD COLUMN IF NOT EXISTS triggered text""",
    # (version 8) The key's fires taken to run, across its generations (the take of a new fire counts
    # one; a rerun, or the same take again, is the run it was); put and replace leave it
    """ALTER TABLE timerwheel_keys ADD COLUMN IF NOT EXISTS runs bigint NOT NULL DEFAULT 0""",
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
    # (version 9) Keys' histories (KeyedScheduler.history): entries in the order they were written, each
    # key's kept to the newest the writing KeyedScheduler keeps (its history=)
    """CREATE TABLE IF NOT EXISTS timerwheel_history (
        id bigserial PRIMARY KEY,
        key text NOT NULL,
        at bigint NOT NULL,
        scheduled_for bigint,
        outcome text NOT NULL,
        attempt integer NOT NULL,
        duration bigint,
        error text
    )""",
    """CREATE INDEX IF NOT EXISTS timerwheel_history_key ON timerwheel_history (key, id)""",
    # A process's lease: every key whose row names it as owner is its own while the lease has not lapsed;
    # once it lapsed, a claim may take its keys (see Keeper.one_round). `sharing` is false once its
    # KeyedScheduler closed: it still holds the keys whose runs go on, and no longer counts among the
    # processes the keys are shared by. A row is deleted when its process closes, or a day after its
    # lease lapsed.
    """CREATE TABLE IF NOT EXISTS timerwheel_leases (
        id text PRIMARY KEY,
        lease_until timestamptz NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        sharing boolean NOT NULL DEFAULT true
    )""",
    # (version 4 and before: a heartbeat per process in timerwheel_owners, which a process of those
    # versions still running would go on writing: gone, so that it no longer passes for alive)
    """DROP TABLE IF EXISTS timerwheel_owners""",
    # Version 1 had a start_fire that returned a boolean: a function's result type cannot be replaced.
    """DROP FUNCTION IF EXISTS timerwheel_start_fire(text, bigint, bigint, bigint, text, boolean,
        double precision, text, bigint, text)""",
    # Version 4's take renewed a lease per key: a process of an older version must not take fires in a
    # database of this one (its calls fail, and its keys go to the others once its lease lapses).
    """DROP FUNCTION IF EXISTS timerwheel_start_fire(text, bigint, bigint, bigint, text, boolean,
        double precision, text, bigint, text, double precision)""",
    # A fire taken, its key's row locked by the caller (timerwheel_take_fires): the key must be held
    # (owner, generation) by the caller (the caller's lock found it so); the fire must be new, or an
    # unfinished one of the caller's (a retry after a lost connection), or, for a rerun, any unfinished
    # one (the interrupted fire of a process that died). Returns its attempt (1, more for a rerun; the
    # same take again of a rerun, its answer lost, has the same owner and started_at, and the same
    # attempt), or 0 if it was not taken. A new fire at or before a later one of its generation in the
    # log is a stale one (a process that held the key before, and holds it again, asking for a fire its
    # plan had before it lost the key): the later one started, so this one ran, or was decided about. The
    # key's latest started fire does not go back for a rerun of an older one. A fire of a paused key is
    # not taken: -3 (the taker pauses the key too). A fire at or after the key's trigger ran for it: the
    # trigger is cleared. A new fire (not one in the log: a rerun, or the same take again) counts a run.
    """CREATE OR REPLACE FUNCTION timerwheel_take_locked(
        p_key text, p_generation bigint, p_scheduled_for bigint, p_started_at bigint, p_owner text,
        p_rerun boolean, p_state text, p_next_run_at bigint, p_last_error text)
        RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        v_attempts integer;
        v_new boolean;
    BEGIN
        IF EXISTS (SELECT 1 FROM timerwheel_keys WHERE key = p_key AND paused) THEN
            RETURN -3;
        END IF;
        v_new := NOT EXISTS (SELECT 1 FROM timerwheel_fires WHERE key = p_key AND generation = p_generation
                AND scheduled_for = p_scheduled_for);
        IF v_new
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
            triggered = CASE WHEN (triggered::jsonb ->> 'at')::bigint <= p_scheduled_for THEN NULL
                ELSE triggered END,
            runs = runs + (CASE WHEN v_new THEN 1 ELSE 0 END)
            WHERE key = p_key;
        RETURN v_attempts;
    END $$""",
    # Fires taken in one round trip, each as if alone (timerwheel_take_locked), in the order given (the
    # caller sorts them by key, the order every statement that locks several keys' rows takes them).
    # The taker's lease (its row in timerwheel_leases) is renewed first, its row locked to the end of
    # the transaction: a claim skips the keys of a lapsed owner whose row is locked, and a take waits for
    # a claim that holds its taker's row (a claim locks the rows of the lapsed owners whose keys it
    # takes): a take and a claim of its taker's keys never overlap. A taker without a row (it closed, or
    # its lease lapsed a day ago) takes nothing: -1 for every fire. The fires whose key's row is free
    # are taken at once; those whose row (or fire's row) another session holds locked just now (an upsert
    # elsewhere, an operator's open transaction) are waited for, p_lock_wait seconds at most for them all
    # (so that the lease row is never held long), each in a subtransaction of its own: one still locked
    # then gives -2, for that fire alone.
    # Each fire's result: its attempt, 0 if it was not taken (or its key is not the caller's at that
    # generation), -2 if its row was locked; one more element at the end: 1 if the taker's lease had
    # lapsed before this renewal (its keeper then reads what it holds), else 0.
    """CREATE OR REPLACE FUNCTION timerwheel_take_fires(
        p_keys text[], p_generations bigint[], p_scheduled_for bigint[], p_started_at bigint[],
        p_owner text, p_reruns boolean[], p_lease double precision, p_states text[],
        p_next_run_at bigint[], p_last_errors text[], p_lock_wait double precision)
        RETURNS integer[] LANGUAGE plpgsql AS $$
    DECLARE
        n integer := coalesce(array_length(p_keys, 1), 0);
        v_result integer[] := array_fill(0, ARRAY[coalesce(array_length(p_keys, 1), 0)]);
        v_locked integer[] := '{}';
        v_until timestamptz;
        v_deadline timestamptz;
        v_left double precision;
        i integer;
    BEGIN
        SELECT lease_until INTO v_until FROM timerwheel_leases WHERE id = p_owner FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RETURN array_fill(-1, ARRAY[n]) || 0;
        END IF;
        UPDATE timerwheel_leases SET lease_until = GREATEST(lease_until,
            clock_timestamp() + make_interval(secs => p_lease)) WHERE id = p_owner;
        v_deadline := clock_timestamp() + make_interval(secs => p_lock_wait);
        FOR i IN 1 .. n LOOP
            PERFORM 1 FROM timerwheel_keys WHERE key = p_keys[i] AND generation = p_generations[i]
                AND owner = p_owner FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                -- (a fire's row that another session holds, met by the take: waited for out of what is
                -- left of the budget, the fire retried after the others if it runs out)
                v_left := extract(epoch FROM v_deadline - clock_timestamp());
                PERFORM set_config('lock_timeout', greatest(1, ceil(v_left * 1000))::bigint || 'ms', true);
                BEGIN
                    v_result[i] := timerwheel_take_locked(p_keys[i], p_generations[i], p_scheduled_for[i],
                        p_started_at[i], p_owner, p_reruns[i], p_states[i], p_next_run_at[i],
                        p_last_errors[i]);
                EXCEPTION WHEN lock_not_available THEN
                    v_locked := v_locked || i;
                END;
            ELSIF EXISTS (SELECT 1 FROM timerwheel_keys WHERE key = p_keys[i]
                    AND generation = p_generations[i] AND owner = p_owner) THEN
                v_locked := v_locked || i;
            END IF;
        END LOOP;
        FOREACH i IN ARRAY v_locked LOOP
            v_left := extract(epoch FROM v_deadline - clock_timestamp());
            IF v_left < 0.001 THEN
                v_result[i] := -2;
                CONTINUE;
            END IF;
            PERFORM set_config('lock_timeout', ceil(v_left * 1000)::bigint || 'ms', true);
            BEGIN
                PERFORM 1 FROM timerwheel_keys WHERE key = p_keys[i] AND generation = p_generations[i]
                    AND owner = p_owner FOR UPDATE;
                IF FOUND THEN
                    v_result[i] := timerwheel_take_locked(p_keys[i], p_generations[i], p_scheduled_for[i],
                        p_started_at[i], p_owner, p_reruns[i], p_states[i], p_next_run_at[i],
                        p_last_errors[i]);
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                v_result[i] := -2;
            END;
        END LOOP;
        RETURN v_result || (CASE WHEN v_until < clock_timestamp() THEN 1 ELSE 0 END);
    END $$""",
    # Runs' ends recorded in one round trip: each fire marked finished (with its error), and each key's
    # row written (its state after the run) if the caller still holds it at that generation and no other
    # session holds the row locked just now (SKIP LOCKED: never waited for; the row is left as it is,
    # and the fire log says the run ended, which is what a later owner's start reads; the key's next
    # take writes the row anyway). The caller gives at most one row per key, in key order.
    """CREATE OR REPLACE FUNCTION timerwheel_finish_fires(
        p_keys text[], p_generations bigint[], p_scheduled_for bigint[], p_finished_at bigint[],
        p_errors text[], p_owner text, p_row_keys text[], p_row_generations bigint[], p_states text[],
        p_next_run_at bigint[], p_last_scheduled_for bigint[], p_last_errors text[])
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
            UPDATE timerwheel_fires SET finished_at = p_finished_at[i], error = p_errors[i]
                WHERE key = p_keys[i] AND generation = p_generations[i]
                AND scheduled_for = p_scheduled_for[i];
        END LOOP;
        FOR i IN 1 .. coalesce(array_length(p_row_keys, 1), 0) LOOP
            UPDATE timerwheel_keys SET state = p_states[i], next_run_at = p_next_run_at[i],
                last_scheduled_for = p_last_scheduled_for[i], last_error = p_last_errors[i]
                WHERE key = (SELECT key FROM timerwheel_keys WHERE key = p_row_keys[i]
                    AND generation = p_row_generations[i] AND owner = p_owner FOR UPDATE SKIP LOCKED);
        END LOOP;
    END $$""",
    # (version 2 before its release had a timerwheel_finish_fire: a run's end is one statement now)
    """DROP FUNCTION IF EXISTS timerwheel_finish_fire(text, bigint, bigint, bigint, text, text, boolean,
        text, bigint, bigint, text, double precision)""",
]


def held_row(
    key: Any, generation: int, paused: bool, triggered: Any
) -> tuple[Hashable, int, bool, str | None]:
    """A key held, its generation, whether it is paused and its trigger not run yet, checked as key_row
    checks them."""
    check_triggered(triggered)
    return stored_key(key), generation, bool(paused), triggered


HELD = "key, generation, paused, triggered"  # (the columns of held_row)
COLUMNS = (
    "key, data, generation, state, next_run_at, last_scheduled_for, last_error, paused, options, triggered, "
    "runs"
)
ROW_WAIT = 0.1  # seconds a batch of takes waits, at most, for keys' rows others hold (timerwheel_take_fires)
# A key's generation never goes back, across a delete too: the highest generation of any key deleted is
# kept (timerwheel_meta 'generation_floor'), and a key stored anew starts above it.
ABOVE_FLOOR = "GREATEST(%s, (SELECT value::bigint + 1 FROM timerwheel_meta WHERE name = 'generation_floor'))"
RAISE_FLOOR = (  # (after `WITH d AS (DELETE ... RETURNING generation)`)
    "INSERT INTO timerwheel_meta AS m (name, value) SELECT 'generation_floor', max(generation)::text FROM d "
    "HAVING max(generation) IS NOT NULL ON CONFLICT (name) DO UPDATE "
    "SET value = GREATEST(m.value::bigint, EXCLUDED.value::bigint)::text"
)
# Rows of the keys given (%s: a text[]) locked in key order, as replace_all() locks them: two statements
# that lock many rows never wait for one another in a cycle.
IN_ORDER = "SELECT key FROM timerwheel_keys WHERE key = ANY(%s) ORDER BY key FOR UPDATE"
MAX_LEASE = 366 * 86400.0  # seconds: a year (a timestamptz holds it; beyond, nothing is gained)
MAX_KEY = 1000  # characters of a key's JSON: it travels in NOTIFY payloads (8000 bytes) and an index


def clean_text(text: str | None) -> str | None:
    """Free text (an error's message) as a text column can hold it: a NUL character written as \\x00, and
    a lone surrogate, which UTF-8 cannot encode, as its backslash escape."""
    if text is None:
        return None
    text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def clean_row(row: StoredKey) -> StoredKey:
    """A key's row with its last_error as the database can hold it (clean_text)."""
    error = clean_text(row.last_error)
    return row if error is row.last_error else StoredKey(*row[:6], error, *row[7:])  # (7th: last_error)


def clean_fire(fire: FinishedFire) -> FinishedFire:
    """A finished fire with its error as the database can hold it (clean_text)."""
    error = clean_text(fire.error)
    return fire if error is fire.error else FinishedFire(*fire[:-1], error)  # (error: the last field)


def array_literal(values: Iterable[str | int | bool | None]) -> str:
    """A PostgreSQL array literal of the values (str, int, bool or None), to be cast by the statement
    (`%s::text[]`, `::bigint[]`, `::boolean[]`): a string is quoted, its quotes and backslashes escaped.
    (psycopg adapts a list element by element, in Python: about 100 us for the eight lists of a take;
    this is a join.)"""
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif isinstance(value, bool):
            parts.append("t" if value else "f")
        elif isinstance(value, int):
            parts.append(str(value))
        else:
            parts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(parts) + "}"


def key_text(key: Any) -> str:
    """A key as stored (see encode_key), and not longer than MAX_KEY characters: ValueError naming key."""
    k = encode_key(key)
    if len(k) > MAX_KEY:
        raise ValueError(f"key: at most {MAX_KEY} characters (as JSON) with a PostgresStore, got {len(k)}")
    return k


def migrate(conn: Any, name: str) -> None:
    """Create the schema, or migrate it to this version, under an advisory lock (safe when many
    processes start at once); StoreError if the database holds a newer version."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
        exists = conn.execute("SELECT to_regclass('timerwheel_meta') IS NOT NULL").fetchone()[0]
        version = None
        if exists:
            row = conn.execute("SELECT value FROM timerwheel_meta WHERE name = 'schema'").fetchone()
            version = None if row is None else int(row[0])
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"the {name} has timerwheel schema version {version}; this version of timerwheel "
                f"reads versions up to {SCHEMA_VERSION}"
            )
        if version == SCHEMA_VERSION:
            return
        for statement in SCHEMA:  # (version None: a new database; migrations from older go here)
            conn.execute(statement)
        conn.execute(
            "INSERT INTO timerwheel_meta VALUES ('schema', %s) "
            "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            (str(SCHEMA_VERSION),),
        )
