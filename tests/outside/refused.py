"""A task its backend refuses as it is declared: a queue that TASKS['default']['QUEUES']
does not list. Only the tests that name it in TASK_MODULES import it."""

from __future__ import annotations

from django_pgqueue.backend.compat import task


@task(queue_name="not_listed")
def refused() -> None: ...
