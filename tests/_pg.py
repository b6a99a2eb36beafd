"""A real PostgreSQL server for the tests: initdb and pg_ctl in a temporary directory, listening on
127.0.0.1 only, on a free port; started once per test session and stopped at its end.

The server refuses to run as root: when the tests run as root, the data directory is given to the
`postgres` user and the server binaries run as that user (runuser). Where no server binary exists the
PostgreSQL tests skip, saying so.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid


def bindir() -> str | None:
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


class Server:
    """One PostgreSQL server in a temporary directory. `dsn` connects as the superuser `postgres`."""

    def __init__(self) -> None:
        bin_ = bindir()
        if bin_ is None:
            raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
        self.bin = bin_
        self.dir = tempfile.mkdtemp(prefix="timerwheel-pg-")
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self.run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a", encoding="utf-8") as conf:
            conf.write(  # (kept across a pause and resume; root may write it, postgres reads it)
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\n"
                "fsync = off\nmax_connections = 200\nshared_buffers = 64MB\n"
            )
        self.run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "start")
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        deadline = time.monotonic() + 30
        while True:  # pg_ctl -w waited already; this only makes sure TCP answers too
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def database(self, prefix: str = "t") -> str:
        """A fresh database of this server: its dsn."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={name}"

    def run(self, tool: str, *args: str) -> None:
        command = [os.path.join(self.bin, tool), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.dir)

    def pause(self) -> None:
        """Stop the server, keeping its data (resume() starts it again on the same port)."""
        self.run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        self.run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "start")

    def _processes(self) -> list[int]:
        """The server's processes: the postmaster (its pid file says which) and all its children."""
        with open(os.path.join(self.data, "postmaster.pid"), encoding="utf-8") as pidfile:
            postmaster = int(pidfile.readline())
        out = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False)
        return [postmaster, *(int(pid) for pid in out.stdout.split())]

    def freeze(self) -> None:
        """SIGSTOP the server and every backend (a database that hangs, its connections left open)."""
        for pid in self._processes():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what freeze() stopped."""
        for pid in self._processes():
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        try:
            self.run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
