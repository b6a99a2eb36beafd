"""The core wheel under keep-alive traffic at 10^6 pending timers: what a timer pushed later costs.

Two workloads, each timed in its own rounds (the medians are printed):

- **push later**: `reschedule_at(tid, due + U(1, 30) s)` of a random timer among 10^6, time standing
  still (the Python loop's own cost, measured alone, is subtracted);
- **keep-alive**: 10 s of traffic in steps of 5 ms: per step, 500 random timers pushed to now + 30 s,
  `advance(now)` (a timer that fires is a connection closed: a new one takes its place) and `next_due()`.

    python benchmarks/wheel_pushes.py                      # this checkout (~1 minute)
    PYTHONPATH=/path/to/other/build python benchmarks/wheel_pushes.py   # another version

Times on a shared machine are noisy: compare versions by interleaved runs.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

N = 10**6


def push_later(rounds: int) -> float:
    from timerwheel import TimerWheel

    rnd = random.Random(1)
    wheel = TimerWheel()
    ids = [wheel.add(rnd.uniform(30, 60), i) for i in range(N)]
    dues = [wheel.due(t) for t in ids]
    picks = [rnd.randrange(N) for _ in range(N)]
    steps = [rnd.uniform(1, 30) for _ in range(N)]
    move = wheel.reschedule_at
    runs = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for k in range(N):
            i = picks[k]
            due = dues[i] + steps[k]
            dues[i] = due
            move(ids[i], due)
        moved = time.perf_counter() - t0
        t0 = time.perf_counter()
        for k in range(N):  # the same loop without the move
            i = picks[k]
            due = dues[i] + steps[k]
            dues[i] = due
        runs.append((moved - (time.perf_counter() - t0)) * 1e9 / N)
    return statistics.median(runs)


def keep_alive(rounds: int) -> float:
    from timerwheel import TimerWheel

    runs = []
    for _ in range(rounds):
        rnd = random.Random(2)
        wheel = TimerWheel()
        ids = [wheel.add(rnd.uniform(0, 30), i) for i in range(N)]
        picks = [rnd.randrange(N) for _ in range(N)]
        move, advance, add_at, next_due = wheel.reschedule_at, wheel.advance, wheel.add_at, wheel.next_due
        now = 0.0
        t0 = time.perf_counter()
        for step in range(2000):
            now += 0.005
            for k in range(step * 500, step * 500 + 500):
                i = picks[k % N]
                move(ids[i], now + 30.0)
            for _, item in advance(now):
                ids[item] = add_at(now + 30.0, item)
            next_due()
        runs.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(runs)


def main() -> None:
    import timerwheel

    print(f"timerwheel {timerwheel.__file__} ({timerwheel.BACKEND})", file=sys.stderr)
    print(f"push later, 10^6 pending: {push_later(3):.0f} ns per reschedule_at (median of 3 rounds)")
    print(f"keep-alive, 10^6 pending: {keep_alive(3):.0f} ms for 10 s of traffic (median of 3 rounds)")


if __name__ == "__main__":
    main()
