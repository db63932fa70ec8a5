"""The job table, and its manager: the public API for enqueueing and steering jobs.

A job moves ``queued -> running -> done``; a failed run goes back to ``queued``
with a later ``run_at`` until its attempts are spent, then to ``dead``. The
claim, the reaper and the operators' actions are the only ways out of each state;
docs/concepts.md draws the machine. The states themselves are
:class:`~django_pgqueue.records.JobStatus`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from django_pgqueue import conf, schema
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.queue import claims, enqueue, maintenance
from django_pgqueue.records import (
    FINISHED,
    ClaimedJob,
    Failure,
    JobSpec,
    JobStatus,
    QueueStats,
    ReapResult,
    Success,
)
from django_pgqueue.validation import MAX_KEY

__all__ = ["Job", "JobManager", "JobQuerySet", "JobStatus"]


#: What retry() and cancel() accept: ids, jobs, or a queryset of jobs.
Jobs = Iterable["int | Job"] | models.QuerySet["Job"]


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

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED)


_JobManagerBase = models.Manager.from_queryset(JobQuerySet)


class JobManager(_JobManagerBase["Job"]):
    """Job operations, each through the queue's named statements on ``using``
    (default: ``PGQUEUE["DATABASE"]``). The read vocabulary (``ready()``,
    ``running()``, ...) comes from :class:`JobQuerySet`."""

    def _alias(self, using: str | None) -> str:
        # PGQUEUE["DATABASE"] is where workers claim: jobs must be written there.
        return using or self._db or conf.get().DATABASE

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

        Options: ``queue``, ``priority`` (-100..100, higher first), ``run_at`` or
        ``delay`` (seconds or timedelta), ``max_attempts``, ``unique_key``,
        ``concurrency_key``, ``backoff`` (seconds before the first retry,
        doubling after each; default ``PGQUEUE["BACKOFF_BASE"]``). Arguments
        must be JSON; a bad value raises
        :class:`~django_pgqueue.exceptions.InvalidJobArguments` before anything
        is written. If a live (queued or running) job already has
        ``unique_key``, nothing is inserted and that job is returned with
        ``duplicate = True``. Workers are notified when (and only if) the
        transaction commits.
        """
        spec = JobSpec.build(task, args, kwargs, **options)
        row = enqueue.insert(spec, self._alias(using))
        # The caller's own (already validated) arguments: no need to decode the JSON.
        job = self.model(
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
            status=row.status,
            attempts=0,
        )
        job._state.adding = False
        job._state.db = self._alias(using)
        job.duplicate = row.duplicate
        return job

    def enqueue_many(self, jobs: Iterable[JobSpec], *, using: str | None = None) -> list[int]:
        """Insert many jobs at once; returns the new ids, in order (duplicates are skipped).

        Build each item with :meth:`JobSpec.build`. Like :meth:`enqueue`, it joins
        the caller's transaction and wakes workers when it commits. A batch of
        ``COPY_THRESHOLD`` jobs or more with no ``unique_key`` is written with
        COPY; any other batch is one ``INSERT ... ON CONFLICT`` statement.
        """
        return enqueue.insert_many(list(jobs), self._alias(using))

    # -- the worker's operations --------------------------------------------------------

    def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        lease: float | None = None,
        using: str | None = None,
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` ready jobs to ``worker`` in one statement, committed at once.

        Jobs come highest priority first, then by run_at and id. Jobs sharing a
        concurrency_key never run at the same time.
        """
        return claims.claim(
            worker, limit, queues, conf.get().LEASE if lease is None else lease, self._alias(using)
        )

    def complete(
        self, worker: str, successes: Sequence[Success], *, using: str | None = None
    ) -> set[int]:
        """Mark runs done with their results; returns the ids recorded (fenced)."""
        return claims.complete(worker, successes, self._alias(using))

    def fail(
        self, worker: str, failures: Sequence[Failure], *, using: str | None = None
    ) -> dict[int, str]:
        """Record failed runs (retry later, or dead); returns {id: new status} (fenced)."""
        return claims.fail(worker, failures, self._alias(using))

    def heartbeat(
        self,
        worker: str,
        runs: Sequence[tuple[int, int]],
        *,
        lease: float | None = None,
        using: str | None = None,
    ) -> set[tuple[int, int]]:
        """Extend the leases ``worker`` holds on these (id, run) pairs; returns those held."""
        return claims.heartbeat(
            worker, runs, conf.get().LEASE if lease is None else lease, self._alias(using)
        )

    def release(
        self,
        worker: str,
        runs: Sequence[tuple[int, int]],
        *,
        reason: str = "worker shut down before the job finished",
        using: str | None = None,
    ) -> set[int]:
        """Put running jobs (id, run) back to queued without spending the attempt."""
        return claims.release(worker, runs, reason, self._alias(using))

    # -- maintenance and operators -----------------------------------------------------

    def reap(self, *, batch_size: int = 1000, using: str | None = None) -> ReapResult:
        """Return jobs whose lease expired to the queue (or bury them); idempotent."""
        return maintenance.reap(batch_size, self._alias(using))

    def retry(self, jobs: Jobs, *, using: str | None = None) -> list[int]:
        """Dead jobs (or queued ones waiting for a later run_at) become ready now.

        ``jobs`` is ids, Job instances or a queryset. Returns the ids retried; a
        job whose ``unique_key`` another live job holds is left as it is.
        """
        return maintenance.retry(_ids(jobs), self._alias(using))

    def cancel(
        self, jobs: Jobs, *, reason: str = "no reason given", using: str | None = None
    ) -> list[int]:
        """Take queued jobs (ids, Job instances or a queryset) out of the queue: they
        become dead with the reason. Returns the ids cancelled."""
        return maintenance.cancel(_ids(jobs), reason, self._alias(using))

    def prune(
        self,
        older_than: dt.timedelta | float,
        *,
        statuses: Sequence[str] = FINISHED,
        batch_size: int = 5000,
        dry_run: bool = False,
        using: str | None = None,
    ) -> int:
        """Delete finished jobs whose done_at is older than ``older_than``, in batches."""
        bad = set(statuses) - set(FINISHED)
        if bad or not statuses:
            raise InvalidJob(f"prune only deletes {' and '.join(FINISHED)} jobs, not {sorted(bad)}")
        return maintenance.prune(
            maintenance.prune_bound(older_than), statuses, batch_size, dry_run, self._alias(using)
        )

    def relax_commit(self, relaxed: bool = True, *, using: str | None = None) -> None:
        """Let this connection's commits skip the WAL flush (worker bookkeeping
        only), or with ``relaxed=False`` restore the configured behaviour."""
        maintenance.relax_commit(relaxed, self._alias(using))

    def stats(self, *, using: str | None = None) -> list[QueueStats]:
        """Counts by queue and status, the oldest ready job's age, recent deaths."""
        return maintenance.stats(self._alias(using))


def _ids(jobs: Jobs) -> list[int]:
    if isinstance(jobs, models.QuerySet):
        return list(jobs.order_by().values_list("pk", flat=True))
    return [job if isinstance(job, int) else job.pk for job in jobs]


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=MAX_KEY, help_text="Dotted path of a registered task.")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
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
        blank=True,
        help_text="The newest entries of the error history: attempt, "
        "at, exception, message, traceback.",
    )
    error_count = models.IntegerField(
        default=0,
        db_default=0,
        help_text="Entries ever added to the error history; the oldest are dropped "
        "once there are more than the history keeps.",
    )
    worker_ids = models.JSONField(
        default=list, blank=True, help_text="Workers that claimed it, in order (the newest 100)."
    )
    unique_key = models.CharField(max_length=MAX_KEY, null=True, blank=True)
    concurrency_key = models.CharField(max_length=MAX_KEY, null=True, blank=True)
    result = models.JSONField(null=True, blank=True)

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
