"""Where a KeyedScheduler keeps its keys: MemoryStore (the default: nothing survives the process),
SQLiteStore (a file: keys, their next runs and a fire log survive a restart, and a crash at any instant)
and PostgresStore (one schedule shared by many processes).

A store holds, per key: the key (a str or an int), its data (JSON), generation, state, next_run_at, the
scheduled time of its last fire, last_error, whether it is paused, its own options, its trigger not run
yet and its count of runs; and a fire log keyed by (key,
generation, scheduled_for): a row is written, "started", in the same transaction that moves the key on,
before the run; and marked "finished" after it. Nothing executable is ever stored: next_run and run are
code, given to the KeyedScheduler.

The KeyStore protocol (protocols.py) is what a KeyedScheduler calls, always under its lock; every method
that writes commits before it returns. A key's generation never goes back: a key stored anew after a
delete gets a generation above the one deleted (see KeyStore.put). The rows and their checks are in
rows.py; a shared store calls back the SharedHolder protocol.
"""

from .memory import MemoryStore
from .postgres import PostgresStore
from .protocols import KeyStore, SharedHolder
from .rows import (
    OUTCOMES,
    TAKE_PAUSED,
    FinishedFire,
    Put,
    StoredEntry,
    StoredFire,
    StoredKey,
    StoreError,
    decode_key,
    encode_key,
    stored_key,
)
from .sqlite import SQLiteStore, abandon

__all__ = [
    "OUTCOMES",
    "TAKE_PAUSED",
    "FinishedFire",
    "KeyStore",
    "MemoryStore",
    "PostgresStore",
    "Put",
    "SQLiteStore",
    "SharedHolder",
    "StoreError",
    "StoredEntry",
    "StoredFire",
    "StoredKey",
    "abandon",
    "decode_key",
    "encode_key",
    "stored_key",
]
