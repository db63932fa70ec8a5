"""Job rows read back as Tasks-framework TaskResults."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from django_pgqueue import conf, registry, tolerant, validation
from django_pgqueue.backend.compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from django_pgqueue.backend.task import PgQueueTask
from django_pgqueue.backend.taskerrors import task_errors
from django_pgqueue.exceptions import UnknownTask
from django_pgqueue.installed import job_model
from django_pgqueue.records import JobStatus
from django_pgqueue.retrypolicy import RetryPolicy, classes_named, stored_policy

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.records import ClaimedJob

#: A pending retry is queued, which Django calls READY ("ready to be executed again").
STATUSES: dict[str, TaskResultStatus] = {
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.DONE: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    # Django has no cancelled state: the job did not succeed, and its last error
    # (a django_pgqueue.control.Cancel) carries the reason.
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


def module_task(job: Job) -> Task[Any, Any]:
    """The Task object the job's path names, found as the worker would find it."""
    try:
        target = registry.resolve(job.task).target
    except UnknownTask as exc:
        raise TaskResultDoesNotExist(f"job {job.id}: {exc}") from None
    if not isinstance(target, Task):
        raise TaskResultDoesNotExist(
            f"job {job.id} runs {job.task!r}, which is not a Tasks-framework Task"
        )
    return target


def job_task(base: Task[Any, Any], job: Job, alias: str) -> Task[Any, Any]:
    """``base`` with the options the job row ``job`` was enqueued with.

    The row keeps no separate "run after": ``run_at`` is when the job (or its
    pending retry) may next run. A job enqueued to run at once gets ``created_at``
    as its ``run_at`` (both the transaction's ``now()``), so a ``run_at`` equal to
    ``created_at`` reads back as ``None``, and any other as itself: a ``run_after``
    already past when it was enqueued (``timezone.now()``, say) too.
    """
    return task_with(
        base,
        alias,
        job.priority,
        job.queue,
        job.run_at if job.run_at != job.created_at else None,
        job.max_attempts,
        job.unique_key,
        job.concurrency_key,
        validation.stored_backoff(job.backoff),
        stored_policy(job.retry_policy),
    )


@lru_cache(maxsize=1024)
def task_with(
    base: Task[Any, Any],
    alias: str,
    priority: int,
    queue: str,
    run_after: datetime | None,
    max_attempts: int,
    unique_key: str | None,
    concurrency_key: str | None,
    backoff: float | None,
    policy: RetryPolicy | None = None,
) -> Task[Any, Any]:
    """``base`` as a job with these options reports it (cached), built without
    ``validate_task``: the job was accepted at enqueue (perhaps by another alias,
    or before a deploy changed ``QUEUES``); refused here, every attempt failed.
    ``policy``: the retry policy the row keeps (None: it keeps none, and the
    worker applies the task's)."""
    changes: dict[str, Any] = {
        "priority": priority,
        "queue_name": queue,
        "backend": alias,
        "run_after": run_after,
    }
    if isinstance(base, PgQueueTask):
        changes.update(
            max_attempts=max_attempts,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            backoff=backoff,
        )
        if policy is not None:
            retry_on = policy.retry_on
            changes["retry_on"] = None if retry_on is None else classes_named(retry_on)
            changes["discard_on"] = classes_named(policy.discard_on)
    task = object.__new__(type(base))
    for field in dataclasses.fields(base):
        object.__setattr__(task, field.name, changes.get(field.name, getattr(base, field.name)))
    return task


def _moment(epoch: float) -> datetime:
    """A time the claim returned (epoch seconds), aware. One Python cannot hold (a
    row written by hand: infinity, a year BC) reads as the nearest it can."""
    try:
        return datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, ValueError, OSError):
        return validation.LATEST if epoch > 0 else validation.EARLIEST


def _local_moment(epoch: float) -> datetime:
    """:func:`_moment` as Django reads times with ``USE_TZ = False``: naive, in TIME_ZONE."""
    try:
        return timezone.make_naive(_moment(epoch))
    except OverflowError:  # near year 1 or 9999, the zone's offset is out of range
        return timezone.make_naive(validation.LATEST if epoch > 0 else validation.EARLIEST)


def running_result(task: Task[Any, Any], job: ClaimedJob, alias: str) -> TaskResult[Any, Any]:
    """The RUNNING TaskResult of a run this worker just claimed, built from the claim:
    no read of the row, but for a ``run_at`` the claim's float cannot give exactly."""
    moment = _moment if settings.USE_TZ else _local_moment  # read once: not free
    run_after = None
    if job.run_at != job.enqueued_at:  # a deferred job, or a retry
        run_after = moment(job.run_at)
        if not -_EXACT_EPOCH < job.run_at < _EXACT_EPOCH:
            run_after = _stored_run_at(job.id, run_after)
    return build_result(
        task_with(
            task,
            alias,
            job.priority,
            job.queue,
            run_after,
            job.max_attempts,
            job.unique_key,
            job.concurrency_key,
            validation.stored_backoff(job.backoff),
            stored_policy(job.retry_policy),
        ),
        str(job.id),
        TaskResultStatus.RUNNING,
        moment(job.enqueued_at),
        moment(job.started_at),
        moment(job.attempted_at),
        job.args,
        job.kwargs,
        alias,
        task_errors(_decoded(job.errors)) if job.errors else [],
        list(_worker_ids(job.worker_ids)),
    )


#: Epoch seconds (float8) within this bound hold a time to the microsecond: from
#: 1833-11-24 to 2106-02-07 UTC. Farther out (a run_after Django accepted, such as
#: one in the year 1500), a float cannot tell microseconds apart.
_EXACT_EPOCH = 2.0**32


def _stored_run_at(job_id: int, rounded: datetime) -> datetime:
    """The job's ``run_at`` as its row holds it, for one the claim's float cannot give
    to the microsecond, so the running result's ``run_after`` is what ``get_result()``
    reads (``rounded`` if the row is not found in the queue's database). A time Python
    cannot hold (written by hand: -infinity, a year BC) is ``rounded``, the nearest
    the claim gave: read as is, psycopg refused it and the run failed before its task."""
    alias = conf.database()
    with tolerant.readable(alias):
        stored = job_model().objects.using(alias).filter(id=job_id).values_list("run_at").first()
    return rounded if stored is None or tolerant.out_of_range(stored[0]) else stored[0]


def _decoded(text: str) -> Any:
    """JSON text of a history column, or None where Python cannot read it (a row
    written by hand): the task still runs, its history is only reported."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


@lru_cache(maxsize=256)
def _worker_ids(text: str) -> tuple[str, ...]:
    """The claim's ``worker_ids`` JSON, decoded once per distinct text (``["<id>"]``)."""
    ids = _decoded(text)
    return tuple(str(worker) for worker in ids) if isinstance(ids, list) else ()


#: The fields build_result() sets: all the fields of the TaskResult it was
#: written against (Django 6.0 and 6.1, the backport 0.12). Against any other
#: shape it calls the constructor instead.
_RESULT_FIELDS = (
    "task",
    "id",
    "status",
    "enqueued_at",
    "started_at",
    "finished_at",
    "last_attempted_at",
    "args",
    "kwargs",
    "backend",
    "errors",
    "worker_ids",
    "_return_value",
)
#: The names the ``__post_init__`` it was written against uses: it only
#: normalises ``args`` and ``kwargs``. One that does more is never skipped.
_POST_INIT_NAMES = frozenset({"object", "__setattr__", "normalize_json", "args", "kwargs"})


def _may_skip_post_init() -> bool:
    """True if TaskResult has exactly the fields build_result() sets and its
    ``__post_init__`` does no more than normalise the arguments."""
    if {field.name for field in dataclasses.fields(TaskResult)} != set(_RESULT_FIELDS):
        return False
    code = getattr(getattr(TaskResult, "__post_init__", None), "__code__", None)
    return code is not None and set(code.co_names) <= _POST_INIT_NAMES


_BARE = _may_skip_post_init()


def build_result(
    task: Task[Any, Any],
    result_id: str,
    status: TaskResultStatus,
    enqueued_at: datetime | None,
    started_at: datetime | None,
    attempted_at: datetime | None,
    args: Any,
    kwargs: Any,
    alias: str,
    errors: list[TaskError],
    worker_ids: list[str],
) -> TaskResult[Any, Any]:
    """An unfinished ``TaskResult(...)``, less its ``__post_init__``, which copies
    ``args`` and ``kwargs`` through ``normalize_json``: the callers pass values
    just read back from their JSON (by the enqueue's check, or the claim), which
    are such copies already, and the copy was most of the result's cost. A worker
    calls the task with these very lists, as Django's ImmediateBackend calls it
    with its result's."""
    if not _BARE:
        return TaskResult(
            task=task,
            id=result_id,
            status=status,
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=None,
            last_attempted_at=attempted_at,
            args=args,
            kwargs=kwargs,
            backend=alias,
            errors=errors,
            worker_ids=worker_ids,
        )
    result: TaskResult[Any, Any] = TaskResult.__new__(TaskResult)
    put = object.__setattr__  # frozen: as the dataclass's own __init__ sets its fields
    put(result, "task", task)
    put(result, "id", result_id)
    put(result, "status", status)
    put(result, "enqueued_at", enqueued_at)
    put(result, "started_at", started_at)
    put(result, "finished_at", None)
    put(result, "last_attempted_at", attempted_at)
    put(result, "args", args)
    put(result, "kwargs", kwargs)
    put(result, "backend", alias)
    put(result, "errors", errors)
    put(result, "worker_ids", worker_ids)
    put(result, "_return_value", None)
    return result


def job_result(job: Job, alias: str, task: Task[Any, Any] | None = None) -> TaskResult[Any, Any]:
    """The TaskResult of ``job`` as backend ``alias`` reports it."""
    task = job_task(task if task is not None else module_task(job), job, alias)
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.id),
        status=STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.done_at,
        last_attempted_at=job.attempted_at,
        args=job.args,
        kwargs=job.kwargs,
        backend=alias,
        errors=task_errors(job.errors),
        worker_ids=[str(worker) for worker in job.worker_ids or []],
    )
    if job.status == JobStatus.DONE:
        # A frozen dataclass field with init=False: set it the way Django's own
        # backends do.
        object.__setattr__(result, "_return_value", job.result)
    return result
