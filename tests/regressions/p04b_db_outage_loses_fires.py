"""The tests' own child (tests/_shared_child.py: 4 processes, 400 keys every 500 ms, catch_up=ALL,
max_catch_up=1000, lease 1 s) through two database outages of 2.5 s (pg_ctl stop / start): after each,
one process claims most keys and catches up, then sheds keys down to its share in the middle of their
catch-up (fires handed to its scheduler but not begun: see 04_...): Journal.check() of the tests finds
100+ fires that no process ever ran. Hit rate: 4/4 runs here. ~30 s."""

import signal
import tempfile
import time
from pathlib import Path

from _common import fail, fresh_db, pg_start, pg_stop, server

from _shared_child import Journal, seed, spawn

srv = server()
try:
    dsn = fresh_db(srv)
    seed(dsn, 400)
    journal = Path(tempfile.mkdtemp()) / "journal"
    journal.touch()
    kids = [spawn(dsn, journal, f"p{i}", 1.0) for i in range(4)]
    time.sleep(4)
    for _ in range(2):
        pg_stop(srv)
        time.sleep(2.5)
        pg_start(srv)
        time.sleep(5)
    time.sleep(2)
    for k in kids:
        k.send_signal(signal.SIGTERM)
    for k in kids:
        k.wait(timeout=60)
    r = Journal(journal).check(killed=set())
    print(
        f"fires {r['fires']}, run twice {len(r['twice'])}, lost {len(r['lost'])}; lost e.g. {r['lost'][:3]}"
    )
    if r["lost"] or r["twice"]:
        fail(f"{len(r['lost'])} fires lost (a key's next start is not the next point of its grid)")
    print("OK")
finally:
    srv.stop()
