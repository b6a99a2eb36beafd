"""A child process of tests/test_durable.py: opens a SQLiteStore on a file the test made read-only.

    python tests/_sqlite_readonly.py PATH

Prints "opened", or the StoreError's type and message. Run as root, it first gives up the capabilities
that let root write whatever a file's permissions say (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
CAP_FOWNER), so that a read-only file is to it what it is to a user; where it cannot (not Linux), it prints
why and exits with status 2 (the test skips).
"""

from __future__ import annotations

import ctypes
import os
import sys

_CAPABILITY_V3 = 0x20080522
_DAC = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_dac_capabilities() -> None:
    """Clear the DAC capabilities from this process's effective set (Linux capget/capset)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _Header(_CAPABILITY_V3, 0)
    data = (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for cap in _DAC:
        data[0].effective &= ~(1 << cap)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def main() -> None:
    path = sys.argv[1]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            drop_dac_capabilities()
        except (OSError, AttributeError) as exc:
            print(f"root, and cannot give up the capabilities that ignore permissions: {exc}")
            sys.exit(2)
    from timerwheel import SQLiteStore, StoreError

    try:
        SQLiteStore(path).close()
    except StoreError as exc:
        print(f"StoreError: {exc}")
    else:
        print("opened")


if __name__ == "__main__":
    main()
