"""``@django_pgqueue.task``: register a function the worker may run.

For projects on Django's Tasks framework, ``django.tasks.task`` with the
``PgQueueBackend`` is the usual spelling; this decorator is the direct API,
available on every supported Django version.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from django.dispatch import Signal

from django_pgqueue import custom_names, registry, validation, wording
from django_pgqueue.control import (
    Cancel,
    Snooze,
    current_job,
    is_coroutine_function,
    overran,
    run_coroutine,
)
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.installed import job_model
from django_pgqueue.jobdb import raise_if_transaction_left_open
from django_pgqueue.jsonargs import Encoded, dumps_result
from django_pgqueue.records import RunOutcome
from django_pgqueue.retrypolicy import DEFAULT, RetryPolicy, row_policy, snooze_refused
from django_pgqueue.signals import job_finished, job_started

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.records import ClaimedJob

P = ParamSpec("P")
R = TypeVar("R")
logger = logging.getLogger("django_pgqueue")


@dataclasses.dataclass(frozen=True)
class TaskFunction[**P, R]:
    """A registered task: call it to run it here, ``.enqueue()`` it to run it in a worker."""

    func: Callable[P, R]
    path: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: What the worker does after a failed run (``@task(retry_on=..., discard_on=...)``).
    retry_policy: RetryPolicy = DEFAULT

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __hash__(self) -> int:
        # By path (equal tasks have equal paths): options are a dict, and signals
        # look their senders up by hash.
        return hash(self.path)

    def using(self, **options: Any) -> TaskFunction[P, R]:
        """A copy with other enqueue options (queue, priority, delay, run_at,
        max_attempts, unique_key, concurrency_key, backoff, retry_on, discard_on);
        InvalidJob for an unknown option or a bad value."""
        validation.check_options(options)
        retry_on, discard_on = options.pop("retry_on", None), options.pop("discard_on", None)
        policy = self.retry_policy
        if retry_on is not None or discard_on is not None:
            policy = policy.replace(retry_on, discard_on)
        return dataclasses.replace(self, options={**self.options, **options}, retry_policy=policy)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue a run in the current transaction (see ``JobManager.enqueue``)."""
        return job_model().objects.enqueue(self, args, kwargs)


def _invoke(target: TaskFunction[..., Any], job: ClaimedJob) -> Any:
    _send(job_started, target, job=job)
    try:
        if is_coroutine_function(target.func):
            # The worker's threads have no event loop: run the coroutine to completion
            # (as a task an abort can cancel).
            result = run_coroutine(target.func, job.args, job.kwargs)
        else:
            result = target.func(*job.args, **job.kwargs)
        raise_if_transaction_left_open()
    except BaseException as exc:
        # Inside the except block: a receiver logging with exc_info sees exc. Past the
        # job timeout (decided now, as the task returns) the worker records that.
        late = overran(current_job())
        # Cancel ends the job cancelled past the timeout too (the worker records it so).
        reported = exc if late is None or isinstance(exc, Cancel) else late
        outcome = _raised(target, job, reported)
        _send(job_finished, target, job=job, outcome=outcome, result=None, exception=reported)
        raise
    late = overran(current_job())  # decided as the task returns, not after the receivers below
    if late is not None:
        outcome = _raised(target, job, late)
        _send(job_finished, target, job=job, outcome=outcome, result=None, exception=late)
        return result
    running = current_job()
    if running is not None and running.stopped_by_request and running.cancel_reason is not None:
        # It saw the request and returned: the executor ends the job cancelled.
        _send(
            job_finished, target, job=job, outcome=RunOutcome.CANCELLED, result=None, exception=None
        )
        return result
    try:
        encoded = dumps_result(result)
    except TypeError as exc:
        # Returned as it is: the executor refuses it and buries the job.
        _send(job_finished, target, job=job, outcome=RunOutcome.DEAD, result=result, exception=exc)
        return result
    _send(
        job_finished, target, job=job, outcome=RunOutcome.SUCCEEDED, result=result, exception=None
    )
    return Encoded(encoded)  # checked and encoded once: the executor stores the text


def _raised(target: TaskFunction[..., Any], job: ClaimedJob, exc: BaseException) -> RunOutcome:
    """What the executor will make of a run that raised ``exc`` (as it decides)."""
    running = current_job()
    if isinstance(exc, Cancel) or (running is not None and running.cancel_requested):
        return RunOutcome.CANCELLED
    if isinstance(exc, Snooze):
        # Back to queued, the attempt not spent; buried past MAX_SNOOZES (executor.snoozed).
        return RunOutcome.RETRIED if snooze_refused(job.snoozes, exc) is None else RunOutcome.DEAD
    # The executor's policy_for, which logs a policy it cannot read: not twice.
    policy = row_policy(job.id, job.task, job.retry_policy, lambda: target.retry_policy, warn=False)
    if job.attempt < job.max_attempts and policy.retries(exc):
        return RunOutcome.RETRIED
    return RunOutcome.DEAD


def _send(signal: Signal, task: TaskFunction[..., Any], **data: Any) -> None:
    # A receiver's error must not change what happens to the job.
    try:
        responses = signal.send_robust(task, **data)
    except Exception:
        logger.exception("job %s: sending a signal failed", data["job"].id)
        return
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error(
                "job %s: signal receiver %r raised", data["job"].id, receiver, exc_info=response
            )


@overload
def task[**P, R](func: Callable[P, R], /) -> TaskFunction[P, R]: ...
@overload
def task(
    *,
    name: str | None = None,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    discard_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    **options: Any,
) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...


def task[**P, R](
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    discard_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    **options: Any,
) -> TaskFunction[P, R] | Callable[[Callable[P, R]], TaskFunction[P, R]]:
    """Register ``func`` as a task, with default enqueue options and a retry policy.

    ``@task`` or ``@task(queue="emails", max_attempts=5)``. The path stored in
    job rows is ``module.qualname`` unless ``name`` is given. ``retry_on``: only
    these exceptions are retried (any other buries the job at once);
    ``discard_on``: these bury it at once (they win over ``retry_on``).
    """
    if name is not None and not validation.TASK_PATH.is_valid(name):
        raise InvalidJob(
            f"@task(name={name!r}): a task's name is the dotted path its jobs store, "
            f"such as 'mailer.send' (at most {validation.MAX_KEY} chars)"
        )
    validation.check_options(options)  # a mistake fails here, not at every enqueue
    policy = RetryPolicy.build(retry_on, discard_on)

    def wrap(f: Callable[P, R]) -> TaskFunction[P, R]:
        if hasattr(type(f), "module_path"):  # stacked on django.tasks' @task
            raise TypeError(
                f"{f.module_path!r} is already a django.tasks Task: use one decorator, "  # type: ignore[attr-defined]
                "django.tasks' @task (with PgQueueBackend) or @django_pgqueue.task"
            )
        if isinstance(f, str):  # @task("emails"): Celery's habit
            raise TypeError(
                f"@task takes the function to register, not {f!r}: give its options by "
                f"keyword, as in @task(queue={f!r}) or @task(name={f!r})"
            )
        if not callable(f):  # a classmethod, say: nothing a worker could call
            raise TypeError(f"@task takes the function to register, not {f!r}: not callable")
        path = name or f"{f.__module__}.{f.__qualname__}"
        if name is None and "<lambda>" in f.__qualname__:  # all of a module's share it
            raise TypeError(
                f"@task cannot register {path!r}: a worker finds a task by its module and "
                "name, and every lambda of a module has the same one. Define it with def, or "
                "give it a name of its own: @task(name='app.tasks.double')"
            )
        where = wording.not_top_level(getattr(f, "__qualname__", ""))
        if name is None and where is not None:  # its path names nothing a worker imports
            raise TypeError(
                f"@task cannot register {path!r}: it is defined {where}, and "
                + wording.TOP_LEVEL_ONLY
            )
        wrapped = TaskFunction(f, path, dict(options), policy)
        registry.register(path, wrapped, _invoke)
        if name is not None:  # found by a worker only if what it imports runs this line
            custom_names.note(path, getattr(f, "__module__", ""))
        return wrapped

    return wrap(func) if func is not None else wrap
