"""The periodic schedules' system check, ``django_pgqueue.E010``.

Apart from ``django_pgqueue.checks``: resolving a schedule's task reaches the
Tasks backend, whose own checks use that module.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_pgqueue import conf
from django_pgqueue.exceptions import InvalidSchedule
from django_pgqueue.periodic.calls import job_spec


@checks.register(checks.Tags.compatibility)
def check_periodic(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E010: an entry of PGQUEUE['PERIODIC'] whose task cannot be found, or whose job
    its task would refuse (arguments that do not fit, a queue its backend lacks).
    The entries' own shape (cron, every, timezone...) is E001's, read with settings."""
    if not apps.is_installed("django_pgqueue"):
        return []
    try:
        schedules = conf.get().schedules
    except ImproperlyConfigured:
        return []  # E001
    found: list[checks.CheckMessage] = []
    for schedule in schedules:
        try:
            job_spec(schedule)
        except InvalidSchedule as exc:
            found.append(
                checks.Error(
                    str(exc),
                    hint="Each tick enqueues this job: fix the entry, or remove it.",
                    id="django_pgqueue.E010",
                )
            )
    return found
