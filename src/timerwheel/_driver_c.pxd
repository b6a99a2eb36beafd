# The compiled build of the drivers' shared base: Cython compiles _driver.py itself into the module
# timerwheel._driver_c (see setup.py), as it does the engine. DriverBase stays a Python class there (its
# methods compiled): as a cdef class with typed fields its hot paths cost half as many instructions, but
# on CPython 3.11 the Python subclasses of an extension type lose the interpreter's fast instance
# attributes (41 ns per `self.x` read against 12), which made TimerHandle.reset and the drivers' own
# Python code 25% slower. What this file may say: the types of module constants and functions. It must
# never change what the code does.
cdef object _NEW, _RUNNING, _AS_COROUTINE, _FUNCTION, _PLAIN_CALLABLES
cdef long _CO_COROUTINE


cpdef bint is_async(object fn) except -1
