"""The shutdown's word on runs past the job timeout whose threads had not returned
when the worker exits: recorded as failed (timed out), as the last statements."""

from __future__ import annotations

import logging

from django_pgqueue import wording
from django_pgqueue.dberrors import first_line
from django_pgqueue.exceptions import JobTimeout
from django_pgqueue.models import Job
from django_pgqueue.records import ClaimedJob, JobStatus
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.executor import timed_out
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.services import reset_connection

logger = logging.getLogger("django_pgqueue")


def fail_overdue(
    config: WorkerConfig, ledger: Ledger, events: Events, overdue: list[ClaimedJob]
) -> None:
    timeout = config.job_timeout
    outcomes = [
        timed_out(
            job,
            JobTimeout(
                f"job ran past the worker's job timeout of {timeout:g}s and had not "
                "returned when its worker exited"
            ),
        )
        for job in overdue
    ]
    try:
        statuses = Job.objects.fail(config.worker_id, outcomes, using=config.database)
    except Exception as exc:
        reset_connection(config.database)
        logger.error(
            "could not record jobs %s as timed out (%s): the reaper returns them "
            "once their leases expire",
            [job.id for job in overdue],
            first_line(exc),
        )
        return
    # Counted as any outcome, for the "stopped" line that follows, and told as
    # any batch of outcomes is (the metrics count them, the registry's done).
    new = list(statuses.values())
    buried, retried = new.count(JobStatus.DEAD), new.count(JobStatus.QUEUED)
    ledger.settled([], 0, buried=buried, retried=retried, cancelled=new.count(JobStatus.CANCELLED))
    settled = [job.key for job in overdue]
    events.emit(
        "recorded", settled=settled, succeeded=0, buried=buried, retried=retried,
        statuses={job.key: statuses.get(job.id) for job in overdue},
    )  # fmt: skip
    logger.warning(
        "shutdown: recorded %s as timed out: %s",
        wording.count(len(overdue), "job"),
        [job.id for job in overdue],
    )
