"""The simulated shared store: one database in memory, kept by the same rules as PostgresStore's
statements and functions, and one store per simulated process over it.

Every statement of PostgresStore is a method of SimDatabase, atomic at one instant of the simulated
database clock; SimStore is what a KeyedScheduler of one simulated process holds (its owner id, its
lease, its keeper and its listener, its clock). Where a real store has threads (the KeyedScheduler's
writers, the keeper, the listener), the simulated one runs the same work as callbacks on its process's
event loop, so that a paused process pauses all of them, as SIGSTOP does, and a killed one stops them
all at that instant. Faults come from the process (see simulate.Process): a store cut off (every call
fails, or hangs until the cut ends), slow calls, one write that fails (before or after its commit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from .._keyed.journal import Work, next_work
from .._stores import (
    TAKE_PAUSED,
    FinishedFire,
    Put,
    SharedHolder,
    StoredEntry,
    StoredFire,
    StoredKey,
    StoreError,
)
from .._stores.postgres.keeper import CLAIM_CHUNK, RECONCILE_EVERY

__all__ = ["SimDatabase", "SimStore"]


class SimDatabase:
    """The shared database of a simulated cluster: keys, the fire log, the owners' leases and the
    generation floor, on the database's own clock (`now()`, POSIX seconds)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.keys: dict[Hashable, dict[str, Any]] = {}
        self.fires: dict[tuple[Hashable, int, int], dict[str, Any]] = {}
        self.history: dict[Hashable, list[StoredEntry]] = {}  # (timerwheel_history: oldest first)
        self.owners: dict[str, float] = {}  # the processes' leases (timerwheel_leases): owner -> until
        self.detached: set[str] = set()  # owners whose KeyedScheduler closed (sharing: false)
        self.rechecks: set[str] = set()  # owners whose take found their lease lapsed, or a fire refused
        self.floor = 0  # the highest generation of any key deleted
        self.stores: list[SimStore] = []  # every store that listens (NOTIFY reaches them)
        # users' changes: (time, what, key, data, next_run_at: the first fire its writer planned)
        self.commits: list[tuple[float, str, Hashable, Any, int | None]] = []

    # -- what the rows say ----------------------------------------------------------------------------

    def held_by(self, owner: str) -> dict[Hashable, int]:
        return {k: r["generation"] for k, r in self.keys.items() if r["owner"] == owner}

    def paused_held_by(self, owner: str, keys: Iterable[Hashable] | None = None) -> dict[Hashable, bool]:
        """Whether each key `owner` holds (of `keys`, if given) is paused."""
        rows = self.keys.items() if keys is None else [(k, self.keys[k]) for k in keys if k in self.keys]
        return {k: r["paused"] for k, r in rows if r["owner"] == owner}

    def notify(self, sender: str, payload: dict[str, Any]) -> None:
        text = json.dumps({"o": sender, **payload})
        for store in list(self.stores):
            store._notified(text)

    # -- users' changes -------------------------------------------------------------------------------

    def _stored(self, row: StoredKey, owner: str) -> Put:
        old = self.keys.get(row.key)
        paused = False if old is None else old["paused"]  # (set by set_paused only)
        runs = 0 if old is None else old["runs"]  # (counted by the takes only)
        if old is None:
            generation = max(row.generation, self.floor + 1)
            last = row.last_scheduled_for
        else:
            generation = max(row.generation, old["generation"] + 1)
            last = row.last_scheduled_for if row.last_scheduled_for is not None else old["last_scheduled_for"]
        self.keys[row.key] = {
            "data": row.data,
            "generation": generation,
            "state": row.state,
            "next_run_at": row.next_run_at,
            "last_scheduled_for": last,
            "last_error": row.last_error,
            "owner": owner,
            "paused": paused,
            "options": row.options,
            "triggered": None,  # (a user's change drops a trigger not run yet)
            "runs": runs,
        }
        self.commits.append((self.now(), "upsert", row.key, row.data, row.next_run_at))
        return Put(generation, runs)

    def put(self, row: StoredKey, owner: str) -> Put:
        generation = self._stored(row, owner)
        self.notify(owner, {"k": [row.key]})
        return generation

    def replace(self, rows: list[StoredKey], owner: str) -> list[Put]:
        keep = {row.key for row in rows}
        for fire in [f for f in self.fires if f[0] not in keep]:
            del self.fires[fire]
        for key in [k for k in self.history if k not in keep]:
            del self.history[key]
        gone = [k for k in self.keys if k not in keep]
        for key in gone:
            self.floor = max(self.floor, self.keys.pop(key)["generation"])
            self.commits.append((self.now(), "remove", key, None, None))
        generations = [self._stored(row, owner) for row in rows]
        self.notify(owner, {"all": True})
        return generations

    def set_paused(self, keys: list[Hashable] | None, paused: bool, owner: str) -> list[Hashable]:
        if keys is None:
            found = [k for k, r in self.keys.items() if r["paused"] != paused]
        else:
            found = [k for k in dict.fromkeys(keys) if k in self.keys]
        for k in found:
            self.keys[k]["paused"] = paused
            if paused:  # (a pause drops a trigger not run yet)
                self.keys[k]["triggered"] = None
            self.commits.append((self.now(), "pause" if paused else "resume", k, None, None))
        if found:
            many = keys is None or len(found) > 100
            self.notify(owner, {"p": True, "all": True} if many else {"p": True, "k": found})
        return found

    def trigger(
        self, key: Hashable, restart: bool, overlap: str | None, owner: str
    ) -> tuple[str, bool] | None:
        row = self.keys.get(key)
        if row is None or row["paused"]:
            return None
        if row["triggered"] is None:
            at = round(self.now() * 1_000_000)
            row["triggered"] = json.dumps({"at": at, "restart": restart, "overlap": overlap})
            self.commits.append((self.now(), "trigger", key, overlap, at))  # (data: its overlap)
        self.notify(owner, {"t": True, "k": [key]})
        return row["triggered"], row["owner"] == owner

    def triggered_held_by(self, owner: str, keys: Iterable[Hashable] | None = None) -> dict[Hashable, str]:
        """The triggers not run yet of the keys `owner` holds (of `keys`, if given)."""
        rows = self.keys.items() if keys is None else [(k, self.keys[k]) for k in keys if k in self.keys]
        return {k: r["triggered"] for k, r in rows if r["owner"] == owner and r["triggered"] is not None}

    def delete(self, key: Hashable, owner: str) -> bool:
        for fire in [f for f in self.fires if f[0] == key]:
            del self.fires[fire]
        self.history.pop(key, None)
        row = self.keys.pop(key, None)
        if row is None:
            return False
        self.floor = max(self.floor, row["generation"])
        self.commits.append((self.now(), "remove", key, None, None))
        self.notify(owner, {"k": [key]})
        return True

    # -- fires (timerwheel_take_fires, finish_fires, save) --------------------------------------------

    def start_fire(
        self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool, owner: str, lease: float
    ) -> int:
        if owner not in self.owners:
            return -1  # (no lease: its store closed, or it lapsed a day ago)
        if self.owners[owner] < self.now():
            self.rechecks.add(owner)  # (another process may have claimed some of its keys)
        self.owners[owner] = max(self.owners[owner], self.now() + lease)
        key = self.keys.get(row.key)
        if key is None or key["generation"] != row.generation or key["owner"] != owner:
            return 0
        if key["paused"]:
            return TAKE_PAUSED
        ident = (row.key, row.generation, scheduled_for)
        fire = self.fires.get(ident)
        if fire is None and any(
            k == row.key and g == row.generation and s > scheduled_for for k, g, s in self.fires
        ):
            return 0  # (a stale fire: a later one of its generation started)
        if fire is None:
            fire = self.fires[ident] = {"started_at": started_at, "finished_at": None, "error": None}
            fire.update(attempts=1, owner=owner)
            key["runs"] += 1  # (a new fire: one run more)
        elif fire["finished_at"] is None and (rerun or fire["owner"] == owner):
            same = fire["owner"] == owner and fire["started_at"] == started_at  # (the same take again)
            fire["attempts"] += 1 if rerun and not same else 0
            fire["started_at"], fire["owner"] = started_at, owner
        else:
            return 0
        fire["taken"] = self.now()  # (when: the oracle checks that no paused key's fire was taken)
        for other in [f for f, v in self.fires.items() if f[0] == row.key and v["finished_at"] is not None]:
            if other[2] < scheduled_for:
                del self.fires[other]
        latest = key["last_scheduled_for"]
        if rerun and latest is not None and latest > scheduled_for:
            scheduled_for = latest  # (a rerun of an older fire: the latest started one stays)
        key.update(state=row.state, next_run_at=row.next_run_at, last_scheduled_for=scheduled_for)
        key.update(last_error=row.last_error)
        if key["triggered"] is not None and json.loads(key["triggered"])["at"] <= scheduled_for:
            key["triggered"] = None  # (a fire at or after the trigger ran for it)
        return int(fire["attempts"])

    def finish(
        self, key: Hashable, generation: int, scheduled_for: int, finished_at: int, error: Any
    ) -> None:
        fire = self.fires.get((key, generation, scheduled_for))
        if fire is not None:
            fire["finished_at"], fire["error"] = finished_at, error

    def write_row(self, row: StoredKey, owner: str) -> None:
        key = self.keys.get(row.key)
        if key is not None and key["generation"] == row.generation and key["owner"] == owner:
            key.update(state=row.state, next_run_at=row.next_run_at)
            key.update(last_scheduled_for=row.last_scheduled_for, last_error=row.last_error)

    def release(self, keys: Mapping[Hashable, int], owner: str) -> None:
        for k, generation in keys.items():
            row = self.keys.get(k)
            if row is not None and row["owner"] == owner and row["generation"] == generation:
                row["owner"] = None

    # -- the keeper's statements ----------------------------------------------------------------------

    def register(self, owner: str, lease: float) -> None:
        """A store made (or a process back to life): its lease row."""
        self.owners[owner] = self.now() + lease

    def renew(self, owner: str, lease: float) -> tuple[bool, bool, int, int, int]:
        """The keeper's renewal of its one lease row, and the counts: (renewed: False if its row is gone,
        lapsed: whether the lease had lapsed, live owners, keys, keys it holds)."""
        now = self.now()
        renewed = owner in self.owners
        lapsed = renewed and self.owners[owner] < now
        if renewed:
            self.owners[owner] = now + lease
        others = [o for o, until in self.owners.items() if until > now and o != owner]
        live = sum(1 for o in others if o not in self.detached) + 1
        return renewed, lapsed, live, len(self.keys), len(self.held_by(owner))

    def claim(self, owner: str, limit: int) -> tuple[list[StoredKey], list[StoredFire]]:
        now = self.now()
        for other in [o for o, until in self.owners.items() if until < now - 86400]:
            del self.owners[other]  # (a day lapsed: its row goes)
        lapsed = {o for o, until in self.owners.items() if until < now and o != owner}
        free = [
            (k, r)
            for k, r in self.keys.items()
            if r["owner"] is None or r["owner"] in lapsed or r["owner"] not in self.owners
        ]
        free.sort(key=lambda kr: (kr[1]["next_run_at"] is None, kr[1]["next_run_at"] or 0, repr(kr[0])))
        rows = []
        for k, r in free[:limit]:
            r["owner"] = owner
            rows.append(
                StoredKey(
                    k,
                    r["data"],
                    r["generation"],
                    r["state"],
                    r["next_run_at"],
                    r["last_scheduled_for"],
                    r["last_error"],
                    r["paused"],
                    r["options"],
                    r["triggered"],
                    r["runs"],
                )
            )
        taken = {row.key for row in rows}
        fires = [
            StoredFire(k, g, s, v["attempts"])
            for (k, g, s), v in sorted(self.fires.items(), key=lambda f: (repr(f[0][0]), f[0][2]))
            if k in taken and v["finished_at"] is None
        ]
        return rows, fires

    def give_back(self, owner: str, keep: Iterable[Hashable] = ()) -> None:
        self.detached.add(owner)
        kept = set(keep)
        for k, row in self.keys.items():
            if row["owner"] == owner and k not in kept:
                row["owner"] = None


class _Writer:
    """The KeyedScheduler's writer thread, as callbacks on its process's loop: one call at a time, in
    order; each call's effect happens after its latency, its result reaches the caller after a second
    one (a process paused in between sees it when it resumes). Batch items are taken together as the
    thread's are (journal.next_work)."""

    def __init__(self, store: SimStore) -> None:
        self._store = store
        self._queue: list[Work] = []
        self._busy = False
        self._stopped = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.append(Work(future, fn, args))
        self._pump()
        return future

    def submit_batched(self, fn: Callable[[list[Any]], list[Any]], item: Any, key: Hashable) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.append(Work(future, fn, (item,), key))
        self._pump()
        return future

    def stop(self, wait: bool = True) -> None:
        self._stopped = True  # (what was submitted is still done, as the thread does)

    def _pump(self) -> None:
        if self._busy or not self._queue:
            return
        self._busy = True
        batch = next_work(self._queue)
        first = batch[0]
        process = self._store.process

        def call() -> None:
            error: BaseException | None = None
            results: list[Any] = []
            try:
                assert first.fn is not None
                if first.key is None:
                    results = [first.fn(*first.args)]
                else:
                    results = first.fn([work.args[0] for work in batch])
            except BaseException as exc:
                error = exc

            def reply() -> None:
                for work, result in zip(batch, results or [None] * len(batch), strict=True):
                    if work.future.set_running_or_notify_cancel():
                        if error is not None:
                            work.future.set_exception(error)
                        else:
                            work.future.set_result(result)
                self._busy = False
                self._pump()

            process.loop.call_later(process.latency(), reply)

        process.loop.call_later(process.latency(), call)


class SimStore:
    """A simulated process's PostgresStore over a SimDatabase (the same methods and rules), with its
    faults taken from the process."""

    durable = True
    shared = True

    def __init__(self, db: SimDatabase, process: Any, owner_id: str, lease: float) -> None:
        self.db = db
        self.process = process
        self.owner_id = owner_id
        self.lease = lease
        self.name = f"simulated shared store ({owner_id})"
        self._holder: SharedHolder | None = None
        self._detached = False
        self._closed = False
        self._failures = 0
        self._valid_until = 0.0
        self._lost_said = False
        self._listening = True
        self._rounds = 0  # rounds since the last full read of the keys held (as PostgresStore's keeper)
        db.register(owner_id, lease)

    def __repr__(self) -> str:
        return f"SimStore({self.owner_id!r})"

    # -- clocks and where the work runs ---------------------------------------------------------------

    def wall(self) -> float:
        """The database's clock as this process reads it (its offset measured at every keeper round)."""
        return float(self.db.now() + self.process.wall_offset)

    def monotonic(self) -> float:
        """This process's monotonic clock: its loop's."""
        return float(self.process.loop.time())

    def writer(self, name: str) -> _Writer:
        """Where the KeyedScheduler's database work runs: on this process's loop."""
        return _Writer(self)

    def _call(self, what: str, write: bool = True) -> Callable[[], None] | None:
        """Before a statement: StoreError if the process is cut from the store or a write fails now
        (before its commit); or, for a write that fails after its commit, the raise to do after it."""
        if not self.process.alive:
            raise StoreError(f"the {self.name}: its process was killed")
        self.process.check_store(self.name, what)
        if self._closed:
            raise StoreError(f"the {self.name} is closed")
        if write and self.process.fail_next_write():
            if self.process.rng.random() < 0.5:
                raise StoreError(f"the {self.name} could not {what}: the connection was lost")

            def after() -> None:
                raise StoreError(f"the {self.name} could not {what}: the connection was lost after commit")

            return after
        return None

    # -- KeyStore ---------------------------------------------------------------------------------------

    def load(self) -> tuple[list[StoredKey], list[StoredFire]]:
        return [], []

    def put(self, row: StoredKey) -> Put:
        after = self._call(f"store key {row.key!r}")
        generation = self.db.put(row, self.owner_id)
        if after is not None:
            after()
        return generation

    def replace(self, rows: list[StoredKey], removed: Iterable[Hashable] | None) -> list[Put]:
        after = self._call(f"replace the keys with {len(rows)} key(s)")
        generations = self.db.replace(rows, self.owner_id)
        if after is not None:
            after()
        return generations

    def save(self, rows: list[StoredKey], finished: Iterable[FinishedFire] = ()) -> None:
        finished = list(finished)
        if not rows and not finished:
            return
        after = self._call(f"write the state of {len(rows)} key(s)")
        for row in rows:
            self.db.write_row(row, self.owner_id)
        for fire in finished:
            self.db.finish(fire.key, fire.generation, fire.scheduled_for, fire.finished_at, fire.error)
        if after is not None:
            after()

    def trigger(self, key: Hashable, restart: bool, overlap: str | None) -> tuple[str, bool] | None:
        after = self._call(f"trigger key {key!r}")
        found = self.db.trigger(key, restart, overlap, self.owner_id)
        if after is not None:
            after()
        return found

    def set_paused(self, keys: list[Hashable] | None, paused: bool) -> list[Hashable]:
        after = self._call(f"{'pause' if paused else 'resume'} keys")
        found = self.db.set_paused(keys, paused, self.owner_id)
        if after is not None:
            after()
        return found

    def delete(self, key: Hashable) -> bool:
        after = self._call(f"delete key {key!r}")
        existed = self.db.delete(key, self.owner_id)
        if after is not None:
            after()
        return existed

    def add_history(self, entries: list[StoredEntry], keep: int) -> None:
        after = self._call(f"record {len(entries)} history entries")
        for entry in entries:
            kept = self.db.history.setdefault(entry.key, [])
            kept.append(entry)
            del kept[: max(0, len(kept) - keep)]
        if after is not None:
            after()

    def history(self, key: Hashable) -> list[StoredEntry]:
        self._call(f"read the history of key {key!r}", write=False)
        return list(reversed(self.db.history.get(key, ())))

    def start_fire(self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool) -> int:
        result = self.start_fires([(row, scheduled_for, started_at, rerun)])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def start_fires(self, takes: list[tuple[StoredKey, int, int, bool]]) -> list[int | StoreError]:
        """Fires taken in one statement (as PostgresStore's): one fault for all of them."""
        after = self._call(f"take {len(takes)} fire(s)")
        results: list[int | StoreError] = []
        for row, scheduled_for, started_at, rerun in takes:
            attempt = self.db.start_fire(row, scheduled_for, started_at, rerun, self.owner_id, self.lease)
            if attempt == TAKE_PAUSED:  # (as PostgresStore's: its keeper reads the flags again)
                self.db.rechecks.add(self.owner_id)
                results.append(attempt)
            elif attempt < 0:
                results.append(
                    StoreError(f"the {self.name} could not take a fire of key {row.key!r}: it has no lease")
                )
            else:
                if attempt == 0:  # (as PostgresStore's: its keeper reads what it holds, in full)
                    self.db.rechecks.add(self.owner_id)
                results.append(attempt)
        if after is not None:
            after()
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
        self.finish_fires([(row, FinishedFire(key, generation, scheduled_for, finished_at, error))])

    def finish_fires(self, ends: list[tuple[StoredKey | None, FinishedFire]]) -> None:
        """Runs' ends recorded in one statement (as PostgresStore's): one fault for all of them."""
        after = self._call(f"record the ends of {len(ends)} run(s)")
        for row, fire in ends:
            self.db.finish(fire.key, fire.generation, fire.scheduled_for, fire.finished_at, fire.error)
            if row is not None:
                self.db.write_row(row, self.owner_id)
        if after is not None:
            after()

    def release(self, keys: Mapping[Hashable, int]) -> None:
        if keys:
            after = self._call(f"give {len(keys)} key(s) back")
            self.db.release(keys, self.owner_id)
            if after is not None:
                after()

    def detach(self, running: list[Hashable]) -> None:
        self._detached = True
        try:
            self._call("give its keys back")
        except StoreError:
            return  # (the leases lapse by themselves)
        self.db.give_back(self.owner_id, running)

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._call("give its keys back")
        except StoreError:
            pass
        else:
            self.db.owners.pop(self.owner_id, None)
            self.db.give_back(self.owner_id)
        self._closed = True
        self._holder = None
        if self in self.db.stores:
            self.db.stores.remove(self)

    def held(self) -> int:
        """How many keys the database says this process holds."""
        return len(self.db.held_by(self.owner_id))

    # -- sharing: the keeper and the listener, on the process's loop ------------------------------------

    def attach(self, holder: SharedHolder) -> None:
        self._holder = holder
        self._valid_until = self.monotonic() + self.lease
        self.db.stores.append(self)
        self.process.loop.call_soon(self._keep)

    def _keep(self) -> None:
        """One round of the keeper, as PostgresStore's: each statement a round trip of its own (its
        effect after one latency, its answer after another), so that the writers' answers, the
        listener and users' changes interleave with the round, as the threads of a real process do. A
        statement that fails ends the round; the next comes sooner."""
        if self._closed or self._holder is None:
            return
        started = self.monotonic()
        holder = self._holder

        def failed() -> None:
            self._failures += 1
            self._rounds = 0  # (after a failure: what is held is read again in full)
            if self.monotonic() >= self._valid_until and not self._lost_said and self._holder is not None:
                self._lost_said = True
                self._holder.lost()
            self._next_round(started)

        def done(more: bool = False) -> None:
            self._failures = 0
            self._lost_said = False
            self._next_round(started, more)

        def measured(_: None) -> None:
            if self._detached:  # (closing: only the lease, for the runs still going, until close())
                self._statement("renew its lease", lambda: self.db.renew(self.owner_id, self.lease), failed)(
                    lambda counted: done()
                )
                return
            stamp = holder.stamp()  # (before the count, as PostgresStore)
            shedding = holder.shedding()
            renewal = self._statement(
                "renew its lease", lambda: self.db.renew(self.owner_id, self.lease), failed
            )
            renewal(lambda counted: renewed(stamp, shedding, *counted))

        def renewed(
            stamp: int, shedding: bool, alive: bool, lapsed: bool, live: int, total: int, count: int
        ) -> None:
            if lapsed or not alive or self.owner_id in self.db.rechecks:
                self.db.rechecks.discard(self.owner_id)
                self._rounds = 0  # (another may have claimed some of its keys: read them in full)
            if not alive:  # (its row gone: made again, keeping what still names it)
                back = self._statement(
                    "renew its lease", lambda: self.db.register(self.owner_id, self.lease), failed
                )
                back(lambda _: read(stamp, shedding, live, total, count))
                return
            read(stamp, shedding, live, total, count)

        def read(stamp: int, shedding: bool, live: int, total: int, count: int) -> None:
            if self._rounds % RECONCILE_EVERY == 0:
                self._rounds += 1
                full = self._statement(
                    "read the keys it holds",
                    lambda: (
                        self.db.held_by(self.owner_id),
                        self.db.paused_held_by(self.owner_id),
                        self.db.triggered_held_by(self.owner_id),
                    ),
                    failed,
                )
                full(lambda held: counted(stamp, shedding, live, total, len(held[0]), *held))
                return
            self._rounds += 1
            counted(stamp, shedding, live, total, count, None)

        def counted(
            stamp: int,
            shedding: bool,
            live: int,
            total: int,
            count: int,
            held: dict[Hashable, int] | None,
            paused: dict[Hashable, bool] | None = None,
            triggered: dict[Hashable, str] | None = None,
        ) -> None:
            self._valid_until = started + self.lease
            if held is not None:
                holder.reconcile(dict(held), stamp)
                holder.paused(paused or {}, stamp)
                holder.triggered(triggered or {}, stamp)
            share = -(-total // live)
            if count > share:
                if not shedding:
                    holder.shed(count - share, stamp)
            elif count < share and self._failures == 0:
                holder.flush()
                stamp = holder.stamp()
                if not self._detached:
                    limit = min(share - count, CLAIM_CHUNK)
                    claim = self._statement("claim keys", lambda: self.db.claim(self.owner_id, limit), failed)
                    claim(lambda found: claimed(stamp, share - count, *found))
                    return
            done()

        def claimed(stamp: int, short: int, keys: list[StoredKey], fires: list[StoredFire]) -> None:
            if keys:
                holder.adopt(keys, fires, stamp)
            done(len(keys) == CLAIM_CHUNK < short)  # (a whole chunk, short of its share: again at once)

        self._statement("renew its leases", self.process.clock_error, failed)(measured)

    def _statement(
        self, what: str, fn: Callable[[], Any], failed: Callable[[], None]
    ) -> Callable[[Callable[[Any], None]], None]:
        """A statement of the keeper's connection: fn() at the database after one latency; its answer
        given to `then` after another, or failed() if the process cannot reach the database then."""

        def send(then: Callable[[Any], None]) -> None:
            process = self.process

            def at_database() -> None:
                if self._closed or self._holder is None:
                    return
                try:
                    self._call(what, write=False)
                    result = fn()
                except StoreError:
                    failed()
                    return
                process.loop.call_later(process.latency(), answer, result)

            def answer(result: Any) -> None:
                if self._closed or self._holder is None:
                    return
                try:
                    self._call(what, write=False)  # (the connection lost before the answer came)
                except StoreError:
                    failed()
                    return
                then(result)

            process.loop.call_later(process.latency(), at_database)

        return send

    def _next_round(self, started: float, at_once: bool = False) -> None:
        period = 0.0 if at_once else min(0.1, self.lease / 3) if self._failures else self.lease / 3
        self.process.loop.call_later(max(0.0, period - (self.monotonic() - started)), self._keep)

    def _notified(self, payload: str) -> None:
        """NOTIFY from the database: heard after a delay, or lost, as the process's faults say."""
        delay = self.process.notify_delay()
        if delay is None:
            return
        self.process.loop.call_later(delay, self.heard, payload)

    def heard(self, payload: str | None) -> None:
        holder = self._holder
        if holder is None or self._detached or self._closed:
            return
        try:
            self._call("listen", write=False)
        except StoreError:
            return  # (a lost connection: what was said is read again when it is back, below)
        note: dict[str, Any] = json.loads(payload) if payload is not None else {"all": True}
        if note.get("o") == self.owner_id:
            return
        stamp = holder.stamp()
        if note.get("all"):
            if not note.get("p"):
                holder.reconcile(self.db.held_by(self.owner_id), stamp)
            holder.paused(self.db.paused_held_by(self.owner_id), stamp)
            holder.triggered(self.db.triggered_held_by(self.owner_id), stamp)
            return
        if note.get("t"):
            holder.triggered(self.db.triggered_held_by(self.owner_id, note.get("k", ())), stamp)
            return
        if note.get("p"):
            holder.paused(self.db.paused_held_by(self.owner_id, note.get("k", ())), stamp)
            return
        changes: dict[Hashable, int | None] = {}
        removed = set()
        for k in note.get("k", ()):
            row = self.db.keys.get(k)
            if row is None:
                removed.add(k)
            changes[k] = row["generation"] if row is not None and row["owner"] == self.owner_id else None
        holder.changed(changes, stamp, removed)
