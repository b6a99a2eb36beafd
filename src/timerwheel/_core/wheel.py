"""The pure-Python timing wheel: the readable reference that _wheel_c.pyx mirrors function for function.

Read this file first. The Cython twin has the same names, the same constants and the same order of steps;
where it uses a trick for speed (C arrays, bit scans), the trick is named here in a comment.

Re-entrancy. Any allocation can run the cyclic garbage collector, and a finalizer it runs (a `__del__`, a
`weakref.finalize`) may call back into this wheel: cancel the timer of a connection that just died, add
another, move one. So may a signal handler. Every operation here is written so that such a call finds the
wheel whole, and its answer stays true:

- Work that calls out (helpers, list methods, allocations) is done first, in a *prepare* step, and checked
  again afterwards; the change itself is made in a *commit* block that has no calls, no loops and no
  allocation of a container, so no Python code can run in the middle of it (CPython runs the GC at an
  allocation before 3.12 and at calls and loop back-edges from 3.12 on). Commit blocks are marked.
- Buckets are dicts used as ordered sets: an insert or a delete is one instruction. (The C twin keeps an
  array per bucket, with swap-and-shrink removal and a position in each entry; there no Python code can
  run during a change, so it needs no such care.)
- Scans (the next event, the earliest due) compare a version counter, bumped by every commit, before they
  use their result: if the wheel changed meanwhile, they scan again.
- advance() takes a snapshot of a bucket before it moves or fires its timers, and checks each timer again
  (same generation, same order number, same bucket) just before the commit that takes it out: a timer
  that a finalizer cancelled or moved in between is left alone. A timer comes out only if it was pending
  when the commit took it, and from then on its id is stale, so cancel() of it returns False: cancel()
  returns True only for a timer that will not come out.
- advance() cannot be re-entered (RuntimeError): a second advance from a finalizer would move time under
  the first one.
"""

from __future__ import annotations

import math
from heapq import heapify, heappop, heappush
from typing import Any

from .._validate import identifier
from .._validate import seconds as _seconds

__all__ = [
    "MAX_LEVELS",
    "MAX_SLOTS",
    "MAX_TICKS",
    "MIN_SLOTS",
    "TaskTable",
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
#: An entry is retired (never handed out again) once its generation reaches this: every id then fits a
#: signed 64-bit integer, which the compiled engine keeps its tasks' timer ids in. It costs one 40 B
#: entry per 2**31 timers that went through it.
MAX_GEN = 1 << 31
#: The bucket of an entry that is on the free list.
FREE = -1
#: A top slot's epoch bound while its cascade is under way (any real epoch is lower).
_NO_EPOCH = 1 << 63
#: A bucket of more entries than this gets the slot heap when next_due() needs its earliest due (smaller
#: ones are scanned: a few dozen compares cost less than keeping a heap up to date).
HEAP_MIN = 32


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


def _check_id(timer_id: Any) -> None:
    if type(timer_id) is not int:
        identifier(timer_id, "timer_id")  # TypeError for anything but an int (a bool included)


class _Entry:
    """One pool entry. The Cython twin keeps the same fields in a C struct (40 bytes), the item in a list."""

    __slots__ = ("bucket", "due", "gen", "item", "next_free", "seq", "tick")

    def __init__(self) -> None:
        self.due = 0.0  # exact due time, in the caller's seconds
        self.tick = 0  # tick_of(due), clamped to -1 below the start; decides the bucket
        self.seq = 0  # order of add / reschedule: breaks ties between equal dues
        self.gen = 1  # generation: the high bits of this entry's current timer id
        self.bucket = FREE  # level * slots + slot, CURRENT, or FREE
        self.next_free = -1  # the next free entry while FREE (C: `pos`, also the position in a bucket)
        self.item: Any = None


class _Wheel:
    """The wheel's storage and its internal operations: the pool of entries, the buckets and bitmaps, the
    one conversion of seconds into ticks, placement, cascades and expiry, and the invariants. TimerWheel,
    below, is the public face; the C twin is split the same way. The geometry is in TimerWheel's docstring.
    """

    __slots__ = (
        "_advancing",
        "_bitmaps",
        "_bits",
        "_buckets",
        "_count",
        "_current",
        "_elapsed",
        "_entries",
        "_free",
        "_heap",
        "_heap_bucket",
        "_heap_owed",
        "_levels",
        "_mask",
        "_min_due",
        "_min_valid",
        "_now",
        "_resolution",
        "_seq",
        "_size",
        "_slots",
        "_span_bits",
        "_start",
        "_ticks_per_second",
        "_top",
        "_top_epoch",
        "_version",
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
        self._mask = slots - 1
        # Levels past the 62nd tick bit would stay empty: only the used ones get slots (ceil(62 / bits)).
        used = min(levels, (TICK_BITS + bits - 1) // bits)
        self._top = used - 1  # the top level: also holds timers beyond the span, by epoch
        self._span_bits = min(used * bits, TICK_BITS)  # a tick's epoch is tick >> span_bits
        self._current = used * slots  # the bucket after the last slot: timers due at the current tick
        self._elapsed = 0  # the current tick: tick_of(now)
        self._buckets: list[dict[int, None]] = [{} for _ in range(used * slots + 1)]
        # One occupancy bitmap per level; the C twin uses arrays of 64-bit words and a count-trailing-zeros.
        self._bitmaps = [0] * used
        # Per top slot, a lower bound of the epochs of its timers (exact after a cascade or a refresh).
        self._top_epoch = [0] * slots
        self._entries: list[_Entry] = []  # the pool; a timer id's low bits index it
        self._size = 0  # len(self._entries), readable without a call (commit blocks read it)
        self._free = -1  # head of the free list, threaded through _Entry.next_free
        self._count = 0
        self._seq = 0
        self._min_due = 0.0  # cached next_due(), valid while _min_valid
        self._min_valid = False
        self._version = 0  # bumped by every commit: a scan that saw it change scans again
        self._advancing = False
        # The slot heap (see _slot_min): (due, seq, idx) nodes over one bucket, or none (bucket -1).
        self._heap: list[tuple[float, int, int]] = []
        self._heap_bucket = -1
        self._heap_owed = 0  # placements into the heap's bucket whose node is not pushed yet

    # -- the one place where seconds become ticks --------------------------------------------------------

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

    # -- placement ---------------------------------------------------------------------------------------

    def _bucket_for(self, tick: int) -> int:
        """The bucket of a timer at `tick`, relative to the current tick."""
        elapsed = self._elapsed
        if tick <= elapsed:
            return self._current
        level = level_for(elapsed, tick, self._bits, self._top)
        return level * self._slots + slot_for(tick, level, self._bits)

    def _grow_pool(self) -> None:
        """Add one entry to the pool and put it on the free list (C: the pool grows by half, with realloc).

        The new entry is made first (an allocation: the GC may run and re-enter); the commit that appends it
        and frees it is one `+=` and a few stores.
        """
        if self._size >= ID_MASK:  # ID_MASK itself is the C twin's "no entry" mark
            raise OverflowError(f"a wheel holds at most {ID_MASK} timers")
        new = (_Entry(),)
        # commit: no calls, loops or allocations
        idx = self._size
        self._entries += new
        self._size = idx + 1
        new[0].next_free = self._free
        self._free = idx

    def _lookup(self, timer_id: Any) -> int:
        """The pool index of a pending timer, or -1. TypeError if timer_id is not an int.

        A caller that goes on to change the entry checks it again in its commit block: the GC may run
        between this call's return and that block.
        """
        _check_id(timer_id)
        if timer_id <= 0:
            return -1
        idx: int = timer_id & ID_MASK
        if idx >= self._size:
            return -1
        entry = self._entries[idx]
        if entry.gen != timer_id >> ID_BITS or entry.bucket == FREE:
            return -1
        return idx

    def _insert(self, due: float, tick: int, item: Any) -> int:
        while True:  # prepare: a free entry and the target bucket; the GC may re-enter the wheel here
            if self._free < 0:
                self._grow_pool()
                continue
            elapsed = self._elapsed
            bucket = self._bucket_for(tick)
            idx = self._free
            if idx >= 0 and elapsed == self._elapsed:  # still a free entry, and the same placement
                break
        # commit: no calls, loops or allocations from here on
        entry = self._entries[idx]
        lst = self._buckets[bucket]
        was_empty = not lst
        lst[idx] = None  # a MemoryError here changes nothing
        self._free = entry.next_free
        entry.due = due
        entry.tick = tick
        self._seq += 1
        entry.seq = self._seq
        entry.bucket = bucket
        entry.item = item
        if bucket != self._current:
            level = bucket >> self._bits
            slot = bucket & self._mask
            if level == self._top:
                epoch = tick >> self._span_bits
                if was_empty or epoch < self._top_epoch[slot]:
                    self._top_epoch[slot] = epoch
            self._bitmaps[level] |= 1 << slot
        if self._count == 0:
            self._min_due = due
            self._min_valid = True
        elif self._min_valid and due < self._min_due:
            self._min_due = due
        self._count += 1
        self._version += 1
        timer_id = (entry.gen << ID_BITS) | idx
        if bucket == self._heap_bucket:
            self._heap_owed += 1
            self._heap_note(bucket, due, entry.seq, idx)  # (after the commit: it allocates)
        return timer_id

    def _move(self, timer_id: int, due: float, tick: int) -> bool:
        """Give a pending timer a new due (reschedule_at's work once the arguments are checked).

        A move later, out of a slot below the top level, is only noted in the entry: the timer stays in
        its slot, filed earlier than its due, until time reaches that slot, whose cascade files it where
        it is then due (once per slot passed, not once per move: a keep-alive timer pushed back on every
        message costs a store). A slot holds its timers' dues in its own range, or later: none comes out
        early, and next_due() files again a first slot whose earliest timer was moved out of it
        (_filed_early). A move earlier, within the slot, out of CURRENT or of a top slot places the timer
        at once.
        """
        gen = timer_id >> ID_BITS
        while True:  # prepare: the target bucket; the GC may re-enter the wheel here
            idx = self._lookup(timer_id)
            if idx < 0:
                return False
            elapsed = self._elapsed
            bucket = self._bucket_for(tick)
            entry = self._entries[idx]
            if entry.bucket != FREE and entry.gen == gen and elapsed == self._elapsed:
                break
        # commit: no calls, loops or allocations from here on
        old = entry.bucket
        if tick > entry.tick and old != self._current and old >> self._bits != self._top:
            bucket = old  # later: noted in the entry, which stays filed too early (see the docstring)
        if self._min_valid and entry.due <= self._min_due:
            self._min_valid = False
        if bucket != old:
            lst = self._buckets[bucket]
            was_empty = not lst
            lst[idx] = None  # a MemoryError here changes nothing
            old_lst = self._buckets[old]
            del old_lst[idx]
            if not old_lst and old != self._current:
                self._bitmaps[old >> self._bits] &= ~(1 << (old & self._mask))
            if bucket != self._current:
                level = bucket >> self._bits
                slot = bucket & self._mask
                if level == self._top:
                    epoch = tick >> self._span_bits
                    if was_empty or epoch < self._top_epoch[slot]:
                        self._top_epoch[slot] = epoch
                self._bitmaps[level] |= 1 << slot
        elif bucket != self._current and bucket >> self._bits == self._top:
            slot = bucket & self._mask  # same top slot, maybe another epoch: keep the bound a lower bound
            epoch = tick >> self._span_bits
            if epoch < self._top_epoch[slot]:
                self._top_epoch[slot] = epoch
        entry.bucket = bucket
        entry.due = due
        entry.tick = tick
        self._seq += 1
        entry.seq = self._seq
        if self._min_valid and due < self._min_due:
            self._min_due = due
        self._version += 1
        if bucket == self._heap_bucket:  # placed in it, or moved within it (its old node is stale now)
            self._heap_owed += 1
            self._heap_note(bucket, due, entry.seq, idx)
        return True

    # -- time --------------------------------------------------------------------------------------------

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

        Timers that stay in this very slot (a top slot's later epochs) stay; the others move to lower
        levels or to CURRENT. A top slot's epoch bound is rebuilt as the timers that stay are seen (a
        finalizer that adds one to the slot meanwhile lowers it as any add does), so it ends exact.
        """
        lst = self._buckets[bucket]
        entries = self._entries
        slot = bucket & self._mask
        top = bucket >> self._bits == self._top
        old_bound = self._top_epoch[slot]
        if top:
            self._top_epoch[slot] = _NO_EPOCH
        try:
            for idx in list(lst):  # a snapshot: a finalizer may change the slot between two moves
                entry = entries[idx]
                tick = entry.tick
                target = self._bucket_for(tick)
                # commit: no calls, loops or allocations (the entry is checked again: the GC may have run)
                if entry.bucket != bucket or entry.tick != tick:
                    continue  # cancelled, or moved (and placed) by a finalizer
                if target == bucket:  # a later epoch of this top slot (or, refiled early, a timer in place)
                    epoch = tick >> self._span_bits
                    if top and epoch < self._top_epoch[slot]:
                        self._top_epoch[slot] = epoch
                    continue
                new = self._buckets[target]
                was_empty = not new
                new[idx] = None  # a MemoryError here changes nothing
                del lst[idx]
                entry.bucket = target
                if target != self._current:  # a lower level, or (moved later: see _move) a higher one
                    level = target >> self._bits
                    if level == self._top:
                        epoch = tick >> self._span_bits
                        if was_empty or epoch < self._top_epoch[target & self._mask]:
                            self._top_epoch[target & self._mask] = epoch
                    self._bitmaps[level] |= 1 << (target & self._mask)
                self._version += 1
                if target == self._heap_bucket:
                    self._heap_owed += 1
                    self._heap_note(target, entry.due, entry.seq, idx)
        except BaseException:
            if top:  # the timers not placed yet are still here: the old bound still bounds them
                self._top_epoch[slot] = min(old_bound, self._top_epoch[slot])
            raise
        finally:
            if not lst:
                self._bitmaps[bucket >> self._bits] &= ~(1 << slot)

    def _expire_current(self, now: float, limit: int, fired: list[tuple[int, Any]]) -> None:
        """Take every timer of the CURRENT bucket whose due is <= now, by (due, seq), into `fired`.

        Only timers added or moved before the advance began (seq <= limit): one that a finalizer adds or
        moves meanwhile comes out at the next advance().
        """
        lst = self._buckets[self._current]
        if not lst:
            return
        entries = self._entries
        # A snapshot, sorted; C: sorted only when not already in order.
        due_now = [
            (e.due, e.seq, idx, e.gen)
            for idx in list(lst)
            if (e := entries[idx]).due <= now and e.seq <= limit
        ]
        due_now.sort()
        for _, seq, idx, gen in due_now:
            entry = entries[idx]
            # commit: no calls, loops or allocations (the entry is checked again: the GC may have run)
            if entry.gen != gen or entry.seq != seq or entry.bucket != self._current:
                continue  # cancelled or moved by a finalizer meanwhile: not this timer any more
            del lst[idx]
            if self._min_valid and entry.due <= self._min_due:  # a finalizer's next_due() must not see it
                self._min_valid = False
            item = entry.item
            entry.item = None
            entry.gen = gen + 1  # from here its id is stale: a cancel() of it returns False
            entry.bucket = FREE
            if gen + 1 < MAX_GEN:  # (else retired: see MAX_GEN)
                entry.next_free = self._free
                self._free = idx
            self._count -= 1
            self._version += 1
            fired.append(((gen << ID_BITS) | idx, item))

    # -- the slot heap: next_due() in O(1) amortised ----------------------------------------------------

    def _heap_note(self, bucket: int, due: float, seq: int, idx: int) -> None:
        """Push the node of entry `idx`, just placed in the slot heap's bucket by a commit that counted it in
        _heap_owed. Until the count is back to zero, _slot_min() does not trust the heap (a finalizer that
        the allocation runs asks next_due() while the node is missing). A heap that holds twice its bucket
        in stale nodes, or that cannot grow, is dropped: it is a cache, built again when needed.
        """
        try:
            node = (due, seq, idx)  # an allocation: the GC may run
            if bucket == self._heap_bucket:
                heap = self._heap
                if len(heap) >= 2 * len(self._buckets[bucket]) + HEAP_MIN:
                    self._heap_bucket = -1
                else:
                    heappush(heap, node)  # (compares floats and ints: runs no Python code)
        except BaseException as exc:
            self._heap_bucket = -1
            if not isinstance(exc, MemoryError):  # the timer is placed: a full heap must not undo that
                raise
        finally:
            self._heap_owed -= 1

    def _slot_min(self, bucket: int) -> int:
        """The pool index of the entry with the earliest due in the non-empty `bucket`.

        A small bucket is scanned. A large one gets the slot heap, a heap of (due, seq, idx) nodes built
        once over the bucket and then kept up by every placement into it (_insert, _move, _cascade push a
        node). The node of an entry that left the bucket or moved within it is stale (seq is new at every
        placement, and an entry never comes back to a bucket it left with the same seq): it is popped here,
        once. So each change costs O(1) amortised, not a scan of the slot. The C twin keeps the heap in a
        C array. If a finalizer changes the wheel meanwhile the answer may be out of date: callers compare
        _version, as every scan here does.
        """
        if bucket < 0:  # no slot left (a finalizer emptied the wheel)
            return -1
        lst = self._buckets[bucket]
        entries = self._entries
        if len(lst) > HEAP_MIN and not self._heap_owed:
            if bucket != self._heap_bucket:
                version = self._version
                heap = [(entries[idx].due, entries[idx].seq, idx) for idx in list(lst)]
                heapify(heap)
                # commit: no calls between the check and the stores
                if version == self._version and not self._heap_owed:  # it covers the bucket as it is
                    self._heap = heap
                    self._heap_bucket = bucket
            if bucket == self._heap_bucket:
                heap = self._heap
                while heap:
                    _, seq, idx = heap[0]
                    entry = entries[idx]
                    if entry.bucket == bucket and entry.seq == seq:
                        return idx
                    heappop(heap)
        # (-1 if a finalizer that the snapshot's allocation ran emptied the bucket: the caller looks again)
        return min(list(lst), key=lambda i: entries[i].due, default=-1)

    def _filed_early(self, bucket: int, idx: int) -> bool:
        """Whether entry `idx`, the earliest of the non-empty slot `bucket`, was moved later and left there
        (see _move). Then so was every timer of the slot: one in its own slot is due before any moved out
        of it. CURRENT and top slots hold none: a move out of them places the timer at once."""
        if bucket == self._current or bucket >> self._bits == self._top:
            return False
        return self._bucket_for(self._entries[idx].tick) != bucket

    def _first_slot(self) -> int:
        """The bucket of the earliest non-empty slot, with an exact epoch bound if it is a top slot."""
        while True:
            version = self._version
            _, bucket = self._next_event()
            if bucket >> self._bits != self._top:
                return bucket
            idx = self._slot_min(bucket)
            if idx < 0:
                continue  # a finalizer emptied the slot meanwhile: look again
            exact = self._entries[idx].tick >> self._span_bits  # the earliest due's tick
            slot = bucket & self._mask
            # commit: no calls between the check and the store
            if version != self._version:
                continue  # a finalizer changed the wheel meanwhile: look again
            if exact == self._top_epoch[slot]:
                return bucket
            self._top_epoch[slot] = exact  # was a stale lower bound (its earliest timer left): look again
            self._version += 1  # and so must an outer scan that a finalizer's next_due() interrupted

    # -- invariants --------------------------------------------------------------------------------------

    def _location(self, timer_id: int) -> tuple[int, int, int] | None:
        """(level, slot, position) of a pending timer; level == levels used for CURRENT. For tests."""
        idx = self._lookup(timer_id)
        if idx < 0:
            return None
        bucket = self._entries[idx].bucket
        return bucket >> self._bits, bucket & self._mask, list(self._buckets[bucket]).index(idx)

    def _age(self, idx: int, gen: int) -> None:
        """Tests only: give the free entry `idx` the generation `gen` (the retirement of MAX_GEN is tested
        without 2**31 timers)."""
        assert self._entries[idx].bucket == FREE and 0 < gen < MAX_GEN
        self._entries[idx].gen = gen

    def _check(self) -> None:
        """Check the bookkeeping (index, buckets, bitmaps, bounds, counts, cache); AssertionError if off."""
        seen = 0
        elapsed = self._elapsed
        assert not self._advancing
        assert self._size == len(self._entries)
        assert elapsed == self._tick_of(self._now, "now")
        for bucket, lst in enumerate(self._buckets):
            for idx in lst:
                entry = self._entries[idx]
                assert entry.bucket == bucket, (bucket, idx)
                assert entry.tick == self._tick_of(entry.due, "due")
                if bucket == self._current:
                    assert entry.tick <= elapsed
                else:
                    level, slot = bucket >> self._bits, bucket & self._mask
                    assert entry.tick > elapsed
                    if not self._filed_early(bucket, idx):
                        assert level_for(elapsed, entry.tick, self._bits, self._top) == level
                        assert slot_for(entry.tick, level, self._bits) == slot
                    else:  # moved later and left here (see _move): filed no later than its due
                        shift = (level + 1) * self._bits
                        start = ((elapsed >> shift) << shift) | (slot << (level * self._bits))
                        assert elapsed < start <= entry.tick, (bucket, idx, "filed after its due")
                    if level == self._top:
                        assert self._top_epoch[slot] <= entry.tick >> self._span_bits
                        assert self._top_event()[0] > elapsed
            seen += len(lst)
            if bucket != self._current:
                level, slot = bucket >> self._bits, bucket & self._mask
                assert bool(self._bitmaps[level] >> slot & 1) == bool(lst), (bucket, lst)
        assert seen == self._count
        free = 0
        idx = self._free
        while idx >= 0:
            assert self._entries[idx].bucket == FREE and self._entries[idx].item is None
            free += 1
            idx = self._entries[idx].next_free
        retired = sum(e.bucket == FREE and e.gen >= MAX_GEN for e in self._entries)
        assert free + retired + self._count == len(self._entries)
        if self._min_valid and self._count:
            assert self._min_due == min(self._entries[i].due for lst in self._buckets for i in lst), (
                "stale next_due cache"
            )
        assert self._heap_owed == 0
        if self._heap_bucket >= 0:  # the slot heap: a heap by due, with a node for every entry of its bucket
            heap = self._heap
            live = set()
            for pos, (due, seq, idx) in enumerate(heap):
                assert pos == 0 or heap[(pos - 1) >> 1] <= heap[pos], "slot heap order"
                entry = self._entries[idx]
                if entry.bucket == self._heap_bucket and entry.seq == seq:
                    assert entry.due == due
                    live.add(idx)
            assert live == set(self._buckets[self._heap_bucket]), "an entry of the heap's bucket has no node"


class TimerWheel(_Wheel):
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
    maximum delay below 2**62 ticks. An index from timer id to its bucket makes removal O(1); a per-level
    occupancy bitmap finds the next non-empty slot without scanning empty ones.

    Re-entrancy: a finalizer that the garbage collector runs during any operation may call any method
    but advance() (RuntimeError) and finds the wheel consistent; see the module docstring.

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

    __slots__ = ()

    # -- read-only geometry and time ---------------------------------------------------------------------

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

    @property
    def horizon(self) -> float:
        """start + 2**62 ticks: the wheel refuses times from about here on (OverflowError)."""
        return self._start + MAX_TICKS * self._resolution

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

    # -- the public operations ---------------------------------------------------------------------------

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
        # commit: no calls, loops or allocations (the entry is checked again: the GC may have run)
        entry = self._entries[idx]
        bucket = entry.bucket
        if bucket == FREE or entry.gen != timer_id >> ID_BITS:
            return False
        lst = self._buckets[bucket]
        del lst[idx]
        if not lst and bucket != self._current:
            self._bitmaps[bucket >> self._bits] &= ~(1 << (bucket & self._mask))
        if self._min_valid and entry.due <= self._min_due:
            self._min_valid = False
        item = entry.item  # dies when this frame does, after the bookkeeping: its __del__ may call back
        entry.item = None
        entry.gen += 1
        entry.bucket = FREE
        if entry.gen < MAX_GEN:  # (else retired: see MAX_GEN)
            entry.next_free = self._free
            self._free = idx
        self._count -= 1
        self._version += 1
        del item
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

    def due(self, timer_id: int) -> float | None:
        """The exact due of a pending timer, or None. O(1). TypeError if timer_id is not an int."""
        idx = self._lookup(timer_id)
        return None if idx < 0 else self._entries[idx].due

    def __contains__(self, timer_id: object) -> bool:
        """`timer_id in wheel`: True while the timer is pending. TypeError if timer_id is not an int."""
        return self._lookup(timer_id) >= 0

    def clear(self) -> None:
        """Remove every pending timer; their ids become stale. `now` is kept. O(levels x slots + pending).

        Timers added while it runs (by a finalizer) may survive it.
        """
        dropped = []  # the items die after the bookkeeping: a __del__ may call back into the wheel
        entries = self._entries
        for bucket, lst in enumerate(self._buckets):
            for idx in list(lst):  # a snapshot: a finalizer may change the bucket meanwhile
                entry = entries[idx]
                # commit: no calls, loops or allocations
                if entry.bucket != bucket:
                    continue
                del lst[idx]
                if not lst and bucket != self._current:
                    self._bitmaps[bucket >> self._bits] &= ~(1 << (bucket & self._mask))
                item = entry.item
                entry.item = None
                entry.gen += 1
                entry.bucket = FREE
                if entry.gen < MAX_GEN:  # (else retired: see MAX_GEN)
                    entry.next_free = self._free
                    self._free = idx
                self._count -= 1
                self._min_valid = False
                self._heap_bucket = -1
                self._version += 1
                dropped.append(item)
        del dropped

    # -- time --------------------------------------------------------------------------------------------

    def advance(self, now: float) -> list[tuple[int, Any]]:
        """Move time to `now`; remove and return every timer with due <= now as (timer_id, item).

        Timers come out ordered by due, ties in the order they were added (a reschedule counts as a fresh
        add). The cost is proportional to the non-empty slots passed and the timers moved or returned, never
        to the ticks elapsed: a jump of 10**13 ticks over an empty wheel is as cheap as one tick. A timer
        that a finalizer adds meanwhile, even one already due, comes out at the next advance().

        Raises:
            ValueError: now is not finite, or earlier than `now` (time does not go backwards).
            OverflowError: now is more than 2**62 ticks after the wheel's start.
            RuntimeError: called while an advance() of this wheel is under way (from a finalizer).
        """
        now = _seconds(now, "now")
        # The flag is set before anything else that calls out (the tick computation may allocate): a
        # finalizer's advance() during it must be refused, not move time under this one.
        if self._advancing:
            raise RuntimeError("advance() must not be called while an advance() of this wheel is under way")
        self._advancing = True
        try:
            if now < self._now:
                raise ValueError(f"now must not go backwards: {now!r} < wheel.now {self._now!r}")
            target = self._tick_of(now, "now")
            fired: list[tuple[int, Any]] = []
            limit = self._seq
            self._expire_current(now, limit, fired)
            while True:
                version = self._version
                tick, bucket = self._next_event()
                if version != self._version:
                    continue  # a finalizer changed the wheel during the scan: scan again
                # commit: no calls between the scan's check and the move of time
                if bucket < 0 or tick > target:
                    break
                self._elapsed = tick
                self._cascade(bucket)
                self._expire_current(now, limit, fired)
            self._elapsed = target
            self._now = now
            if fired:
                self._min_valid = False
            self._version += 1
        finally:
            self._advancing = False
        return fired

    def next_due(self) -> float | None:
        """The exact earliest due among pending timers, or None when there are none.

        Cached between changes; when it must be found again, only the earliest non-empty slot is looked
        at (the CURRENT bucket, or the first slot after the current tick): scanned when small, through
        the slot heap when large. O(1) amortised after the earliest timer is cancelled or moved.
        """
        read_all = False
        while True:
            if self._count == 0:
                return None
            if self._min_valid:
                return self._min_due
            version = self._version
            if self._advancing or read_all:  # (a finalizer asks during an advance(), or no memory): read all
                found = min((e.due for e in list(self._entries) if e.bucket != FREE), default=None)
                if found is None:
                    continue  # a finalizer emptied the wheel meanwhile: look again
                due = found
            else:
                bucket = self._current if self._buckets[self._current] else self._first_slot()
                idx = self._slot_min(bucket)
                if idx < 0:
                    continue  # a finalizer emptied the slot meanwhile: look again
                if self._filed_early(bucket, idx):
                    try:
                        self._cascade(bucket)  # its timers were all moved later: file them where they are due
                    except MemoryError:  # no room to file them (they stay where they are): read everything
                        read_all = True
                    continue
                due = self._entries[idx].due
            # commit: no calls between the check and the store
            if version == self._version and not self._advancing:
                self._min_due = due
                self._min_valid = True
                return due
            if version == self._version:
                return due


#: The job engine's tasks by id (ids handed out 1, 2, 3, ...): in Python, the dict itself, the fastest
#: table there is (a subclass would lose the interpreter's fast paths for dict subscripts). The Cython
#: twin keeps recent ids in a list indexed by id, older ones in a dict, so that a pending task costs one
#: list slot instead of a dict entry; it offers what the engine uses of a dict: get, pop, [], del, len,
#: in, values (in id order) and clear.
TaskTable = dict
