# What the compiled drivers' base cimports from the engine, by the name it imports it under (`from .._engine
# import Timer`): the compiled engine's Timer (the same layout as in _scheduler_c.pxd; the type is taken from
# timerwheel._engine at import, and Cython checks its size then), so that a driver's timer extends it as C.
cdef class Timer:
    cdef public double due
    cdef public object id
