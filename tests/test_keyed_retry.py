"""Retries (retry=Retry(attempts, backoff, cap)): a failed run's fire is tried again, an attempt more
each time (ctx.fence.attempt, the fire log's attempts), after a backoff that doubles up to the cap,
never at or past the key's next fire (it gives way); while it waits the fire stays unfinished in a
durable store, so that a process that dies meanwhile leaves it to `recover`. Time comes from a
ManualClock."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from timerwheel import JobContext, KeyState, MemoryStore, Reschedule, Retry, SQLiteStore
from timerwheel.testing import ManualClock

from . import test_keyed_pause as pause
from .test_durable import crash, down
from .test_keyed_pause import T0

clock, store = pause.clock, pause.store  # (the fixtures: a ManualClock; a MemoryStore, a SQLiteStore)


class Life(pause.Life):
    """A life (see test_durable) whose keys fire every 10 s; a run records (key, fire, attempt, start),
    in seconds after T0, and fails while its attempt is at most data["fail"] (every time: -1)."""

    def __init__(self, store: Any, clock: ManualClock, **kwargs: Any) -> None:
        self.attempts: list[tuple[Any, float, int, float]] = []
        kwargs.setdefault("context", True)
        kwargs.setdefault("run", self._fails)
        super().__init__(store, clock, **kwargs)

    def _fails(self, ctx: JobContext, key: Any, data: Any) -> None:
        attempt = ctx.fence.attempt  # type: ignore[union-attr]
        self.attempts.append((key, ctx.scheduled_for - T0, attempt, self.clock.wall() - T0))
        fail = (data or {}).get("fail", 0)
        if fail == -1 or attempt <= fail:
            raise RuntimeError(f"attempt {attempt} fails")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


@pytest.mark.parametrize("reschedule", [Reschedule.AFTER_FINISH, Reschedule.BEFORE_RUN])
def test_a_failed_run_is_tried_again_after_a_backoff_that_doubles(
    store: Any, clock: ManualClock, reschedule: Reschedule
) -> None:
    life = Life(store, clock, reschedule=reschedule, retry=Retry(3, backoff=1.0))
    life.keyed.upsert("k", {"fail": 2})
    life.keyed.start()
    life.advance(10)
    assert life.attempts == [("k", 10.0, 1, 10.0)]
    info = life.keyed.get("k")
    assert info is not None and info.state is KeyState.PENDING and info.next_run_at == at(11)
    assert info.last_error == "RuntimeError: attempt 1 fails" and info.retry == Retry(3, 1.0, 60.0)
    life.advance(5)
    # the same fire, attempts 2 (1 s after the first ended) and 3 (2 s after the second): it succeeds
    assert life.attempts == [("k", 10.0, 1, 10.0), ("k", 10.0, 2, 11.0), ("k", 10.0, 3, 13.0)]
    assert life.keyed.stats().retried == 2 and life.keyed.stats().failed == 2
    life.advance(10)
    assert life.attempts[3:] == [("k", 20.0, 1, 20.0), ("k", 20.0, 2, 21.0), ("k", 20.0, 3, 23.0)]
    life.keyed.close()


def test_a_fire_runs_attempts_times_at_most_then_ends_failed(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, retry=Retry(2, backoff=1.0))
    life.keyed.upsert("k", {"fail": -1})
    life.keyed.start()
    life.advance(15)
    assert [(fire, attempt) for _, fire, attempt, _ in life.attempts] == [(10.0, 1), (10.0, 2)]
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == at(20)
    assert info.last_error == "RuntimeError: attempt 2 fails"
    life.keyed.close()


def test_a_retry_gives_way_to_the_next_fire(store: Any, clock: ManualClock) -> None:
    """Every 10 s, backoff 4 s: the first retry comes at 14, the second would come at 14 + 8 = 22, past
    the next fire (20): there is none, the fire of 10 ends failed, and the fire of 20 runs on time."""
    life = Life(store, clock, retry=Retry(5, backoff=4.0))
    life.keyed.upsert("k", {"fail": -1})
    life.keyed.start()
    life.advance(25)
    assert [(fire, attempt, start) for _, fire, attempt, start in life.attempts] == [
        (10.0, 1, 10.0),
        (10.0, 2, 14.0),
        (20.0, 1, 20.0),
        (20.0, 2, 24.0),
    ]
    assert life.keyed.stats().retried == 2
    life.keyed.close()


def test_the_cap_bounds_the_backoff(clock: ManualClock) -> None:
    def hourly(now: datetime, key: Any, data: Any) -> datetime:
        return datetime.fromtimestamp(T0 + ((now.timestamp() - T0) // 3600 + 1) * 3600, UTC)

    life = Life(MemoryStore(), clock, next_run=hourly, retry=Retry(6, backoff=1.0, cap=5.0))
    life.keyed.upsert("k", {"fail": -1})
    life.keyed.start()
    life.advance(3600 + 100)
    starts = [start - 3600 for _, _, _, start in life.attempts]
    assert starts == [0.0, 1.0, 3.0, 7.0, 12.0, 17.0]  # (1, 2, 4, then 5, 5: the cap)
    life.keyed.close()


def test_a_keys_own_retry_wins_and_an_upsert_without_gives_it_the_default_again(
    store: Any, clock: ManualClock
) -> None:
    life = Life(store, clock, retry=Retry(2))
    life.keyed.upsert("k", {"fail": -1}, retry=Retry(1))  # (one attempt: no retry)
    life.keyed.start()
    life.advance(12)
    assert [attempt for *_, attempt, _ in life.attempts] == [1]
    life.keyed.upsert("k", {"fail": -1})
    assert life.keyed.get("k").retry == Retry(2)  # type: ignore[union-attr]
    life.keyed.close()


def test_a_run_that_raises_a_base_exception_is_not_retried(clock: ManualClock) -> None:
    def exits(ctx: JobContext, key: Any, data: Any) -> None:
        raise SystemExit(3)

    life = Life(MemoryStore(), clock, run=exits, retry=Retry(3))
    life.keyed.upsert("k")
    life.keyed.start()
    with pytest.raises(SystemExit):
        life.advance(10)
    assert life.keyed.stats().retried == 0
    info = life.keyed.get("k")
    assert info is not None and info.next_run_at == at(20)
    life.keyed.close()


def test_a_pause_holds_the_retry_and_a_resume_runs_it(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("k", {"fail": 1})
    life.keyed.start()
    life.advance(10.5)
    life.keyed.pause("k")
    life.advance(5)
    assert [attempt for *_, attempt, _ in life.attempts] == [1]
    life.keyed.resume("k")
    life.advance(0)
    assert life.attempts[-1] == ("k", 10.0, 2, 15.5)  # (the retry, first in line)
    life.keyed.close()


def test_a_removed_or_upserted_key_drops_its_retry(store: Any, clock: ManualClock) -> None:
    life = Life(store, clock, retry=Retry(3, backoff=2.0))
    life.keyed.upsert("a", {"fail": -1})
    life.keyed.upsert("b", {"fail": -1})
    life.keyed.start()
    life.advance(10.5)
    life.keyed.remove("a")
    life.keyed.upsert("b", {"fail": 0})
    life.advance(9)
    assert [(key, fire, attempt) for key, fire, attempt, _ in life.attempts] == [
        ("a", 10.0, 1),
        ("b", 10.0, 1),
    ]
    life.keyed.close()


def test_a_retry_waiting_in_a_file_survives_a_crash_and_counts_on(tmp_path: Path, clock: ManualClock) -> None:
    """The process dies during the backoff: the fire was left unfinished, so the next life reruns it
    (recover=RERUN), its attempt one more; the file's fire log counts every attempt."""
    path = tmp_path / "keys.db"
    first = Life(SQLiteStore(path), clock, retry=Retry(5, backoff=2.0))
    first.keyed.upsert("k", {"fail": 2})
    first.keyed.start()
    first.advance(12.5)  # attempts 1 (at 10) and 2 (at 12) failed; the third waits until 16
    assert [attempt for *_, attempt, _ in first.attempts] == [1, 2]
    crash(first)
    look = SQLiteStore(path)
    fires = look.load()[1]
    look.close()
    assert [(f.scheduled_for / 1e6 - T0, f.attempts) for f in fires] == [(10.0, 2)]  # (unfinished)
    down(clock, 1)
    second = Life(SQLiteStore(path), clock, retry=Retry(5, backoff=2.0))
    second.keyed.start()
    second.advance(0)
    assert second.attempts == [("k", 10.0, 3, 13.5)]
    assert second.keyed.stats().recovered == 1
    second.keyed.close()


def test_bad_retries_name_the_argument_and_change_nothing(store: Any, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        Retry(0)
    with pytest.raises(TypeError, match="attempts must be an int"):
        Retry(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backoff must be > 0"):
        Retry(2, backoff=0)
    with pytest.raises(ValueError, match="cap must be > 0 seconds and finite"):
        Retry(2, cap=float("inf"))
    with pytest.raises(TypeError, match="backoff must be a number"):
        Retry(2, backoff="1")  # type: ignore[arg-type]
    life = Life(store, clock)
    life.keyed.upsert("k", retry=Retry(2))
    before = life.keyed.get("k")
    with pytest.raises(TypeError, match="retry must be a Retry"):
        life.keyed.upsert("k", {"v": 2}, retry=3)  # type: ignore[arg-type]
    assert life.keyed.get("k") == before
    with pytest.raises(TypeError, match="retry must be a Retry"):
        Life(store, clock, retry=(3, 1.0, 2.0))
    life.keyed.close()
