"""The job table's indexes and constraints, each with the reason it exists.

Kept apart from the model so that ``models.py`` reads as the columns and the
manager; ``Job.Meta`` uses these lists as they are.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.lookups import Exact

from django_pgqueue.records import FINISHED, LIVE, JobStatus
from django_pgqueue.validation import MAX_ATTEMPTS, MAX_PRIORITY, MIN_PRIORITY

#: The error count's (and the snooze count's) upper bound (also in queries.sql,
#: whose least() keeps to it).
MAX_ERROR_COUNT = 10**9


def _json_type(field: str) -> Func:
    return Func(F(field), function="jsonb_typeof", output_field=models.CharField())


INDEXES: list[models.Index] = [
    # Serves the claim exactly: only queued rows, in the claim's order.
    models.Index(
        models.F("priority").desc(),
        "run_at",
        "id",
        name="pgqueue_job_ready",
        condition=Q(status=JobStatus.QUEUED),
    ),
    # The claim of a worker serving chosen queues: one range per queue, in the
    # claim's order, so a small queue's claim never walks a big queue's backlog.
    models.Index(
        "queue",
        models.F("priority").desc(),
        "run_at",
        "id",
        name="pgqueue_job_ready_by_queue",
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
    # The jobs of one schedule (the admin's link from a schedule), newest first;
    # only the jobs that schedules enqueued are in it.
    models.Index(
        "schedule",
        models.F("id").desc(),
        name="pgqueue_job_schedule",
        condition=Q(schedule__isnull=False),
    ),
    # Pruning and the admin's "finished" views read finished rows by age.
    models.Index(
        fields=["done_at"],
        name="pgqueue_job_finished",
        condition=Q(status__in=FINISHED),
    ),
]
CONSTRAINTS: list[models.BaseConstraint] = [
    models.CheckConstraint(
        condition=Q(status__in=JobStatus.values),
        name="pgqueue_job_status_valid",
    ),
    models.CheckConstraint(
        condition=Q(priority__gte=MIN_PRIORITY, priority__lte=MAX_PRIORITY),
        name="pgqueue_job_priority_range",
    ),
    models.CheckConstraint(condition=Q(attempts__gte=0), name="pgqueue_job_attempts_gte_0"),
    # The claim adds one attempt: no row may hold a count it cannot add to.
    models.CheckConstraint(
        condition=Q(attempts__lte=models.F("max_attempts")), name="pgqueue_job_attempts_lte_max"
    ),
    models.CheckConstraint(
        condition=Q(max_attempts__gte=1),
        name="pgqueue_job_max_attempts_gte_1",
    ),
    models.CheckConstraint(
        condition=Q(max_attempts__lte=MAX_ATTEMPTS), name="pgqueue_job_max_attempts_lte_limit"
    ),
    # A counter the statements add to, capped there at this bound (least()),
    # so that no value a row can hold makes them overflow.
    models.CheckConstraint(
        condition=Q(error_count__gte=0, error_count__lte=MAX_ERROR_COUNT),
        name="pgqueue_job_error_count_range",
    ),
    # The claim and the error history append to these: a row written by
    # hand with anything but a list would make their statements fail.
    models.CheckConstraint(
        condition=Exact(_json_type("errors"), Value("array")), name="pgqueue_job_errors_is_list"
    ),
    models.CheckConstraint(
        condition=Exact(_json_type("worker_ids"), Value("array")),
        name="pgqueue_job_worker_ids_is_list",
    ),
    models.CheckConstraint(
        condition=Q(snoozes__gte=0, snoozes__lte=MAX_ERROR_COUNT),
        name="pgqueue_job_snoozes_range",
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
        fields=["unique_key"],
        condition=Q(status__in=LIVE, unique_key__isnull=False),
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
