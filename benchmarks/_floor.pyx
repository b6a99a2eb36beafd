# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True, binding=False
"""The floor of an add+cancel loop: the same calls into a Cython extension type, doing nothing.

Built by benchmarks/conftest.py with the first line of src/timerwheel/_core_c.pyx as its directives, so
argument passing and method lookup cost the same as the wheel's; only the work inside is missing.
"""


cdef class Floor:
    def add(self, delay, item):
        return 1

    def cancel(self, timer_id):
        return True
