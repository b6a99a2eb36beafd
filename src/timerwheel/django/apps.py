"""The Django app of timerwheel (INSTALLED_APPS: "timerwheel.django")."""

from __future__ import annotations

from django.apps import AppConfig


class TimerwheelConfig(AppConfig):
    """timerwheel's app: it brings the `timerwheel_worker` management command."""

    name = "timerwheel.django"
    label = "timerwheel"
    verbose_name = "timerwheel"
