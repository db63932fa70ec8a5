"""``PgQueueBackend``: Django's Tasks framework on the django-pgqueue job table."""

from __future__ import annotations

from typing import Any

from django_pgqueue import conf, validation
from django_pgqueue.backend.checks import OPTION_RULES, check_backend
from django_pgqueue.backend.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from django_pgqueue.backend.results import job_result, load_job
from django_pgqueue.backend.task import PgQueueTask, validate_extras
from django_pgqueue.exceptions import InvalidJob


class PgQueueBackend(BaseTaskBackend):
    """Tasks run by django-pgqueue workers; results read from the job table.

    ``TASKS = {"default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend",
    "QUEUES": [...], "OPTIONS": {"MAX_ATTEMPTS": 5}}}``. Jobs go to the database
    ``PGQUEUE["DATABASE"]``, in the caller's transaction.
    """

    task_class = PgQueueTask
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    #: The OPTIONS keys this backend reads; check() reports any other (E103).
    known_options = frozenset(OPTION_RULES)

    # No __init__ of our own: Django builds a backend at import time of every module
    # that declares a task (and once per thread), possibly before the app registry is
    # ready, so OPTIONS are read when used and check() reports what is wrong with them.

    @property
    def database(self) -> str:
        """The database alias jobs are written to and results read from."""
        return conf.get().DATABASE

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks, then the queue's own: a valid queue name and valid options."""
        super().validate_task(task)
        if not validation.QUEUE.is_valid(task.queue_name):
            raise InvalidTask(
                f"Queue name {task.queue_name!r} is not valid for django-pgqueue: "
                f"expected {validation.QUEUE.expected}."
            )
        validate_extras(task)

    def enqueue[**P, R](
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Insert the job in the caller's transaction and return its READY result.

        With a ``unique_key`` that a queued or running job already holds, nothing is
        inserted, no ``task_enqueued`` is sent, and the result is that job's.
        """
        from django_pgqueue.models import Job  # backends are built before the app registry

        self.validate_task(task)
        # Django's own normalisation first, so a bad argument fails with the
        # framework's TypeError("Unsupported type ...") before anything is written.
        plain_args: Any = normalize_json(args)
        plain_kwargs: Any = normalize_json(kwargs)
        try:
            job = Job.objects.enqueue(
                task.module_path,
                plain_args,
                plain_kwargs,
                using=self.database,
                queue=task.queue_name,
                priority=task.priority,
                run_at=task.run_after,
                max_attempts=_first_set(
                    getattr(task, "max_attempts", None), self.options.get("MAX_ATTEMPTS")
                ),
                unique_key=getattr(task, "unique_key", None),
                concurrency_key=getattr(task, "concurrency_key", None),
                backoff=_first_set(getattr(task, "backoff", None), self.options.get("BACKOFF")),
            )
        except InvalidJob as exc:
            if isinstance(exc, TypeError):  # arguments that are not JSON stay a TypeError
                raise
            # An option the queue refuses (a bad OPTIONS value, say): the
            # framework's exception, with the queue's message.
            raise InvalidTask(f"{exc} (TASKS[{self.alias!r}])") from exc
        if job.duplicate:
            live = load_job(job.id, self.database)
            return job_result(live, self.alias, task if live.task == task.module_path else None)
        result: TaskResult[P, R] = TaskResult(
            task=task,
            id=str(job.id),
            status=TaskResultStatus.READY,
            enqueued_at=job.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=job.args,
            kwargs=job.kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The job's current state; TaskResultDoesNotExist for unknown or malformed ids."""
        return job_result(load_job(result_id, self.database), self.alias)

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's checks, then ours (E101-E107, see ``django_pgqueue.backend.checks``)."""
        return [*super().check(**kwargs), *check_backend(self.alias, self.options, self.queues)]


def _first_set(*values: Any) -> Any:
    """The first value that is not None (0 is a valid backoff)."""
    return next((v for v in values if v is not None), None)
