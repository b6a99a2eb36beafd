# The compiled build of the drivers' shared base: Cython compiles _driver.py itself into the module
# timerwheel._driver_c (see setup.py), with the C types below, as it does the engine (_scheduler_c.pxd says
# why). The base's hot paths (schedule, cancel, reschedule) then read typed fields and call the compiled
# engine as C. What this file may say: the types of attributes and locals, and which methods become cpdef.
# It must never change what the code does.
cimport cython

from timerwheel._scheduler_c cimport Scheduler as _CScheduler

cdef object _NEW, _RUNNING, _AS_COROUTINE, _FUNCTION, _PLAIN_CALLABLES
cdef long _CO_COROUTINE


cdef class DriverBase:
    cdef public dict _engine_kwargs
    cdef public object _missed
    cdef public object _logger
    cdef public object _lock
    cdef object _acquire, _release
    cdef public object _state
    cdef public object _fault
    cdef public long long _clock_errors
    cdef public _CScheduler _engine
    cdef public bint _coroutines
    cdef public bint _checks_caller
    cdef public bint _idle_hook
    cdef public bint _locking
    cdef public object _caller_loop
    cdef dict __dict__  # the subclasses' own attributes
    cdef object __weakref__

    # C only in the compiled build (no subclass overrides them; nothing else calls them)
    cdef _check_thread(self)

    @cython.locals(locking=bint, engine=_CScheduler)
    cdef _add(self, bint at, object time_arg, object fn, object interval, object args, object kwargs,
              object mode, object missed, object context, object timeout)

    cdef _options(self, object fn, object context, object timeout)


cpdef bint is_async(object fn) except -1
