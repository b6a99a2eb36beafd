"""A typed use of the public API: `mypy --strict` checks it in CI, so the package's types stay usable."""

from __future__ import annotations

import timerwheel
from timerwheel import JobEvent, Missed, RepeatMode, Scheduler, Stats, TimerInfo, TimerWheel
from timerwheel.testing import ManualClock


def idle_timeouts(wheel: TimerWheel, connections: list[str]) -> dict[str, int]:
    """One idle timeout per connection; returns the timer ids."""
    return {conn: wheel.add(30.0, conn) for conn in connections}


def expired(wheel: TimerWheel, now: float) -> list[str]:
    return [str(item) for _, item in wheel.advance(now)]


def main() -> None:
    wheel = TimerWheel(0.001)
    ids = idle_timeouts(wheel, ["a", "b"])
    assert wheel.reschedule(ids["a"], 60.0)
    due: float | None = wheel.next_due()
    assert due == 30.0 and expired(wheel, 31.0) == ["b"]

    clock = ManualClock()
    events: list[JobEvent] = []
    sched = Scheduler(clock, observer=events.append)
    task: int = sched.schedule(
        1.0, print, 2.0, args=("tick",), mode=RepeatMode.FIXED_DELAY, missed=Missed.SKIP
    )
    clock.advance(1.0)
    ran: int = sched.run_pending()
    stats: Stats = sched.stats()
    infos: list[TimerInfo] = sched.pending()
    assert ran == 1 and stats.executed == 1 and infos[0].id == task and events[0].task_id == task
    print(timerwheel.BACKEND, timerwheel.__version__)


if __name__ == "__main__":
    main()
