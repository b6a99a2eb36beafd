"""Helpers for the reproducers: a server of tests/_pg.py, fresh databases, SQL, polling."""

from __future__ import annotations

import os
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # tests/: _pg (timerwheel: the one installed)

import psycopg  # noqa: E402

import _pg  # noqa: E402


def server() -> _pg.Server:
    return _pg.Server()


def fresh_db(srv) -> str:
    name = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"host=127.0.0.1 port={srv.port} user=postgres dbname={name}"


def sql(dsn, statement, *args):
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, args or None)
        return cur.fetchall() if cur.description else []


def wait_for(pred, timeout):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            return False
        time.sleep(0.01)
    return True


def pg_stop(srv):
    srv.run("pg_ctl", "-D", srv.data, "-m", "fast", "-w", "stop")


def pg_start(srv):
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={srv.port} -c unix_socket_directories={srv.dir} "
        "-c fsync=off -c max_connections=200 -c shared_buffers=64MB"
    )
    srv.run("pg_ctl", "-D", srv.data, "-o", options, "-l", os.path.join(srv.dir, "log"), "-w", "start")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def ok(msg):
    print("OK (bug not reproduced):", msg)
    sys.exit(0)
