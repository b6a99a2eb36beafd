"""uvloop's own tests, unmodified, with timerwheel.loop's UVLoop as uvloop's loop (and its
SelectorEventLoop as asyncio's, for their asyncio twins).

    python tests/peer_uvloop.py               # the installed uvloop's test modules, from its sdist on PyPI
    python tests/peer_uvloop.py test_base     # some of them

uvloop's wheels do not carry its tests: the script downloads the sdist of the installed version from PyPI
(its simple index; the file checked against its sha256; nothing is built), takes its tests/ directory,
and runs MODULES with uvloop.new_event_loop and asyncio's loop classes replaced by timerwheel.loop's. The
count of wheel loops made is printed.

Exit status 0 if every test passes or is a known difference (KNOWN), 1 otherwise, 2 if nothing could be
run (no uvloop, PyPI unreachable).
"""

from __future__ import annotations

import asyncio
import asyncio.unix_events
import hashlib
import html
import io
import re
import sys
import tarfile
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

import timerwheel.loop
from peer_asyncio import report  # (this directory: the script's own)

#: The modules whose loops arm timers (test_tcp and test_dns need pyOpenSSL and a resolver: left out).
MODULES = (
    "test_base",
    "test_context",
    "test_runner",
    "test_unix",
    "test_aiohttp",
    "test_executors",
    "test_signals",
)

#: Tests that fail with the wheel loop for a reason that is not a difference in behaviour: id -> reason.
KNOWN: dict[str, str] = {}


def _tests(version: str, into: Path) -> Path:
    """uvloop's tests/ of `version`, from its sdist, as the package `uvloop_tests` under `into`."""
    with urllib.request.urlopen("https://pypi.org/simple/uvloop/", timeout=60) as answer:  # (PEP 503)
        page = answer.read().decode()
    name = f"uvloop-{version}.tar.gz"
    links = [u for u in re.findall(r'href="([^"]+)"', page) if u.split("#")[0].endswith("/" + name)]
    if not links:
        raise OSError(f"no {name} on PyPI")
    url, _, digest = html.unescape(links[0]).partition("#sha256=")
    with urllib.request.urlopen(url, timeout=120) as answer:
        data = answer.read()
    if digest and hashlib.sha256(data).hexdigest() != digest:
        raise OSError(f"{name}: its sha256 is not PyPI's")
    target = into / "uvloop_tests"
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if len(parts) > 2 and parts[1] == "tests" and member.isfile():
                path = target.joinpath(*parts[2:])
                path.parent.mkdir(parents=True, exist_ok=True)
                extracted = archive.extractfile(member)
                assert extracted is not None
                path.write_bytes(extracted.read())
    (target / "__init__.py").touch()
    return target


def main(names: list[str]) -> int:
    try:
        import uvloop
    except ImportError as exc:
        print(f"uvloop is not installed ({exc}): nothing run", file=sys.stderr)
        return 2
    made = [0]

    def new_event_loop() -> asyncio.AbstractEventLoop:
        made[0] += 1
        return timerwheel.loop.new_event_loop("uvloop")

    uvloop.new_event_loop = new_event_loop  # type: ignore[assignment]
    asyncio.SelectorEventLoop = asyncio.unix_events.SelectorEventLoop = timerwheel.loop.SelectorEventLoop  # type: ignore[misc]
    asyncio.DefaultEventLoopPolicy = timerwheel.loop.EventLoopPolicy  # type: ignore[misc]
    asyncio.unix_events.DefaultEventLoopPolicy = timerwheel.loop.EventLoopPolicy  # type: ignore[misc]
    asyncio.set_event_loop_policy(None)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _tests(uvloop.__version__, Path(tmp))
        except OSError as exc:
            print(
                f"uvloop {uvloop.__version__}'s tests could not be fetched ({exc}): nothing run",
                file=sys.stderr,
            )
            return 2
        sys.path.insert(0, tmp)
        wanted = [
            n for n in (names or MODULES) if (Path(tmp) / "uvloop_tests" / f"{n.split('.')[0]}.py").exists()
        ]
        suite = unittest.defaultTestLoader.loadTestsFromNames([f"uvloop_tests.{n}" for n in wanted])
        began = time.perf_counter()
        result = unittest.TextTestRunner(verbosity=1).run(suite)
    title = f"uvloop {uvloop.__version__}: {', '.join(wanted)}"
    return report(title, result, KNOWN, f"{made[0]} wheel uvloops made", began, made[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
