"""django-pgqueue: a reliable job queue on the PostgreSQL your Django project already runs.

The public API::

    from django_pgqueue import task, enqueue

    @task(queue="emails", max_attempts=5)
    def send_welcome(user_id: int) -> None: ...

    with transaction.atomic():
        user = User.objects.create(...)
        send_welcome.enqueue(user.id)        # or enqueue("app.tasks.send_welcome", [user.id])

Inside a task: ``raise Snooze(60)`` (run again in a minute), ``raise Cancel("why")``
(give up for good), and ``current_job().cancel_requested`` (an operator asked the
job to stop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_pgqueue.control import Cancel, RunningJob, Snooze, current_job
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments, PgQueueError, UnknownTask
from django_pgqueue.tasks import TaskFunction, task

if TYPE_CHECKING:
    from django_pgqueue.models import Job

__version__ = "0.1.0.dev0"

__all__ = [
    "Cancel",
    "InvalidJob",
    "InvalidJobArguments",
    "PgQueueError",
    "RunningJob",
    "Snooze",
    "TaskFunction",
    "UnknownTask",
    "current_job",
    "enqueue",
    "task",
]


def enqueue(task: Any, args: Any = (), kwargs: dict[str, Any] | None = None, **options: Any) -> Job:
    """Enqueue a job in the current transaction; see ``Job.objects.enqueue``."""
    # Imported here: the models need the app registry, not ready when this package is.
    from django_pgqueue.installed import job_model

    return job_model().objects.enqueue(task, args, kwargs, **options)
