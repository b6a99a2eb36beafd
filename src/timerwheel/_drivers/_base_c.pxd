# The compiled build of the drivers' shared base: Cython compiles base.py itself into the module
# timerwheel._drivers._base_c (see setup.py), as it does the engine. DriverBase stays a Python class there (its
# methods compiled): as a cdef class with typed fields its hot paths cost half as many instructions, but
# on CPython 3.11 the Python subclasses of an extension type lose the interpreter's fast instance
# attributes (41 ns per `self.x` read against 12), which made TimerHandle.reset and the drivers' own
# Python code 25% slower. What the hot paths read lives instead in _Hot, an extension type with C fields,
# one attribute of the driver; they call the compiled engine as C. TimerHandle (a TimerHandle's fields and
# methods) is an extension type: its Python subclasses declare __slots__ and keep the fast attributes.
# What this file may say: the types of module constants, of _Hot's and TimerHandle's fields, and of
# functions. It must never change what the code does.
cimport cython

from timerwheel._engine._scheduler_c cimport Scheduler as _CScheduler
from timerwheel._engine cimport Timer

cdef double _INF
cdef int _PENDING, _DONE, _CANCELLED
cdef object _NEW, _RUNNING, _AS_COROUTINE, _FUNCTION, _PLAIN_CALLABLES
cdef long _CO_COROUTINE


cdef class _Hot:
    cdef public _CScheduler engine
    cdef public object missed
    cdef public bint coroutines, locking, checks_caller, idle_hook, running, accepting
    cdef public object acquire, release
    cdef public object loop, time
    cdef public bint exact, own_check
    cdef public double horizon

    cpdef sync(self, object state, object fault)


cpdef bint is_async(object fn) except -1

cdef _options(bint coroutines, object fn, object context, object timeout)

cdef bint _caller_ok(_Hot hot, object driver) except -1

cdef _check_thread(_Hot hot, object driver)


@cython.locals(engine=_CScheduler)
cdef _add(_Hot hot, object driver, bint at, object time_arg, object fn, object interval, object args,
          object kwargs, object mode, object missed, object context, object timeout)

@cython.locals(engine=_CScheduler)
cdef _cancel(_Hot hot, object driver, object task_id)

@cython.locals(engine=_CScheduler)
cdef _reschedule(_Hot hot, object driver, object task_id, object delay)

cdef class TimerHandle(Timer):
    cdef public object _args, _callback, _context, _fallback, _sched
    cdef public _Hot _hot
    cdef public int _state
    cdef public double _when

    @cython.locals(hot=_Hot, due=double)
    cpdef reset(self, object delay)

    @cython.locals(hot=_Hot)
    cpdef cancel(self)


@cython.locals(hot=_Hot, timer=TimerHandle)
cpdef timeout_reschedule(object self, object when)

cdef int _fill(TimerHandle handle, object sched, _Hot hot, double when, object callback, object args,
               object context) except -1

@cython.locals(hot=_Hot, when=double, timer=TimerHandle)
cpdef call_later_fast(object sched, object cls, object delay, object callback, tuple args, object context)

@cython.locals(hot=_Hot, handle=TimerHandle)
cdef bint _enter_wheel(object self, double when, object task) except -1

cpdef timeout_init(object self, object when, object sched)

@cython.locals(hot=_Hot)
cpdef timeout_fast(object sched, object delay)

cdef object _timeout_class, _timeout_handle, _created, _entered, _exited, _current_task
cdef bint _notes_cancelling, _init_inline

cdef bint _on_loop_thread(_Hot hot, object driver, bint idle) except -1
