"""The job manager: the only code that runs SQL against the job table.

Every operation is one named statement from ``sql/queries.sql``, executed on a
Django connection so that it joins whatever transaction the caller has open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import IntegrityError, connections, models, transaction
from django.utils import timezone

from django_pgqueue import conf
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.jsonargs import dumps
from django_pgqueue.records import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    ClaimedJob,
    Failure,
    JobSpec,
    QueueStats,
    ReapResult,
    Success,
)
from django_pgqueue.sql import query

# The value types live in records.py; they are imported from here too.
__all__ = ["MAX_PRIORITY", "MIN_PRIORITY", "ClaimedJob", "Failure", "JobManager",
           "JobQuerySet", "JobSpec", "QueueStats", "ReapResult", "Success"]

if TYPE_CHECKING:
    from django_pgqueue.models import Job

ONE_RUNNING_PER_KEY = "pgqueue_job_one_running_per_key"
SPEC_FIELDS = tuple(field.name for field in dataclasses.fields(JobSpec))
#: Batches at least this large (and without unique keys) are written with COPY.
COPY_THRESHOLD = 500
FINISHED = ("done", "dead")


def _parse_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


class JobQuerySet(models.QuerySet["Job"]):
    """Read-side vocabulary for the admin, stats and tests."""

    def queued(self) -> JobQuerySet:
        return self.filter(status="queued")

    def ready(self) -> JobQuerySet:
        return self.filter(status="queued", run_at__lte=timezone.now())

    def running(self) -> JobQuerySet:
        return self.filter(status="running")

    def expired(self) -> JobQuerySet:
        return self.filter(status="running", locked_until__lt=timezone.now())

    def done(self) -> JobQuerySet:
        return self.filter(status="done")

    def dead(self) -> JobQuerySet:
        return self.filter(status="dead")

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED)


_JobManagerBase = models.Manager.from_queryset(JobQuerySet)


class JobManager(_JobManagerBase["Job"]):
    """Job operations. Each runs one named statement on ``using`` (default: the job DB).

    The read vocabulary (``ready()``, ``running()``, ...) comes from JobQuerySet.
    """

    def _alias(self, using: str | None) -> str:
        # PGQUEUE["DATABASE"] is where workers claim: jobs must be written there.
        return using or self._db or conf.get().DATABASE

    def _fetch(self, name: str, params: dict[str, Any], using: str | None) -> list[tuple[Any, ...]]:
        wrapper = connections[self._alias(using)]
        if not conf.get().PREPARE:
            with wrapper.cursor() as cursor:
                cursor.execute(query(name), params)
                return cursor.fetchall() if cursor.description else []
        # Every statement is fully typed, so it can be bound server-side and
        # prepared once per connection: no re-planning on the hot path. The
        # cursor is psycopg's own on Django's connection, so it joins the
        # caller's transaction; errors are wrapped into django.db's classes.
        wrapper.ensure_connection()
        started = time.monotonic()
        with wrapper.wrap_database_errors, psycopg.Cursor(wrapper.connection) as cursor:
            cursor.execute(query(name), params, prepare=True)
            rows = cursor.fetchall() if cursor.description else []
        if wrapper.queries_logged:  # keep assertNumQueries and debug tools counting
            wrapper.queries_log.append({"sql": f"/* pgqueue: {name} */ {query(name)}",
                                        "time": f"{time.monotonic() - started:.3f}"})
        return rows

    def _notify_params(self) -> dict[str, Any]:
        settings = conf.get()
        return {"channel": settings.CHANNEL, "notify": settings.LISTEN_NOTIFY}

    # -- enqueue -----------------------------------------------------------------

    def enqueue(self, task: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
                *, using: str | None = None, **options: Any) -> Job:
        """Insert one job in the caller's transaction and return it.

        Options: ``queue``, ``priority`` (-100..100, higher first), ``run_at`` or
        ``delay`` (seconds or timedelta), ``max_attempts``, ``unique_key``,
        ``concurrency_key``, ``backoff`` (seconds before the first retry, doubling
        after each; default ``PGQUEUE["BACKOFF_BASE"]``). Arguments must be JSON; a bad value raises
        :class:`~django_pgqueue.exceptions.InvalidJobArguments` before anything is
        written. If a live (queued or running) job already has ``unique_key``,
        nothing is inserted and that job is returned with ``duplicate = True``.
        Workers are notified when (and only if) the transaction commits.
        """
        spec = JobSpec.build(task, args, kwargs, **options)
        # Not dataclasses.asdict: it deep-copies, and this is every enqueue's path.
        params = {field: getattr(spec, field) for field in SPEC_FIELDS}
        params.update(self._notify_params())
        for _ in range(3):
            rows = self._fetch("enqueue", params, using)
            if rows:
                job_id, created_at, run_at, _notified = rows[0]
                return self._job(spec, list(args), kwargs or {}, job_id, created_at, run_at,
                                 duplicate=False)
            # A live job holds the unique_key. If it finished between the two
            # statements, the insert is worth another try.
            existing = self._fetch("live_job_by_unique_key", {"unique_key": spec.unique_key}, using)
            if existing:
                job_id, created_at, run_at, status = existing[0]
                job = self._job(spec, list(args), kwargs or {}, job_id, created_at, run_at,
                                duplicate=True)
                job.status = status
                return job
        raise IntegrityError(f"could not enqueue or find a live job for {spec.unique_key!r}")

    def _job(self, spec: JobSpec, args: list[Any], kwargs: dict[str, Any], job_id: int,
             created_at: dt.datetime, run_at: dt.datetime, duplicate: bool) -> Job:
        # The caller's own (already validated) arguments: no need to decode the JSON.
        job = self.model(
            id=job_id, task=spec.task, args=args, kwargs=kwargs,
            queue=spec.queue, priority=spec.priority, max_attempts=spec.max_attempts,
            run_at=run_at, created_at=created_at, unique_key=spec.unique_key,
            concurrency_key=spec.concurrency_key, backoff=spec.backoff, status="queued",
            attempts=0,
        )
        job._state.adding = False
        job.duplicate = duplicate
        return job

    def enqueue_many(self, jobs: Iterable[JobSpec], *, using: str | None = None) -> list[int]:
        """Insert many jobs at once; returns the new ids, in order (duplicates are skipped).

        Build each item with :meth:`JobSpec.build`. Like :meth:`enqueue`, it joins
        the caller's transaction and wakes workers when it commits. A batch of
        ``COPY_THRESHOLD`` jobs or more with no ``unique_key`` is written with
        COPY; any other batch is one ``INSERT ... ON CONFLICT`` statement.
        """
        specs = list(jobs)
        if not specs:
            return []
        if len(specs) >= COPY_THRESHOLD and all(s.unique_key is None for s in specs):
            return self._copy_many(specs, self._alias(using))
        columns = {
            "tasks": [s.task for s in specs], "args": [s.args for s in specs],
            "kwargs": [s.kwargs for s in specs], "queues": [s.queue for s in specs],
            "priorities": [s.priority for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
            "run_ats": [s.run_at for s in specs], "unique_keys": [s.unique_key for s in specs],
            "concurrency_keys": [s.concurrency_key for s in specs],
            "backoffs": [s.backoff for s in specs],
        }
        rows = self._fetch("enqueue_many", {**columns, **self._notify_params()}, using)
        return list(rows[0][0])

    def _copy_many(self, specs: list[JobSpec], alias: str) -> list[int]:
        # Three statements (ids, COPY, NOTIFY) that must stand or fall together:
        # a transaction of their own, or a savepoint in the caller's.
        with transaction.atomic(using=alias):
            ((ids, now),) = self._fetch("reserve_ids", {"count": len(specs)}, alias)
            wrapper = connections[alias]
            with wrapper.wrap_database_errors, psycopg.Cursor(wrapper.connection) as cursor, \
                    cursor.copy(query("copy_jobs")) as copy:
                for job_id, s in zip(ids, specs, strict=True):
                    copy.write_row((job_id, s.task, s.args, s.kwargs, s.queue, s.priority,
                                    "queued", 0, s.max_attempts, s.run_at or now, "", "[]",
                                    "[]", s.concurrency_key, s.backoff))
            if wrapper.queries_logged:
                wrapper.queries_log.append({"sql": f"/* pgqueue: copy_jobs */ {len(ids)} rows",
                                            "time": "0.000"})
            self._fetch("notify_queues", {"queues": sorted({s.queue for s in specs}),
                                          **self._notify_params()}, alias)
        return list(ids)

    # -- the worker's operations ----------------------------------------------------

    def claim(self, worker: str, *, limit: int = 1, queues: Sequence[str] | None = None,
              lease: float | None = None, using: str | None = None) -> list[ClaimedJob]:
        """Lease up to ``limit`` ready jobs to ``worker`` in one statement, committed at once.

        Jobs come highest priority first, then by run_at and id. Jobs sharing a
        concurrency_key never run at the same time.
        """
        params = {"worker": worker, "limit": limit, "queues": list(queues) if queues else None,
                  "lease": conf.get().LEASE if lease is None else lease}
        alias = self._alias(using)
        for _ in range(5):
            try:
                if connections[alias].in_atomic_block:
                    # Inside the caller's transaction a failed statement would
                    # doom it: a savepoint keeps the retry below possible.
                    with transaction.atomic(using=alias):
                        rows = self._fetch("claim", params, alias)
                else:
                    rows = self._fetch("claim", params, alias)  # autocommit: one round trip
                break
            except IntegrityError as exc:
                # Another claim took a job of the same concurrency_key between our
                # snapshot and our update: the unique index refused ours. Try again
                # with a fresh snapshot, which sees that job running.
                if ONE_RUNNING_PER_KEY not in str(exc):
                    raise
        else:
            return []
        return [
            ClaimedJob(id=r[0], task=r[1], args=_parse_json(r[2]), kwargs=_parse_json(r[3]),
                       queue=r[4], priority=r[5], attempt=r[6], max_attempts=r[7],
                       concurrency_key=r[8], unique_key=r[9], backoff=r[10])
            for r in rows
        ]

    def complete(self, worker: str, successes: Sequence[Success], *,
                 using: str | None = None) -> set[int]:
        """Mark runs done with their results; returns the ids recorded (fenced)."""
        if not successes:
            return set()
        rows = self._fetch("complete", {
            "worker": worker, "ids": [s.job_id for s in successes],
            "attempts": [s.attempt for s in successes], "results": [s.result for s in successes],
        }, using)
        return {r[0] for r in rows}

    def fail(self, worker: str, failures: Sequence[Failure], *,
             using: str | None = None) -> dict[int, str]:
        """Record failed runs (retry later, or dead); returns {id: new status} (fenced)."""
        if not failures:
            return {}
        rows = self._fetch("fail", {
            "worker": worker, "ids": [f.job_id for f in failures],
            "attempts": [f.attempt for f in failures], "delays": [f.delay for f in failures],
            "errors": [f.error for f in failures],
            "entries": [dumps(f.entry, "error entry") for f in failures],
            "finals": [f.final for f in failures],
        }, using)
        return {r[0]: r[1] for r in rows}

    def heartbeat(self, worker: str, job_ids: Sequence[int], *, lease: float | None = None,
                  using: str | None = None) -> set[int]:
        """Extend the leases ``worker`` holds on ``job_ids``; returns those still held."""
        if not job_ids:
            return set()
        rows = self._fetch("heartbeat", {
            "worker": worker, "ids": list(job_ids),
            "lease": conf.get().LEASE if lease is None else lease,
        }, using)
        return {r[0] for r in rows}

    def release(self, worker: str, held: Sequence[tuple[int, int]], *,
                reason: str = "worker shut down before the job finished",
                using: str | None = None) -> set[int]:
        """Put running jobs (id, attempt) back to queued without spending the attempt."""
        if not held:
            return set()
        rows = self._fetch("release", {
            "worker": worker, "ids": [h[0] for h in held], "attempts": [h[1] for h in held],
            "reason": reason,
        }, using)
        return {r[0] for r in rows}

    # -- maintenance and operators ----------------------------------------------------

    def reap(self, *, batch_size: int = 1000, using: str | None = None) -> ReapResult:
        """Return jobs whose lease expired to the queue (or bury them); idempotent."""
        returned = buried = 0
        while True:
            rows = self._fetch("reap", {"limit": batch_size}, using)
            returned += sum(1 for (status,) in rows if status == "queued")
            buried += sum(1 for (status,) in rows if status == "dead")
            if len(rows) < batch_size:
                return ReapResult(returned=returned, buried=buried)

    def retry(self, job_ids: Sequence[int], *, using: str | None = None) -> list[int]:
        """Dead jobs (or queued ones waiting for run_at) become ready now; returns their ids.

        A job whose ``unique_key`` another live job holds is left as it is.
        """
        alias = self._alias(using)
        try:
            return self._retry(list(job_ids), alias)
        except IntegrityError:
            # A job with one of these keys went live meanwhile: one by one,
            # skipping the ones that clash.
            retried: list[int] = []
            for job_id in job_ids:
                with contextlib.suppress(IntegrityError):
                    retried += self._retry([job_id], alias)
            return sorted(retried)

    def _retry(self, job_ids: list[int], alias: str) -> list[int]:
        with transaction.atomic(using=alias):  # a savepoint if the caller has a transaction
            rows = self._fetch("retry", {"ids": job_ids, **self._notify_params()}, alias)
        return list(rows[0][0])

    def cancel(self, job_ids: Sequence[int], *, reason: str = "cancelled",
               using: str | None = None) -> list[int]:
        """Take queued jobs out of the queue (they become dead with the reason)."""
        rows = self._fetch("cancel", {"ids": list(job_ids), "reason": reason}, using)
        return sorted(r[0] for r in rows)

    def prune(self, older_than: dt.timedelta | float, *, statuses: Sequence[str] = FINISHED,
              batch_size: int = 5000, dry_run: bool = False, using: str | None = None) -> int:
        """Delete finished jobs whose done_at is older than ``older_than``, in batches."""
        bad = set(statuses) - set(FINISHED)
        if bad or not statuses:
            raise InvalidJob(f"prune only deletes {' and '.join(FINISHED)} jobs, not {sorted(bad)}")
        seconds = older_than.total_seconds() if isinstance(older_than, dt.timedelta) else older_than
        params: dict[str, Any] = {"statuses": list(statuses), "limit": batch_size,
                                  "before": timezone.now() - dt.timedelta(seconds=seconds)}
        if dry_run:
            return int(self._fetch("count_prunable", params, using)[0][0])
        deleted = 0
        alias = self._alias(using)
        while True:
            with connections[alias].cursor() as cursor:  # rare: no need to prepare
                cursor.execute(query("prune"), params)
                count = int(cursor.rowcount)
            deleted += count
            if count < batch_size:
                return deleted

    def relax_commit(self, relaxed: bool = True, *, using: str | None = None) -> None:
        """Let this connection's commits skip the WAL flush (worker bookkeeping
        only), or with ``relaxed=False`` restore the configured behaviour."""
        with connections[self._alias(using)].cursor() as cursor:
            cursor.execute(query("relax_commit" if relaxed else "reset_commit"))

    def stats(self, *, using: str | None = None) -> list[QueueStats]:
        """Counts by queue and status, the oldest ready job's age, recent deaths."""
        return [
            QueueStats(queue=r[0], status=r[1], jobs=r[2],
                       oldest_ready_age=float(r[3]) if r[3] is not None else None,
                       dead_last_24h=r[4], lease_expired=r[5])
            for r in self._fetch("stats", {}, using)
        ]
