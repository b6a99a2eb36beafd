"""The protocols between the keyed layer and a store: KeyStore (what a KeyedScheduler calls) and
SharedHolder (what a shared store calls back, from its own threads, on the scheduler that holds keys)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Protocol

from .rows import FinishedFire, Put, StoredFire, StoredKey


class KeyStore(Protocol):
    """What a KeyedScheduler needs of a store: MemoryStore, SQLiteStore, PostgresStore, or one's own.

    A store holds, per key, a row (StoredKey: its data as JSON, generation, state, next_run_at, the
    scheduled time of its last fire, last_error), and a fire log keyed by (key, generation,
    scheduled_for): a fire is written "started" in the transaction that moves its key on, before the run,
    and marked finished after it. Times are integers of microseconds since the epoch (UTC). The
    KeyedScheduler calls a local store under its lock; every method that writes commits before it
    returns, or raises and changes nothing. `durable`: what it holds survives the process; `shared`: many
    processes use it at once (it then claims keys for its process and calls a SharedHolder); `name`: how
    messages name it. A store is correct when it passes the store contract (tests/test_store_contract.py).

    A shared store may also offer `start_fires(takes)` (a list of start_fire()'s arguments; returns, in
    order, each one's result or the StoreError it would raise) and `finish_fires(ends)` (a list of
    (row, FinishedFire)): the KeyedScheduler's writer then takes, and records the ends of, the fires
    queued together in one call each (PostgresStore does, in one round trip).

    Pausing: a local store keeps a row's `paused` as every write gives it (the KeyedScheduler's memory is
    the truth). A shared store keeps it as `set_paused(keys, paused)` sets it (keys: a list, or None for
    every key; returns the keys it has, or, None, those it changed; the holders are told through
    SharedHolder.paused) and leaves it in every other write; its take of a fire of a paused key answers
    TAKE_PAUSED (-3), and writes nothing.

    Triggers: a local store keeps a row's `triggered` as every write gives it. A shared store offers
    `trigger(key, restart, overlap)` (overlap: an Overlap's value or None), which stores a trigger at
    its own clock unless one is there, and returns it as stored (StoredKey.triggered) with whether the
    caller holds the key, or None (the key is not there, or paused; the holder is told through
    SharedHolder.triggered); put() and replace() clear it, set_paused() clears it when it pauses, its
    take of a fire at or after the trigger's time clears it, and every other write leaves it.
    """

    durable: bool
    name: str
    shared: bool  # many processes on one store (PostgresStore): it calls a SharedHolder

    def load(self) -> tuple[Iterable[StoredKey], list[StoredFire]]:
        """Every stored key (an iterable, read once), and the fires started and never finished."""
        ...

    def put(self, row: StoredKey) -> int | Put:
        """A user's change of a key (upsert): insert or replace its row (committed). Returns the
        generation stored: for a key that is stored, row.generation, or the generation stored if that is
        higher (a put that raised after its commit may have left the key there, ahead of the caller's
        memory); for a key that is not, at least one above the highest generation ever deleted from the
        store (a key's generation never goes back, across delete() and replace()); for a shared store,
        one above any other process stored. The caller adopts the generation returned. A store that
        counts the key's runs itself (StoredKey.runs: a shared store, where the caller may not have held
        the key) returns Put(generation, runs), and the caller adopts the count too."""
        ...

    def replace(self, rows: list[StoredKey], removed: Iterable[Hashable] | None) -> Sequence[int | Put]:
        """replace_all(): delete every removed key, and every other key not in rows, and put every row, in
        one transaction (a shared store may be given None: it knows every key). Returns the generations
        stored, in the order of rows, each as put() would (a key removed by this call and in rows gets a
        generation above the one removed), or Put(generation, runs) as put() may."""
        ...

    def save(self, rows: list[StoredKey], finished: Iterable[FinishedFire] = ()) -> None:
        """Write the state of keys at their generation (what start() decided, a dropped run) and mark
        fires finished (abandoned or superseded ones), in one transaction."""
        ...

    def delete(self, key: Hashable) -> bool:
        """Delete a key and its fires (committed), keeping its generation as a floor for the generations
        of keys stored anew (see put). True if it was stored. A key the store cannot hold is refused as
        put() refuses it (TypeError or ValueError naming key), and nothing changes."""
        ...

    def start_fire(self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool) -> int:
        """Record the fire (row.key, row.generation, scheduled_for) as started and write the key's row, in
        one transaction. Returns the attempt it is (1; a rerun of an unfinished fire counts one more
        attempt of it), or 0 (nothing written) if that fire was taken already, or if a later fire of its
        generation was (a stale fire: it ran, or was decided about). The same take again of an unfinished
        fire by its taker (its answer was lost: an error raised after the commit) takes it, at the same
        attempt: a first take's by the same taker; a rerun's by the same taker (a file's: its one
        process; a shared store's: its process) with the same `started_at` (the KeyedScheduler retries a
        take whose answer it did not get with the `started_at` of its first try). Any other rerun of an
        unfinished fire (a fire found unfinished, a retry of a failed run) counts one more attempt."""
        ...

    def finish_fire(
        self,
        row: StoredKey | None,
        key: Hashable,
        generation: int,
        scheduled_for: int,
        finished_at: int,
        error: str | None,
    ) -> None:
        """Mark the fire finished (with its error, or None), and write the key's row unless it is None
        (a fire of an older generation, or of a removed key), in one transaction."""
        ...

    def close(self) -> None:
        """Release the store (idempotent)."""
        ...


class SharedHolder(Protocol):
    """What a shared store (PostgresStore) calls of the KeyedScheduler it was attached to, from its keeper
    and listener: the keys the database gives to this process, takes from it, or says changed.

    A round reads `stamp()` before it asks the database; the holder uses it to tell the answer from
    changes it made itself meanwhile (an answer older than a local change does not undo it).
    """

    def stamp(self) -> int:
        """The stamp now (read by the store before it asks the database)."""
        ...

    def adopt(self, rows: list[StoredKey], fires: list[StoredFire], stamp: int) -> None:
        """Keys the store claimed for this process (rows read as of `stamp`), with their unfinished fires:
        recovered, caught up and armed here."""
        ...

    def reconcile(self, held: dict[Hashable, int], stamp: int) -> None:
        """What the database says this process holds (key: generation), as of `stamp`: a key held here
        and not there was lost (its lease lapsed and another took it), and is disarmed."""
        ...

    def changed(self, changes: dict[Hashable, int | None], stamp: int, removed: set[Hashable]) -> None:
        """Keys another process changed (key: generation, None when unknown) or removed, as heard."""
        ...

    def paused(self, flags: dict[Hashable, bool], stamp: int) -> None:
        """Whether keys held here are paused (key: flag), as the database says as of `stamp` (another
        process paused or resumed them; told as it is heard, and with every full read of the keys held)."""
        ...

    def triggered(self, triggers: dict[Hashable, str], stamp: int) -> None:
        """Triggers not run yet of keys held here (key: StoredKey.triggered), as the database says as of
        `stamp` (another process triggered them; told as it is heard, and with every full read)."""
        ...

    def flush(self) -> None:
        """Record the ends of runs the store failed to record (called before any claim)."""
        ...

    def shedding(self) -> bool:
        """Whether keys given back by shed() are on their way to the store: a count of the keys held read
        from now on may not show them, and is not shed on (read before the count)."""
        ...

    def shed(self, count: int, stamp: int) -> None:
        """This process holds `count` keys more than its share: give back that many it does not run."""
        ...

    def lost(self) -> None:
        """The store could not renew its leases for a whole lease (another process may hold them)."""
        ...
