"""The job table, and its manager: the public API for enqueueing and steering jobs.

A job moves ``queued -> running -> done``; a failed run goes back to ``queued``
with a later ``run_at`` until its attempts are spent, then to ``dead``. The
claim, the reaper and the operators' actions are the only ways out of each state;
docs/concepts.md draws the machine (the states: :class:`~django_pgqueue.records.JobStatus`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from django_pgqueue import conf, schema
from django_pgqueue.basemodel import OnJobDatabaseModel
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.monitoring.models import QueueGauge, RegisteredWorker
from django_pgqueue.periodic.models import Schedule
from django_pgqueue.periodic.spec import MAX_NAME as MAX_SCHEDULE_NAME
from django_pgqueue.queue import enqueue
from django_pgqueue.queue.enqueue import Inserted
from django_pgqueue.queue.manager import QueueOperations
from django_pgqueue.records import (
    FINISHED,
    JobSpec,
    JobStatus,
)
from django_pgqueue.validation import MAX_KEY

__all__ = [
    "Job",
    "JobManager",
    "JobQuerySet",
    "JobStatus",
    "Queue",
    "QueueGauge",
    "RegisteredWorker",
    "Schedule",
]


class JobQuerySet(models.QuerySet["Job"]):
    """Read-side vocabulary for the admin, stats and tests."""

    def queued(self) -> JobQuerySet:
        return self.filter(status=JobStatus.QUEUED)

    def ready(self) -> JobQuerySet:
        return self.filter(status=JobStatus.QUEUED, run_at__lte=timezone.now())

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def expired(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING, locked_until__lt=timezone.now())

    def done(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DONE)

    def dead(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DEAD)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED)


_JobManagerBase = models.Manager.from_queryset(JobQuerySet)


def _loaded[M: models.Model](model: type[M], alias: str, **known: Any) -> M:
    """``model(**known)`` for a row read from ``alias``; every other field at its
    default, as the keyword constructor sets it. Built by ``Model.from_db()``,
    as Django builds the rows it reads, from every field's value in order: the
    keyword constructor looks up each of the thirty fields by name, in about
    twice the time."""
    fields = _defaults(model)
    if not known.keys() <= fields.keys():
        raise TypeError(f"{model.__name__} has no field {sorted(known.keys() - fields.keys())}")
    values = [known[name] if name in known else default() for name, default in fields.items()]
    return model.from_db(alias, fields.keys(), values)


def _defaults(model: type[models.Model]) -> dict[str, Any]:
    """{attname: its default's maker} of each concrete field, in the constructor's order."""
    found = _DEFAULTS.get(model)
    if found is None:
        found = _DEFAULTS[model] = {
            field.attname: field.get_default for field in model._meta.concrete_fields
        }
    return found


_DEFAULTS: dict[type[models.Model], dict[str, Any]] = {}

# The JSON columns callers and tasks write, which Python may be unable to decode.
USER_JSON = ("args", "kwargs", "result")


class JobManager(QueueOperations, conf.OnJobDatabase["Job"], _JobManagerBase["Job"]):
    """Job operations, each through the queue's named statements on ``using``
    (default: ``PGQUEUE["DATABASE"]``). The read vocabulary (``ready()``,
    ``running()``, ...) comes from :class:`JobQuerySet`."""

    # -- enqueue -------------------------------------------------------------------

    def enqueue(
        self,
        task: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        using: str | None = None,
        **options: Any,
    ) -> Job:
        """Insert one job in the caller's transaction and return it.

        Options: ``queue``, ``priority`` (-100..100, higher first), ``run_at`` or ``delay``
        (seconds or timedelta), ``max_attempts``, ``unique_key``, ``concurrency_key``,
        ``backoff`` (seconds before the first retry, doubling after each; default
        ``PGQUEUE["BACKOFF_BASE"]``), ``retry_on`` and ``discard_on`` (exception classes).
        Arguments must be JSON; a bad value raises
        :class:`~django_pgqueue.exceptions.InvalidJobArguments` before anything is written.
        If a live (queued or running) job already has ``unique_key``, nothing is inserted
        and that job is returned with ``duplicate = True``. Workers are notified when
        (and only if) the transaction commits.
        """
        spec = JobSpec.build(task, args, kwargs, **options)
        row = enqueue.insert(spec, self._alias(using))
        if row.duplicate:  # the live job as stored, not the refused request's values
            live = self._stored(row.id, self._alias(using))
            if live is not None:  # (unless it was deleted since)
                live.duplicate = True
                return live
        # The caller's own (already validated) arguments: no need to decode the JSON.
        job = _loaded(
            self.model,
            self._alias(using),
            id=row.id,
            task=spec.task,
            args=list(args),
            kwargs=kwargs or {},
            queue=spec.queue,
            priority=spec.priority,
            max_attempts=spec.max_attempts,
            run_at=row.run_at,
            created_at=row.created_at,
            unique_key=spec.unique_key,
            concurrency_key=spec.concurrency_key,
            backoff=spec.backoff,
            retry_policy=None if spec.retry_policy is None else json.loads(spec.retry_policy),
            status=row.status,
            attempts=0,
        )
        job.duplicate = row.duplicate
        return job

    def _stored(self, pk: int, alias: str) -> Job | None:
        """The row ``pk``; JSON that Python cannot read (a number past int's 4,300
        digits, nesting past the recursion limit) is left deferred, as stored."""
        rows = self.db_manager(alias).filter(pk=pk)
        try:
            return rows.first()
        except (ValueError, RecursionError):
            return rows.defer(*USER_JSON).first()

    def enqueue_many(self, jobs: Iterable[JobSpec], *, using: str | None = None) -> list[int]:
        """Insert many jobs at once; returns the new ids, in order (duplicates are skipped).

        Build each item with :meth:`JobSpec.build`. Like :meth:`enqueue`, it joins the
        caller's transaction and wakes workers when it commits. A batch of ``COPY_THRESHOLD``
        jobs or more with no ``unique_key`` is written with COPY; any other is one statement.
        """
        specs = list(jobs)
        for i, spec in enumerate(specs):
            if not isinstance(spec, JobSpec):
                raise InvalidJob(
                    f"enqueue_many takes JobSpec.build(task, args, kwargs, **options) "
                    f"values; jobs[{i}] is {spec!r}"
                )
        return enqueue.insert_many(specs, self._alias(using))[0]

    def insert(self, spec: JobSpec, *, using: str | None = None) -> Inserted:
        """:meth:`enqueue` for callers with a result type of their own (the Tasks
        backend): ``spec`` as it is, and what the database said, without a model
        instance."""
        return enqueue.insert(spec, self._alias(using))

    def insert_many(
        self, specs: Sequence[JobSpec], *, using: str | None = None
    ) -> tuple[list[int], dt.datetime | None]:
        """:meth:`enqueue_many`, and the jobs' ``created_at`` (one for all of them)."""
        return enqueue.insert_many(specs, self._alias(using))


class Job(OnJobDatabaseModel):
    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=MAX_KEY, help_text="Dotted path of a registered task.")
    args = models.JSONField(default=list, db_default=[], blank=True)
    kwargs = models.JSONField(default=dict, db_default={}, blank=True)
    queue = models.CharField(max_length=64, default="default", db_default="default")
    priority = models.SmallIntegerField(
        default=0, db_default=0, help_text="-100 to 100; higher runs first."
    )
    status = models.CharField(
        max_length=16,
        choices=JobStatus.choices,
        default=JobStatus.QUEUED,
        db_default=JobStatus.QUEUED,
    )
    attempts = models.IntegerField(
        default=0, db_default=0, help_text="Runs started so far, including the current one."
    )
    max_attempts = models.IntegerField(default=3, db_default=3)
    lease_token = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="The token of the latest claim, chosen by the claiming worker and never "
        "used by it before; the run's outcome and renewals are fenced on it.",
    )
    backoff = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds before this job's first retry, doubling "
        "after each; empty: PGQUEUE['BACKOFF_BASE'].",
    )
    run_at = models.DateTimeField(db_default=Now(), help_text="Not claimed before this time.")
    locked_until = models.DateTimeField(
        null=True, blank=True, help_text="Lease: the claim holds until this time."
    )
    locked_by = models.CharField(
        max_length=255, null=True, blank=True, help_text="Worker holding the lease."
    )
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True, help_text="First attempt's start.")
    attempted_at = models.DateTimeField(null=True, blank=True, help_text="Last attempt's start.")
    done_at = models.DateTimeField(null=True, blank=True, help_text="When it became done or dead.")
    last_error = models.TextField(blank=True, default="", db_default="")
    errors = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="The newest error history entries: attempt, time, exception, message, traceback.",
    )
    error_count = models.IntegerField(
        default=0,
        db_default=0,
        help_text="Entries ever added to the error history; the oldest are dropped "
        "once there are more than the history keeps.",
    )
    worker_ids = models.JSONField(
        default=list, db_default=[], blank=True, help_text="Workers that claimed it (newest 100)."
    )
    unique_key = models.CharField(max_length=MAX_KEY, null=True, blank=True)
    concurrency_key = models.CharField(max_length=MAX_KEY, null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    retry_policy = models.JSONField(
        null=True,
        blank=True,
        help_text="retry_on/discard_on as exception class paths; empty: retry any exception.",
    )
    cancel_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When an operator asked the running job to stop; the worker holding it "
        "tells the task at its next heartbeat.",
    )
    cancel_reason = models.TextField(
        blank=True, default="", db_default="", help_text="The reason given with the request."
    )
    schedule = models.CharField(
        max_length=MAX_SCHEDULE_NAME,
        null=True,
        blank=True,
        help_text="The periodic schedule (PGQUEUE['PERIODIC']) whose tick enqueued it; "
        "its run_at is the tick.",
    )
    snoozes = models.IntegerField(
        default=0,
        db_default=0,
        help_text="Times the task snoozed (raise Snooze); past PGQUEUE['MAX_SNOOZES'] the "
        "job is buried.",
    )

    objects: ClassVar[JobManager] = JobManager()

    #: Set by enqueue: True when a live job already held the unique_key.
    duplicate: bool = False

    class Meta:
        db_table = "pgqueue_job"
        ordering = ("-id",)
        # Operators' actions in the admin, granted separately from change_job.
        permissions = (
            ("retry_job", "Can retry jobs"),
            ("cancel_job", "Can cancel jobs"),
        )
        indexes: ClassVar[list[Any]] = schema.INDEXES
        constraints: ClassVar[list[Any]] = schema.CONSTRAINTS

    def __str__(self) -> str:
        return f"#{self.id} {self.task} ({self.status})"


class Queue(OnJobDatabaseModel):
    """A queue an operator paused (``Job.objects.pause_queue(name)``): while
    ``paused_at`` is set, no worker claims its jobs, which stay ``queued``.
    Rows exist only for queues that were paused at some time."""

    name = models.CharField(primary_key=True, max_length=64)
    paused_at = models.DateTimeField(null=True, blank=True, help_text="Paused since; empty: not.")
    objects = conf.OnJobDatabase["Queue"]()

    class Meta:
        db_table = "pgqueue_queue"
        ordering = ("name",)
        # Only pausing is an operator's action; rows are written by Job.objects.
        default_permissions = ()
        permissions = (("pause_queue", "Can pause and resume queues"),)

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.paused_at else 'not paused'})"
