"""`python -m timerwheel keys --store URL COMMAND [KEY]`: a store's keys from the command line.

    python -m timerwheel keys --store sqlite:///jobs.db list
    python -m timerwheel keys --store postgresql://localhost/app show nightly-report
    python -m timerwheel keys --store postgresql://localhost/app pause nightly-report
    python -m timerwheel keys --store postgresql://localhost/app trigger nightly-report --json
    python -m timerwheel keys --store sqlite:///jobs.db preview nightly-report --next-run app.jobs:nightly

Commands: list, show KEY, pause KEY, resume KEY, trigger KEY, remove KEY, preview KEY. Aligned tables
for people, `--json` for scripts. Exit status: 0 done, 1 no such key (or, for trigger, a paused key) or
a store that failed, 2 a command line it does not understand.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Hashable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from .._stores import StoreError
from .admin import UNREADABLE, KeyView, StoreKeys
from .keys import HistoryEntry, options_of

COMMANDS = ("list", "show", "pause", "resume", "trigger", "remove", "preview")
CELL = 60  # the widest a key, an owner or an error is shown in a table's column (show prints it whole)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m timerwheel keys",
        description="A store's keys: list them, show one with its history, pause, resume, trigger, "
        "remove or preview one.",
    )
    parser.add_argument(
        "--store",
        required=True,
        metavar="URL",
        help="sqlite:///path.db (sqlite:////abs/path.db), or a PostgreSQL DSN (postgresql://...)",
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("key", nargs="?", help="the key (a str, or the digits of an int key)")
    parser.add_argument("--json", action="store_true", help="print JSON, for scripts")
    parser.add_argument(
        "--next-run",
        metavar="MODULE:NAME",
        help="preview: the next_run the keys run by (a function, or a Cron), imported from MODULE",
    )
    parser.add_argument("--hours", type=float, default=24.0, help="preview: how far ahead (default 24)")
    parser.add_argument("--limit", type=int, default=20, help="preview: at most this many entries")
    return parser


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    """Run the command; returns its exit status."""
    out = sys.stdout if out is None else out
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command != "list" and args.key is None:
        parser.error(f"{args.command} needs a KEY")
    if args.command == "list" and args.key is not None:
        parser.error("list takes no KEY")
    if args.command == "preview" and args.next_run is None:
        parser.error("preview needs --next-run MODULE:NAME (the next_run your KeyedScheduler is given)")
    if not 0 < args.hours <= 24 * 3660 or not 1 <= args.limit <= 100_000:
        parser.error("--hours must be > 0 (at most ten years), --limit between 1 and 100000")
    try:
        keys = StoreKeys(args.store)
    except (StoreError, ValueError, ImportError) as exc:
        return _error(args, out, exc, 2 if isinstance(exc, ValueError) else 1)
    try:
        return _run(keys, args, out)
    except (StoreError, ValueError) as exc:  # (ValueError: a stored key the store cannot name, too long)
        return _error(args, out, exc, 1)
    except BrokenPipeError:  # (piped into a program that stopped reading, such as head: quietly)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        keys.close()


def _run(keys: StoreKeys, args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "list":
        views = keys.keys()
        if args.json:
            _dump([_view_json(v) for v in views], out)
        else:
            rows = [
                (_key(v.key, CELL), v.state, _when(v.next_run_at), _when(v.last_started), _owner(v))
                for v in views
            ]
            _table(["KEY", "STATE", "NEXT RUN", "LAST STARTED", "OWNER"], rows, out)
        return 0
    view = keys.find(args.key)
    if view is None:
        return _missing(args, out)
    if args.command == "show":
        return _show(keys, view, args.json, out)
    name = _cell(args.key)  # (as typed: shown escaped)
    if view.state == UNREADABLE and args.command != "remove":  # (its holders pass over it)
        raise StoreError(f"{view.last_error}: remove the key, or correct its row")
    key = view.key
    if args.command == "preview":
        return _preview(view, args, out)
    if args.command == "trigger":
        at = keys.trigger(key)
        if at is None:  # (removed meanwhile, or paused)
            return _say(args, out, {"key": key, "triggered": None}, f"{name}: paused, not triggered", 1)
        where = "its holder runs it" if keys.shared else "the next process to open the file runs it"
        return _say(
            args,
            out,
            {"key": key, "triggered": at.isoformat()},
            f"triggered {name} at {_when(at)}: {where}",
        )
    done = keys.remove(view) if args.command == "remove" else keys.set_paused(key, args.command == "pause")
    if not done:
        return _missing(args, out)
    past = {"pause": "paused", "resume": "resumed", "remove": "removed"}[args.command]
    return _say(args, out, {"key": key, past: True}, f"{past} {name}")


def _show(keys: StoreKeys, view: KeyView, as_json: bool, out: TextIO) -> int:
    history = keys.history(view.key)
    if as_json:
        _dump({**_view_json(view), "history": [_entry_json(e) for e in history]}, out)
        return 0
    fields = [
        ("key", _key(view.key)),
        ("state", view.state),
        ("next run", _when(view.next_run_at)),
        ("last started", _when(view.last_started)),
        ("last error", _cell(view.last_error or "-")),
        ("generation", str(view.generation)),
        ("runs", str(view.runs)),
        ("owner", _owner(view)),
        ("triggered", _when(view.triggered_at)),
        ("options", json.dumps(view.options) if view.options else "-"),
        ("data", json.dumps(view.data)),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name:<{width}}  {value}", file=out)
    print(f"\nhistory (newest first, {len(history)} entries):", file=out)
    _history_table(history, out)
    return 0


def _preview(view: KeyView, args: argparse.Namespace, out: TextIO) -> int:
    from .._engine import Scheduler
    from .keys import KeyState
    from .scheduler import KeyedScheduler

    key = view.key
    module, _, name = args.next_run.partition(":")
    try:
        next_run = getattr(importlib.import_module(module), name)
    except Exception as exc:
        print(f"error: --next-run {args.next_run!r} cannot be imported: {exc!r}", file=sys.stderr)
        return 2
    if not callable(next_run):
        print(
            f"error: --next-run {args.next_run!r} is a {type(next_run).__name__}, not callable",
            file=sys.stderr,
        )
        return 2
    options = _upsert_options(view.options)
    if view.state == "paused" or (options.get("max_runs") is not None and view.runs >= options["max_runs"]):
        entries = []  # (paused: nothing runs until it is resumed; its runs spent: nothing more)
    else:
        if options.get("max_runs") is not None:
            options["max_runs"] -= view.runs  # (the runs it has left)
        keyed = KeyedScheduler(Scheduler(), next_run, lambda key, data: None)
        try:
            keyed.upsert(key, view.data, **options)
            info = keyed.get(key)
            if info is not None and info.state is KeyState.INVALID:
                print(
                    f"error: {args.next_run} fails for {_cell(args.key)}: {info.last_error}", file=sys.stderr
                )
                return 1
            start = datetime.now(UTC)
            entries = keyed.preview(key, start, start + timedelta(hours=args.hours), limit=args.limit)
        finally:
            keyed.close()
    if args.json:
        _dump([_entry_json(e) for e in entries], out)
    else:
        print(
            f"{_key(key)}: the next {args.hours:g} hours (at most {args.limit} entries), oldest first",
            file=out,
        )
        _history_table(entries, out)
    return 0


def _upsert_options(stored: dict[str, Any] | None) -> dict[str, Any]:
    """A key's stored options as upsert()'s keywords."""
    options = options_of(None if stored is None else json.dumps(stored))
    if options is None:
        return {}
    found = options._asdict()
    for name in ("start", "end"):
        if found[name] is not None:
            found[name] = datetime.fromtimestamp(found[name], UTC)
    return {k: v for k, v in found.items() if v is not None}


def _error(args: argparse.Namespace, out: TextIO, exc: Exception, status: int) -> int:
    """A failure: on stderr, and with --json as {"error": ...} on stdout too (for the script)."""
    print(f"error: {exc}", file=sys.stderr)
    if args.json:
        _dump({"error": str(exc)}, out)
    return status


def _missing(args: argparse.Namespace, out: TextIO) -> int:
    return _say(args, out, {"key": args.key, "error": "no such key"}, f"{_cell(args.key)}: no such key", 1)


def _say(args: argparse.Namespace, out: TextIO, data: dict[str, Any], text: str, status: int = 0) -> int:
    if args.json:
        _dump(data, out)
    else:
        print(text, file=out)
    return status


def _dump(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2)
    out.write("\n")


def _view_json(view: KeyView) -> dict[str, Any]:
    found = view._asdict()
    for name in ("next_run_at", "last_started", "triggered_at"):
        found[name] = None if found[name] is None else found[name].isoformat()
    return found


def _entry_json(entry: HistoryEntry) -> dict[str, Any]:
    found = entry._asdict()
    for name in ("scheduled_for", "at"):
        found[name] = None if found[name] is None else found[name].isoformat()
    return found


def _history_table(entries: Sequence[HistoryEntry], out: TextIO) -> None:
    rows = [
        (
            _when(e.at),
            _when(e.scheduled_for),
            e.outcome,
            str(e.attempt),
            "-" if e.duration is None else f"{e.duration:.3f} s",
            _cell(e.error or "", CELL),
        )
        for e in entries
    ]
    _table(["AT", "SCHEDULED FOR", "OUTCOME", "ATTEMPT", "DURATION", "ERROR"], rows, out)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _cell(text: str, limit: int | None = None) -> str:
    """A value as a table shows it: on one line (a control character escaped, as repr() writes it), at
    most `limit` characters (cut, ending in "...")."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def _key(key: Hashable, limit: int | None = None) -> str:
    return _cell(str(key), limit)


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _owner(view: KeyView) -> str:
    if view.owner is None:
        return "-"
    return _cell(view.owner, CELL) + ("" if view.owner_live else " (lease lapsed)")
