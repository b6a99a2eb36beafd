"""What the keyed layer adds for a shared store: a run's fencing token (Fence), the error of a lease
that lapsed (LeaseLapsed), and a user's change on its way to the database (Change, Pending)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, NamedTuple

from .._stores import StoredKey, StoreError
from .keys import Key, KeyState


class Fence(NamedTuple):
    """A run's fencing token (`ctx.fence`): it grows with every run of a key that may have overlapped an
    earlier one in another process, so that the job's own writes can refuse the older run's.

    Compared as a tuple: a newer generation (an upsert) is greater; within a generation, a later fire;
    within a fire, a later attempt (a rerun after a crash or a takeover). A job that writes somewhere
    else stores the fence it ran with beside what it wrote and writes only over a smaller one.

    Attributes:
        generation: the key's generation.
        scheduled_for: the fire's time, in integer microseconds since the epoch (UTC).
        attempt: 1 for a fire's first run, 2 and more for its reruns (recover=Recover.RERUN).
    """

    generation: int
    scheduled_for: int
    attempt: int


class LeaseLapsed(StoreError):
    """A shared store's lease on a key may have lapsed before its run could start (the process was
    paused longer than the lease): the run did not start; its fire is taken again, if the key is still
    held here."""


class Change(NamedTuple):
    """A user's change of a key for a durable store (KeyedScheduler._change): its row, and what the key
    becomes once the row is committed."""

    rec: Key
    encoded: str
    state: KeyState
    at: float | None
    last_error: str | None
    result: Any
    row: StoredKey


class Pending(NamedTuple):
    """A user's change of a shared store, handed to the writer: the caller waits for (or awaits) its
    commit without the lock, then applies it under the lock (KeyedScheduler._wait, _await)."""

    keys: list[Hashable]
    seq: int
    future: Future[Any]
    apply: Callable[[Any], Any]
