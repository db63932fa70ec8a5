"""Helpers for a project's tests: run queued jobs here and now.

``run_jobs()`` is to django-pgqueue what Django's ImmediateBackend is to the Tasks
framework, except that the jobs go through the queue itself: each one is claimed
by the worker's claim statement, run by the worker's executor and recorded by
the worker's outcome statements, so what a test sees (statuses, retries, results,
error histories, Tasks-framework signals and results) is what a worker would
leave. It runs in the calling thread, on the calling thread's connection, so it
works inside a ``TestCase`` too, where a real worker cannot see the test's rows::

    from django_pgqueue.testing import run_jobs

    def test_checkout_sends_the_confirmation(client):
        client.post("/checkout/", {...})
        ran = run_jobs()
        assert ran.done and not ran.dead
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from django.db import connections, transaction

from django_pgqueue import conf, jobdb, registry
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.installed import job_model
from django_pgqueue.records import ClaimedJob, Failure, JobStatus, Success
from django_pgqueue.worker.executor import execute

__all__ = ["Ran", "run_jobs"]


@dataclasses.dataclass
class Ran:
    """What :func:`run_jobs` ran, by job id, in the order the jobs ran."""

    #: Jobs whose run succeeded (now ``done``).
    done: list[int] = dataclasses.field(default_factory=list)
    #: Jobs whose run failed with attempts left: queued again for a later ``run_at``.
    retried: list[int] = dataclasses.field(default_factory=list)
    #: Jobs whose run failed for good (now ``dead``).
    dead: list[int] = dataclasses.field(default_factory=list)
    #: Jobs that ended ``cancelled`` (their task raised ``Cancel``).
    cancelled: list[int] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.done) + len(self.retried) + len(self.dead) + len(self.cancelled)


def run_jobs(
    *,
    queues: Sequence[str] | None = None,
    max_jobs: int | None = None,
    using: str | None = None,
) -> Ran:
    """Run ready jobs one by one in this thread until none is ready; return what ran.

    Jobs that the jobs enqueue run too, if they are ready; a failed job with
    attempts left is queued again for after its backoff, as a worker leaves it,
    and is not waited for (call ``run_jobs()`` again once its ``run_at`` has
    passed, or move its ``run_at`` back: in a ``TestCase`` the database's ``now()``
    stands still, so only that works there; ``Job.objects.retry()`` would start its
    attempts over). ``queues`` limits the queues served
    (default: all), ``max_jobs`` the number of runs, ``using`` the database
    (default: the job table's).

    Inside an open transaction (a ``TestCase``), each job runs in a savepoint that
    is rolled back if the run fails (not if it snoozes), so that a task's database
    error cannot break the test's transaction; a job run in autocommit keeps what it wrote before
    failing, as it would in a worker.
    """
    if max_jobs is not None and (
        isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 0
    ):
        raise InvalidJob(
            f"max_jobs must be a whole number, 0 or more (None: no limit), not {max_jobs!r}"
        )
    alias = using or conf.database()
    jobs = job_model().objects
    worker = f"run_jobs:{os.getpid()}"
    registry.discover()  # as a worker does: tasks registered under names of their own
    ran = Ran()
    in_transaction = connections[alias].in_atomic_block
    while max_jobs is None or len(ran) < max_jobs:
        claimed = jobs.claim(worker, limit=1, queues=queues, using=alias)
        if not claimed:
            return ran
        (job,) = claimed
        outcome = _execute(job, alias) if in_transaction else execute(job)
        if isinstance(outcome, Success):
            jobs.complete(worker, [outcome], using=alias)
            ran.done.append(job.id)
        else:
            status = jobs.fail(worker, [outcome], using=alias).get(job.id)
            if status == JobStatus.DEAD:
                ran.dead.append(job.id)
            elif status == JobStatus.CANCELLED:
                ran.cancelled.append(job.id)
            else:  # queued again: a retry, or a snooze
                ran.retried.append(job.id)
    return ran


class _RolledBack(Exception):
    """Leaves a failed run's savepoint, rolling back what the run wrote."""


def _execute(job: ClaimedJob, alias: str) -> Success | Failure:
    """Run ``job`` inside the caller's open transaction, in a savepoint of its own."""
    outcome: Success | Failure | None = None
    try:
        with transaction.atomic(using=alias), jobdb.inside_callers_transaction():
            outcome = execute(job)
            # A snooze is not a failure: a worker keeps what the run wrote, and a
            # task that counts its polls in the database relies on it.
            if isinstance(outcome, Failure) and (
                not outcome.snooze or connections[alias].needs_rollback
            ):
                raise _RolledBack
    except _RolledBack:
        pass
    assert outcome is not None
    return outcome
