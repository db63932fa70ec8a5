"""The job table.

A job moves ``queued -> running -> done``; a failed run goes back to ``queued``
with a later ``run_at`` until its attempts are spent, then to ``dead``. The
claim, the reaper and the operators' actions are the only ways out of each state;
docs/concepts.md draws the machine.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from django_pgqueue.queue import MAX_PRIORITY, MIN_PRIORITY, JobManager


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    DEAD = "dead", "Dead"


LIVE = Q(status__in=[JobStatus.QUEUED, JobStatus.RUNNING])


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=255, help_text="Dotted path of a registered task.")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=64, default="default", db_default="default")
    priority = models.SmallIntegerField(default=0, db_default=0,
                                        help_text="-100 to 100; higher runs first.")
    status = models.CharField(max_length=16, choices=JobStatus.choices,
                              default=JobStatus.QUEUED, db_default=JobStatus.QUEUED)
    attempts = models.IntegerField(default=0, db_default=0,
                                   help_text="Runs started so far, including the current one.")
    max_attempts = models.IntegerField(default=3, db_default=3)
    backoff = models.FloatField(null=True, blank=True,
                                help_text="Seconds before this job's first retry, doubling "
                                          "after each; empty: PGQUEUE['BACKOFF_BASE'].")
    run_at = models.DateTimeField(db_default=Now(), help_text="Not claimed before this time.")
    locked_until = models.DateTimeField(null=True, blank=True,
                                        help_text="Lease: the claim holds until this time.")
    locked_by = models.CharField(max_length=255, null=True, blank=True,
                                 help_text="Worker holding the lease.")
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True, help_text="First attempt's start.")
    attempted_at = models.DateTimeField(null=True, blank=True, help_text="Last attempt's start.")
    done_at = models.DateTimeField(null=True, blank=True, help_text="When it became done or dead.")
    last_error = models.TextField(blank=True, default="", db_default="")
    errors = models.JSONField(default=list, blank=True,
                              help_text="One entry per failed attempt: attempt, at, "
                                        "exception, message, traceback.")
    worker_ids = models.JSONField(default=list, blank=True,
                                  help_text="Workers that claimed it, in order.")
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
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
        indexes: ClassVar[list[Any]] = [
            # Serves the claim exactly: only queued rows, in the claim's order.
            models.Index(
                models.F("priority").desc(), "run_at", "id",
                name="pgqueue_job_ready",
                condition=Q(status=JobStatus.QUEUED),
            ),
            # The reaper looks only at running rows, oldest lease first.
            models.Index(
                fields=["locked_until"],
                name="pgqueue_job_leases",
                condition=Q(status=JobStatus.RUNNING),
            ),
            # The admin's "dead" filter, newest first, without reading every row.
            models.Index(
                models.F("id").desc(),
                name="pgqueue_job_dead",
                condition=Q(status=JobStatus.DEAD),
            ),
            # Pruning and the admin's "finished" views read finished rows by age.
            models.Index(
                fields=["done_at"],
                name="pgqueue_job_finished",
                condition=Q(status__in=[JobStatus.DONE, JobStatus.DEAD]),
            ),
        ]
        constraints: ClassVar[list[Any]] = [
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="pgqueue_job_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=MIN_PRIORITY, priority__lte=MAX_PRIORITY),
                name="pgqueue_job_priority_range",
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="pgqueue_job_attempts_gte_0"),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="pgqueue_job_max_attempts_gte_1",
            ),
            models.CheckConstraint(
                condition=Q(backoff__isnull=True) | Q(backoff__gte=0),
                name="pgqueue_job_backoff_gte_0",
            ),
            models.CheckConstraint(condition=~Q(queue=""), name="pgqueue_job_queue_not_empty"),
            models.CheckConstraint(
                condition=Q(status=JobStatus.RUNNING, locked_until__isnull=False)
                | ~Q(status=JobStatus.RUNNING),
                name="pgqueue_job_running_has_lease",
            ),
            # One live job per unique_key: a second enqueue of the same key is skipped.
            models.UniqueConstraint(
                fields=["unique_key"], condition=LIVE & Q(unique_key__isnull=False),
                name="pgqueue_job_unique_live",
            ),
            # At most one running job per concurrency_key: the database enforces
            # what the claim's NOT EXISTS check can miss between two claims.
            models.UniqueConstraint(
                fields=["concurrency_key"],
                condition=Q(status=JobStatus.RUNNING, concurrency_key__isnull=False),
                name="pgqueue_job_one_running_per_key",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.task} ({self.status})"
