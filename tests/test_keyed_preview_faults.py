"""KeyedScheduler.preview under hard inputs: a span past 2**24 s of virtual time, a limit reached while a
run goes, overlapping runs that begin by the end, an outage that ends at the end or outlasts the span, a
disabled key, runs that would end past what a datetime shows. Each docstring gives the rule and the bug
it pins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from timerwheel import KeyState, Overlap, Reschedule
from timerwheel.testing import ManualClock

from .test_keyed_preview import START, hours, keyed_on, shown

SRC = Path(__file__).resolve().parent.parent / "src"


def test_a_preview_of_more_than_194_days_finishes() -> None:
    """Expected (docs: "hours of schedule take milliseconds"; preview returns "the entries its history would
    have"): a daily key previewed over 200 days returns its 200 runs (well under the default limit of 1000).

    The bug: the preview never returns. It runs on VirtualTimeLoop(0.0), whose loop.time() is the span so
    far; past 2**24 s (194.2 days) asyncio's `end_time = self.time() + self._clock_resolution` (1e-9 s) is
    below half an ulp of the time and rounds back to it, so a timer due at the current time is never ready
    (`when >= end_time`), the next select has timeout 0, and virtual time never moves again: a busy loop
    for ever, holding the calling thread (and, from a coroutine, the caller's event loop). The same happens
    to any VirtualTimeLoop (timerwheel.testing) with a timer past 2**24 s of its own time."""
    code = textwrap.dedent(
        """
        from datetime import UTC, datetime, timedelta
        from timerwheel import Cron, KeyedScheduler, Scheduler
        from timerwheel.testing import ManualClock
        start = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
        keyed = KeyedScheduler(Scheduler(ManualClock(0.0, wall=start.timestamp())), Cron("0 0 * * *"),
                               lambda key, data: None)
        keyed.upsert("daily")
        print(len(keyed.preview("daily", start, start + timedelta(days=200))))
        """
    )
    env = {"PYTHONPATH": str(SRC), "TIMERWHEEL_NO_EXTENSIONS": "1", "PATH": "/usr/bin:/bin"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:  # (the child is killed)
        raise AssertionError("preview() of a daily key over 200 days did not return within 30 s") from None
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200"]


def test_a_preview_that_reaches_its_limit_while_a_run_goes_returns_its_entries() -> None:
    """Expected (docs: "At most `limit` entries"): the documented example (hourly, BEFORE_RUN, SKIP, runs of
    90 minutes) with limit=1 returns its first entry, the skip of 10:00.

    The bug: RuntimeError('Event loop stopped before Future completed.'). _Recorder.add_history calls
    loop.stop() whenever the entries reach the limit, and keeps doing so after it: the run still going
    when run_forever() stopped ends (and is recorded) during loop.run_until_complete(keyed.aclose()),
    which the second loop.stop() aborts. Any limit reached while a run goes (BEFORE_RUN with SKIP, ALLOW,
    REPLACE; limits 1, 3, 5 here) fails so."""
    _, keyed = keyed_on(
        ManualClock(0.0, wall=START.timestamp()), reschedule=Reschedule.BEFORE_RUN, overlap=Overlap.SKIP
    )
    keyed.upsert("etl")
    try:
        entries = keyed.preview("etl", START, hours(4), duration=5400, limit=1)
        assert shown(entries) == [("10:00", "10:00", "skipped")]
    finally:
        keyed.close()


def test_a_preview_lists_every_overlapping_run_that_begins_by_the_end() -> None:
    """Expected (docs: "A run that begins by `end` is listed, ended"): hourly, BEFORE_RUN, Overlap.ALLOW, runs
    of 90 minutes, 08:00 to 12:00: the runs of 09:00, 10:00, 11:00 and 12:00 all begin by 12:00 and are
    listed.

    The bug: only 09:00 and 10:00. The end filter is `e.at - (e.duration or 0) <= end`, but a run that
    overlaps another has no duration in its entry (Runs._ended measures it from rec.took, which holds the
    latest run's start only), so it is taken to begin when it ended: a run that begins by `end` and ends
    after it is dropped. Catch-up runs beside one another (CatchUp.ALL with ALLOW) are dropped likewise."""
    _, keyed = keyed_on(
        ManualClock(0.0, wall=START.timestamp()), reschedule=Reschedule.BEFORE_RUN, overlap=Overlap.ALLOW
    )
    keyed.upsert("k")
    try:
        entries = keyed.preview("k", START, hours(4), duration=5400)
        assert [e.scheduled_for for e in entries] == [hours(1), hours(2), hours(3), hours(4)]
    finally:
        keyed.close()


def test_the_catch_up_run_of_an_outage_that_ends_at_end_is_listed() -> None:
    """Expected (docs: "when the outage ends, the catch-up rules decide which of the fires that fell due
    run"; "A run that begins by `end` is listed"): nobody holds the key from 08:00 to 11:30, the preview
    ends at 11:30: with catch_up=ONCE the 11:00 fire runs at 11:30, as the same preview to 11:30:01 shows.

    The bug: the missed entries are there but the run is not (with CatchUp.ALL nothing at all is listed).
    The resume and the loop's stop are both at 11:30; the catch-up runs decided at the resume begin on a
    later loop iteration, after run_forever() has stopped, and the close drops them unrecorded."""
    _, keyed = keyed_on(ManualClock(0.0, wall=START.timestamp()))
    keyed.upsert("k")
    try:
        a_second_later = keyed.preview("k", START, hours(3.5) + timedelta(seconds=1), outage=3.5 * 3600)
        assert shown(a_second_later)[-1] == ("11:00", "11:30", "ran")
        assert shown(keyed.preview("k", START, hours(3.5), outage=3.5 * 3600)) == shown(a_second_later)
    finally:
        keyed.close()


def test_an_outage_longer_than_the_span_runs_nothing_in_it() -> None:
    """Expected (docs: "`outage` seconds from `start`, nobody holds the key ... when the outage ends, the
    catch-up rules decide"): an outage of 10 hours from 08:00 lasts past a preview that ends at 12:00, so
    nothing runs in it (the catch-up is decided at 18:00, after the end).

    The bug: a run at 12:00 is listed ("ran"), as if the outage ended at `end`: _previewed resumes the key
    at min(outage, end - start), cutting the outage to the span."""
    _, keyed = keyed_on(ManualClock(0.0, wall=START.timestamp()))
    keyed.upsert("k")
    try:
        entries = keyed.preview("k", START, hours(4), outage=10 * 3600)
        assert [e for e in entries if e.outcome == "ran"] == []
    finally:
        keyed.close()


def test_a_disabled_key_is_previewed_running_nothing() -> None:
    """Expected (docs: "what it shows is what the engine does"; Reschedule.NONE: "after a run the key is
    DISABLED until it is upserted again"): a Reschedule.NONE key that has run is DISABLED and will not run
    again, so its preview lists no run.

    The bug: the preview lists a run at the next hour. _previewed upserts the key afresh into its own
    KeyedScheduler (a new generation, next_run computed again), carrying its runs count but not its
    state: a DISABLED key (and likewise a paused one) is shown running on schedule."""
    clock = ManualClock(0.0, wall=START.timestamp())
    sched, keyed = keyed_on(clock, reschedule=Reschedule.NONE)
    keyed.upsert("once")
    keyed.start()
    clock.advance(3600)
    sched.run_pending()
    try:
        assert keyed.get("once").state is KeyState.DISABLED and keyed.get("once").runs == 1
        assert keyed.preview("once", hours(1), hours(6)) == []
    finally:
        keyed.close()


def test_a_preview_near_the_end_of_time_does_not_fail_with_an_unnamed_error() -> None:
    """Expected (preview()'s docstring: ValueError only for a naive start or end, an end not after the start,
    a negative duration or outage, limit < 1: "clear exceptions naming bad arguments"): start and end are
    valid (9999-12-30, inside what preview accepts) and duration is a finite non-negative number, so the
    preview returns its entries (or refuses the duration by name).

    The bug: ValueError('year 10000 is out of range') from entry_of() after the whole run: the run of
    20:00 (3 days long) ends past datetime.max and its entry cannot be shown."""
    _, keyed = keyed_on(ManualClock(0.0, wall=START.timestamp()))
    keyed.upsert("k")
    late = datetime(9999, 12, 30, 20, 0, tzinfo=UTC)
    try:
        try:
            entries = keyed.preview("k", late, late + timedelta(hours=3), duration=3 * 86400)
        except ValueError as exc:
            assert "duration" in str(exc), f"an error that names no argument: {exc!r}"
        else:
            assert entries and entries[0].scheduled_for == late + timedelta(hours=1)
    finally:
        keyed.close()
