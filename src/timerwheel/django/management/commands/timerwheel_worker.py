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
            factory = import_string(path)
        except ImportError as exc:
            raise CommandError(f"settings.TIMERWHEEL_KEYED = {path!r} cannot be imported: {exc}") from None
        try:
            keyed = factory()
        except Exception as exc:
            raise CommandError(f"{path}() raised {exc!r}") from exc
        if not isinstance(keyed, KeyedScheduler):
            raise CommandError(f"{path}() gave a {type(keyed).__name__}, not a KeyedScheduler")
        stop = threading.Event()

        def stopping(signum: int, frame: Any) -> None:
            if stop.is_set():  # (a second signal while it closes: out now, the runs going on abandoned)
                raise KeyboardInterrupt
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stopping)
        try:
            keyed.start()
            held = len(keyed)
            self.stdout.write(f"timerwheel worker: {held} keys held at start; stop with SIGINT or SIGTERM")
            self.stdout.flush()
            stop.wait(options["seconds"])
        except Exception as exc:
            raise CommandError(f"the KeyedScheduler could not start: {exc!r}") from exc
        finally:
            try:
                keyed.close()
            except KeyboardInterrupt:
                self.stderr.write("timerwheel worker: stopped at once; the runs going on were not awaited")
                raise SystemExit(1) from None
        stats = keyed.stats()
        self.stdout.write(f"timerwheel worker: stopped after {stats.started} runs ({stats.failed} failed)")
