"""The job manager's operations that need no model instance: the worker's claims and
outcomes, maintenance, and the operators' actions.

A mixin of :class:`~django_pgqueue.models.JobManager` (``Job.objects.claim(...)``),
kept here so that models.py is the table, its read vocabulary and enqueue. Each
method runs the queue's named statements on ``using`` (default:
``PGQUEUE["DATABASE"]``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from django.db import models

from django_pgqueue import conf, validation
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.queue import claims, maintenance, outcomes, pauses
from django_pgqueue.records import (
    FINISHED,
    ClaimedJob,
    Failure,
    QueueStats,
    ReapResult,
    Renewal,
    Success,
)


class _Result(Protocol):
    """A Tasks-framework TaskResult, as far as retry() and cancel() read it."""

    @property
    def id(self) -> str: ...


#: What retry() and cancel() accept: ids (ints, or digit strings such as a Tasks
#: result's id), jobs, Tasks-framework results, or a queryset of jobs.
_OneJob = int | str | models.Model | _Result
Jobs = Iterable[_OneJob] | models.QuerySet[Any] | _OneJob


class QueueOperations:
    if TYPE_CHECKING:  # conf.OnJobDatabase's, beside this in JobManager's bases

        def _alias(self, using: str | None) -> str: ...

    def _job_model(self) -> type[models.Model]:
        """The Manager's model, beside this in JobManager's bases."""
        model: type[models.Model] = self.model  # type: ignore[attr-defined]
        return model

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

        Jobs come highest priority first, then by run_at and id. While its lease
        holds, a job's concurrency_key is held: no other job of the key is claimed
        (a reaped run may still be going; see docs/guarantees.md).
        """
        _check_claim(worker, limit, queues, lease)
        return claims.claim(
            worker, limit, queues, conf.get().LEASE if lease is None else lease, self._alias(using)
        )

    def complete(
        self, worker: str, successes: Iterable[Success], *, using: str | None = None
    ) -> set[int]:
        """Mark runs done with their results; returns the ids recorded (fenced). A row
        another transaction holds locked is waited for, the rows taken in id order."""
        successes = list(successes)  # a generator is read once, by the check
        outcomes.check_successes(successes, decode=True)
        return claims.complete(worker, successes, self._alias(using))

    def fail(
        self, worker: str, failures: Iterable[Failure], *, using: str | None = None
    ) -> dict[int, str]:
        """Record the runs that did not succeed: failed (retry later, or dead), snoozed
        (queued later, the attempt not spent) or cancelled; returns {id: new status}
        (fenced; a row another transaction holds locked is waited for)."""
        checked = outcomes.check_failures(list(failures))  # a generator is read once
        return claims.fail(worker, checked, self._alias(using))

    def record(
        self,
        worker: str,
        successes: Iterable[Success],
        failures: Sequence[Failure],
        *,
        using: str | None = None,
    ) -> claims.Recorded:
        """:meth:`complete` and :meth:`fail` in one transaction, all or nothing (what
        the worker writes each batch of outcomes with): a ``Recorded(done, failed,
        busy)``, ``busy`` the ids skipped because another transaction held their rows
        locked (still held: write them again later)."""
        successes = list(successes)
        outcomes.check_successes(successes, decode=False)  # the worker's own: JSON it encoded
        return claims.record(worker, successes, failures, self._alias(using))

    def heartbeat(
        self,
        worker: str,
        runs: claims.Runs,
        *,
        lease: float | None = None,
        using: str | None = None,
    ) -> set[tuple[int, int]]:
        """Extend the leases ``worker`` holds on these (id, run) pairs; returns those held
        (one whose row another transaction holds locked is held, and renewed next time)."""
        renewal = self.renew(worker, runs, lease=lease, using=using)
        return renewal.kept | renewal.busy

    def renew(
        self,
        worker: str,
        runs: claims.Runs,
        *,
        lease: float | None = None,
        using: str | None = None,
    ) -> Renewal:
        """:meth:`heartbeat`, also saying which of the runs held an operator asked to
        stop, with the reason (what the worker's heartbeat uses)."""
        _check_lease(lease)
        return claims.heartbeat(
            worker,
            claims.run_keys(runs),
            conf.get().LEASE if lease is None else lease,
            self._alias(using),
        )

    def release(
        self,
        worker: str,
        runs: claims.Runs,
        *,
        reason: str | None = "worker shut down before the job finished",
        using: str | None = None,
    ) -> set[int]:
        """Put running jobs (id, run) back to queued without spending the attempt.
        The reason goes into each job's error history; None, for runs that never
        started (prefetched ones), adds nothing there. Returns the ids of the jobs
        released: given back, or, for one an operator had asked to stop, cancelled."""
        return set(claims.release(worker, claims.run_keys(runs), reason, self._alias(using)))

    # -- maintenance and operators -----------------------------------------------------

    def reap(
        self, *, batch_size: int = 1000, using: str | None = None, spare: claims.Runs = ()
    ) -> ReapResult:
        """Return jobs whose lease expired to the queue (or bury them); idempotent.
        The runs (id, run) in ``spare`` are left alone, however expired (a worker's
        own reaper spares the runs it still holds and renews)."""
        _check_batch_size(batch_size)
        return maintenance.reap(batch_size, self._alias(using), claims.run_keys(spare))

    def retry(self, ids: Jobs, *, using: str | None = None) -> list[int]:
        """Dead and cancelled jobs (or queued ones waiting for a later run_at) become
        ready now, with fresh attempts.

        ``ids`` is job ids, Job instances or a queryset. Returns the ids retried; a
        job whose ``unique_key`` another live job holds is left as it is.
        """
        return maintenance.retry(_ids(ids, self._job_model()), self._alias(using))

    def cancel(
        self, ids: Jobs, *, reason: str = "no reason given", using: str | None = None
    ) -> list[int]:
        """Cancel jobs (``ids``: job ids, Job instances or a queryset): queued ones become
        ``cancelled`` at once, with the reason; running ones are asked to stop.

        The request is stored on the row, and the worker holding the job learns it
        at its next heartbeat, or at once when a NOTIFY wakes it; the task sees
        ``current_job().cancel_requested`` turn true (an ``async def`` task is
        cancelled at its next await). A run that stops because of it ends
        ``cancelled``; one that finishes anyway ends as it finished. Returns the
        ids cancelled or asked to stop; finished jobs are left alone.
        """
        if not isinstance(reason, str) or not validation.storable(reason):
            raise InvalidJob(
                f"reason must be a string PostgreSQL can store (UTF-8, no NUL), not {reason!r}"
            )
        return sorted(maintenance.cancel(_ids(ids, self._job_model()), reason, self._alias(using)))

    def pause_queue(self, name: str, *, using: str | None = None) -> bool:
        """Pause queue ``name``: from the commit on, no worker claims its jobs (they
        stay queued; running ones finish, and those claimed ahead and not started go
        back). True if it was not paused already."""
        return pauses.pause(name, self._alias(using))

    def resume_queue(self, name: str, *, using: str | None = None) -> bool:
        """Resume queue ``name`` and wake the workers serving it; True if it was paused."""
        return pauses.resume(name, self._alias(using))

    def paused_queues(self, *, using: str | None = None) -> list[str]:
        """The names of the paused queues, sorted."""
        return sorted(pauses.paused(self._alias(using)))

    def prune(
        self,
        older_than: dt.timedelta | float,
        *,
        statuses: Iterable[str] = FINISHED,
        batch_size: int = 5000,
        dry_run: bool = False,
        using: str | None = None,
    ) -> int:
        """Delete finished (done, dead, cancelled) jobs whose done_at is older than
        ``older_than`` (or further ahead than any worker writes), in batches."""
        seconds = older_than.total_seconds() if isinstance(older_than, dt.timedelta) else older_than
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= validation.MAX_DELAY
        ):
            raise InvalidJob(
                f"older_than must be a timedelta or a number of seconds from 0 to ten years, "
                f"not {older_than!r}"
            )
        _check_batch_size(batch_size)
        if isinstance(statuses, str) or not isinstance(statuses, Iterable):
            raise InvalidJob(f"statuses must be a list of {', '.join(FINISHED)}, not {statuses!r}")
        statuses = tuple(statuses)  # a generator is read once, by the check
        bad = set(statuses) - set(FINISHED)
        if bad or not statuses:
            raise InvalidJob(f"prune only deletes {', '.join(FINISHED)} jobs, not {sorted(bad)}")
        return maintenance.prune(
            maintenance.prune_bound(older_than), statuses, batch_size, dry_run, self._alias(using)
        )

    def stats(self, *, using: str | None = None) -> list[QueueStats]:
        """Counts by queue and status, the oldest ready job's age, recent deaths."""
        return maintenance.stats(self._alias(using))


def _check_claim(worker: object, limit: object, queues: object, lease: object) -> None:
    """Refuse claim arguments that would claim the wrong jobs or spend attempts."""
    if not isinstance(worker, str) or not worker:
        raise InvalidJob(f"worker must be a non-empty string (the worker id), not {worker!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidJob(f"limit must be a whole number of at least 1, not {limit!r}")
    _check_lease(lease)
    if queues is not None and (
        isinstance(queues, str | bytes) or not isinstance(queues, Collection) or not queues
    ):
        # Each name is checked as the claim writes it into its statement.
        raise InvalidJob(
            f"queues must be a non-empty list of queue names (None: every queue), not {queues!r}"
        )


def _check_batch_size(batch_size: object) -> None:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= validation.MAX_COUNT
    ):
        raise InvalidJob(
            f"batch_size must be a whole number from 1 to {validation.MAX_COUNT:,}, "
            f"not {batch_size!r}"
        )


def _check_lease(lease: object) -> None:
    if lease is not None and (
        isinstance(lease, bool)
        or not isinstance(lease, int | float)
        or not 0 < lease <= validation.MAX_DELAY
    ):
        raise InvalidJob(
            f"lease must be a number of seconds above 0 (at most ten years), not {lease!r}"
        )


def _ids(jobs: Jobs, job_model: type[models.Model]) -> list[int]:
    """The job ids ``jobs`` gives (see :data:`Jobs`); rows of a model other than
    ``job_model`` (or a subclass) are refused."""
    if isinstance(jobs, models.QuerySet):
        _check_of_jobs(jobs.model, job_model, "a queryset")
        if not jobs.query.is_sliced:  # (a slice cannot be reordered, nor needs to be)
            jobs = jobs.order_by()
        return list(jobs.values_list("pk", flat=True))
    given: Iterable[Any]
    if isinstance(jobs, int | str | models.Model) or isinstance(getattr(jobs, "id", None), str):
        given = [jobs]  # one job, given on its own (a TaskResult too)
    elif isinstance(jobs, Iterable) and not isinstance(jobs, bytes | bytearray | memoryview):
        given = jobs  # (bytes iterate as small ints: b"1" would name job 49)
    else:
        raise InvalidJob(f"expected job ids, Job instances or a queryset of jobs, got {jobs!r}")
    ids = []
    for job in given:
        if isinstance(job, models.Model):
            _check_of_jobs(type(job), job_model, "an instance")
            job = job.pk
        elif not isinstance(job, int | str) and isinstance(getattr(job, "id", None), str):
            job = job.id  # a Tasks-framework TaskResult: its id is the job's
        if isinstance(job, str) and job.isascii() and job.isdigit() and len(job) < 19:
            job = int(job)  # a Tasks-framework result's id is the job's id as text
        if isinstance(job, bool) or not isinstance(job, int):
            raise InvalidJob(f"expected job ids, Job instances or a queryset of jobs, got {job!r}")
        if not -(2**63) <= job < 2**63:  # the column is a bigint: no such job
            raise InvalidJob(f"no job has the id {job}: job ids are below 2**63")
        ids.append(job)
    return ids


def _check_of_jobs(model: type[models.Model], job_model: type[models.Model], given: str) -> None:
    """InvalidJob for rows of another model: their primary keys would name jobs."""
    if not issubclass(model, job_model):
        raise InvalidJob(
            f"expected job ids, Job instances or a queryset of jobs, got {given} of "
            f"{model._meta.label}: its primary keys are not job ids"
        )
