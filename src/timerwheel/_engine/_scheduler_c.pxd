# The compiled build of the job engine: Cython compiles scheduler.py itself into the module
# timerwheel._engine._scheduler_c (see setup.py), and this file, found by that module's name, gives its records C
# types. One source, two builds: the pure-Python engine is scheduler.py imported as it is, and every rule
# is written once, there. What this file may say: the types of attributes and locals, and which methods
# become cpdef (callable from C without a Python call). It must never change what the code does.
cimport cython

from timerwheel._core._wheel_c cimport TaskTable as _CTable
from timerwheel._core._wheel_c cimport TimerWheel as _CWheel

cdef double _INF, _NAN
cdef Py_ssize_t _KEYS, _HANDLES, _TIMEOUTS, _SLEEPS, _DEADLINES, _KINDS
cdef bint _COMPILED
cdef object _FIXED_DELAY, _SKIP_IF_RUNNING, _FIXED_RATE, _NO_OPTIONS


cdef class Timer:
    cdef public double due
    cdef public object id


cdef class JobContext:
    cdef public object cancelled
    cdef public object fence
    cdef public double scheduled_for
    cdef public object task_id
    cdef public bint timed_out
    cdef public object timeout


cdef class _Plan:
    cdef public object interval
    cdef public object mode
    cdef public object missed
    cdef public double first_due
    cdef public object cron
    cdef public object wall
    cdef public bint overdue
    cdef public double warned


cdef class _Task:
    cdef public object fn
    cdef public tuple args
    cdef public object kwargs
    cdef public object id
    cdef public long long timer_id
    cdef public double due
    cdef public object options
    cdef public object waiting
    cdef public _Plan plan
    cdef public long long last_call
    cdef public int running
    cdef public unsigned char live  # (bint is a C int: these pack beside `running` in 8 bytes)
    cdef public unsigned char repeat


cdef _Plan _ONE_SHOT


@cython.locals(plan=_Plan)
cdef _Plan _own_plan(_Task task)


cdef class Run:
    cdef public _Engine _engine
    cdef public int _state
    cdef public object context
    cdef public object deadline
    cdef public double scheduled_for
    cdef public double started_at
    cdef public _Task task
    cdef public bint timed_out

    @cython.locals(engine=_Engine, task=_Task)
    cpdef start(self)

    @cython.locals(task=_Task)
    cpdef call(self)

    @cython.locals(engine=_Engine, task=_Task, finished=double)
    cpdef finish(self, error=*)


cdef class _Reports:
    cdef public object error_handler
    cdef public list errors
    cdef public object logger
    cdef public object observer
    cdef public object propagate


cdef class _Calendar:
    cdef public object clock
    cdef public object groups
    cdef public double now
    cdef public double offset
    cdef public object tasks


cdef class _Engine:
    cdef public object _clock
    cdef public object _read
    cdef public object _store
    cdef public _CWheel _wheel
    cdef public double _horizon
    cdef public double _latest
    cdef public _Reports _reports
    cdef public _CTable _tasks
    cdef public long long _last_id
    cdef public long long _executed, _cancelled, _running, _dropped, _skipped, _failed
    cdef public long long _waiting, _calls
    cdef long long _timers[6]  # by kind: TIMER_KINDS, then run deadlines (_KINDS of them; see _count)
    cdef object _kind_class
    cdef Py_ssize_t _kind_index
    cdef public list _batch
    cdef public bint _draining
    cdef public object _driver
    cdef public object _wake
    cdef public double wake_below
    cdef public _Calendar _cal
    cdef dict __dict__  # attributes of the user's own, as on any Python object
    cdef object __weakref__  # weakref.ref(sched), WeakMethod(sched.run_pending), weakref.finalize

    @cython.locals(task=_Task, calls="long long", started=int, taken="Py_ssize_t", batch=list, deferred=list)
    cpdef int drain(self, double now, object driver=*) except -1

    cpdef execute(self, Run run)

    @cython.locals(run=Run, scheduled_for=double, plan=_Plan)
    cpdef int _fire(self, _Task task, double now, object driver) except -1

    @cython.locals(timer_id="long long")
    cpdef _arm(self, _Task task, double due)

    @cython.locals(kind="Py_ssize_t")
    cpdef add_timer(self, Timer timer, double due)

    @cython.locals(timer_id=object)
    cpdef move_timer(self, Timer timer, double due)

    @cython.locals(kind="Py_ssize_t")
    cpdef cancel_timer(self, Timer timer)

    @cython.locals(total="long long", kind="Py_ssize_t")
    cpdef long long _armed_timers(self) except -1

    @cython.locals(wheel=_CWheel, timer_id=object)
    cpdef long long _add_at(self, double due, object item) except -1

    @cython.locals(wheel=_CWheel)
    cpdef bint _cancel_at(self, long long timer_id) except -1

    @cython.locals(wheel=_CWheel)
    cpdef bint _move_at(self, long long timer_id, double due) except -1

    @cython.locals(due=double, plan=_Plan)
    cpdef _rearm_on_grid(self, _Task task, double scheduled_for, double now)

    @cython.locals(plan=_Plan)
    cpdef _rearm_after(self, _Task task, double finished_at)


cdef class Scheduler(_Engine):
    @cython.locals(span=double, now=double)
    cpdef schedule_positional(self, object delay, object fn, object interval, object args, object kwargs, object mode,
                       object missed, object options)

    cpdef schedule_at_positional(self, object when, object fn, object interval, object args, object kwargs, object mode,
                       object missed, object options)

    @cython.locals(task=_Task, timer_id="long long")
    cdef _add(self, double due, object fn, object interval, object args, object kwargs, object mode,
              object missed, object options, str name)

    @cython.locals(task=_Task, timer_id="long long")
    cpdef cancel(self, object task_id)

    @cython.locals(task=_Task, due=double, span=double, now=double, timer_id="long long", plan=_Plan)
    cpdef reschedule(self, object task_id, object delay)


@cython.locals(run=Run)
cdef Run _new_run(_Engine engine, _Task task, double scheduled_for)


cdef int _count(_Engine engine, Py_ssize_t kind, long long change) except -1

@cython.locals(kind="Py_ssize_t")
cdef inline Py_ssize_t _kind_of(_Engine engine, object timer) except? -1


@cython.locals(task=_Task)
cdef _Task _new_task(object task_id, object fn, object interval, tuple args, object kwargs, object mode,
                     object missed, double due, object options)
