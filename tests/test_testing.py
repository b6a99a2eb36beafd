"""ManualClock: the clock users' tests (and ours) run on."""

from __future__ import annotations

import math

import pytest

from timerwheel.testing import ManualClock, PostgresServer, postgres_bindir


def test_advance_and_set() -> None:
    clock = ManualClock()
    assert clock() == 0.0
    assert clock.advance(1.5) == 1.5
    assert clock.advance(0) == 1.5
    clock.set(10)
    assert clock() == 10.0
    clock.set(10)
    assert repr(clock) == "ManualClock(10.0, wall=10.0)"
    assert ManualClock(5)() == 5.0


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda c: c.advance(-1), ValueError, "seconds must be >= 0"),
        (lambda c: c.advance(math.nan), ValueError, "seconds must be finite"),
        (lambda c: c.set(9.0), ValueError, "t must not be earlier than the current time 10.0"),
        (lambda c: c.set(math.inf), ValueError, "t must be finite"),
        (lambda c: c.advance("1"), TypeError, "seconds must be a real number, not str"),
        (lambda c: c.advance(True), TypeError, "seconds must be a real number, not bool"),
    ],
)
def test_never_backwards(call: object, exc: type[Exception], message: str) -> None:
    clock = ManualClock(10.0)
    with pytest.raises(exc, match=message):
        call(clock)  # type: ignore[operator]
    assert clock() == 10.0


def test_subscribers_are_told_of_every_move() -> None:
    clock = ManualClock()
    seen: list[float] = []
    clock.subscribe(seen.append)
    clock.advance(1)
    clock.set(5)
    clock.unsubscribe(seen.append)
    clock.unsubscribe(seen.append)  # no error the second time
    clock.advance(1)
    assert seen == [1.0, 5.0]


def test_a_subscriber_may_read_the_clock() -> None:
    clock = ManualClock()
    seen: list[float] = []
    clock.subscribe(lambda now: seen.append(clock() - now))
    clock.advance(2)
    assert seen == [0.0]


def test_advance_past_the_largest_float_is_refused() -> None:
    clock = ManualClock(1e308)
    with pytest.raises(ValueError, match="past the largest float"):
        clock.advance(1e308)
    assert clock() == 1e308


def test_virtual_time_loop_jumps_to_the_next_timer() -> None:
    import asyncio

    from timerwheel.testing import VirtualTimeLoop

    loop = VirtualTimeLoop(start=50.0)
    order: list[str] = []
    try:
        assert loop.time() == 50.0
        loop.call_later(7200, order.append, "late")
        loop.call_later(3600, order.append, "early")
        loop.run_until_complete(asyncio.sleep(7200.5))
        assert order == ["early", "late"]
        assert loop.time() == 7250.5
    finally:
        loop.close()


def test_virtual_time_loop_serves_ready_io_before_moving_time() -> None:
    import asyncio
    import socket

    from timerwheel.testing import VirtualTimeLoop

    loop = VirtualTimeLoop()
    left, right = socket.socketpair()
    try:
        right.sendall(b"ping")

        async def read() -> bytes:
            reader, writer = await asyncio.open_connection(sock=left)
            async with asyncio.timeout(10):
                data = await reader.read(4)
            writer.close()
            return data

        start = loop.time()
        assert loop.run_until_complete(read()) == b"ping"
        assert loop.time() == start  # the data was there: no timer was waited for
    finally:
        right.close()
        loop.close()


def test_virtual_time_loop_rejects_a_bad_start() -> None:
    from timerwheel.testing import VirtualTimeLoop

    with pytest.raises(ValueError, match="start"):
        VirtualTimeLoop(start=float("nan"))


def test_the_wall_clock_moves_with_time_and_steps_alone() -> None:
    clock = ManualClock(100.0, wall=1_700_000_000.0)
    seen: list[float] = []
    clock.subscribe(seen.append)
    assert clock.wall() == 1_700_000_000.0
    clock.advance(5)
    assert clock.wall() == 1_700_000_005.0
    clock.set_wall(1_699_999_000.0)  # an NTP step back: monotonic time stands still
    assert clock() == 105.0
    assert clock.wall() == 1_699_999_000.0
    assert seen == [105.0, 105.0]  # subscribers hear of the step, so drivers look again
    clock.advance(1)
    assert clock.wall() == 1_699_999_001.0
    with pytest.raises(ValueError, match="t must be finite"):
        clock.set_wall(math.nan)
    with pytest.raises(TypeError, match="t must be a real number"):
        clock.set_wall("now")  # type: ignore[arg-type]
    assert clock.wall() == 1_699_999_001.0
    with pytest.raises(ValueError, match="wall must be finite"):
        ManualClock(wall=math.inf)


def test_virtual_time_loop_has_a_wall_clock() -> None:
    import asyncio

    from timerwheel.testing import VirtualTimeLoop

    loop = VirtualTimeLoop(start=50.0, wall=1000.0)
    try:
        assert loop.wall() == 1000.0
        loop.run_until_complete(asyncio.sleep(30))
        assert loop.wall() == 1030.0
        loop.set_wall(10.0)
        assert loop.time() == 80.0
        assert loop.wall() == 10.0
        with pytest.raises(ValueError, match="t must be finite"):
            loop.set_wall(math.inf)
        assert loop.wall() == 10.0
    finally:
        loop.close()


def test_a_virtual_time_loop_runs_timers_past_2_to_the_24_seconds() -> None:
    """Past 2**24 s of loop time, asyncio's "due before now + the clock's resolution" (1 ns) rounds back to
    now: a timer due now never ran, and the loop spun for ever without moving time (so this runs in a
    child process, killed after 30 s, rather than hang the suite)."""
    import subprocess
    import sys

    code = (
        "import asyncio\n"
        "from timerwheel.testing import VirtualTimeLoop\n"
        "loop = VirtualTimeLoop(2.0 ** 25)\n"
        "loop.run_until_complete(asyncio.sleep(1.0))\n"
        "loop.run_until_complete(asyncio.sleep(3600.0))\n"
        "print(loop.time() - 2.0 ** 25)\n"
        "loop.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 3601.0


# -- a throwaway PostgreSQL server ---------------------------------------------------------------------


def _refused(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.mark.skipif(postgres_bindir() is None, reason="no PostgreSQL server binaries (initdb, pg_ctl)")
def test_the_postgres_command_prints_a_dsn_that_connects_and_removes_the_server_when_stopped() -> None:
    """`python -m timerwheel.testing.postgres`: the first line it prints is a DSN a PostgresStore can use;
    SIGTERM stops the server, and nothing listens on its port any more."""
    import signal
    import subprocess
    import sys

    from timerwheel import PostgresStore

    command = [sys.executable, "-m", "timerwheel.testing.postgres", "--seconds", "120"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        dsn = proc.stdout.readline().strip()
        assert dsn.startswith("host=127.0.0.1 port="), proc.stderr.read() if proc.stderr else ""
        store = PostgresStore(dsn)
        assert store.held() == 0
        store.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    port = int(dsn.split("port=")[1].split()[0])
    assert _refused(port)


@pytest.mark.skipif(postgres_bindir() is None, reason="no PostgreSQL server binaries (initdb, pg_ctl)")
def test_a_postgres_server_gives_fresh_databases_and_stops_with_its_block() -> None:
    import psycopg

    with PostgresServer() as server:
        first, second = server.database(), server.database("app")
        assert first != second and "dbname=app_" in second
        with psycopg.connect(first) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(ValueError, match="prefix"):
            server.database("no; DROP")
    assert _refused(server.port)
    server.stop()  # (idempotent)
