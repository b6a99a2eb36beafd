"""With a durable store, docs/durable.md: run, next_run, the callbacks and KeyInfo get what JSON gives back,
'the same in every life of the process'. But upsert() and replace_all() call next_run with the caller's
own object: {1: 10} (an int dict key) is {1: 10} for next_run at upsert and {"1": 10} everywhere else, so
the key is INVALID in this life and fine after a restart (and a tuple is a tuple at upsert, a list after)."""

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta

from timerwheel import KeyedScheduler, Scheduler, SQLiteStore
from timerwheel.testing import ManualClock

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC).timestamp()
seen = []


def next_run(now, key, data):
    seen.append(data)
    return now + timedelta(seconds=data["1"])  # what the stored JSON gives back: a str key


path = os.path.join(tempfile.mkdtemp(), "k.db")
clock = ManualClock(0.0, wall=T0)
k1 = KeyedScheduler(Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path))
k1.start()
k1.upsert("a", {1: 10})
k1.replace_all({"a": {1: 10}, "b": {1: 20}})
s1 = {k: (i.state.name, i.data, i.last_error) for k, i in k1.snapshot().items()}
k1.close()
print("this life:", s1, "| next_run saw:", seen)
k2 = KeyedScheduler(Scheduler(clock), next_run, lambda k, d: None, store=SQLiteStore(path))
k2.start()
s2 = {k: (i.state.name, i.data, i.last_error) for k, i in k2.snapshot().items()}
k2.close()
print("next life:", s2)
if any(type(d) is dict and 1 in d for d in seen) or s1["a"][0] != s2["a"][0]:
    print(
        "FAIL: next_run got the caller's object, not what JSON gives back; the key's state differs "
        "between lives"
    )
    sys.exit(1)
print("ok")
