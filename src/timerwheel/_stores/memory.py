"""MemoryStore: the default store, which keeps nothing beyond the process."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from .rows import FinishedFire, StoredFire, StoredKey


class MemoryStore:
    """The default store: keys live in the KeyedScheduler's memory only, and nothing survives the
    process (what a KeyedScheduler without a store does)."""

    durable = False
    shared = False
    name = "memory"

    def load(self) -> tuple[Iterable[StoredKey], list[StoredFire]]:
        """Nothing is stored."""
        return [], []

    def put(self, row: StoredKey) -> int:
        """Nothing to write."""
        return row.generation

    def replace(self, rows: list[StoredKey], removed: Iterable[Hashable] | None) -> list[int]:
        """Nothing to write."""
        return [row.generation for row in rows]

    def save(self, rows: list[StoredKey], finished: Iterable[FinishedFire] = ()) -> None:
        """Nothing to write."""

    def delete(self, key: Hashable) -> bool:
        """Nothing to write."""
        return False

    def start_fire(self, row: StoredKey, scheduled_for: int, started_at: int, rerun: bool) -> int:
        """Every fire is taken, at its first attempt."""
        return 1

    def finish_fire(
        self,
        row: StoredKey | None,
        key: Hashable,
        generation: int,
        scheduled_for: int,
        finished_at: int,
        error: str | None,
    ) -> None:
        """Nothing to write."""

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return "MemoryStore()"
