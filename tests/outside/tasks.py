"""Tasks in a module outside every installed app, like a project's own ``mysite/tasks.py``."""

from __future__ import annotations

from django_pgqueue import task as pgqueue_task
from django_pgqueue.backend.compat import task


@task
def framework_double(n: int) -> int:
    return 2 * n


@pgqueue_task
def direct_double(n: int) -> int:
    return 2 * n
