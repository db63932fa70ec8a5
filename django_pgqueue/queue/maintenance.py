"""Maintenance and operators: reap expired leases, retry, cancel, prune, stats."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Sequence

import psycopg
from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from django_pgqueue import validation
from django_pgqueue.backoff import retry_delay
from django_pgqueue.queue.enqueue import notify_params
from django_pgqueue.records import FINISHED, JobStatus, QueueStats, Reaped, ReapResult
from django_pgqueue.retrypolicy import DEFAULT
from django_pgqueue.sql import runner

#: Ids per retry statement: each statement's work (and the locks it holds) stays bounded.
RETRY_BATCH = 1000
#: Seconds ahead past which a running row's lease was written by no worker (LEASE
#: is at most validation.MAX_DELAY; a day more for clocks): the reaper takes it.
UNWRITTEN_LEASE = validation.MAX_DELAY + 86400.0
#: Seconds ahead past which a finished row's done_at was written by no worker (they
#: write now(); a day for a prune in a transaction open a while, which sees jobs
#: finished since ahead of its own now()): finished at a time no one can tell (as
#: with none), it is pruned whatever the bound.
UNWRITTEN_DONE = 86400.0
#: Seconds back that stats' dead_last_24h counts the jobs buried dead.
DEAD_WINDOW = 86400.0
#: Tries of a cancel statement that PostgreSQL keeps picking as a deadlock's victim.
CANCEL_ATTEMPTS = 5


def reap(batch_size: int, alias: str, spare: Sequence[tuple[int, int]] = ()) -> ReapResult:
    """Return jobs whose lease expired to the queue (or bury them), batch by batch.

    Each batch is locked, given its delays by the retry policy (a lease that
    expired counts as a failure under the job's backoff), and written, in one
    transaction (a savepoint inside the caller's). The runs (id, run) in
    ``spare`` are left alone, however expired."""
    cancelled = 0
    buried: list[Reaped] = []
    returned: list[Reaped] = []
    params = {
        "limit": batch_size,
        "beyond": UNWRITTEN_LEASE,
        "spare_ids": [job_id for job_id, _ in spare],
        "spare_runs": [run for _, run in spare],
    }
    while True:
        with transaction.atomic(using=alias):
            expired = runner.fetch("expired_leases", params, alias)
            delays = [
                DEFAULT.after_lease_expired(
                    row["attempts"], row["max_attempts"], row["backoff"], row["id"]
                )
                for row in expired
            ]
            rows = (
                runner.fetch(
                    "reap",
                    {
                        "ids": [row["id"] for row in expired],
                        "delays": delays,
                        "beyond": UNWRITTEN_LEASE,
                        "commit": runner.commit_mode(),
                    },
                    alias,
                )
                if expired
                else []
            )
        delay_of = {row["id"]: delay for row, delay in zip(expired, delays, strict=True)}
        for r in rows:
            if r["status"] == JobStatus.CANCELLED:
                cancelled += 1
                continue
            reaped = Reaped(
                r["id"],
                r["task"],
                r["queue"],
                r["attempts"],
                r["max_attempts"],
                r["locked_by"] or "",
                delay_of[r["id"]] if r["status"] == JobStatus.QUEUED else None,
            )
            (returned if r["status"] == JobStatus.QUEUED else buried).append(reaped)
        if len(expired) < batch_size:
            return ReapResult(len(returned), len(buried), cancelled, tuple(buried), tuple(returned))


def retry(job_ids: Sequence[int], alias: str) -> list[int]:
    """Dead jobs (or queued ones waiting for run_at) become ready now; the ids retried.

    Newest ids first, in batches: of several jobs sharing a unique_key the newest
    is retried, and a later batch's older job then finds the key live and stays.
    """
    ordered = sorted(set(job_ids), reverse=True)
    retried: list[int] = []
    with transaction.atomic(using=alias):
        if len(ordered) > RETRY_BATCH:
            # Written newest first, but locked oldest first, as cancel() locks them:
            # else each of the two could hold rows the other wants next (a deadlock).
            oldest_first = ordered[::-1]
            for start in range(0, len(oldest_first), RETRY_BATCH):
                runner.fetch_one(
                    "lock_for_retry", {"ids": oldest_first[start : start + RETRY_BATCH]}, alias
                )
        for start in range(0, len(ordered), RETRY_BATCH):
            retried += _retry_batch(ordered[start : start + RETRY_BATCH], alias)
    return sorted(retried)


def _retry_batch(job_ids: list[int], alias: str) -> list[int]:
    try:
        return _retry_statement(job_ids, alias)
    except IntegrityError:
        # A job with one of these keys went live meanwhile (an enqueue raced
        # us): one by one, skipping the ones that clash. The savepoint let the
        # batch's locks go: they are taken again in id order first, as cancel()
        # takes them, or the newest-first pass could deadlock with it.
        runner.fetch_one("lock_for_retry", {"ids": sorted(job_ids)}, alias)
        retried: list[int] = []
        for job_id in job_ids:
            with contextlib.suppress(IntegrityError):
                retried += _retry_statement([job_id], alias)
        return retried


def _retry_statement(job_ids: list[int], alias: str) -> list[int]:
    with transaction.atomic(using=alias):  # a savepoint: a clash must not doom the caller
        row = runner.fetch_one("retry", {"ids": job_ids, **notify_params()}, alias)
    return list(row["ids"])


def cancel(job_ids: Sequence[int], reason: str, alias: str) -> dict[int, tuple[str, bool]]:
    """Queued jobs become cancelled with the reason; running ones are asked to stop
    (their workers are notified). {id: (status, asked before)} of the jobs acted
    on: ``cancelled``, or ``running`` for those asked to stop, True for one asked
    before (it keeps that first request and its reason)."""
    params = {"ids": sorted(set(job_ids)), "reason": reason, **notify_params()}
    for attempt in range(1, CANCEL_ATTEMPTS + 1):
        try:
            # A savepoint in the caller's transaction: a deadlock must not doom it.
            with transaction.atomic(using=alias):
                rows = runner.fetch("cancel", params, alias)
            break
        except OperationalError as exc:
            # The statement locks running rows that a worker may be writing at
            # that moment (a batch of outcomes): PostgreSQL may pick it as a
            # deadlock's victim. The worker retries its side; so does this,
            # after a short pause (doubling, jittered, as retries are): the peer,
            # given the rows this one let go, then finishes first.
            deadlock = isinstance(exc.__cause__, psycopg.errors.DeadlockDetected)
            if not deadlock or attempt == CANCEL_ATTEMPTS:
                raise
            time.sleep(retry_delay(attempt, base=0.02, cap=0.2, jitter=0.5))
    return {row["id"]: (row["status"], row["asked_before"]) for row in rows}


def prune(
    before: dt.datetime, statuses: Sequence[str], batch_size: int, dry_run: bool, alias: str
) -> int:
    """Delete finished jobs whose done_at is before ``before`` (or no worker wrote
    it), in batches; the count."""
    params = {
        "statuses": list(statuses),
        "limit": batch_size,
        "before": before,
        "beyond": UNWRITTEN_DONE,
    }
    if dry_run:
        return int(runner.fetch_one("count_prunable", params, alias)["jobs"])
    deleted = 0
    while True:
        row = runner.fetch_one("prune", params, alias)
        deleted += int(row["deleted"])
        # The last batch is the one that found fewer rows than it could take. A full
        # one that deleted fewer, or none (jobs retried meanwhile keep their rows),
        # is not: a row it kept has changed, so the next batch does not choose it.
        if int(row["chosen"]) < batch_size:
            return deleted


def prune_bound(older_than: dt.timedelta | float) -> dt.datetime:
    seconds = older_than.total_seconds() if isinstance(older_than, dt.timedelta) else older_than
    return timezone.now() - dt.timedelta(seconds=seconds)


def stats(alias: str) -> list[QueueStats]:
    """Counts by queue and status, the oldest ready job's age, recent deaths."""
    return [
        QueueStats(
            queue=row["queue"],
            status=row["status"],
            jobs=row["jobs"],
            oldest_ready_age=(
                None if row["oldest_ready_age"] is None else float(row["oldest_ready_age"])
            ),
            dead_last_24h=row["dead_last_24h"],
            lease_expired=row["lease_expired"],
        )
        for row in runner.fetch("stats", {"seconds": DEAD_WINDOW}, alias)
    ]


__all__ = ["FINISHED", "RETRY_BATCH", "cancel", "prune", "reap", "retry", "stats"]
