"""A throwaway PostgreSQL server for trying PostgresStore and for tests: initdb and pg_ctl in a temporary
directory, listening on 127.0.0.1 only, on a free port, removed when it stops.

    python -m timerwheel.testing.postgres            # prints a DSN; Ctrl-C stops the server
    python -m timerwheel.testing.postgres --seconds 600

    with PostgresServer() as server:                  # in code (a test's fixture)
        store = PostgresStore(server.database())

It needs PostgreSQL's server binaries (Debian and Ubuntu: `apt-get install postgresql`; macOS: `brew
install postgresql`): initdb and pg_ctl are found on PATH, by `pg_config --bindir`, or in Debian's
/usr/lib/postgresql/*/bin. The server refuses to run as root: run as root, the data directory is given
to the `postgres` user and the binaries run as that user (runuser).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from types import TracebackType

__all__ = ["PostgresServer", "postgres_bindir"]


def postgres_bindir() -> str | None:
    """The directory of initdb and pg_ctl, or None: PATH, `pg_config --bindir`, Debian's layout."""
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout
        if os.path.exists(os.path.join(out.strip(), "initdb")):
            return out.strip()
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return os.path.dirname(path)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A PostgreSQL server of its own, started when made (a second or two): in a temporary directory, on
    127.0.0.1 and a free port, with trust authentication for the superuser `postgres` and fsync off (a
    server for trying things and for tests, not for data you keep). `stop()` (or leaving a `with` block)
    stops it and removes its directory.

    Attributes:
        dsn: a libpq connection string to its `postgres` database, as the superuser.
        port: the TCP port it listens on (127.0.0.1).

    Raises:
        FileNotFoundError: no PostgreSQL server binaries on this machine (see postgres_bindir()).
        subprocess.CalledProcessError: initdb or pg_ctl failed (the directory is removed).
    """

    def __init__(self) -> None:
        found = postgres_bindir()
        if found is None:
            raise FileNotFoundError(
                "no PostgreSQL server binaries (initdb, pg_ctl) on this machine: install PostgreSQL's "
                "server (Debian, Ubuntu: apt-get install postgresql; macOS: brew install postgresql)"
            )
        self._bin = found
        self._dir = tempfile.mkdtemp(prefix="timerwheel-pg-")
        self._data = os.path.join(self._dir, "data")
        self.port = _free_port()
        self._as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        try:
            os.chmod(self._dir, 0o755)
            if self._as_root:
                shutil.chown(self._dir, "postgres", "postgres")
            self._run("initdb", "-D", self._data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            with open(os.path.join(self._data, "postgresql.conf"), "a", encoding="utf-8") as conf:
                conf.write(  # (kept across a pause and resume; root may write it, postgres reads it)
                    f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                    f"unix_socket_directories = '{self._dir}'\n"
                    "fsync = off\nmax_connections = 200\nshared_buffers = 64MB\n"
                )
            self.resume()
        except BaseException:  # (Ctrl-C during pg_ctl start too: a server that came up is stopped)
            if os.path.exists(os.path.join(self._data, "postmaster.pid")):
                with contextlib.suppress(Exception):
                    self._run("pg_ctl", "-D", self._data, "-m", "immediate", "-w", "stop")
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PostgresServer(port={self.port})"

    def database(self, prefix: str = "t") -> str:
        """Create a fresh database (named `prefix` and a random suffix) and return its DSN. Needs psycopg
        (pip install "timerwheel[postgres]")."""
        import psycopg

        if not prefix.isidentifier() or not prefix.isascii():
            raise ValueError(f"prefix must be an ASCII identifier, not {prefix!r}")
        name = f"{prefix}_{uuid.uuid4().hex[:10]}".lower()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={name}"

    def pause(self) -> None:
        """Stop the server, keeping its data (resume() starts it again on the same port): an outage."""
        self._run("pg_ctl", "-D", self._data, "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start it again (after pause()), and wait until it answers on its port."""
        self._run("pg_ctl", "-D", self._data, "-l", os.path.join(self._dir, "log"), "-w", "start")
        deadline = time.monotonic() + 30
        while True:  # (pg_ctl -w waited already; this makes sure TCP answers too)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def freeze(self) -> None:
        """SIGSTOP the server and every backend: a database that hangs, its connections left open."""
        for pid in self._processes():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what freeze() stopped."""
        for pid in self._processes():
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server at once and remove its directory. Idempotent."""
        if not os.path.isdir(self._dir):
            return
        try:
            self._run("pg_ctl", "-D", self._data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _run(self, tool: str, *args: str) -> None:
        command = [os.path.join(self._bin, tool), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self._dir)

    def _processes(self) -> list[int]:
        """The postmaster (its pid file says which) and all its children."""
        with open(os.path.join(self._data, "postmaster.pid"), encoding="utf-8") as pidfile:
            postmaster = int(pidfile.readline())
        out = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False)
        return [postmaster, *(int(pid) for pid in out.stdout.split())]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """`python -m timerwheel.testing.postgres`: start a server, print its DSN, stop it on Ctrl-C (or
    SIGTERM, SIGHUP, or after --seconds), removing its data."""
    parser = argparse.ArgumentParser(
        prog="python -m timerwheel.testing.postgres", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, help="stop after this many seconds (default: on Ctrl-C)")
    args = parser.parse_args(argv)
    if args.seconds is not None and not 0 <= args.seconds < 10**9:
        parser.error(f"--seconds must be a number of seconds >= 0, not {args.seconds}")
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):  # (before startup: none leaves it)
        if signum is not None:
            signal.signal(signum, _interrupt)
    try:
        server = PostgresServer()
    except KeyboardInterrupt:
        return 1
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        print(f"error: {exc} {detail.decode(errors='replace').strip()}".strip(), file=sys.stderr)
        return 1
    try:
        print(server.dsn, flush=True)
        how = "Ctrl-C stops it" if args.seconds is None else f"it stops in {args.seconds:g} s"
        print(
            f"# a throwaway PostgreSQL on 127.0.0.1:{server.port}; {how} and removes its data",
            file=sys.stderr,
        )
        time.sleep(10**9 if args.seconds is None else args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
