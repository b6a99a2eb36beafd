"""`python manage.py timerwheel_worker`: run the project's KeyedScheduler (settings.TIMERWHEEL_KEYED)
until SIGINT or SIGTERM, or for --seconds."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from ...._keyed import KeyedScheduler


class Command(BaseCommand):
    help = "Run the KeyedScheduler that settings.TIMERWHEEL_KEYED makes, until SIGINT or SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--seconds", type=float, help="stop after this many seconds (default: on a signal)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = getattr(settings, "TIMERWHEEL_KEYED", None)
        if not isinstance(path, str):
            raise CommandError(
                "settings.TIMERWHEEL_KEYED must name a factory of your KeyedScheduler, such as "
                "'myapp.jobs.make_keyed' (a callable of no argument)"
            )
        try:
            keyed = import_string(path)()
        except ImportError as exc:
            raise CommandError(f"settings.TIMERWHEEL_KEYED = {path!r} cannot be imported: {exc}") from None
        if not isinstance(keyed, KeyedScheduler):
            raise CommandError(f"{path}() gave a {type(keyed).__name__}, not a KeyedScheduler")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        keyed.start()
        self.stdout.write(f"timerwheel worker: {len(keyed)} keys; stop with SIGINT or SIGTERM", ending="\n")
        self.stdout.flush()
        try:
            stop.wait(options["seconds"])
        finally:
            keyed.close()
        stats = keyed.stats()
        self.stdout.write(f"timerwheel worker: stopped after {stats.started} runs ({stats.failed} failed)")
