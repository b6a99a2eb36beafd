"""PostgresStore: one schedule shared by many processes (on one machine or many) through PostgreSQL, each
fire run once across all of them. store.py is what a KeyedScheduler calls; keeper.py its keeper and
listener threads; database.py its connections; schema.py the schema and the SQL its statements share.

How it works (docs/shared.md says it for users):

- Every process's KeyedScheduler *holds* a share of the keys: a key's row names its owner, and the
  owner's one lease row (timerwheel_leases, on the database's clock) says whether it is alive. A process
  arms in its wheel only the keys it holds. A keeper thread of the store, with a connection of its own,
  renews the lease every lease/3 seconds (one row, whatever the number of keys), claims keys that nobody
  holds, or whose owner's lease lapsed, with `SELECT ... FOR UPDATE SKIP LOCKED` up to a fair share
  (keys / live processes), and gives back what it holds beyond that share. A claim holds the lapsed
  leases' rows (FOR SHARE) to its end, and a take renews its taker's lease first, its row locked: a
  take never overlaps a claim of its taker's keys.
- Fires are taken by one statement for a batch (timerwheel_take_fires) that renews the taker's lease,
  checks each key's owner and generation and inserts each fire-log row (unique on key, generation,
  scheduled_for) in the same transaction: a process that no longer holds the key, or holds an older
  generation, cannot take it, whatever its own clock or wheel says. A completion is fenced the same
  way: only the holder of that generation writes the key's row.
- upsert() and replace_all() from any process take the keys over (the new generation is armed where it
  was computed) and NOTIFY the others, whose listener thread drops what they held of the older
  generation (and cancels its running run, with cancel_running_on_replace / _on_remove) at once.
- A process that dies stops renewing: the others take its keys over within lease + lease/3 seconds, and
  apply the same recover and catch-up rules as a restart on SQLite (the fires it had started and not
  finished: recover=; those missed meanwhile: catch_up=), once, in the process that claimed the key.
- The schema is created and migrated by the store itself, under an advisory lock: versioned, and safe
  when many processes start at once.
"""

from .schema import CHANNEL, MAX_KEY, SCHEMA_VERSION
from .store import PostgresStore

__all__ = ["CHANNEL", "MAX_KEY", "SCHEMA_VERSION", "PostgresStore"]
