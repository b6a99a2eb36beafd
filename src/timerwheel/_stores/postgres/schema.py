"""The PostgreSQL store's schema (versioned, created and migrated by the store itself under an advisory
lock) and the SQL that its statements share."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ..rows import StoreError, encode_key, stored_key

# (3: timerwheel_start_fire refuses a new fire before a later one of its generation; 4: a rerun taken
# again after a lost answer keeps its attempt, and a rerun of an older fire keeps the latest started one;
# 5: one lease per process, in timerwheel_owners, instead of one per key; a fire is taken by
# timerwheel_take_fire, which renews the taker's lease and refuses a taker declared dead)
SCHEMA_VERSION = 5
CHANNEL = "timerwheel"
LOCK_ID = 0x74696D6572  # the advisory lock that serialises schema creation and migration ("timer")
REPLACE_ID = LOCK_ID + 1  # the advisory lock that serialises replace_all() across processes
# The advisory lock between claims (shared) and a process's return to life (exclusive): a claim's
# statement never reads the owners as they were before a return that commits while it runs (see
# Keeper.one_round).
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
    # (version 4 and before: a lease per key; the lease is the owner's now, in timerwheel_owners)
    """ALTER TABLE timerwheel_keys DROP COLUMN IF EXISTS lease_until""",
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
    # A process's lease: every key whose row names it as owner is held while this row exists; a claim
    # deletes the row once the lease lapsed (the process is declared dead, and its keys are anyone's).
    # `sharing` is false once its KeyedScheduler closed: it still holds the keys whose runs go on, and no
    # longer counts among the processes the keys are shared by.
    """CREATE TABLE IF NOT EXISTS timerwheel_owners (
        id text PRIMARY KEY,
        lease_until timestamptz NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        sharing boolean NOT NULL DEFAULT true
    )""",
    """ALTER TABLE timerwheel_owners ADD COLUMN IF NOT EXISTS sharing boolean NOT NULL DEFAULT true""",
    # Version 1 had a start_fire that returned a boolean: a function's result type cannot be replaced.
    """DROP FUNCTION IF EXISTS timerwheel_start_fire(text, bigint, bigint, bigint, text, boolean,
        double precision, text, bigint, text)""",
    # Version 4's take renewed a lease per key: a process of an older version must not take fires in a
    # database of this one (its calls fail, and its keys go to the others once its lease lapses).
    """DROP FUNCTION IF EXISTS timerwheel_start_fire(text, bigint, bigint, bigint, text, boolean,
        double precision, text, bigint, text, double precision)""",
    # A fire taken in one round trip. The taker's lease (its row in timerwheel_owners) is renewed first:
    # a taker without one was declared dead by another process's claim (its lease lapsed), which may
    # have taken its keys: -1, nothing written. (The row's lock, taken by the renewal, is what a claim's
    # DELETE of a lapsed owner waits for: a take and a declaration of its taker's death never overlap.)
    # Then the key must be held (owner, generation) by the caller; the fire must be new, or an unfinished
    # one of the caller's (a retry after a lost connection), or, for a rerun, any unfinished one (the
    # interrupted fire of a process that died). It waits for the key's row at most p_lock_wait seconds:
    # a row locked longer by another session (an operator's open transaction) raises
    # lock_not_available, and the fire is tried again later while the other keys go on. Returns the
    # fire's attempt (1, more for a rerun; the same take again of a rerun, its answer lost, has the same
    # owner and started_at, and the same attempt), or 0 if it was not taken. The key's latest started
    # fire does not go back for a rerun of an older one.
    """CREATE OR REPLACE FUNCTION timerwheel_take_fire(
        p_key text, p_generation bigint, p_scheduled_for bigint, p_started_at bigint, p_owner text,
        p_rerun boolean, p_lease double precision, p_state text, p_next_run_at bigint,
        p_last_error text, p_lock_wait double precision) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        v_attempts integer;
    BEGIN
        PERFORM set_config('lock_timeout', (ceil(p_lock_wait * 1000))::bigint || 'ms', true);
        UPDATE timerwheel_owners SET lease_until = GREATEST(lease_until,
            clock_timestamp() + make_interval(secs => p_lease)) WHERE id = p_owner;
        IF NOT FOUND THEN
            RETURN -1;
        END IF;
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
            last_error = p_last_error
            WHERE key = p_key;
        RETURN v_attempts;
    END $$""",
    # (version 2 before its release had a timerwheel_finish_fire: a run's end is one statement now)
    """DROP FUNCTION IF EXISTS timerwheel_finish_fire(text, bigint, bigint, bigint, text, text, boolean,
        text, bigint, bigint, text, double precision)""",
]


def held_row(key: Any, generation: int) -> tuple[Hashable, int]:
    """A key held and its generation, its key checked as key_row checks it."""
    return stored_key(key), generation


COLUMNS = "key, data, generation, state, next_run_at, last_scheduled_for, last_error"
ROW_WAIT = 0.1  # seconds a fire's take or end waits for its key's row (see timerwheel_start_fire)
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
