"""The same tasks declared with Django's ``@task`` (``django.tasks``): what users write.

Under ``benchmarks.settings`` they belong to ``PgQueueBackend`` (the Tasks path);
under ``benchmarks.peer_settings`` to django-tasks-db. Same bodies as
``benchapp.tasks``.
"""

from __future__ import annotations

import time

from django.tasks import task

from benchmarks.jobbody import record


@task
def noop(*args: object, **kwargs: object) -> None:
    record("job")


@task
def stamp(key: str) -> None:
    record(key)


@task
def sleep_ms(ms: float) -> None:
    record("sleep")
    time.sleep(ms / 1000)
