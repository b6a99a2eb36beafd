"""MemoryStore: the default store, which keeps nothing beyond the process."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence

from .rows import FinishedFire, StoredEntry, StoredFire, StoredKey


class MemoryStore:
    """The default store: keys live in the KeyedScheduler's memory only, and nothing survives the
    process (what a KeyedScheduler without a store does)."""

    durable = False
    shared = False
    name = "memory"

    def __init__(self) -> None:
        self._history: dict[Hashable, deque[StoredEntry]] = {}

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
        """Nothing to write (the key's history goes)."""
        self._history.pop(key, None)
        return False

    def add_history(self, entries: Sequence[StoredEntry], keep: int) -> None:
        """Add entries to their keys' histories, each kept to its `keep` newest."""
        for entry in entries:
            kept = self._history.get(entry.key)
            if kept is None or kept.maxlen != keep:
                kept = self._history[entry.key] = deque(kept or (), maxlen=keep)
            kept.append(entry)

    def history(self, key: Hashable) -> list[StoredEntry]:
        """The key's history, newest first."""
        return list(reversed(self._history.get(key, ())))

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
