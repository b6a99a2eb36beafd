"""A child process of tests/test_durable.py: the owner of a SQLiteStore forks a child that inherited it.

    python tests/_sqlite_fork.py PATH HOW

The owner upserts 100 keys, forks a child that ends as HOW says ("return": the end of the program,
"exit": sys.exit(), "exec": os.execv(), "killed": SIGKILL, "use": tries the store, then the end of the
program), waits for it, and writes one JSON line to stdout: whether its WAL file is still the one it
writes to, and what the child reported. Then it waits for a line on stdin (the test checks the file's
owner meanwhile), upserts 100 keys more, and SIGKILLs itself: every one of the 200 returned.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore, StoreError
from timerwheel.testing import ManualClock


def later(now: datetime, key: Any, data: Any) -> datetime:
    return now + timedelta(hours=1)


def child(how: str, keyed: KeyedScheduler, store: SQLiteStore, report: int) -> None:
    """The forked child: ends as `how` says."""
    if how == "exit":
        sys.exit(3)
    if how == "exec":
        os.execv(sys.executable, [sys.executable, "-c", "pass"])
    if how == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "use":
        errors = []
        for attempt in (lambda: keyed.upsert("child", {}), lambda: store.integrity()):
            try:
                attempt()
                errors.append("no error")
            except StoreError as exc:
                errors.append(str(exc))
        keyed.close()  # (and so store.close(): nothing to release in the child)
        os.write(report, "\n".join(errors).encode())
    # "return", "use": the end of the program (the interpreter's exit: finalizers, module cleanup)


def main() -> None:
    """The owner's life; the forked child returns from it, to the end of the program."""
    path, how = sys.argv[1], sys.argv[2]
    clock = ManualClock(0.0, wall=datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp())
    store = SQLiteStore(path)
    keyed = KeyedScheduler(Scheduler(clock), later, print, store=store)
    keyed.start()
    for i in range(100):
        keyed.upsert(f"before-{i}", {"i": i})
    wal = os.stat(path + "-wal")
    read, write = os.pipe()  # (not inherited by an exec: the owner reads to the end of it)
    pid = os.fork()
    if pid == 0:
        os.close(read)
        child(how, keyed, store, write)
        return
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        reported = pipe.read().decode()
    os.waitpid(pid, 0)
    now = os.stat(path + "-wal") if os.path.exists(path + "-wal") else None
    kept = now is not None and (now.st_dev, now.st_ino) == (wal.st_dev, wal.st_ino) and now.st_nlink > 0
    print(json.dumps({"wal_kept": kept, "child": reported}), flush=True)
    sys.stdin.readline()  # (the test looks at the file's owner meanwhile)
    for i in range(100):
        keyed.upsert(f"after-{i}", {"i": i})
    os.kill(os.getpid(), signal.SIGKILL)  # every upsert returned: all 200 must be in the file


if __name__ == "__main__":
    main()
