"""The deterministic simulation (timerwheel.testing.simulate): a seed replays exactly, the oracle catches
the bugs it is there for, the seeds it found stay fixed, and a fixed budget of seeds per store passes.

Each run is a whole cluster on virtual time: no sleeping, no threads, no server."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from timerwheel import CatchUp, Reschedule, Retry
from timerwheel._keyed import runs as _runs
from timerwheel._keyed import table as _table
from timerwheel.testing import SimulatedCluster, Violation, _simstore
from timerwheel.testing.simulate import campaign, limits_of, main, plan, shrink, simulate

STORES = ("memory", "sqlite", "shared")
# Seeds per store that the suite runs on each backend (about a minute in all, on this project's CI
# machine); `python -m timerwheel.testing.simulate --soak` runs as many as asked.
BUDGET = {"memory": 150, "sqlite": 100, "shared": 60}


def every_second(now: datetime, key: Any, data: Any) -> datetime:
    return now.replace(microsecond=0) + timedelta(seconds=1)


@pytest.mark.parametrize("store", STORES)
def test_a_seed_replays_exactly(store: str) -> None:
    first = simulate(plan(7, store))
    again = simulate(plan(7, store))
    other = simulate(plan(8, store))
    assert first.trace == again.trace and len(first.trace) > 50
    assert (first.faults, first.checks) == (again.faults, again.checks)
    assert other.trace != first.trace


@pytest.mark.parametrize("store", STORES)
def test_a_fixed_budget_of_seeds_breaks_no_invariant(store: str) -> None:
    out = io.StringIO()
    done = campaign(range(BUDGET[store]), store, 3, out, shrink_budget=0)
    assert done.violations == [], out.getvalue()
    assert done.seeds == BUDGET[store] and done.faults > done.seeds and done.checks > 100 * done.seeds
    assert done.process_hours > done.seeds / 60  # (each seed simulates a few process-minutes at least)


# Seeds that broke an invariant once, each kept with what it found (fixed since).
FOUND = [
    (
        "sqlite",
        22,
        "a take whose commit answered an error was never retaken (the fire left unfinished), "
        "and its rerun in the next life ran the later fires again",
    ),
    ("sqlite", 1304, "a replace_all() left a key whose upsert raised after its commit: it came back"),
    ("sqlite", 1612, "a remove() of a key whose upsert raised after its commit did not reach the file"),
    ("shared", 20, "BEFORE_RUN: a run's end armed the key again at the fire whose take was on its way"),
    (
        "shared",
        33,
        "the oracle took the interrupted fire of a key paused since, held for its resume, for lost",
    ),
    ("sqlite", 80006, "the oracle took a key whose upsert raised for one that pause_all() paused"),
    ("sqlite", 93012, "a resume walked a catch-up queue's fires again, and ran one the start reported"),
    ("shared", 40, "BEFORE_RUN with a slow store: the same fire taken twice by its own process"),
    ("shared", 71, "a fire handed over and not begun yet was armed again by the end of the run before it"),
    ("shared", 72, "a catch-up fire being taken was armed again by the end of the run before it"),
    ("shared", 248, "a wall clock stepped back between a fire and its start: the run started early"),
    ("shared", 1831, "a fire left unfinished, later than the row's last fire, was rerun and caught up too"),
    ("shared", 1854, "an upsert whose first fire was the old generation's fire being taken wedged the key"),
    ("shared", 1955, "the take of an older generation's fire emptied the newer one's queue: the key stopped"),
    ("shared", 54, "the oracle took a killed rerun for lost, though the zombie run it followed had ended"),
    ("sqlite", 300401, "the oracle took the fires still queued in a long catch-up (ALL, 100) for lost"),
    ("sqlite", 600183, "the oracle took for lost a rerun that waited for its time on the new life's clock"),
    ("memory", 500052, "a key upserted after a wall step with no key armed was armed by the old offset"),
    ("memory", 502581, "a key re-armed after a wall step, before the next drain, by the old offset"),
    ("sqlite", 600485, "an upsert after one that raised after its commit took the file's generation back"),
]


# (seeds found with --processes 4)
FOUND_4 = [
    ("shared", 13547, "a process that held a key again took a fire its plan had before it lost the key"),
    ("shared", 13658, "the same: a stale fire taken after later ones of its generation had run elsewhere"),
    ("shared", 20456, "the same (found on the pure-Python backend)"),
]


# (seeds found with the triggers drawn, and no overlap nor delays drawn)
FOUND_TRIGGERS = [
    ("shared", 71, "a trigger skipped behind a catch-up queue put its key back on a fire it had run"),
]

# (seeds found with everything drawn: overlap, delays, triggers, windows and counts)
FOUND_ALL = [
    ("sqlite", 910054, "a key whose window ended after a point lost that point's delayed fire"),
    ("sqlite", 930093, "a pause wrote the key's row with no runs: the next life ran its max_runs again"),
    ("memory", 940015, "oracle: a point skipped during a run, then the wall clock stepped back behind it"),
    ("sqlite", 975079, "a trigger that came as its key's fire was due was lost with the process"),
    ("sqlite", 995072, "a stored trigger at a point of the schedule: reported missed, and run"),
    ("sqlite", 990105, "oracle: a trigger that raised after its commit ran, as it may"),
    ("sqlite", 975064, "oracle: such a trigger, a microsecond after a fire the wall clock stepped back from"),
    ("sqlite", 1010015, "oracle: such a trigger, due after the wall clock's now (stepped back), ran at once"),
    ("sqlite", 900663, "oracle: a second trigger while one waits took the first's overlap from it"),
    ("sqlite", 900968, "oracle: a fire told late while an older generation's run of the same time went"),
    ("sqlite", 901897, "a resume that raised after its commit left the fires its pause held undecided"),
    ("sqlite", 975068, "oracle: a step forward is noticed at the next wake: its fires are late till then"),
    ("sqlite", 990008, "a rerun whose key a remove that raised after its commit deleted was dropped"),
    ("memory", 1300099, "a catch-up queue a pause held was dropped by the resume once its window ended"),
    ("memory", 7300270, "oracle: a trigger still waiting behind its key's long catch-up queue"),
    ("memory", 7300665, "a fire waiting behind a run began after a newer trigger that ran beside it"),
]
FOUND_ALL_4 = [  # (four processes)
    (
        "shared",
        1030037,
        "a retry after the wall stepped back during the run: before its fire, its take the first's",
    ),
    ("shared", 850543, "oracle: max_runs counted by a stepped wall clock a fire taken before a removal"),
    ("shared", 850783, "the same, a step of 2 s"),
    ("shared", 850976, "the same, a step of 30 s"),
    ("shared", 1200185, "oracle: a trigger a paused process asked, committed as it woke, ran as later fire"),
]


@pytest.mark.parametrize(
    ("store", "seed", "found", "processes", "drawn"),
    [(*f, 3, "") for f in FOUND]
    + [(*f, 4, "") for f in FOUND_4]
    + [(*f, 3, "triggers") for f in FOUND_TRIGGERS]
    + [(*f, 3, "all") for f in FOUND_ALL]
    + [(*f, 4, "all") for f in FOUND_ALL_4],
    ids=[f"{s}-{n}" for s, n, _ in FOUND + FOUND_4 + FOUND_TRIGGERS + FOUND_ALL + FOUND_ALL_4],
)
def test_a_seed_that_found_a_bug_stays_fixed(
    store: str, seed: int, found: str, processes: int, drawn: str
) -> None:
    campaign = plan(seed, store, processes)
    if drawn != "all":  # (drawn since: these seeds replay as they were found)
        campaign.keyed["overlap"] = None
        campaign.keyed.pop("jitter", None)
        campaign.keyed.pop("spread", None)
        campaign.keyed.pop("late_grace", None)
        campaign.keyed.pop("retry", None)
        for _, what, args in campaign.events:
            if what == "upsert":
                args[2].pop("m", None)
                args[2].pop("w", None)
    if not drawn:
        campaign.events[:] = [e for e in campaign.events if e[1] != "trigger-key"]
    cluster = simulate(campaign)
    assert cluster.violations == [], "\n".join(cluster.trace[-40:])


def test_before_run_with_a_slow_store_takes_each_fire_once() -> None:
    """A run ends while the next fire's take is on its way to a slow shared store: that fire used to be
    armed again and taken a second time by the same process."""
    cluster = SimulatedCluster(
        lambda now, key, data: datetime.fromtimestamp((int(now.timestamp() * 2) + 1) / 2, UTC),
        lambda key, data: None,
        processes=1,
        reschedule=Reschedule.BEFORE_RUN,
        catch_up=CatchUp.ALL,
    )
    with cluster:
        for key in range(5):
            cluster.upsert(key, {})
        cluster.run_for(1.0)
        cluster.slow(0, 30.0)
        cluster.run_for(30.0)
        cluster.quiet()
        cluster.check()
        assert len(cluster.runs) > 200


# -- the oracle can fail --------------------------------------------------------------------------------


def unfenced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a bug in the simulated database: a fire's take no longer checks who holds the key, nor
    what its fire log says."""
    real = _simstore.SimDatabase.start_fire

    def start_fire(
        self: Any, row: Any, scheduled_for: int, started_at: int, rerun: bool, owner: str, lease: float
    ) -> int:
        key = self.keys.get(row.key)
        if key is not None and key["generation"] == row.generation:
            owner = key["owner"] or owner  # (whoever asks takes it, as if it held the key)
            for fire in [f for f in self.fires if f[0] == row.key and f[1] == row.generation]:
                del self.fires[fire]  # (and the log forgets every fire of the key)
        return int(real(self, row, scheduled_for, started_at, rerun, owner, lease))

    monkeypatch.setattr(_simstore.SimDatabase, "start_fire", start_fire)


def test_a_store_that_takes_a_fire_for_a_process_that_lost_the_key_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unfenced(monkeypatch)
    found = [simulate(plan(seed, "shared")).violations for seed in range(30)]
    assert any(v.invariant in ("at-most-once", "no-overlap") for vs in found for v in vs)


def test_a_store_that_loses_a_committed_change_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _simstore.SimDatabase.put

    def loses(self: Any, row: Any, owner: str) -> int:
        generation = real(self, row, owner)
        self.commits.pop()  # (it says it stored the change, and did not)
        return generation

    monkeypatch.setattr(_simstore.SimDatabase, "put", loses)
    found = [simulate(plan(seed, "shared")).violations for seed in range(5)]
    assert any(v.invariant == "changes-kept" for vs in found for v in vs)


@pytest.mark.parametrize("store", STORES)
def test_a_key_that_runs_past_its_max_runs_or_out_of_its_window_is_caught(
    monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """Plant a bug: the keyed layer forgets every key's window and max_runs (it plans as if they had
    none). The oracle reads them from the data the campaign gives ("m", "w") and catches the runs."""
    real = _table.effective
    monkeypatch.setattr(
        _table,
        "effective",
        lambda own, defaults: real(own, defaults)._replace(max_runs=None, start=None, end=None),
    )
    monkeypatch.setattr(_runs.Runs, "_spent", lambda self, *args: False)
    with limited_keys(store) as cluster:
        assert {"max-runs", "in-its-window"} <= {v.invariant for v in cluster.violations}


def limited_keys(store: str) -> SimulatedCluster:
    """A cluster whose key "a" may run twice (max_runs) and "b" in a window of 3 to 5 s, run 8 s."""
    cluster = SimulatedCluster(every_second, lambda key, data: None, store=store, processes=1, points=True)
    limited, window = {"m": 2}, {"w": [cluster.epoch + 3, cluster.epoch + 5]}
    cluster.upsert("a", limited, 0, **limits_of(limited))
    cluster.upsert("b", window, 0, **limits_of(window))
    cluster.run_for(8.0)
    return cluster


@pytest.mark.parametrize("store", STORES)
def test_a_fire_retried_more_than_its_attempts_or_after_a_newer_fire_is_caught(
    monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """Plant bugs: a failed run is always tried again, whatever its attempts; or tried again after the
    key's next fire began. The oracle catches each; the retries the rules allow pass."""

    calls = [0]

    def fails(key: Any, data: Any) -> None:
        raise RuntimeError("fails")

    def every_other_fails(key: Any, data: Any) -> None:
        calls[0] += 1
        if calls[0] % 2:
            raise RuntimeError("fails")

    def cluster_of(retry: Retry, job: Any = fails) -> SimulatedCluster:
        return SimulatedCluster(every_second, job, store=store, processes=1, points=True, retry=retry)

    with cluster_of(Retry(2, backoff=0.05)) as cluster:
        cluster.upsert("a", {})
        cluster.run_for(3.0)
        cluster.quiet()
        cluster.check()
        assert any(r.attempt == 2 for r in cluster.runs)  # (retried, once per fire)
    with monkeypatch.context() as m:
        m.setattr(_runs.Runs, "_retry_at", lambda self, rec, ctx, at, wall_now, outcome: wall_now + 0.05)
        with cluster_of(Retry(2, backoff=0.05)) as cluster:
            cluster.upsert("a", {})
            cluster.run_for(3.0)
            assert "retry-attempts" in {v.invariant for v in cluster.violations}

    def eager(self: Any, retrying: Any) -> None:  # (handed over whatever came since: no give-way)
        rec, fire = retrying.rec, retrying.fire_of
        if fire is not None and not self.table.closed:
            rec.hand += 1
            rec.handed, retrying.handed = fire, True
            args = (rec, *fire, True, rec.hand)
            self.table.engine.schedule_at(retrying.due, self.job, args=args, options=self.options)

    with monkeypatch.context() as m:
        m.setattr(_runs.Runs, "_retry_at", lambda self, rec, ctx, at, wall_now, outcome: wall_now + 1.5)
        m.setattr(_runs.Runs, "retry_due", eager)
        m.setattr(_runs.Runs, "_gives_way", lambda self, rec, generation, at: False)
        m.setattr(_runs.Runs, "_give_up", lambda self, retrying: None)
        with cluster_of(Retry(2, backoff=1.5), every_other_fails) as cluster:
            cluster.upsert("a", {})
            cluster.run_for(4.0)
            assert "retry-gives-way" in {v.invariant for v in cluster.violations}


@pytest.mark.parametrize("store", STORES)
def test_a_history_that_tells_of_a_run_that_did_not_end_is_caught(
    monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """Plant a bug: a run's entry in its key's history names the wrong attempt. The oracle catches it;
    the true history passes."""

    def cluster_of() -> SimulatedCluster:
        processes = 2 if store == "shared" else 1
        return SimulatedCluster(every_second, lambda key, data: None, store=store, processes=processes)

    with cluster_of() as cluster:
        cluster.upsert("a", {})
        cluster.run_for(3.0)
        cluster.quiet()
        cluster.check()
    real = _table.KeyTable.noted

    def wrong(self: Any, rec: Any, scheduled_for: Any, outcome: str, attempt: int = 0, *args: Any) -> None:
        real(self, rec, scheduled_for, outcome, attempt + (outcome == "ran"), *args)

    monkeypatch.setattr(_table.KeyTable, "noted", wrong)
    with cluster_of() as cluster:
        cluster.upsert("a", {})
        cluster.run_for(3.0)
        cluster.quiet()
        assert {v.invariant for v in cluster.violations} == {"history-true"}


def test_a_fire_told_late_before_its_grace_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a bug: every fire is told late as it is handed over (late_by 0). The oracle catches it."""
    real = _runs.Runs._watch

    def eager(self: Any, rec: Any, scheduled_for: float, rerun: bool) -> None:
        real(self, rec, scheduled_for, rerun)
        assert rec.late is not None
        self._tell_late(rec.late, scheduled_for)  # (as if the grace had passed)

    monkeypatch.setattr(_runs.Runs, "_watch", eager)
    cluster = SimulatedCluster(
        every_second, lambda key, data: None, store="memory", processes=1, points=True, late_grace=0.5
    )
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(3.0)
        assert {v.invariant for v in cluster.violations} == {"late-told-late"}


@pytest.mark.parametrize("store", STORES)
def test_a_key_that_keeps_to_its_max_runs_and_its_window_passes(store: str) -> None:
    with limited_keys(store) as cluster:
        cluster.quiet()
        cluster.check()
        assert len([r for r in cluster.runs if r.key == "a"]) == 2
        assert sorted(r.scheduled_for / 1e6 - cluster.epoch for r in cluster.runs if r.key == "b") == [
            3,
            4,
            5,
        ]


def test_a_key_that_stops_running_is_caught() -> None:
    cluster = SimulatedCluster(every_second, lambda key, data: None, processes=2)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(3.0)
        holder = cluster.holder("a")
        assert holder is not None
        holder.keyed._table.disarm(holder.keyed._keys["a"])  # (a bug: the key's timer is gone)
        cluster.quiet()
        assert [v.invariant for v in cluster.violations] == ["progress"]
        with pytest.raises(Violation, match="key 'a' did not run"):
            cluster.check()


def test_a_fire_lost_silently_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that answers one take in twenty "taken already" without anyone having taken it: the key
    goes on at its next fire (progress holds), and the fire it refused is lost."""
    real = _simstore.SimDatabase.start_fire
    asked = [0]

    def refuses(
        self: Any, row: Any, scheduled_for: int, started_at: int, rerun: bool, owner: str, lease: float
    ) -> int:
        asked[0] += 1
        if asked[0] % 20 == 0:
            return 0
        return int(real(self, row, scheduled_for, started_at, rerun, owner, lease))

    monkeypatch.setattr(_simstore.SimDatabase, "start_fire", refuses)
    cluster = SimulatedCluster(every_second, lambda key, data: None, processes=2, points=True)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(60.0)
        cluster.quiet()
        assert {v.invariant for v in cluster.violations} == {"no-lost-fire"}


def test_a_run_before_its_time_is_caught() -> None:
    cluster = SimulatedCluster(every_second, lambda key, data: None, store="memory", processes=1)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(2.0)
        assert cluster.violations == []
        run = cluster.runs[-1]
        run.wall = run.scheduled_for / 1e6 - 0.5  # (as a run that started half a second early)
        cluster.runs.remove(run)
        cluster._oracle.started(cluster.processes[0], run)
        assert [v.invariant for v in cluster.violations] == ["no-early-run"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_paused_key_that_runs_is_caught(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from timerwheel._keyed.table import KeyTable

    monkeypatch.setattr(KeyTable, "pause", lambda self, rec: None)  # (a bug: a pause that holds nothing)
    cluster = SimulatedCluster(every_second, lambda key, data: None, store=store, processes=1)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(2.0)
        cluster.pause_key("a")
        cluster.run_for(2.0)
        assert {v.invariant for v in cluster.violations} == {"paused-runs-nothing"}


@pytest.mark.parametrize("store", STORES)
def test_a_resume_that_skips_the_paused_fires_silently_is_caught(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume that goes on at the next fire after now, without the catch-up's decision and its report
    of the fires missed while paused: the oracle's no-lost-fire catches it."""
    from timerwheel._keyed import recovery, shared

    def silent(table: Any, recs: list[Any], wall_now: float, write: Any) -> None:
        for rec in recs:
            rec.paused = False
            table.plan(rec, wall_now)

    monkeypatch.setattr(recovery, "resume", silent)
    monkeypatch.setattr(shared, "resume", silent)
    processes = 2 if store == "shared" else 1
    cluster = SimulatedCluster(
        every_second, lambda key, data: None, store=store, processes=processes, points=True
    )
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(2.0)
        cluster.pause_key("a")
        cluster.run_for(10.0)
        cluster.resume_key("a")
        cluster.quiet()
        assert {v.invariant for v in cluster.violations} == {"no-lost-fire"}


def test_a_shared_store_that_takes_a_paused_keys_fire_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _simstore.SimDatabase.start_fire

    def ignores_pauses(self: Any, row: Any, *args: Any) -> int:
        key = self.keys.get(row.key)
        paused = key is not None and key["paused"]
        if paused:
            key["paused"] = False
        try:
            return int(real(self, row, *args))
        finally:
            if paused:
                key["paused"] = True

    monkeypatch.setattr(_simstore.SimDatabase, "start_fire", ignores_pauses)
    cluster = SimulatedCluster(every_second, lambda key, data: None, processes=2)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(2.0)
        cluster.pause_key("a")
        cluster.run_for(3.0)
        assert "paused-runs-nothing" in {v.invariant for v in cluster.violations}


def test_a_pause_during_a_takeover_holds_and_the_resume_reaches_the_new_holder() -> None:
    """The holder of a key is killed; another process pauses the key while its lease runs out (the key
    is claimed paused by a survivor); then a third process resumes it: every invariant holds, the key
    ran nothing while paused, and the fires missed meanwhile were run or reported."""
    cluster = SimulatedCluster(every_second, lambda key, data: None, processes=3, lease=3.0, points=True)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(3.0)
        holder = cluster.holder("a")
        assert holder is not None
        others = [p for p in cluster.live() if p is not holder]
        cluster.kill(holder)
        cluster.run_for(0.5)
        cluster.pause_key("a", others[0])
        cluster.run_for(8.0)  # (past lease + lease / 3: a survivor claimed it, paused)
        new = cluster.holder("a")
        assert new is not None and new is not holder
        info = new.keyed.get("a")
        assert info is not None and info.state.name == "PAUSED"
        paused_at = cluster.now
        cluster.resume_key("a", others[-1])
        cluster.quiet()
        cluster.check()
        assert not [r for r in cluster.runs if r.key == "a" and paused_at - 7.5 < r.started < paused_at]
        assert any(r.key == "a" and r.started > paused_at for r in cluster.runs)
        assert cluster.missed  # (the fires of the pause, reported at resume)


def test_a_fire_reported_missed_that_ran_is_caught() -> None:
    """A process reports missed (on_missed) a fire it ran, or runs one it reported: a resume that
    decided a fire missed while its take was on its way, then ran it, did both."""
    cluster = SimulatedCluster(every_second, lambda key, data: None, store="memory", processes=1)
    with cluster:
        cluster.upsert("a", {})
        cluster.run_for(2.0)
        p = cluster.processes[0]
        run = cluster.runs[-1]
        p.keyed._table.report_missed(p.keyed._keys["a"], [run.scheduled_for / 1e6], False, "paused")
        assert [v.invariant for v in cluster.violations] == ["missed-not-run"]


# -- the public API and the command ---------------------------------------------------------------------


def test_the_simulated_cluster_runs_a_users_job_through_a_kill() -> None:
    """The example of the docs: a job, three processes, the holder killed; every fire runs once."""
    ran: list[tuple[Any, float]] = []
    cluster = SimulatedCluster(every_second, lambda key, data: ran.append((key, data["n"])), lease=3.0)
    with cluster:
        cluster.upsert("report", {"n": 1})
        cluster.run_for(5.0)
        cluster.kill(cluster.holder("report"))
        cluster.run_for(10.0)
        cluster.check()
        fires = sorted(run.scheduled_for for run in cluster.runs if run.key == "report")
        assert len(fires) == len(set(fires)) >= 10
        new = cluster.holder("report")
        assert new is not None and new.alive and ran


@pytest.mark.parametrize("store", STORES)
def test_a_job_cut_by_a_kill_runs_nothing_more_until_the_cluster_closes(store: str) -> None:
    """SIGKILL runs no `finally` and no `except` of the job it cuts. (kill() used to close the killed
    process's coroutines at once, which ran them.)"""
    events: list[str] = []

    async def job(key: Any, data: Any) -> None:
        import asyncio

        events.append("started")
        try:
            await asyncio.sleep(100.0)
        except BaseException:
            events.append("except")
            raise
        finally:
            events.append("finally")

    cluster = SimulatedCluster(every_second, job, store=store, processes=1)
    with cluster:
        cluster.upsert("k", {})
        cluster.run_for(1.5)
        assert events == ["started"]
        cluster.kill(0)
        cluster.run_for(10.0)
        assert events == ["started"]
    assert events == ["started", "except", "finally"]  # (closed with the cluster, after every check)


def test_bad_arguments_of_the_cluster() -> None:
    job = lambda key, data: None  # noqa: E731
    with pytest.raises(ValueError, match="store must be"):
        SimulatedCluster(every_second, job, store="redis")
    with pytest.raises(ValueError, match="processes"):
        SimulatedCluster(every_second, job, store="sqlite", processes=2)
    with pytest.raises(ValueError, match="lease"):
        SimulatedCluster(every_second, job, lease=0)


def test_the_command_says_seeds_faults_checks_and_violations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "3", "--seed-base", "5", "--store", "memory"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("3 seeds, ") and last.endswith(", 0 violations")
    assert main(["--seed", "4", "--store", "shared", "--processes", "2"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("1 seeds, ")
    assert main(["--soak", "0.5", "--store", "memory", "--seed-base", "100"]) == 0
    soak, last = capsys.readouterr().out.strip().splitlines()[-2:]
    assert soak.startswith("soak: ") and "simulated process-hours" in soak and "seeds 100.." in soak
    assert last.endswith(" 0 violations")


def test_a_violation_is_printed_with_its_seed_a_shorter_plan_and_a_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unfenced(monkeypatch)
    seed = next(s for s in range(30) if simulate(plan(s, "shared")).violations)
    assert main(["--seed", str(seed), "--store", "shared"]) == 1
    out = capsys.readouterr().out
    assert f"seed {seed}: [" in out and "the shortest failing plan" in out and "its trace" in out
    assert out.strip().splitlines()[-1] == "1 seeds, " + out.strip().splitlines()[-1].split("seeds, ")[1]
    assert out.strip().endswith("1 violations")
    failing = plan(seed, "shared")
    invariant = simulate(failing).violations[0].invariant
    keep = shrink(failing, invariant, budget=60)
    assert len(keep) <= len(failing.events)
    assert any(v.invariant == invariant for v in simulate(failing, keep=keep).violations)


def _a_cluster_whose_runs_last_once_its_clock_stepped() -> SimulatedCluster:
    """One process on a SQLite file; its job returns at once, but runs 5 s for a fire 20 s or more after
    the start (one on a wall clock stepped ahead)."""

    async def job(ctx: Any, key: Any, data: Any) -> None:
        import asyncio

        if ctx.fence.scheduled_for / 1e6 >= cluster.epoch + 20.0:
            await asyncio.sleep(5.0)

    cluster = SimulatedCluster(every_second, job, store="sqlite", processes=1, points=True, context=True)
    return cluster


def _a_run_cut_on_a_clock_ahead(cluster: SimulatedCluster) -> int:
    """A SQLite life whose wall clock stepped 30 s ahead is killed during a run; the next life's clock is
    right again: the interrupted fire, due 30 s from its start, is still ahead of it. Returns the fire."""
    cluster.upsert("k", {})
    cluster.run_for(1.2)
    cluster.step_wall(0, 30.0)
    cluster.run_for(1.0)
    cut = [r for r in cluster.runs if r.ended is None]
    assert len(cut) == 1 and cut[0].scheduled_for / 1e6 > cluster.processes[0].wall() - 1.0
    cluster.kill(0)
    cluster.restart()
    return cut[0].scheduled_for


def test_a_rerun_still_ahead_of_the_next_lifes_clock_is_not_taken_for_lost() -> None:
    """Seed 600183 (sqlite): the oracle took the interrupted fire for lost while its rerun waited for its
    time on the next life's clock (30 s behind the killed one's), as the docs say it does."""
    cluster = _a_cluster_whose_runs_last_once_its_clock_stepped()
    with cluster:
        fire = _a_run_cut_on_a_clock_ahead(cluster)
        cluster.quiet(10.0)  # (the fire is still some 20 s ahead of the new life's clock)
        assert cluster.violations == [], "\n".join(cluster.trace[-20:])
        cluster.quiet(40.0)
        assert cluster.violations == [], "\n".join(cluster.trace[-20:])
        assert [(r.process, r.attempt) for r in cluster.runs if r.scheduled_for == fire] == [
            ("p0", 1),
            ("p1", 2),
        ]


def test_a_rerun_lost_by_the_next_life_is_caught_once_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same, with a store whose load forgets the unfinished fires: the rerun never comes, and the
    oracle says so once the fire is due on the new life's clock (not before)."""
    from timerwheel.testing import simulate as sim

    real = sim._FaultyStore.load
    monkeypatch.setattr(sim._FaultyStore, "load", lambda self: (real(self)[0], []))

    cluster = _a_cluster_whose_runs_last_once_its_clock_stepped()
    with cluster:
        _a_run_cut_on_a_clock_ahead(cluster)
        cluster.quiet(10.0)
        assert cluster.violations == []
        cluster.quiet(40.0)
        assert [v.invariant for v in cluster.violations] == ["no-lost-fire"]
        assert "was not run again (recover=RERUN)" in str(cluster.violations[0])
