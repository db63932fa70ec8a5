"""The log lines of a failed run, for people and for error trackers.

A failed attempt that will be retried is logged at WARNING (a lease the reaper
found expired and returned to the queue too), a job buried ``dead`` (its last
attempt, or a failure that retrying cannot fix, or a lease the reaper found
expired on its last attempt) at ERROR;
both with ``exc_info`` (so Sentry, Rollbar and the like capture the exception
and its traceback) and with ``extra`` fields for structured logging:
``job_id``, ``task``, ``queue``, ``attempt`` and ``worker``. A row's names in the
text (and a failure's message) are shown by ``wording.shown``: one written by hand
with a line break cannot forge a log line; the ``extra`` fields keep them as they are.
"""

from __future__ import annotations

import json
import logging

from django_pgqueue import wording
from django_pgqueue.records import ClaimedJob, Failure, JobStatus, Outcome, Reaped, Success

logger = logging.getLogger("django_pgqueue")


def came_to(outcome: Outcome) -> str:
    """The word of ``-v 2``'s line for a finished run: what the worker records."""
    if isinstance(outcome, Success):
        return "succeeded"
    if outcome.cancel:
        return JobStatus.CANCELLED.value  # the status it ends in
    return "snoozed" if outcome.snooze else "failed"


def worker_of(job: ClaimedJob) -> str:
    """The id of the worker running ``job``: the claim appended it to worker_ids."""
    try:
        ids = json.loads(job.worker_ids)
        return str(ids[-1]) if ids else ""
    except (ValueError, TypeError, IndexError, RecursionError):
        return ""


def fields(job: ClaimedJob) -> dict[str, object]:
    return _fields(job.id, job.task, job.queue, job.attempt, worker_of(job))


def _fields(job_id: int, task: str, queue: str, attempt: int, worker: str) -> dict[str, object]:
    return {"job_id": job_id, "task": task, "queue": queue, "attempt": attempt, "worker": worker}


def buries(job: ClaimedJob, outcome: Failure) -> bool:
    """Whether recording ``outcome`` makes the job dead (as the fail statement decides)."""
    return outcome.final or job.attempt >= job.max_attempts


def failed(job: ClaimedJob, outcome: Failure, exc: BaseException) -> None:
    """Log one failed run: WARNING with a retry to come, ERROR when the job is buried."""
    # The message often holds the job's arguments: shown so that it cannot start a
    # line of its own (the traceback, exc_info, prints it as raised).
    what = outcome.exception
    if outcome.message:
        what += f": {wording.shown(outcome.message)}"
    attempt = (job.id, wording.shown(job.task), job.attempt, job.max_attempts)
    if not buries(job, outcome):
        _attempt_failed(*attempt, outcome.delay, what, fields(job), exc)
    elif job.attempt < job.max_attempts:  # final before its last attempt
        logger.error(
            "job %s (%s) buried dead: it cannot succeed by retrying: %s",
            job.id,
            wording.shown(job.task),
            what,
            exc_info=exc,
            extra=fields(job),
        )
    else:
        _attempt_failed(*attempt, None, what, fields(job), exc)


def _attempt_failed(
    job_id: int,
    task: str,
    attempt: int,
    max_attempts: int,
    delay: float | None,
    what: str,
    extra: dict[str, object],
    exc: BaseException | None,
) -> None:
    """A failed attempt: retried after ``delay`` (WARNING), or, None, the job buried
    after it (ERROR)."""
    if delay is not None:
        logger.warning(
            "job %s (%s) failed on attempt %s of %s, retrying in %.1fs: %s",
            *(job_id, task, attempt, max_attempts, delay, what),
            exc_info=exc,
            extra=extra,
        )
    else:
        logger.error(
            "job %s (%s) buried dead after attempt %s of %s: %s",
            *(job_id, task, attempt, max_attempts, what),
            exc_info=exc,
            extra=extra,
        )


def reaped(job: Reaped) -> None:
    """Log a job whose expired lease the reaper found: a failed attempt, at WARNING
    when the job goes back to the queue and at ERROR when it is buried (its last
    attempt), with the fields of any failed run; ``worker`` is the one that lost
    the lease. No exc_info: nothing was raised in this process."""
    why = (
        f"LeaseExpired: the lease expired: worker {wording.shown(job.worker) or '?'} stopped "
        "renewing it before recording an outcome"
    )
    extra = _fields(job.id, job.task, job.queue, job.attempt, job.worker)
    attempt = (job.id, wording.shown(job.task), job.attempt, job.max_attempts)
    _attempt_failed(*attempt, job.delay, why, extra, None)
