# What the compiled engine (timerwheel._engine._scheduler_c) sees of the Cython core: the wheel's storage, so that
# it calls add_at(), cancel() and reschedule_at() as C functions, without a Python call. The fields and
# the storage's methods are documented where they are defined, in _wheel_c.pyx.
cimport cython
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

ctypedef struct Entry:      # wheel._Entry, 40 bytes
    double due
    int64_t tick
    uint64_t seq
    uint64_t gen
    int32_t bucket
    uint32_t pos

ctypedef struct Bucket:     # one slot's list of pool indices
    uint32_t* items
    uint32_t len
    uint32_t cap

ctypedef struct Fired:      # a due timer, sorted by (due, seq) before it is handed out
    double due
    uint64_t seq
    uint32_t idx


cdef class _Wheel:
    cdef double _resolution, _ticks_per_second, _start, _now, _min_due
    cdef int _slots, _levels, _bits, _top, _span_bits, _current, _words
    cdef int64_t _elapsed
    cdef Bucket* _buckets
    cdef uint64_t* _bitmaps         # _words 64-bit words per used level
    cdef int64_t* _top_epoch
    cdef Entry* _entries
    cdef uint32_t _size, _capacity  # pool entries in use (ever handed out) / allocated
    cdef uint32_t _free
    cdef Py_ssize_t _count
    cdef uint64_t _seq
    cdef bint _min_valid
    cdef bint _advancing
    cdef Fired* _scratch
    cdef uint32_t _scratch_cap
    cdef Fired* _heap               # the slot heap: a min-heap by due over one bucket (see _slot_min)
    cdef uint32_t _heap_len, _heap_cap
    cdef int _heap_bucket           # the bucket it covers, or -1: none
    cdef list _items                # a Python list beside the pool: the GC sees the items

    @cython.final
    cdef int64_t _tick_of(self, double t, str name) except -2
    @cython.final
    cdef int _bucket_for(self, int64_t tick) noexcept
    @cython.final
    cdef int _reserve(self, int bucket) except -1
    @cython.final
    cdef int _grow_bucket(self, int bucket) except -1
    @cython.final
    cdef void _link(self, uint32_t idx, int bucket) noexcept
    @cython.final
    cdef void _clear_bit(self, int bucket) noexcept
    @cython.final
    cdef void _unlink(self, uint32_t idx) noexcept
    @cython.final
    cdef int _grow_pool(self) except -1
    @cython.final
    cdef uint32_t _alloc(self) noexcept
    @cython.final
    cdef object _release(self, uint32_t idx)
    @cython.final
    cdef int64_t _lookup(self, object timer_id) except -2
    @cython.final
    cdef int64_t _lookup_id(self, int64_t v) noexcept
    @cython.final
    cdef object _insert(self, double due, int64_t tick, object item)
    @cython.final
    cdef int64_t _insert_idx(self, double due, int64_t tick, object item) except -1
    @cython.final
    cdef object _move(self, object timer_id, double due, int64_t tick)
    @cython.final
    cdef bint _move_idx(self, int64_t idx, double due, int64_t tick) except -1
    @cython.final
    cdef int64_t _add_id(self, double due, object item) except -1
    @cython.final
    cdef bint _cancel_id(self, int64_t timer_id) except -1
    cdef bint _cancel_idx(self, int64_t idx) except -1
    @cython.final
    cdef bint _move_id(self, int64_t timer_id, double due) except -1
    @cython.final
    cdef int _next_event(self, int64_t* tick) noexcept
    @cython.final
    cdef int _top_event(self, int64_t* tick) noexcept
    @cython.final
    cdef int _cascade(self, int bucket) except -1
    @cython.final
    cdef int _expire_current(self, double now, uint64_t limit, list taken) except -1
    @cython.final
    cdef void _heap_push(self, uint32_t idx) noexcept
    @cython.final
    cdef void _heap_sift_down(self, uint64_t i) noexcept
    @cython.final
    cdef bint _heap_build(self, int bucket) noexcept
    @cython.final
    cdef uint32_t _slot_min(self, int bucket) noexcept
    @cython.final
    cdef bint _filed_early(self, int bucket, uint32_t idx) noexcept
    @cython.final
    cdef int _first_slot(self) noexcept


@cython.final
cdef class TimerWheel(_Wheel):
    cpdef add_at(self, due, item)
    cpdef cancel(self, timer_id)
    cpdef reschedule_at(self, timer_id, due)


@cython.final
cdef class TaskTable:
    cdef list _items            # the window: _items[i] is the task of id _base + i, or None
    cdef dict _old              # tasks whose ids are below the window
    cdef long long _base
    cdef Py_ssize_t _start      # _items[:_start] are None
    cdef Py_ssize_t _live       # tasks in the window

    cdef Py_ssize_t _index(self, object key) except -2
    cpdef get(self, key, default=*)
    cpdef pop(self, key, default=*)
    cdef int _put(self, object key, object task) except -1
    cdef int _evict(self) except -1
    cpdef list values(self)
    cpdef clear(self)
