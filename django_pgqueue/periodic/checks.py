"""The periodic schedules' system check: ``django_pgqueue.E010``, or ``W005`` for
an entry that is off in the settings.

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
    W005 for the same in an entry with ``"enabled": False``: no worker of these
    settings ticks it (the operators' switch cannot turn it on), so it stops none
    from starting; it becomes E010 when the settings turn it on. The entries' own
    shape (cron, every, timezone...) is E001's, read with settings."""
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
            if schedule.enabled:
                found.append(
                    checks.Error(
                        str(exc),
                        hint="Each tick enqueues this job: fix the entry, or remove it.",
                        id="django_pgqueue.E010",
                    )
                )
            else:
                found.append(
                    checks.Warning(
                        f'{exc} (the entry is off: "enabled": False)',
                        hint="No worker enqueues it while it is off; switched on as it "
                        "is, it stops every worker from starting (django_pgqueue.E010): "
                        "fix the entry, or remove it.",
                        id="django_pgqueue.W005",
                    )
                )
    return found
