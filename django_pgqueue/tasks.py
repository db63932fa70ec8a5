"""``@django_pgqueue.task``: register a function the worker may run.

For projects on Django's Tasks framework, ``django.tasks.task`` with the
``PgQueueBackend`` is the usual spelling; this decorator is the direct API,
available on every supported Django version.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from asgiref.sync import async_to_sync

from django_pgqueue import registry
from django_pgqueue.installed import job_model
from django_pgqueue.jobdb import raise_if_transaction_left_open

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.records import ClaimedJob

P = ParamSpec("P")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class TaskFunction[**P, R]:
    """A registered task: call it to run it here, ``.enqueue()`` it to run it in a worker."""

    func: Callable[P, R]
    path: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def using(self, **options: Any) -> TaskFunction[P, R]:
        """A copy with other enqueue options (queue, priority, delay, run_at,
        max_attempts, unique_key, concurrency_key)."""
        return dataclasses.replace(self, options={**self.options, **options})

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue a run in the current transaction (see ``JobManager.enqueue``)."""
        return job_model().objects.enqueue(self, args, kwargs)


def _invoke(target: TaskFunction[..., Any], job: ClaimedJob) -> Any:
    if inspect.iscoroutinefunction(target.func):
        # The worker's threads have no event loop: run the coroutine to completion.
        result = async_to_sync(target.func)(*job.args, **job.kwargs)
    else:
        result = target.func(*job.args, **job.kwargs)
    raise_if_transaction_left_open()
    return result


@overload
def task[**P, R](func: Callable[P, R], /) -> TaskFunction[P, R]: ...
@overload
def task(
    *, name: str | None = None, **options: Any
) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...


def task[**P, R](
    func: Callable[P, R] | None = None, /, *, name: str | None = None, **options: Any
) -> TaskFunction[P, R] | Callable[[Callable[P, R]], TaskFunction[P, R]]:
    """Register ``func`` as a task, with default enqueue options.

    ``@task`` or ``@task(queue="emails", max_attempts=5)``. The path stored in
    job rows is ``module.qualname`` unless ``name`` is given.
    """

    def wrap(f: Callable[P, R]) -> TaskFunction[P, R]:
        path = name or f"{f.__module__}.{f.__qualname__}"
        wrapped = TaskFunction(f, path, dict(options))
        registry.register(path, wrapped, _invoke)
        return wrapped

    return wrap(func) if func is not None else wrap
