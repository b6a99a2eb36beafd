"""The pure-Python timing wheel: the readable reference that _core_c.pyx mirrors function for function.

Read this file first. The Cython twin has the same names, the same constants and the same order of steps;
where it uses a trick for speed (C arrays, bit scans), the trick is named here in a comment.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "MAX_LEVELS",
    "MAX_SLOTS",
    "MAX_TICKS",
    "MIN_SLOTS",
    "TimerWheel",
    "level_for",
    "rounds_for",
    "slot_for",
]

#: Smallest and largest number of slots per level (a power of two). Fewer than 4 makes every level a
#: handful of ticks wide; more than 4096 makes the slot table (levels x slots headers) large for no gain.
MIN_SLOTS = 4
MAX_SLOTS = 4096
#: Largest number of levels. Levels beyond what 62-bit ticks need (ceil(62 / log2(slots))) are accepted and
#: stay empty.
MAX_LEVELS = 8
#: Ticks are kept below 2**62, so that every shift and sum of ticks fits a signed 64-bit integer in C.
TICK_BITS = 62
MAX_TICKS = 1 << TICK_BITS
#: A timer id is (generation << ID_BITS) | pool index. The generation of a pool entry grows by one each
#: time the entry is freed, so an id is never issued twice and a stale id never matches a newer timer.
ID_BITS = 32
ID_MASK = (1 << ID_BITS) - 1
#: The bucket of an entry that is on the free list.
FREE = -1


def level_for(elapsed: int, tick: int, bits: int, top: int) -> int:
    """The level of a timer due at `tick` (> `elapsed`) when the wheel stands at tick `elapsed`.

    It is the highest level whose digit differs between the two ticks (aligned blocks, as in the Linux
    kernel's and tokio's wheels), capped at the top level `top`, which also holds every timer beyond its
    span. `bits` is log2(slots). O(1).
    """
    level = ((elapsed ^ tick).bit_length() - 1) // bits
    return level if level < top else top


def slot_for(tick: int, level: int, bits: int) -> int:
    """The slot of `tick` at `level`: its level-th base-`slots` digit. O(1)."""
    return (tick >> (level * bits)) & ((1 << bits) - 1)


def rounds_for(elapsed: int, tick: int, span_bits: int) -> int:
    """How many more times the top level must turn before `tick`'s top slot is the one to expire.

    0 for a timer within the wheel's span of the current block; n for a timer n spans further on. The wheel
    keeps, per top slot, the least epoch (tick >> span_bits) of its timers: rounds are that epoch minus the
    current one, so nothing needs decrementing as the wheel turns. O(1).
    """
    return (tick >> span_bits) - (elapsed >> span_bits)


def _seconds(value: Any, name: str) -> float:
    """`value` as a finite float, or a TypeError / ValueError / OverflowError that names `name`."""
    if type(value) is float:
        result: float = value
    elif isinstance(value, (str, bytes, bytearray)) or not hasattr(type(value), "__float__"):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
    else:
        try:
            result = float(value)
        except OverflowError:
            raise OverflowError(f"{name} is too large to be a number of seconds: {value!r}") from None
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _check_id(timer_id: Any) -> None:
    if not isinstance(timer_id, int):
        raise TypeError(f"timer_id must be an int, not {type(timer_id).__name__}")


class _Entry:
    """One pool entry. The Cython twin keeps the same fields in a C struct (40 bytes)."""

    __slots__ = ("bucket", "due", "gen", "pos", "seq", "tick")

    def __init__(self) -> None:
        self.due = 0.0  # exact due time, in the caller's seconds
        self.tick = 0  # tick_of(due), clamped to -1 below the start; decides the bucket
        self.seq = 0  # order of add / reschedule: breaks ties between equal dues
        self.gen = 1  # generation: the high bits of this entry's current timer id
        self.bucket = FREE  # level * slots + slot, CURRENT, or FREE
        self.pos = 0  # index in its bucket's list (swap-and-shrink); next free entry when FREE


class TimerWheel:
    """A hierarchical timing wheel: add, cancel and reschedule in O(1), exact dues, no maximum delay.

    A deterministic data structure with no clock and no thread: time moves only when the caller passes it
    to advance(). Each timer keeps its exact due (a float in the caller's seconds); ticks only decide where
    it is stored, so the wheel is exact, not rounded to its tick.

    Geometry (Varghese and Lauck, "Hashed and hierarchical timing wheels", SOSP 1987; laid out in aligned
    blocks as in the Linux kernel's timer.c and tokio's time wheel)::

        tick(t)  = floor((t - start) * (1 / resolution))    (t before start: tick -1)
        level L  = `slots` slots, each slots**L ticks wide, spanning slots**(L+1) ticks
        defaults = resolution 1 ms, 64 slots, 4 levels:
            level 0: slots of 1 ms,       span 64 ms
            level 1: slots of 64 ms,      span 4.096 s
            level 2: slots of 4.096 s,    span 4 min 22 s
            level 3: slots of 4 min 22 s, span 4 h 40 min (the top level)

    A timer due at tick T, with the wheel at tick E, is kept at the highest level whose digit differs
    between T and E, in the slot named by T's digit at that level; T == E (or a due in the past) is kept in
    the CURRENT bucket, which every advance() looks at first. When the wheel reaches the start of a
    higher-level slot, the slot's timers cascade into lower levels, so a timer moves at most `levels` times.
    Timers beyond the top level's span stay in the top level with a count of rounds (epochs): there is no
    maximum delay below 2**62 ticks. An index from timer id to (bucket, position) makes removal O(1) by
    swap-and-shrink; a per-level occupancy bitmap finds the next non-empty slot without scanning empty ones.

    Example:
        >>> w = TimerWheel(0.001)
        >>> a = w.add(0.010, "a")
        >>> b = w.add(0.005, "b")
        >>> w.next_due()
        0.005
        >>> " then ".join(item for _, item in w.advance(0.010))
        'b then a'

    Args:
        resolution: seconds per tick, > 0 and finite (default 1 ms).
        slots: slots per level, a power of two from 4 to 4096 (default 64).
        levels: number of levels, 1 to 8 (default 4).
        start: the time the wheel starts at; `now` until the first advance() (default 0.0).

    Raises:
        ValueError: an argument out of its range (the message names it).
        TypeError: slots or levels not an int, resolution or start not a number.
    """

    __slots__ = (
        "_bitmaps",
        "_bits",
        "_buckets",
        "_count",
        "_current",
        "_elapsed",
        "_entries",
        "_free",
        "_items",
        "_levels",
        "_min_due",
        "_min_valid",
        "_now",
        "_resolution",
        "_seq",
        "_slots",
        "_span_bits",
        "_start",
        "_ticks_per_second",
        "_top",
        "_top_epoch",
    )

    def __init__(self, resolution: float = 0.001, *, slots: int = 64, levels: int = 4, start: float = 0.0):
        resolution = _seconds(resolution, "resolution")
        if resolution <= 0:
            raise ValueError(f"resolution must be > 0 seconds, got {resolution!r}")
        if not math.isfinite(1.0 / resolution):
            raise ValueError(f"resolution is too small, got {resolution!r}")
        for name, value in (("slots", slots), ("levels", levels)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not (MIN_SLOTS <= slots <= MAX_SLOTS) or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two from {MIN_SLOTS} to {MAX_SLOTS}, got {slots}")
        if not 1 <= levels <= MAX_LEVELS:
            raise ValueError(f"levels must be from 1 to {MAX_LEVELS}, got {levels}")
        start = _seconds(start, "start")
        self._resolution = resolution
        self._ticks_per_second = 1.0 / resolution  # a multiplication per conversion, not a division
        self._slots = slots
        self._levels = levels
        self._start = start
        self._now = start
        bits = slots.bit_length() - 1
        self._bits = bits
        # Levels past the 62nd tick bit would stay empty: only the used ones get slots (ceil(62 / bits)).
        used = min(levels, (TICK_BITS + bits - 1) // bits)
        self._top = used - 1  # the top level: also holds timers beyond the span, by epoch
        self._span_bits = min(used * bits, TICK_BITS)  # a tick's epoch is tick >> span_bits
        self._current = used * slots  # the bucket after the last slot: timers due at the current tick
        self._elapsed = 0  # the current tick: tick_of(now)
        self._buckets: list[list[int]] = [[] for _ in range(used * slots + 1)]
        # One occupancy bitmap per level; the C twin uses arrays of 64-bit words and a count-trailing-zeros.
        self._bitmaps = [0] * used
        # Per top slot, a lower bound of the epochs of its timers (exact after a cascade or a refresh).
        self._top_epoch = [0] * slots
        self._entries: list[_Entry] = []  # the pool; a timer id's low bits index it
        self._items: list[Any] = []  # the items, beside the pool (a Python list: the GC can see them)
        self._free = -1  # head of the free list, threaded through _Entry.pos
        self._count = 0
        self._seq = 0
        self._min_due = 0.0  # cached next_due(), valid while _min_valid
        self._min_valid = False

    # -- read-only geometry and time ------------------------------------------------------------------

    @property
    def resolution(self) -> float:
        """Seconds per tick."""
        return self._resolution

    @property
    def slots(self) -> int:
        """Slots per level (a power of two)."""
        return self._slots

    @property
    def levels(self) -> int:
        """Number of levels, as given to the constructor."""
        return self._levels

    @property
    def now(self) -> float:
        """The time passed to the last advance(), or `start` before the first."""
        return self._now

    def __len__(self) -> int:
        """Number of pending timers. O(1)."""
        return self._count

    def __reduce__(self) -> Any:
        raise TypeError("TimerWheel cannot be pickled or copied")

    def __repr__(self) -> str:
        return (
            f"TimerWheel(resolution={self._resolution!r}, slots={self._slots}, levels={self._levels}, "
            f"now={self._now!r}, pending={self._count})"
        )

    # -- the one place where seconds become ticks -----------------------------------------------------

    def _tick_of(self, t: float, name: str) -> int:
        """floor((t - start) * (1 / resolution)), -1 for any t before start; OverflowError at 2**62 ticks.

        Rounding is IEEE double arithmetic, the same in both backends, so a due that is an exact multiple
        of the resolution may land in either neighbouring tick. Correctness needs only that the function
        never decreases as t grows: a timer whose due is <= now then always has a tick <= now's tick.
        """
        x = (t - self._start) * self._ticks_per_second
        if x < 0:
            return -1
        if not x < MAX_TICKS:
            raise OverflowError(
                f"{name} is too far ahead: {x:.4g} ticks of {self._resolution!r} s, the wheel counts at most "
                "2**62 ticks from its start"
            )
        return int(x)  # x >= 0: int() truncates, which is floor

    # -- placement: buckets, bitmaps and the free list ------------------------------------------------

    def _bucket_for(self, tick: int) -> int:
        """The bucket of a timer at `tick`, relative to the current tick."""
        elapsed = self._elapsed
        if tick <= elapsed:
            return self._current
        level = level_for(elapsed, tick, self._bits, self._top)
        return level * self._slots + slot_for(tick, level, self._bits)

    def _link(self, idx: int, bucket: int) -> None:
        """Append entry `idx` to `bucket`, marking the slot occupied."""
        entry = self._entries[idx]
        lst = self._buckets[bucket]
        if bucket != self._current:
            level, slot = divmod(bucket, self._slots)
            if level == self._top:
                epoch = entry.tick >> self._span_bits
                if not lst or epoch < self._top_epoch[slot]:
                    self._top_epoch[slot] = epoch
            self._bitmaps[level] |= 1 << slot
        entry.bucket = bucket
        entry.pos = len(lst)
        lst.append(idx)

    def _unlink(self, idx: int) -> None:
        """Remove entry `idx` from its bucket in O(1): move the last one into its place, then shrink."""
        entry = self._entries[idx]
        bucket = entry.bucket
        lst = self._buckets[bucket]
        last = lst.pop()
        if last != idx:
            lst[entry.pos] = last
            self._entries[last].pos = entry.pos  # swap-and-shrink: the moved entry learns its new position
        if not lst and bucket != self._current:
            level, slot = divmod(bucket, self._slots)
            self._bitmaps[level] &= ~(1 << slot)

    def _alloc(self) -> int:
        idx = self._free
        if idx >= 0:
            self._free = self._entries[idx].pos
            return idx
        idx = len(self._entries)
        if idx >= ID_MASK:  # ID_MASK itself is the C twin's "no entry" mark
            raise OverflowError(f"a wheel holds at most {ID_MASK} timers")
        self._entries.append(_Entry())
        self._items.append(None)
        return idx

    def _release(self, idx: int) -> Any:
        """Put entry `idx` (already unlinked) on the free list; return its item. Its id is now stale."""
        entry = self._entries[idx]
        entry.gen += 1
        entry.bucket = FREE
        entry.pos = self._free
        self._free = idx
        item = self._items[idx]
        self._items[idx] = None
        self._count -= 1
        return item

    def _lookup(self, timer_id: Any) -> int:
        """The pool index of a pending timer, or -1. TypeError if timer_id is not an int."""
        _check_id(timer_id)
        if timer_id <= 0:
            return -1
        idx: int = timer_id & ID_MASK
        if idx >= len(self._entries):
            return -1
        entry = self._entries[idx]
        if entry.gen != timer_id >> ID_BITS or entry.bucket == FREE:
            return -1
        return idx

    def _insert(self, due: float, tick: int, item: Any) -> int:
        idx = self._alloc()
        entry = self._entries[idx]
        entry.due = due
        entry.tick = tick
        self._seq += 1
        entry.seq = self._seq
        self._items[idx] = item
        self._link(idx, self._bucket_for(tick))
        if self._count == 0:
            self._min_due = due
            self._min_valid = True
        elif self._min_valid and due < self._min_due:
            self._min_due = due
        self._count += 1
        return (entry.gen << ID_BITS) | idx

    # -- the public operations ------------------------------------------------------------------------

    def add(self, delay: float, item: Any) -> int:
        """Add a timer due at now + `delay` seconds carrying `item`; return its id. O(1).

        Raises:
            ValueError: delay is negative or not finite.
            OverflowError: the due is more than 2**62 ticks after the wheel's start.
        """
        delay = _seconds(delay, "delay")
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay!r}")
        due = self._now + delay
        return self._insert(due, self._tick_of(due, "delay"), item)

    def add_at(self, due: float, item: Any) -> int:
        """Add a timer due at the absolute time `due`; return its id. O(1).

        A due at or before `now` is allowed: the timer comes out at the next advance().

        Raises:
            ValueError: due is not finite.
            OverflowError: due is more than 2**62 ticks after the wheel's start.
        """
        due = _seconds(due, "due")
        return self._insert(due, self._tick_of(due, "due"), item)

    def cancel(self, timer_id: int) -> bool:
        """Remove a pending timer. O(1).

        Returns:
            True if it was pending and is now removed; False if the id is unknown, fired or cancelled.

        Raises:
            TypeError: timer_id is not an int.
        """
        idx = self._lookup(timer_id)
        if idx < 0:
            return False
        if self._min_valid and self._entries[idx].due <= self._min_due:
            self._min_valid = False
        self._unlink(idx)
        self._release(idx)
        return True

    def reschedule(self, timer_id: int, delay: float) -> bool:
        """Move a pending timer to now + `delay`, keeping its id. O(1); the keep-alive operation.

        The timer counts as freshly added for the order of equal dues. Where the new due lands in the same
        slot, the entry is not moved at all.

        Returns:
            True if the timer was pending; False (and nothing changes) otherwise.

        Raises:
            TypeError: timer_id is not an int.
            ValueError: delay is negative or not finite.
            OverflowError: the new due is more than 2**62 ticks after the wheel's start.
        """
        _check_id(timer_id)
        delay = _seconds(delay, "delay")
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay!r}")
        due = self._now + delay
        return self._move(timer_id, due, self._tick_of(due, "delay"))

    def reschedule_at(self, timer_id: int, due: float) -> bool:
        """Move a pending timer to the absolute time `due`, keeping its id. O(1); as reschedule().

        A due at or before `now` comes out at the next advance().

        Raises:
            TypeError: timer_id is not an int.
            ValueError: due is not finite.
            OverflowError: due is more than 2**62 ticks after the wheel's start.
        """
        _check_id(timer_id)
        due = _seconds(due, "due")
        return self._move(timer_id, due, self._tick_of(due, "due"))

    def _move(self, timer_id: int, due: float, tick: int) -> bool:
        idx = self._lookup(timer_id)
        if idx < 0:
            return False
        entry = self._entries[idx]
        if self._min_valid and entry.due <= self._min_due:
            self._min_valid = False
        entry.due = due
        entry.tick = tick
        self._seq += 1
        entry.seq = self._seq
        bucket = self._bucket_for(tick)
        if bucket != entry.bucket:
            self._unlink(idx)
            self._link(idx, bucket)
        elif bucket // self._slots == self._top and bucket != self._current:
            slot = bucket % self._slots  # same top slot, maybe another epoch: keep the bound a lower bound
            self._top_epoch[slot] = min(self._top_epoch[slot], tick >> self._span_bits)
        if self._min_valid and due < self._min_due:
            self._min_due = due
        return True

    def due(self, timer_id: int) -> float | None:
        """The exact due of a pending timer, or None. O(1). TypeError if timer_id is not an int."""
        idx = self._lookup(timer_id)
        return None if idx < 0 else self._entries[idx].due

    def __contains__(self, timer_id: object) -> bool:
        """`timer_id in wheel`: True while the timer is pending. TypeError if timer_id is not an int."""
        return self._lookup(timer_id) >= 0

    def clear(self) -> None:
        """Remove every pending timer; their ids become stale. `now` is kept. O(levels x slots + pending)."""
        dropped = []  # the items die after the bookkeeping: a __del__ may call back into the wheel
        for bucket, lst in enumerate(self._buckets):
            for idx in lst:
                dropped.append(self._release(idx))
            lst.clear()
            if bucket < self._current:
                self._bitmaps[bucket // self._slots] = 0
        self._min_valid = False
        del dropped

    # -- time -----------------------------------------------------------------------------------------

    def _next_event(self) -> tuple[int, int]:
        """(tick, bucket) of the first non-empty slot after the current tick; (-1, -1) if there is none.

        Below the top level, every occupied slot lies after the current digit (aligned blocks), so the
        level's lowest set bit is its next slot and lower levels always come first. The top level holds
        several epochs per slot: the earliest (epoch, slot) block start wins.
        """
        bits = self._bits
        elapsed = self._elapsed
        for level in range(self._top):
            bitmap = self._bitmaps[level]
            if bitmap:
                slot = (bitmap & -bitmap).bit_length() - 1  # C: count trailing zeros
                shift = (level + 1) * bits
                return ((elapsed >> shift) << shift) | (slot << (level * bits)), level * self._slots + slot
        return self._top_event()

    def _top_event(self) -> tuple[int, int]:
        best_tick, best_bucket = -1, -1
        bitmap = self._bitmaps[self._top]
        while bitmap:
            low = bitmap & -bitmap
            bitmap ^= low
            slot = low.bit_length() - 1
            tick = (self._top_epoch[slot] << self._span_bits) | (slot << (self._top * self._bits))
            if best_tick < 0 or tick < best_tick:
                best_tick, best_bucket = tick, self._top * self._slots + slot
        return best_tick, best_bucket

    def _cascade(self, bucket: int) -> None:
        """Place each timer of a slot whose block has begun again, relative to the current tick.

        In place: timers that stay in this very slot (a top slot's later epochs) are compacted to its front
        and its epoch bound becomes exact; the others move to lower levels or to CURRENT. The C twin does
        the same with no allocation for the slot itself.
        """
        lst = self._buckets[bucket]
        entries = self._entries
        keep = 0
        epoch = -1
        for idx in lst:
            entry = entries[idx]
            target = self._bucket_for(entry.tick)
            if target == bucket:
                lst[keep] = idx
                entry.pos = keep
                keep += 1
                tick_epoch = entry.tick >> self._span_bits
                epoch = tick_epoch if epoch < 0 else min(epoch, tick_epoch)
            else:
                self._link(idx, target)
        del lst[keep:]
        level, slot = divmod(bucket, self._slots)
        if keep:
            self._top_epoch[slot] = epoch  # only a top slot keeps timers
        else:
            self._bitmaps[level] &= ~(1 << slot)

    def _expire_current(self, now: float, fired: list[tuple[int, Any]]) -> None:
        """Move every timer of the CURRENT bucket whose due is <= now to `fired`, by (due, seq).

        One pass splits the bucket: timers still to come are compacted to its front.
        """
        lst = self._buckets[self._current]
        if not lst:
            return
        entries = self._entries
        due_now = []
        keep = 0
        for idx in lst:
            entry = entries[idx]
            if entry.due <= now:
                due_now.append(idx)
            else:
                lst[keep] = idx
                entry.pos = keep
                keep += 1
        del lst[keep:]
        due_now.sort(key=lambda i: (entries[i].due, entries[i].seq))  # C: skipped when already in order
        for idx in due_now:
            gen = entries[idx].gen  # read before _release bumps it
            fired.append(((gen << ID_BITS) | idx, self._release(idx)))

    def advance(self, now: float) -> list[tuple[int, Any]]:
        """Move time to `now`; remove and return every timer with due <= now as (timer_id, item).

        Timers come out ordered by due, ties in the order they were added (a reschedule counts as a fresh
        add). The cost is proportional to the non-empty slots passed and the timers moved or returned, never
        to the ticks elapsed: a jump of 10**13 ticks over an empty wheel is as cheap as one tick.

        Raises:
            ValueError: now is not finite, or earlier than `now` (time does not go backwards).
            OverflowError: now is more than 2**62 ticks after the wheel's start.
        """
        now = _seconds(now, "now")
        if now < self._now:
            raise ValueError(f"now must not go backwards: {now!r} < wheel.now {self._now!r}")
        target = self._tick_of(now, "now")
        fired: list[tuple[int, Any]] = []
        self._expire_current(now, fired)
        while True:
            tick, bucket = self._next_event()
            if bucket < 0 or tick > target:
                break
            self._elapsed = tick
            self._cascade(bucket)
            self._expire_current(now, fired)
        self._elapsed = target
        self._now = now
        if fired:
            self._min_valid = False
        return fired

    def next_due(self) -> float | None:
        """The exact earliest due among pending timers, or None when there are none.

        Cached between changes; when it must be found again, only the earliest non-empty slot is read
        (the CURRENT bucket, or the first slot after the current tick), never every pending timer.
        """
        if self._count == 0:
            return None
        if self._min_valid:
            return self._min_due
        lst = self._buckets[self._current]
        if not lst:
            lst = self._buckets[self._first_slot()]
        entries = self._entries
        self._min_due = min(entries[idx].due for idx in lst)
        self._min_valid = True
        return self._min_due

    def _first_slot(self) -> int:
        """The bucket of the earliest non-empty slot, with an exact epoch bound if it is a top slot."""
        while True:
            _, bucket = self._next_event()
            level, slot = divmod(bucket, self._slots)
            if level != self._top:
                return bucket
            exact = min(self._entries[idx].tick for idx in self._buckets[bucket]) >> self._span_bits
            if exact == self._top_epoch[slot]:
                return bucket
            self._top_epoch[slot] = exact  # was a stale lower bound (its earliest timer left): look again

    # -- invariants -----------------------------------------------------------------------------------

    def _location(self, timer_id: int) -> tuple[int, int, int] | None:
        """(level, slot, position) of a pending timer; level == levels used for CURRENT. For tests."""
        idx = self._lookup(timer_id)
        if idx < 0:
            return None
        entry = self._entries[idx]
        level, slot = divmod(entry.bucket, self._slots)
        return level, slot, entry.pos

    def _check(self) -> None:
        """Check the bookkeeping (index, positions, bitmaps, bounds, counts, cache); AssertionError if off."""
        seen = 0
        elapsed = self._elapsed
        assert elapsed == self._tick_of(self._now, "now")
        for bucket, lst in enumerate(self._buckets):
            for pos, idx in enumerate(lst):
                entry = self._entries[idx]
                assert entry.bucket == bucket and entry.pos == pos, (bucket, pos, idx)
                assert entry.tick == self._tick_of(entry.due, "due")
                if bucket == self._current:
                    assert entry.tick <= elapsed
                else:
                    level, slot = divmod(bucket, self._slots)
                    assert entry.tick > elapsed
                    assert level_for(elapsed, entry.tick, self._bits, self._top) == level
                    assert slot_for(entry.tick, level, self._bits) == slot
                    if level == self._top:
                        assert self._top_epoch[slot] <= entry.tick >> self._span_bits
                        assert self._top_event()[0] > elapsed
            seen += len(lst)
            if bucket != self._current:
                level, slot = divmod(bucket, self._slots)
                assert bool(self._bitmaps[level] >> slot & 1) == bool(lst), (bucket, lst)
        assert seen == self._count
        free = 0
        idx = self._free
        while idx >= 0:
            assert self._entries[idx].bucket == FREE and self._items[idx] is None
            free += 1
            idx = self._entries[idx].pos
        assert free + self._count == len(self._entries)
        if self._min_valid and self._count:
            assert self._min_due == min(self._entries[i].due for lst in self._buckets for i in lst), (
                "stale next_due cache"
            )
