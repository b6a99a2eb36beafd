"""The child of test_durable.py's crash test: a KeyedScheduler on SQLite with 1,000 keys firing every
100 ms, which journals every run it starts and finishes, and some upserts, until it is killed.

    python tests/_crash_child.py DB JOURNAL LIFE

Journal lines (one os.write each, to a file opened O_APPEND: a SIGKILL cannot lose a line that write()
returned; the file is fdatasync'ed every 100 ms, for good measure):
    B life wall          before start(): fires scheduled before this are catch-up fires of this life
    S key scheduled_us life   a run starts (after its fire was committed as started)
    F key scheduled_us life   a run ends (before its finish is committed)
    u key data / U key data   an upsert is about to be made / has returned (committed)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from timerwheel import KeyedScheduler, SQLiteStore, ThreadedScheduler

KEYS = 1000
PERIOD = 0.1


def main() -> None:
    path, journal, life = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    def run(ctx: Any, key: str, data: Any) -> None:
        at = round(ctx.scheduled_for * 1_000_000)
        log(f"S {key} {at} {life}")
        log(f"F {key} {at} {life}")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sched = ThreadedScheduler(workers=2)
    keyed = KeyedScheduler(
        sched,
        lambda now, key, data: now + timedelta(seconds=PERIOD),
        run,
        context=True,
        store=SQLiteStore(path),
    )
    if len(keyed) == 0:
        keyed.replace_all({f"k{i}": {"v": 0} for i in range(KEYS)})
    log(f"B {life} {time.time()!r}")
    keyed.start()
    with open(journal + f".ready{life}", "w"):
        pass
    n = 0
    while not stop.wait(0.02):  # upserts meanwhile: each one journaled before and after it commits
        key = f"k{(life * 37 + n * 11) % KEYS}"
        data = {"v": life * 1000 + n}
        text = json.dumps(data, separators=(",", ":"))
        log(f"u {key} {text}")
        keyed.upsert(key, data)
        log(f"U {key} {text}")
        n += 1
        if n % 5 == 0:
            os.fdatasync(fd)
    keyed.close()
    sched.close()


if __name__ == "__main__":
    main()
