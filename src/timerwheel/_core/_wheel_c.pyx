# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True, binding=False
# cython: embedsignature=True, embedsignature.format=python
"""The Cython timing wheel: the algorithm of wheel.py, function for function, over C arrays.

boundscheck and wraparound are off: every index below is a pool index (< _size), a bucket index
(< number of buckets) or a position (< the bucket's length), kept so by the bookkeeping that _check() verifies.
cdivision is on: every division and shift here is of non-negative integers.

Re-entrancy (see wheel.py): no Python code can run in the middle of a change here, because nothing in a
change allocates a Python object that the garbage collector tracks or drops the last reference to an
item: buckets and the pool grow with PyMem_Realloc and list appends. advance() frees the entries of every
due timer before it builds its result (the tuples are the one allocation that can run the GC), so a
finalizer run then finds the wheel whole and the fired ids stale. advance() cannot be re-entered.
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_Check, PyLong_CheckExact, PyLong_FromLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport qsort
from libc.string cimport memset

import math

from timerwheel._validate import identifier as _py_identifier
from timerwheel._validate import seconds as _py_seconds

cdef extern from *:
    """
    /* Bit scans: compiler intrinsics where there are some, a portable loop elsewhere. */
    #if defined(__GNUC__) || defined(__clang__)
    static inline int tw_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    static inline int tw_bitlen64(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }
    #elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_ARM64))
    #include <intrin.h>
    static inline int tw_ctz64(uint64_t x) { unsigned long i; _BitScanForward64(&i, x); return (int)i; }
    static inline int tw_bitlen64(uint64_t x) { unsigned long i; return _BitScanReverse64(&i, x) ? (int)i + 1 : 0; }
    #else
    static inline int tw_ctz64(uint64_t x) { int n = 0; while (!(x & 1)) { x >>= 1; n++; } return n; }
    static inline int tw_bitlen64(uint64_t x) { int n = 0; while (x) { x >>= 1; n++; } return n; }
    #endif
    """
    int tw_ctz64(uint64_t x) nogil      # x != 0
    int tw_bitlen64(uint64_t x) nogil


# The same constants as wheel.py, with the same reasons (written there).
MIN_SLOTS = 4
MAX_SLOTS = 4096
MAX_LEVELS = 8
TICK_BITS = 62
MAX_TICKS = 1 << 62
ID_BITS = 32
ID_MASK = 0xFFFFFFFF
FREE = -1

cdef enum:
    HEAP_MIN = 32       # a bucket of more entries than this gets the slot heap (see wheel.HEAP_MIN)
    C_TICK_BITS = 62
    C_ID_BITS = 32
    C_FREE = -1
cdef uint32_t C_ID_MASK = 0xFFFFFFFFu     # also the "no entry" mark that ends the free list
cdef double C_MAX_TICKS = <double>(1ULL << 62)
cdef uint64_t C_MAX_GEN = 1ULL << 31   # wheel.MAX_GEN: an entry of this generation is retired


cdef int _fired_cmp(const void* a, const void* b) noexcept nogil:
    cdef const Fired* x = <const Fired*>a
    cdef const Fired* y = <const Fired*>b
    if x.due != y.due:
        return -1 if x.due < y.due else 1
    return -1 if x.seq < y.seq else (1 if x.seq > y.seq else 0)


cpdef inline int level_for(int64_t elapsed, int64_t tick, int bits, int top) noexcept:
    """The level of a timer due at `tick` (> `elapsed`) with the wheel at tick `elapsed` (see wheel)."""
    cdef int level = (tw_bitlen64(<uint64_t>(elapsed ^ tick)) - 1) // bits
    return level if level < top else top


cpdef inline int slot_for(int64_t tick, int level, int bits) noexcept:
    """The slot of `tick` at `level`: its level-th base-`slots` digit (see wheel)."""
    return <int>((tick >> (level * bits)) & ((1 << bits) - 1))


cpdef inline int64_t rounds_for(int64_t elapsed, int64_t tick, int span_bits) noexcept:
    """How many more turns of the top level before `tick`'s top slot expires (see wheel)."""
    return (tick >> span_bits) - (elapsed >> span_bits)


cdef double _seconds_slow(object value, str name) except? -1.0:
    return _py_seconds(value, name)   # the one rule and message of _validate.py


cdef inline double _seconds(object value, str name) except? -1.0:
    """`value` as a finite double, or a TypeError / ValueError / OverflowError that names `name`."""
    cdef double v
    if PyFloat_CheckExact(value):
        v = PyFloat_AS_DOUBLE(value)
        if not isfinite(v):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return v
    return _seconds_slow(value, name)


cdef inline int _check_id(object timer_id) except -1:
    if not PyLong_CheckExact(timer_id):
        _py_identifier(timer_id, "timer_id")   # TypeError for anything but an int (a bool included)
    return 0


cdef inline object _make_id(uint64_t gen, uint32_t idx):
    return PyLong_FromLongLong(<long long>((gen << C_ID_BITS) | idx))  # (gen < C_MAX_GEN: 63 bits)


cdef class _Wheel:
    """The wheel's storage and its internal operations (see wheel._Wheel); TimerWheel is its face."""

    # (its fields are declared in _wheel_c.pxd, where the engine, compiled, can see them)

    def __cinit__(self, resolution=0.001, *, slots=64, levels=4, start=0.0):
        # Everything is set up here, not in __init__: TimerWheel.__new__(TimerWheel) alone gives a valid
        # default wheel rather than NULL arrays.
        self._heap_bucket = -1
        self._items = []
        self._free = C_ID_MASK
        cdef double res = _seconds(resolution, "resolution")
        if res <= 0:
            raise ValueError(f"resolution must be > 0 seconds, got {res!r}")
        if not isfinite(1.0 / res):
            raise ValueError(f"resolution is too small, got {res!r}")
        for name, value in (("slots", slots), ("levels", levels)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not (MIN_SLOTS <= slots <= MAX_SLOTS) or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two from {MIN_SLOTS} to {MAX_SLOTS}, got {slots}")
        if not 1 <= levels <= MAX_LEVELS:
            raise ValueError(f"levels must be from 1 to {MAX_LEVELS}, got {levels}")
        cdef double st = _seconds(start, "start")
        self._resolution = res
        self._ticks_per_second = 1.0 / res   # a multiplication per conversion, not a division
        self._slots = slots
        self._levels = levels
        self._start = st
        self._now = st
        cdef int bits = int(slots).bit_length() - 1
        self._bits = bits
        cdef int used = min(levels, (C_TICK_BITS + bits - 1) // bits)
        self._top = used - 1
        self._span_bits = min(used * bits, C_TICK_BITS)
        self._current = used * slots
        self._elapsed = 0
        self._words = (slots + 63) >> 6
        cdef size_t nbuckets = used * slots + 1
        self._buckets = <Bucket*>PyMem_Malloc(nbuckets * sizeof(Bucket))
        self._bitmaps = <uint64_t*>PyMem_Malloc(used * self._words * sizeof(uint64_t))
        self._top_epoch = <int64_t*>PyMem_Malloc(slots * sizeof(int64_t))
        if self._buckets == NULL or self._bitmaps == NULL or self._top_epoch == NULL:
            raise MemoryError()
        memset(self._buckets, 0, nbuckets * sizeof(Bucket))
        memset(self._bitmaps, 0, used * self._words * sizeof(uint64_t))
        memset(self._top_epoch, 0, slots * sizeof(int64_t))

    def __init__(self, resolution=0.001, *, slots=64, levels=4, start=0.0):
        pass   # all done in __cinit__

    def __dealloc__(self):
        cdef int b
        if self._buckets != NULL:
            for b in range(self._current + 1):
                PyMem_Free(self._buckets[b].items)
            PyMem_Free(self._buckets)
        PyMem_Free(self._bitmaps)
        PyMem_Free(self._top_epoch)
        PyMem_Free(self._entries)
        PyMem_Free(self._scratch)
        PyMem_Free(self._heap)

    @cython.final
    cdef int64_t _tick_of(self, double t, str name) except -2:
        """floor((t - start) * (1 / resolution)), -1 before start; OverflowError at 2**62 ticks (see wheel)."""
        cdef double x = (t - self._start) * self._ticks_per_second
        if x < 0:
            return -1
        if not x < C_MAX_TICKS:
            raise OverflowError(
                f"{name} is too far ahead: {x:.4g} ticks of {self._resolution!r} s, the wheel counts at most "
                "2**62 ticks from its start"
            )
        return <int64_t>x   # x >= 0: the cast truncates, which is floor

    @cython.final
    cdef int _bucket_for(self, int64_t tick) noexcept:
        cdef int64_t elapsed = self._elapsed
        cdef int level
        if tick <= elapsed:
            return self._current
        level = level_for(elapsed, tick, self._bits, self._top)
        return level * self._slots + slot_for(tick, level, self._bits)

    @cython.final
    cdef int _reserve(self, int bucket) except -1:
        """Make room for one more entry in `bucket`, before anything is changed."""
        if self._buckets[bucket].len < self._buckets[bucket].cap:
            return 0
        return self._grow_bucket(bucket)

    @cython.final
    cdef int _grow_bucket(self, int bucket) except -1:
        cdef Bucket* b = &self._buckets[bucket]
        cdef uint32_t cap
        cdef uint32_t* items
        cap = b.cap * 2 if b.cap else 4
        items = <uint32_t*>PyMem_Realloc(b.items, cap * sizeof(uint32_t))
        if items == NULL:
            raise MemoryError()
        b.items = items
        b.cap = cap
        return 0

    @cython.final
    cdef void _link(self, uint32_t idx, int bucket) noexcept:
        """Append entry `idx` to `bucket` (room reserved), marking the slot occupied."""
        cdef Entry* entry = &self._entries[idx]
        cdef Bucket* b = &self._buckets[bucket]
        cdef int level, slot
        cdef int64_t epoch
        if bucket != self._current:
            level = bucket >> self._bits
            slot = bucket & (self._slots - 1)
            if level == self._top:
                epoch = entry.tick >> self._span_bits
                if b.len == 0 or epoch < self._top_epoch[slot]:
                    self._top_epoch[slot] = epoch
            self._bitmaps[level * self._words + (slot >> 6)] |= 1ULL << (slot & 63)
        entry.bucket = bucket
        entry.pos = b.len
        b.items[b.len] = idx
        b.len += 1
        if bucket == self._heap_bucket:
            self._heap_push(idx)

    @cython.final
    cdef void _clear_bit(self, int bucket) noexcept:
        cdef int level = bucket >> self._bits
        cdef int slot = bucket & (self._slots - 1)
        self._bitmaps[level * self._words + (slot >> 6)] &= ~(1ULL << (slot & 63))

    @cython.final
    cdef void _unlink(self, uint32_t idx) noexcept:
        """Remove entry `idx` from its bucket in O(1): move the last one into its place, then shrink."""
        cdef Entry* entry = &self._entries[idx]
        cdef int bucket = entry.bucket
        cdef Bucket* b = &self._buckets[bucket]
        cdef uint32_t last
        cdef uint32_t* items
        b.len -= 1
        last = b.items[b.len]
        if last != idx:
            b.items[entry.pos] = last
            self._entries[last].pos = entry.pos   # swap-and-shrink: the moved entry learns its new position
        if b.len == 0 and bucket != self._current:
            self._clear_bit(bucket)
        if b.cap > 64 and b.len < (b.cap >> 2):   # give memory back after a mass cancel; never below 64
            items = <uint32_t*>PyMem_Realloc(b.items, (b.cap >> 1) * sizeof(uint32_t))
            if items != NULL:
                b.items = items
                b.cap >>= 1

    @cython.final
    cdef int _grow_pool(self) except -1:
        """Grow the pool by half."""
        cdef uint32_t cap
        cdef Entry* entries
        if self._size >= C_ID_MASK:
            raise OverflowError(f"a wheel holds at most {ID_MASK} timers")
        cap = self._capacity + (self._capacity >> 1) if self._capacity else 64
        if cap > C_ID_MASK or cap < self._capacity:
            cap = C_ID_MASK
        entries = <Entry*>PyMem_Realloc(self._entries, cap * sizeof(Entry))
        if entries == NULL:
            raise MemoryError()
        self._entries = entries
        while <uint32_t>len(self._items) < cap:   # appends: no object the GC tracks is allocated
            self._items.append(None)
        self._capacity = cap
        return 0

    @cython.final
    cdef uint32_t _alloc(self) noexcept:
        cdef uint32_t idx = self._free
        if idx != C_ID_MASK:
            self._free = self._entries[idx].pos
            return idx
        idx = self._size
        self._size += 1
        self._entries[idx].gen = 1
        return idx

    @cython.final
    cdef object _release(self, uint32_t idx):
        """Put entry `idx` (already unlinked) on the free list; return its item. Its id is now stale."""
        cdef Entry* entry = &self._entries[idx]
        entry.gen += 1
        entry.bucket = C_FREE
        if entry.gen < C_MAX_GEN:  # (else retired: see wheel.MAX_GEN)
            entry.pos = self._free
            self._free = idx
        item = self._items[idx]
        self._items[idx] = None
        self._count -= 1
        return item

    @cython.final
    cdef int64_t _lookup(self, object timer_id) except -2:
        """The pool index of a pending timer, or -1. TypeError if timer_id is not an int."""
        cdef int overflow = 0
        cdef long long v
        cdef uint64_t gen
        cdef uint32_t idx
        cdef Entry* entry
        _check_id(timer_id)
        v = PyLong_AsLongLongAndOverflow(timer_id, &overflow)
        if overflow:  # 2**63 or more, or below -2**63: no id (see wheel.MAX_GEN)
            return -1
        return self._lookup_id(v)

    @cython.final
    cdef int64_t _lookup_id(self, int64_t v) noexcept:
        """_lookup of an id that is a C integer."""
        cdef uint64_t gen
        cdef uint32_t idx
        cdef Entry* entry
        if v <= 0:
            return -1
        idx = <uint32_t>(v & C_ID_MASK)
        gen = <uint64_t>v >> C_ID_BITS
        if idx >= self._size:
            return -1
        entry = &self._entries[idx]
        if entry.gen != gen or entry.bucket == C_FREE:
            return -1
        return idx

    @cython.final
    cdef object _insert(self, double due, int64_t tick, object item):
        cdef uint32_t idx = self._insert_idx(due, tick, item)
        return _make_id(self._entries[idx].gen, idx)

    @cython.final
    cdef int64_t _insert_idx(self, double due, int64_t tick, object item) except -1:
        cdef int bucket
        while True:   # prepare: room in the bucket and a free entry, before anything is changed
            bucket = self._bucket_for(tick)
            if self._buckets[bucket].len == self._buckets[bucket].cap:
                self._grow_bucket(bucket)
            elif self._free == C_ID_MASK and self._size == self._capacity:
                self._grow_pool()
            else:
                break
        # commit: nothing below can fail or run Python code
        cdef uint32_t idx = self._alloc()
        cdef Entry* entry = &self._entries[idx]
        entry.due = due
        entry.tick = tick
        self._seq += 1
        entry.seq = self._seq
        self._items[idx] = item
        self._link(idx, bucket)
        if self._count == 0:
            self._min_due = due
            self._min_valid = True
        elif self._min_valid and due < self._min_due:
            self._min_due = due
        self._count += 1
        return idx

    @cython.final
    cdef object _move(self, object timer_id, double due, int64_t tick):
        return self._move_idx(self._lookup(timer_id), due, tick)

    @cython.final
    cdef bint _move_idx(self, int64_t idx, double due, int64_t tick) except -1:
        if idx < 0:
            return False
        cdef Entry* entry = &self._entries[idx]
        cdef int bucket = entry.bucket
        cdef int slot
        # later, out of a slot below the top: noted in the entry, which stays filed too early (wheel._Wheel._move)
        if not (tick > entry.tick and bucket != self._current and (bucket >> self._bits) != self._top):
            bucket = self._bucket_for(tick)
        if bucket != entry.bucket:
            self._reserve(bucket)
        if self._min_valid and entry.due <= self._min_due:
            self._min_valid = False
        entry.due = due
        entry.tick = tick
        self._seq += 1
        entry.seq = self._seq
        if bucket != entry.bucket:
            self._unlink(<uint32_t>idx)
            self._link(<uint32_t>idx, bucket)
        else:
            if bucket != self._current and (bucket >> self._bits) == self._top:
                slot = bucket & (self._slots - 1)   # same top slot, maybe another epoch: keep the bound a bound
                self._top_epoch[slot] = min(self._top_epoch[slot], tick >> self._span_bits)
            if bucket == self._heap_bucket:   # its node in the slot heap is stale now: a fresh one
                self._heap_push(<uint32_t>idx)
        if self._min_valid and due < self._min_due:
            self._min_due = due
        return True

    # -- for the compiled engine: ids as C integers, so that a task keeps no int object for its timer ----

    @cython.final
    cdef int64_t _add_id(self, double due, object item) except -1:
        """add_at() with a C due and a C id."""
        if not isfinite(due):
            raise ValueError(f"due must be finite, got {due!r}")
        cdef int64_t idx = self._insert_idx(due, self._tick_of(due, "due"), item)
        return <int64_t>((self._entries[idx].gen << C_ID_BITS) | <uint64_t>idx)

    @cython.final
    cdef bint _cancel_id(self, int64_t timer_id) except -1:
        """cancel() of a C id."""
        return self._cancel_idx(self._lookup_id(timer_id))

    @cython.final
    cdef inline bint _cancel_idx(self, int64_t idx) except -1:
        """Remove the pending timer at pool index idx (-1: none, False). What cancel() and _cancel_id share."""
        if idx < 0:
            return False
        if self._min_valid and self._entries[idx].due <= self._min_due:
            self._min_valid = False
        self._unlink(<uint32_t>idx)
        self._release(<uint32_t>idx)  # (the item is dropped here, after the bookkeeping)
        return True

    @cython.final
    cdef bint _move_id(self, int64_t timer_id, double due) except -1:
        """reschedule_at() of a C id, with a C due."""
        if not isfinite(due):
            raise ValueError(f"due must be finite, got {due!r}")
        cdef int64_t tick = self._tick_of(due, "due")
        return self._move_idx(self._lookup_id(timer_id), due, tick)

    @cython.final
    cdef int _next_event(self, int64_t* tick) noexcept:
        """The bucket of the first non-empty slot after the current tick (its start in *tick), or -1.

        Below the top level every occupied slot lies after the current digit (aligned blocks): the level's
        lowest set bit is its next slot, and lower levels come first.
        """
        cdef int level, w, slot, shift
        cdef uint64_t word
        for level in range(self._top):
            for w in range(self._words):
                word = self._bitmaps[level * self._words + w]
                if word:
                    slot = (w << 6) + tw_ctz64(word)
                    shift = (level + 1) * self._bits
                    tick[0] = ((self._elapsed >> shift) << shift) | (<int64_t>slot << (level * self._bits))
                    return level * self._slots + slot
        return self._top_event(tick)

    @cython.final
    cdef int _top_event(self, int64_t* tick) noexcept:
        cdef int w, slot, best = -1
        cdef int64_t t, best_tick = -1
        cdef uint64_t word
        cdef uint64_t* bitmap = &self._bitmaps[self._top * self._words]
        for w in range(self._words):
            word = bitmap[w]
            while word:
                slot = (w << 6) + tw_ctz64(word)
                word &= word - 1
                t = (self._top_epoch[slot] << self._span_bits) | (<int64_t>slot << (self._top * self._bits))
                if best < 0 or t < best_tick:
                    best_tick = t
                    best = self._top * self._slots + slot
        tick[0] = best_tick
        return best

    @cython.final
    cdef int _cascade(self, int bucket) except -1:
        """Place each timer of a slot whose block has begun again, relative to the current tick (in place).

        Timers staying in this very slot (a top slot's later epochs) are compacted to its front. If a target
        slot cannot grow (MemoryError), the timers not yet moved stay here, where the next advance() finds
        them again: none is lost.
        """
        cdef Bucket* b = &self._buckets[bucket]
        cdef uint32_t i = 0, keep = 0, n = b.len, idx
        cdef int target
        cdef int64_t epoch = -1, e
        cdef Entry* entry
        cdef bint done = False
        try:
            while i < n:
                idx = b.items[i]
                entry = &self._entries[idx]
                target = self._bucket_for(entry.tick)
                if target == bucket:
                    b.items[keep] = idx
                    entry.pos = keep
                    keep += 1
                    e = entry.tick >> self._span_bits
                    epoch = e if epoch < 0 or e < epoch else epoch
                else:
                    self._reserve(target)
                    self._link(idx, target)
                i += 1
            done = True
        finally:
            while i < n:   # only after an error: keep the rest here
                idx = b.items[i]
                b.items[keep] = idx
                self._entries[idx].pos = keep
                keep += 1
                i += 1
            b.len = keep
            if keep == 0:
                self._clear_bit(bucket)
            elif done and epoch >= 0 and (bucket >> self._bits) == self._top:   # (after an error the old bound is
                # still a lower bound; a slot below the top, refiled by next_due(), keeps its timers due there)
                self._top_epoch[bucket & (self._slots - 1)] = epoch
        return 0

    @cython.final
    cdef int _expire_current(self, double now, uint64_t limit, list taken) except -1:
        """Take every timer of the CURRENT bucket whose due is <= now and seq <= limit, by (due, seq): free
        its entry and append its id and item to `taken` (appends and ints: nothing here runs Python code)."""
        cdef Bucket* b = &self._buckets[self._current]
        cdef uint32_t i, keep = 0, n = 0, idx
        cdef bint ordered = True
        cdef Entry* entry
        cdef Fired* f
        if b.len == 0:
            return 0
        if self._scratch_cap < b.len:
            f = <Fired*>PyMem_Realloc(self._scratch, b.len * sizeof(Fired))
            if f == NULL:
                raise MemoryError()
            self._scratch = f
            self._scratch_cap = b.len
        f = self._scratch
        for i in range(b.len):
            idx = b.items[i]
            entry = &self._entries[idx]
            if entry.due <= now and entry.seq <= limit:
                f[n].due = entry.due
                f[n].seq = entry.seq
                f[n].idx = idx
                if n and (f[n - 1].due > entry.due or (f[n - 1].due == entry.due and f[n - 1].seq > entry.seq)):
                    ordered = False
                n += 1
            else:
                b.items[keep] = idx
                entry.pos = keep
                keep += 1
        b.len = keep
        if not ordered:
            qsort(f, n, sizeof(Fired), _fired_cmp)
        for i in range(n):
            idx = f[i].idx
            taken.append(_make_id(self._entries[idx].gen, idx))   # before _release bumps the generation
            taken.append(self._release(idx))
        return 0

    # -- the slot heap: next_due() in O(1) amortised (see wheel._Wheel._slot_min) --------------------

    @cython.final
    cdef void _heap_push(self, uint32_t idx) noexcept:
        """Add entry `idx`, just placed in the heap's bucket, to the slot heap. If the heap cannot grow, or
        holds twice the bucket in stale nodes, it is dropped instead: it is a cache, built again when needed."""
        cdef Fired* h
        cdef Fired node
        cdef uint64_t cap
        cdef uint32_t i, parent
        cdef Entry* entry = &self._entries[idx]
        if self._heap_len >= 2 * <uint64_t>self._buckets[self._heap_bucket].len + HEAP_MIN:
            self._heap_bucket = -1
            return
        if self._heap_len == self._heap_cap:
            cap = 2 * <uint64_t>self._heap_cap + HEAP_MIN
            h = NULL if cap > C_ID_MASK else <Fired*>PyMem_Realloc(self._heap, cap * sizeof(Fired))
            if h == NULL:
                self._heap_bucket = -1
                return
            self._heap = h
            self._heap_cap = <uint32_t>cap
        node.due = entry.due
        node.seq = entry.seq
        node.idx = idx
        i = self._heap_len
        self._heap_len += 1
        while i > 0:   # sift up
            parent = (i - 1) >> 1
            if self._heap[parent].due <= node.due:
                break
            self._heap[i] = self._heap[parent]
            i = parent
        self._heap[i] = node

    @cython.final
    cdef void _heap_sift_down(self, uint64_t i) noexcept:
        cdef uint64_t child, n = self._heap_len
        cdef Fired node = self._heap[i]
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and self._heap[child + 1].due < self._heap[child].due:
                child += 1
            if not self._heap[child].due < node.due:
                break
            self._heap[i] = self._heap[child]
            i = child
        self._heap[i] = node

    @cython.final
    cdef bint _heap_build(self, int bucket) noexcept:
        """Make the slot heap cover `bucket` (every entry of it, heapified in O(n)); False if out of memory."""
        cdef Bucket* b = &self._buckets[bucket]
        cdef uint64_t cap = 2 * <uint64_t>b.len + HEAP_MIN
        cdef uint32_t i, idx
        cdef Fired* h
        self._heap_bucket = -1
        if self._heap_cap < cap or self._heap_cap > 4 * cap:   # grow, or give back what a big slot took
            h = NULL if cap > C_ID_MASK else <Fired*>PyMem_Realloc(self._heap, cap * sizeof(Fired))
            if h == NULL:
                return False
            self._heap = h
            self._heap_cap = <uint32_t>cap
        for i in range(b.len):
            idx = b.items[i]
            self._heap[i].due = self._entries[idx].due
            self._heap[i].seq = self._entries[idx].seq
            self._heap[i].idx = idx
        self._heap_len = b.len
        i = b.len >> 1
        while i > 0:
            i -= 1
            self._heap_sift_down(i)
        self._heap_bucket = bucket
        return True

    @cython.final
    cdef uint32_t _slot_min(self, int bucket) noexcept:
        """The pool index of the entry with the earliest due in the non-empty `bucket`.

        A small bucket is scanned. A large one gets the slot heap, built once and then kept up by every
        placement into the bucket (_link, _move); the nodes of entries that left it, or moved within it,
        are stale (their seq no longer matches) and are popped here, each once: O(1) amortised per change.
        """
        cdef Bucket* b = &self._buckets[bucket]
        cdef uint32_t i, best
        cdef Fired* top
        cdef Entry* e
        if b.len > HEAP_MIN and (bucket == self._heap_bucket or self._heap_build(bucket)):
            while self._heap_len:
                top = &self._heap[0]
                e = &self._entries[top.idx]
                if e.bucket == bucket and e.seq == top.seq:
                    return top.idx
                self._heap_len -= 1
                self._heap[0] = self._heap[self._heap_len]
                self._heap_sift_down(0)
            self._heap_bucket = -1   # (cannot happen: every entry of the bucket has a node) scan instead
        best = b.items[0]
        for i in range(1, b.len):
            if self._entries[b.items[i]].due < self._entries[best].due:
                best = b.items[i]
        return best

    @cython.final
    cdef bint _filed_early(self, int bucket, uint32_t idx) noexcept:
        """Whether entry `idx`, the earliest of the non-empty slot `bucket`, was moved later and left there
        (see wheel._Wheel._filed_early)."""
        if bucket == self._current or (bucket >> self._bits) == self._top:
            return False
        return self._bucket_for(self._entries[idx].tick) != bucket

    @cython.final
    cdef int _first_slot(self) noexcept:
        """The bucket of the earliest non-empty slot, with an exact epoch bound if it is a top slot."""
        cdef int64_t tick = 0, exact
        cdef int bucket, slot
        while True:
            bucket = self._next_event(&tick)
            if (bucket >> self._bits) != self._top:
                return bucket
            exact = self._entries[self._slot_min(bucket)].tick >> self._span_bits   # the earliest due's tick
            slot = bucket & (self._slots - 1)
            if exact == self._top_epoch[slot]:
                return bucket
            self._top_epoch[slot] = exact   # was a stale lower bound (its earliest timer left): look again

    def _location(self, timer_id):
        """(level, slot, position) of a pending timer; level == levels used for CURRENT. For tests."""
        cdef int64_t idx = self._lookup(timer_id)
        if idx < 0:
            return None
        cdef Entry* entry = &self._entries[idx]
        return entry.bucket >> self._bits, entry.bucket & (self._slots - 1), entry.pos

    def _age(self, idx, gen):
        """Tests only: as wheel._Wheel._age."""
        assert 0 <= idx < self._size and self._entries[idx].bucket == C_FREE and 0 < gen < C_MAX_GEN
        self._entries[idx].gen = gen

    def _check(self):
        """Check the bookkeeping (index, buckets, bitmaps, bounds, counts, cache); AssertionError if off."""
        cdef int bucket, level, slot
        cdef uint32_t pos, idx, free = 0
        cdef Py_ssize_t seen = 0
        cdef Entry* entry
        cdef int64_t top_tick = 0
        cdef double m = math.inf
        cdef Bucket* b
        elapsed = self._elapsed
        assert not self._advancing
        assert elapsed == self._tick_of(self._now, "now")
        for bucket in range(self._current + 1):
            for pos in range(self._buckets[bucket].len):
                idx = self._buckets[bucket].items[pos]
                assert idx < self._size
                entry = &self._entries[idx]
                assert entry.bucket == bucket and entry.pos == pos, (bucket, pos, idx)
                assert entry.tick == self._tick_of(entry.due, "due")
                m = min(m, entry.due)
                if bucket == self._current:
                    assert entry.tick <= elapsed
                else:
                    level = bucket >> self._bits
                    slot = bucket & (self._slots - 1)
                    assert entry.tick > elapsed
                    if not self._filed_early(bucket, idx):
                        assert level_for(elapsed, entry.tick, self._bits, self._top) == level
                        assert slot_for(entry.tick, level, self._bits) == slot
                    else:   # moved later and left here (see wheel._Wheel._move): filed no later than its due
                        shift = (level + 1) * self._bits
                        start = ((elapsed >> shift) << shift) | (<int64_t>slot << (level * self._bits))
                        assert elapsed < start <= entry.tick, (bucket, idx, "filed after its due")
                    if level == self._top:
                        assert self._top_epoch[slot] <= entry.tick >> self._span_bits
                        self._top_event(&top_tick)
                        assert top_tick > elapsed
            seen += self._buckets[bucket].len
            if bucket != self._current:
                level = bucket >> self._bits
                slot = bucket & (self._slots - 1)
                bit = (self._bitmaps[level * self._words + (slot >> 6)] >> (slot & 63)) & 1
                assert bool(bit) == (self._buckets[bucket].len > 0), bucket
        assert seen == self._count
        idx = self._free
        while idx != C_ID_MASK:
            assert self._entries[idx].bucket == C_FREE and self._items[idx] is None
            free += 1
            idx = self._entries[idx].pos
        for idx in range(self._size):
            free += self._entries[idx].bucket == C_FREE and self._entries[idx].gen >= C_MAX_GEN
        assert free + self._count == self._size
        if self._min_valid and self._count:
            assert self._min_due == m, "stale next_due cache"
        if self._heap_bucket >= 0:   # the slot heap: a heap by due, with a node for every entry of its bucket
            live = set()
            for pos in range(self._heap_len):
                assert pos == 0 or self._heap[(pos - 1) >> 1].due <= self._heap[pos].due, "slot heap order"
                entry = &self._entries[self._heap[pos].idx]
                if entry.bucket == self._heap_bucket and entry.seq == self._heap[pos].seq:
                    assert entry.due == self._heap[pos].due
                    live.add(self._heap[pos].idx)
            b = &self._buckets[self._heap_bucket]
            assert live == {b.items[pos] for pos in range(b.len)}, "an entry of the heap's bucket has no node"


@cython.final
cdef class TimerWheel(_Wheel):
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

    @property
    def resolution(self):
        """Seconds per tick."""
        return self._resolution

    @property
    def slots(self):
        """Slots per level (a power of two)."""
        return self._slots

    @property
    def levels(self):
        """Number of levels, as given to the constructor."""
        return self._levels

    @property
    def now(self):
        """The time passed to the last advance(), or `start` before the first."""
        return self._now

    @property
    def horizon(self):
        """start + 2**62 ticks: the wheel refuses times from about here on (OverflowError)."""
        return self._start + C_MAX_TICKS * self._resolution

    def __len__(self):
        """Number of pending timers. O(1)."""
        return self._count

    def __reduce__(self):
        raise TypeError("TimerWheel cannot be pickled or copied")

    def __repr__(self):
        return (
            f"TimerWheel(resolution={self._resolution!r}, slots={self._slots}, levels={self._levels}, "
            f"now={self._now!r}, pending={self._count})"
        )

    def add(self, delay, item):
        """Add a timer due at now + `delay` seconds carrying `item`; return its id. O(1).

        Raises:
            ValueError: delay is negative or not finite.
            OverflowError: the due is more than 2**62 ticks after the wheel's start.
"""
        cdef double d = _seconds(delay, "delay")
        if d < 0:
            raise ValueError(f"delay must be >= 0, got {d!r}")
        cdef double due = self._now + d
        return self._insert(due, self._tick_of(due, "delay"), item)

    cpdef add_at(self, due, item):
        """Add a timer due at the absolute time `due`; return its id. O(1).

        A due at or before `now` is allowed: the timer comes out at the next advance().

        Raises:
            ValueError: due is not finite.
            OverflowError: due is more than 2**62 ticks after the wheel's start.
"""
        cdef double at = _seconds(due, "due")
        return self._insert(at, self._tick_of(at, "due"), item)

    cpdef cancel(self, timer_id):
        """Remove a pending timer. O(1).

        Returns:
            True if it was pending and is now removed; False if the id is unknown, fired or cancelled.

        Raises:
            TypeError: timer_id is not an int.
"""
        return self._cancel_idx(self._lookup(timer_id))

    def reschedule(self, timer_id, delay):
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
        cdef double d = _seconds(delay, "delay")
        if d < 0:
            raise ValueError(f"delay must be >= 0, got {d!r}")
        cdef double due = self._now + d
        return self._move(timer_id, due, self._tick_of(due, "delay"))

    cpdef reschedule_at(self, timer_id, due):
        """Move a pending timer to the absolute time `due`, keeping its id. O(1); as reschedule().

        A due at or before `now` comes out at the next advance().

        Raises:
            TypeError: timer_id is not an int.
            ValueError: due is not finite.
            OverflowError: due is more than 2**62 ticks after the wheel's start.
"""
        _check_id(timer_id)
        cdef double at = _seconds(due, "due")
        return self._move(timer_id, at, self._tick_of(at, "due"))

    def due(self, timer_id):
        """The exact due of a pending timer, or None. O(1). TypeError if timer_id is not an int."""
        cdef int64_t idx = self._lookup(timer_id)
        return None if idx < 0 else self._entries[idx].due

    def __contains__(self, timer_id):
        """`timer_id in wheel`: True while the timer is pending. TypeError if timer_id is not an int."""
        return self._lookup(timer_id) >= 0

    def clear(self):
        """Remove every pending timer; their ids become stale. `now` is kept. O(levels x slots + pending).

        Timers added while it runs (by a finalizer) may survive it.
"""
        cdef int bucket
        cdef uint32_t i
        cdef Bucket* b
        cdef list dropped = []   # the items die after the bookkeeping: a __del__ may call back into us
        for bucket in range(self._current + 1):
            b = &self._buckets[bucket]
            for i in range(b.len):
                dropped.append(self._release(b.items[i]))
            b.len = 0
        memset(self._bitmaps, 0, (self._top + 1) * self._words * sizeof(uint64_t))
        self._min_valid = False
        self._heap_bucket = -1
        self._heap_len = 0
        del dropped

    def advance(self, now):
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
        cdef double t = _seconds(now, "now")
        cdef int64_t target
        cdef list taken                 # id, item, id, item, ...: the timers taken, their entries freed
        cdef int64_t tick = 0
        cdef int bucket
        cdef Py_ssize_t i
        cdef uint64_t limit = self._seq
        if self._advancing:   # set before anything that could call out, as in the Python twin
            raise RuntimeError("advance() must not be called while an advance() of this wheel is under way")
        self._advancing = True
        try:
            if t < self._now:
                raise ValueError(f"now must not go backwards: {t!r} < wheel.now {self._now!r}")
            target = self._tick_of(t, "now")
            taken = []
            self._expire_current(t, limit, taken)
            while True:
                bucket = self._next_event(&tick)
                if bucket < 0 or tick > target:
                    break
                self._elapsed = tick
                self._cascade(bucket)
                self._expire_current(t, limit, taken)
            self._elapsed = target
            self._now = t
            if taken:
                self._min_valid = False
            # The wheel is whole and the fired timers are out of it: the tuples may now run the GC.
            return [(taken[i], taken[i + 1]) for i in range(0, len(taken), 2)]
        finally:
            self._advancing = False

    def next_due(self):
        """The exact earliest due among pending timers, or None when there are none.

        Cached between changes; when it must be found again, only the earliest non-empty slot is looked
        at (the CURRENT bucket, or the first slot after the current tick): scanned when small, through
        the slot heap when large. O(1) amortised after the earliest timer is cancelled or moved.
"""
        cdef int bucket
        cdef double m
        if self._count == 0:
            return None
        if self._min_valid:
            return self._min_due
        cdef uint32_t idx, i
        while True:
            bucket = self._current if self._buckets[self._current].len else self._first_slot()
            idx = self._slot_min(bucket)
            if not self._filed_early(bucket, idx):
                m = self._entries[idx].due
                break
            try:
                self._cascade(bucket)   # every timer of the slot was moved later: file them where they are due
            except MemoryError:   # no room to file them (they stay where they are): read every entry
                m = INFINITY
                for i in range(self._size):
                    if self._entries[i].bucket != C_FREE and self._entries[i].due < m:
                        m = self._entries[i].due
                break
        self._min_due = m
        self._min_valid = True
        return m


# -- the engine's task table ---------------------------------------------------------------------------

cdef enum:
    TABLE_SLACK = 1024      # window slots tolerated beyond the rules below before they act
cdef long long TABLE_MAX = 1LL << 62   # keys from here on live in the dict: base + index never overflows


@cython.final
cdef class TaskTable:
    """The job engine's tasks by id, a dict for ids handed out 1, 2, 3, ... (see wheel.TaskTable).

    Tasks live in a window, a list indexed by id - base, while their ids are recent; older ones, still
    pending when the window moves on, in a dict. A new id appends to the window; a removed one leaves None,
    and the window's front moves past the Nones. When the window is mostly holes (long-lived tasks pin its
    front while the rest come and go) its live tasks move to the dict and the window starts afresh. Every
    operation is O(1) amortised; a pending task costs one list slot (8 bytes) instead of a dict entry.

    Re-entrancy: nothing here runs Python code while the table changes: the list and the dict grow
    without allocating tracked objects, and a removed task is handed back to the caller, never dropped.
    """

    def __cinit__(self):
        self._items = []
        self._old = {}
        self._base = 0
        self._start = 0
        self._live = 0

    def __len__(self):
        return self._live + len(self._old)

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        task = self.get(key)
        if task is None:
            raise KeyError(key)
        return task

    def __setitem__(self, key, task):
        self._put(key, task)

    def __delitem__(self, key):
        if self.pop(key) is None:
            raise KeyError(key)

    @cython.final
    cdef Py_ssize_t _index(self, object key) except -2:
        """key's index in the window, or -1 when it is outside it (a key of any other type: -1 too)."""
        cdef int overflow = 0
        cdef long long v
        if not PyLong_Check(key):  # (an int subclass too: it hashes and compares as its value)
            return -1
        v = PyLong_AsLongLongAndOverflow(key, &overflow)
        if overflow or v < self._base:
            return -1
        v -= self._base
        if v < self._start or v >= len(self._items):
            return -1
        return <Py_ssize_t>v

    cpdef get(self, key, default=None):
        """The task of id `key`, or `default`."""
        cdef Py_ssize_t i = self._index(key)
        if i >= 0:
            task = self._items[i]
            return default if task is None else task
        if self._old:
            return self._old.get(key, default)
        return default

    cpdef pop(self, key, default=None):
        """Remove and return the task of id `key`, or return `default`."""
        cdef Py_ssize_t i = self._index(key)
        cdef list items = self._items
        if i < 0:
            if self._old:
                return self._old.pop(key, default)
            return default
        task = items[i]
        if task is None:
            return default
        items[i] = None
        self._live -= 1
        if items[self._start] is None:  # the front moves past the holes
            while self._start < len(items) and items[self._start] is None:
                self._start += 1
            if self._start > TABLE_SLACK and 2 * self._start > len(items):
                del items[: self._start]
                self._base += self._start
                self._start = 0
        return task

    @cython.final
    cdef int _put(self, object key, object task) except -1:
        cdef int overflow = 0
        cdef long long v
        cdef Py_ssize_t n
        cdef list items = self._items
        if task is None:
            raise TypeError("a TaskTable holds tasks, not None")
        if not PyLong_CheckExact(key):
            _py_identifier(key, "task_id")
        v = PyLong_AsLongLongAndOverflow(key, &overflow)
        if overflow or v >= TABLE_MAX or v < self._base + self._start:  # below the window, or huge: the dict
            self._old[key] = task
            return 0
        v -= self._base
        n = len(items)
        if v < n:
            if items[v] is None:
                self._live += 1
            items[v] = task
            return 0
        if n - self._start > 2 * self._live + TABLE_SLACK or v > n + TABLE_SLACK:
            self._evict()  # mostly holes, or far ahead: the window starts afresh at key
            self._base = <long long>key
            v = 0
            n = 0
            items = self._items
        while n < v:  # ids given back or burnt by a call that failed: holes
            items.append(None)
            n += 1
        items.append(task)
        self._live += 1
        return 0

    @cython.final
    cdef int _evict(self) except -1:
        """Move the window's tasks to the dict and empty it (every id in it is below the next base)."""
        cdef list items = self._items
        cdef Py_ssize_t i
        for i in range(self._start, len(items)):
            task = items[i]
            if task is not None:
                self._old[self._base + i] = task
        del items[:]  # (no new list: an allocation could run a finalizer with the tasks in both places)
        self._start = 0
        self._live = 0
        return 0

    def _layout(self):
        """Tests only: (base, front, window length, tasks in the window, tasks in the dict)."""
        return self._base, self._start, len(self._items), self._live, len(self._old)

    cpdef list values(self):
        """Every task, in id order."""
        cdef dict old = self._old  # (held: a finalizer that the sort runs may clear the table)
        cdef list out = [old[key] for key in sorted(old)]
        cdef Py_ssize_t i
        for i in range(self._start, len(self._items)):
            task = self._items[i]
            if task is not None:
                out.append(task)
        return out

    cpdef clear(self):
        """Forget every task."""
        fresh_items, fresh_old = [], {}  # (allocated first: the GC may run a finalizer that reads the table)
        items, old = self._items, self._old
        self._items = fresh_items
        self._old = fresh_old
        self._base += len(items)
        self._start = 0
        self._live = 0
        del items, old  # (dropped only now: a finalizer that runs here finds the table empty)
