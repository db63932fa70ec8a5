"""Writing jobs: one (``INSERT ... ON CONFLICT``), many (one statement), or many by COPY."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from django.db import IntegrityError, transaction

from django_pgqueue import conf
from django_pgqueue.records import JobSpec, JobStatus
from django_pgqueue.sql import runner

#: Batches at least this large (and without unique keys) are written with COPY.
COPY_THRESHOLD = 500
_SPEC_FIELDS = tuple(field.name for field in dataclasses.fields(JobSpec))


@dataclasses.dataclass(frozen=True, slots=True)
class Inserted:
    """What the database said about one enqueue."""

    id: int
    created_at: dt.datetime
    run_at: dt.datetime
    status: str
    duplicate: bool  # a live job held the unique_key: this is that job


def notify_params() -> dict[str, object]:
    settings = conf.get()
    return {"channel": settings.CHANNEL, "notify": settings.LISTEN_NOTIFY}


def enqueue_params(spec: JobSpec) -> dict[str, object]:
    """The parameters of the ``enqueue`` statement for ``spec``."""
    # Not dataclasses.asdict: it deep-copies, and this is every enqueue's path.
    params: dict[str, object] = {field: getattr(spec, field) for field in _SPEC_FIELDS}
    params.update(notify_params())
    return params


def insert(spec: JobSpec, alias: str) -> Inserted:
    """Insert ``spec`` in the caller's transaction, or find the live job holding its key."""
    params = enqueue_params(spec)
    # Without a key there is nothing to conflict with, and ON CONFLICT has a cost.
    statement = "enqueue" if spec.unique_key is not None else "enqueue_keyless"
    for _ in range(3):
        rows = runner.fetch(statement, params, alias)
        if rows:
            row = rows[0]
            return Inserted(
                row["id"], row["created_at"], row["run_at"], JobStatus.QUEUED, duplicate=False
            )
        # A live job holds the unique_key. If it finished between the two
        # statements, the insert is worth another try.
        existing = runner.fetch("live_job_by_unique_key", {"unique_key": spec.unique_key}, alias)
        if existing:
            row = existing[0]
            return Inserted(
                row["id"], row["created_at"], row["run_at"], row["status"], duplicate=True
            )
    raise IntegrityError(f"could not enqueue or find a live job for {spec.unique_key!r}")


def insert_many(specs: Sequence[JobSpec], alias: str) -> tuple[list[int], dt.datetime | None]:
    """Insert ``specs`` in one statement (or COPY): the new ids in order (duplicates
    skipped), and their ``created_at``, which is the transaction's ``now()`` for all."""
    if not specs:
        return [], None
    if len(specs) >= COPY_THRESHOLD and all(s.unique_key is None for s in specs):
        return _copy_many(specs, alias)
    columns = {
        "tasks": [s.task for s in specs],
        "args": [s.args for s in specs],
        "kwargs": [s.kwargs for s in specs],
        "queues": [s.queue for s in specs],
        "priorities": [s.priority for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
        "run_ats": [s.run_at for s in specs],
        "unique_keys": [s.unique_key for s in specs],
        "concurrency_keys": [s.concurrency_key for s in specs],
        "backoffs": [s.backoff for s in specs],
        "retry_policies": [s.retry_policy for s in specs],
    }
    row = runner.fetch_one("enqueue_many", {**columns, **notify_params()}, alias)
    return list(row["ids"]), row["now"]


def _copy_many(specs: Sequence[JobSpec], alias: str) -> tuple[list[int], dt.datetime]:
    # Three statements (ids, COPY, NOTIFY) that must stand or fall together:
    # a transaction of their own, or a savepoint in the caller's.
    with transaction.atomic(using=alias):
        reserved = runner.fetch_one("reserve_ids", {"count": len(specs)}, alias)
        ids, now = reserved["ids"], reserved["now"]
        runner.copy(
            "copy_jobs",
            (
                (
                    job_id,
                    s.task,
                    s.args,
                    s.kwargs,
                    s.queue,
                    s.priority,
                    JobStatus.QUEUED.value,
                    0,
                    s.max_attempts,
                    s.run_at or now,
                    now,
                    "",
                    "[]",
                    "[]",
                    s.concurrency_key,
                    s.backoff,
                    s.retry_policy,
                )
                for job_id, s in zip(ids, specs, strict=True)
            ),
            alias,
        )
        runner.fetch(
            "notify_queues", {"queues": sorted({s.queue for s in specs}), **notify_params()}, alias
        )
    return list(ids), now
