"""CPython's own asyncio tests, unmodified, with timerwheel's event loop as asyncio's.

    python tests/peer_asyncio.py                 # this Python's test_asyncio modules on the wheel loop
    python tests/peer_asyncio.py test_tasks      # some of them

asyncio.SelectorEventLoop and asyncio.DefaultEventLoopPolicy are replaced by timerwheel.loop's before the
tests are imported, so every loop the tests make through them (asyncio.new_event_loop, asyncio.run, the
policy, a test case's own SelectorEventLoop) is the wheel loop; the count of loops made is printed, so a
run that exercised nothing shows it. Tests that make a loop of another class (asyncio's test loop, a bare
BaseEventLoop) test asyncio's heap as they always did.

Exit status 0 if every test passes or is a known difference (KNOWN, each with its reason; docs/event-loop.md
lists them), 1 otherwise, 2 if this Python has no test package (Debian's python3 without
libpython3-testsuite, for instance): nothing was run.
"""

from __future__ import annotations

import asyncio
import asyncio.unix_events
import importlib.util
import sys
import time
import unittest

import timerwheel.loop

MODULES = ("test_events", "test_base_events", "test_tasks", "test_timeouts", "test_waitfor", "test_sleep")

#: Tests that fail with the wheel loop for a reason that is not a difference in behaviour: id -> reason.
KNOWN: dict[str, str] = {}

# (at import, not under __main__ only: a test that starts a process by spawn imports this module there too)
asyncio.SelectorEventLoop = asyncio.unix_events.SelectorEventLoop = timerwheel.loop.SelectorEventLoop  # type: ignore[misc]
asyncio.DefaultEventLoopPolicy = asyncio.unix_events.DefaultEventLoopPolicy = timerwheel.loop.EventLoopPolicy  # type: ignore[misc]
asyncio.set_event_loop_policy(None)


def main(names: list[str]) -> int:
    if importlib.util.find_spec("test.test_asyncio") is None:
        print(f"this Python ({sys.executable}) has no test.test_asyncio: nothing run", file=sys.stderr)
        return 2
    found = [
        n for n in (names or MODULES) if importlib.util.find_spec(f"test.test_asyncio.{n.split('.')[0]}")
    ]
    made = [0]
    init = timerwheel.loop.SelectorEventLoop.__init__

    def counted(self: timerwheel.loop.SelectorEventLoop, *args: object, **kwargs: object) -> None:
        made[0] += 1
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    timerwheel.loop.SelectorEventLoop.__init__ = counted  # type: ignore[method-assign]
    suite = unittest.defaultTestLoader.loadTestsFromNames([f"test.test_asyncio.{n}" for n in found])
    began = time.perf_counter()
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    title = f"{sys.implementation.name} {sys.version.split()[0]}: {', '.join(found)}"
    return report(title, result, KNOWN, f"{made[0]} wheel loops made", began, made[0])


def report(
    title: str, result: unittest.TestResult, known: dict[str, str], made: str, began: float, loops: int
) -> int:
    """Print the run's line and its unexpected failures; the exit status (1: one failed, or no wheel loop
    was made at all)."""
    failed = [test.id() for test, _ in result.failures + result.errors]
    unexpected = [t for t in failed if t not in known and t.split(".", 1)[-1] not in known]
    print(
        f"{title}: {result.testsRun} tests, {len(failed)} failed ({len(failed) - len(unexpected)} known), "
        f"{len(result.skipped)} skipped, {made}, {time.perf_counter() - began:.0f} s"
    )
    for test in unexpected:
        print(f"unexpected failure: {test}")
    return 1 if unexpected or loops == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
