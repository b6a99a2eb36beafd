"""The workloads: what every competitor does, defined once (the CLI and benchmarks/ both use these).

On `size` pending timers, due FAR to 2 * FAR seconds ahead (so none fires while measuring):

    schedule_cancel  add a timer due in DELAY s and cancel it: the timeout that never fires
    reset            move a pending timer later, past every other: the keep-alive reset (round-robin)
    next_due         move the earliest timer after all others, then ask when the next is due (the query a
                     driver makes after its earliest timer changed; where there is a public way to ask)
    schedule_expire  add `size` timers due over the next second (1000 distinct dues, 1 ms apart) and run
                     them all, moving time in 1 ms steps: per timer
    memory           bytes allocated per pending timer, with the handle or id a caller keeps
"""

from __future__ import annotations

import random

__all__ = [
    "BATCH",
    "DELAY",
    "FAR",
    "OPERATIONS",
    "RESET",
    "SEED",
    "STEPS",
    "Counter",
    "Unsupported",
    "delays",
    "noop",
]

OPERATIONS = ("schedule_cancel", "reset", "next_due", "schedule_expire", "memory")
BATCH = 1000  # operations between two yields to an event loop
FAR = 1000.0  # pending timers are due FAR to 2 * FAR seconds ahead
DELAY = 50.0  # what schedule_cancel adds: a short deadline among long idle timers
STEPS = [k / 1000 for k in range(1, 1001)]  # schedule_expire moves time in 1 ms steps
RESET = 3 * FAR  # reset moves a timer to RESET + k s from now, k growing by 1 per call: always later
SEED = 20240611  # of delays(): the same random population for everything measured with it


class Unsupported(Exception):
    """The competitor has no public way to do this operation."""


def noop() -> None:
    """The callback of every timer that is measured: does nothing."""


class Counter:
    """A callback that counts its calls (schedule_expire checks that every timer ran, once)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def delays(n: int, low: float = 1.0, high: float = 100.0) -> list[float]:
    """`n` delays uniform in [low, high), the same on every run (seeded with SEED)."""
    rnd = random.Random(SEED).random
    span = high - low
    return [low + span * rnd() for _ in range(n)]
