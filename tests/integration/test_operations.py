"""Operators' operations: retry, cancel, prune, stats."""

from __future__ import annotations

import datetime as dt
import threading

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_pgqueue import validation
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from django_pgqueue.records import Failure, JobSpec
from tests.conftest import status_counts
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def bury(job: Job) -> None:
    (claimed,) = Job.objects.claim("w", limit=1)
    assert claimed.id == job.pk
    Job.objects.fail("w", [Failure(job.pk, claimed.run, "E", "x", "", 0, True)])


def test_retry_requeues_dead_jobs_now_with_fresh_attempts_and_history_kept() -> None:
    job = add.enqueue(1, 1)
    bury(job)
    waiting = add.using(delay=3600).enqueue(2, 2)
    running = add.enqueue(3, 3)
    Job.objects.claim("w")
    assert Job.objects.retry([job.pk, waiting.pk, running.pk]) == sorted([job.pk, waiting.pk])
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.done_at, len(row.errors)) == ("queued", 0, None, 1)
    assert Job.objects.get(pk=waiting.pk).run_at <= timezone.now()
    assert Job.objects.get(pk=running.pk).status == "running"


def test_retry_skips_a_dead_job_whose_unique_key_is_live_again() -> None:
    job = add.using(unique_key="u").enqueue(1, 1)
    bury(job)
    add.using(unique_key="u").enqueue(2, 2)
    assert Job.objects.retry([job.pk]) == []
    assert Job.objects.get(pk=job.pk).status == "dead"


def test_retry_of_two_dead_jobs_sharing_a_key_requeues_only_the_newest() -> None:
    older = add.using(unique_key="same").enqueue(1, 1)
    bury(older)
    newer = add.using(unique_key="same").enqueue(2, 2)
    bury(newer)
    assert Job.objects.retry([older.pk, newer.pk]) == [newer.pk]
    assert Job.objects.get(pk=older.pk).status == "dead"
    assert Job.objects.get(pk=newer.pk).status == "queued"


def test_cancel_takes_queued_jobs_out_with_the_reason() -> None:
    running = add.enqueue(2, 2)
    queued = add.enqueue(1, 1)
    assert [j.id for j in Job.objects.claim("w", limit=1)] == [running.pk]
    # The running job is asked to stop (tests/integration/test_job_control.py).
    assert Job.objects.cancel([queued.pk, running.pk], reason="customer left") == sorted(
        [queued.pk, running.pk]
    )
    row = Job.objects.get(pk=queued.pk)
    assert (row.status, row.last_error) == ("cancelled", "Cancelled: customer left")
    assert Job.objects.claim("w") == []


def test_prune_deletes_old_finished_jobs_in_batches() -> None:
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(30))
    long_ago = timezone.now() - dt.timedelta(days=10)
    Job.objects.filter(pk__in=ids[:12]).update(status="done", done_at=long_ago)
    Job.objects.filter(pk__in=ids[12:20]).update(status="dead", done_at=long_ago)
    Job.objects.filter(pk__in=ids[20:25]).update(status="done", done_at=timezone.now())
    week = dt.timedelta(days=7)
    assert Job.objects.prune(week, dry_run=True) == 20
    assert Job.objects.prune(week, statuses=["dead"], batch_size=3) == 8
    assert Job.objects.prune(week, batch_size=5) == 12
    assert status_counts() == {"done": 5, "queued": 5}
    with pytest.raises(InvalidJob, match="only deletes done, dead, cancelled"):
        Job.objects.prune(week, statuses=["queued"])


def test_prune_reads_statuses_given_as_any_iterable_and_refuses_a_string() -> None:
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(3))
    Job.objects.filter(pk__in=ids).update(status="dead", done_at=timezone.now())
    # A generator is read once: the check must not leave the statement an empty list.
    assert Job.objects.prune(0, statuses=(s for s in ["dead"]), dry_run=True) == 3
    for bad in ("dead", None, 5):
        with pytest.raises(InvalidJob, match=r"statuses must be a list of done, dead, cancelled"):
            Job.objects.prune(0, statuses=bad)  # type: ignore[arg-type]
    assert Job.objects.prune(0, statuses={"dead"}) == 3


def test_stats_counts_by_queue_and_status_with_oldest_ready_age() -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, i], queue="a") for i in range(3))
    Job.objects.enqueue_many(JobSpec.build(add, [i, i], queue="b") for i in range(2))
    Job.objects.filter(queue="a").update(run_at=timezone.now() - dt.timedelta(seconds=60))
    Job.objects.claim("w", queues=["b"])
    stats = {(s.queue, s.status): s for s in Job.objects.stats()}
    assert {k: s.jobs for k, s in stats.items()} == {
        ("a", "queued"): 3,
        ("b", "queued"): 1,
        ("b", "running"): 1,
    }
    age = stats["a", "queued"].oldest_ready_age
    assert age is not None
    assert 59 < age < 70


def test_prune_heartbeat_and_cancel_refuse_values_the_database_cannot_take() -> None:
    job = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w", limit=1)
    with pytest.raises(InvalidJob, match=r"older_than must be .* from 0 to ten years"):
        Job.objects.prune(dt.timedelta(days=999_999_999))
    with pytest.raises(InvalidJob, match=r"batch_size must be a whole number from 1 to"):
        Job.objects.prune(60, batch_size=99_999_999_999)
    with pytest.raises(InvalidJob, match=r"lease must be .* \(at most ten years\)"):
        Job.objects.heartbeat("w", [claimed.key], lease=1e308)
    with pytest.raises(InvalidJob, match=r"reason must be a string PostgreSQL can store"):
        Job.objects.cancel([job.pk], reason="a\x00b")
    assert Job.objects.get(pk=job.pk).status == "running"  # nothing written


def test_reap_prune_and_enqueue_many_refuse_what_would_loop_or_crash() -> None:
    for bad in (0, -1, True, "5"):
        with pytest.raises(InvalidJob, match="batch_size must be a whole number from 1"):
            Job.objects.reap(batch_size=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match="batch_size must be a whole number from 1"):
            Job.objects.prune(10, batch_size=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match=r"enqueue_many takes JobSpec\.build.*jobs\[1\] is"):
        Job.objects.enqueue_many(
            [JobSpec.build(add, [1, 1]), {"task": "tests.testapp.tasks.add"}]  # type: ignore[list-item]
        )
    assert Job.objects.count() == 0


def test_a_job_on_its_thousandth_attempt_is_reaped_with_the_others() -> None:
    """2.0 ** 1025 overflowed the retry delay and failed the reaper's whole batch."""
    late = add.using(max_attempts=1_000_000).enqueue(1, 1)
    Job.objects.filter(pk=late.pk).update(attempts=1100)
    add.enqueue(2, 2)
    Job.objects.claim("gone", limit=2, lease=0.05)
    Job.objects.filter(status="running").update(locked_until=timezone.now())
    assert Job.objects.reap().returned == 2
    assert status_counts() == {"queued": 2}


def test_a_running_row_whose_lease_no_worker_wrote_is_reaped_and_frees_its_key() -> None:
    """``locked_until`` takes ``'infinity'`` and year 9999 (a row written by hand):
    such a lease never expired, so the job stayed running for ever and held its
    concurrency key. A worker's lease is at most LEASE, ten years: one further ahead
    is reaped like an expired one, with what it was; a ten-year lease is not."""
    held = add.using(concurrency_key="user:9").enqueue(1, 1)
    last = add.using(max_attempts=1).enqueue(2, 2)
    Job.objects.claim("by-hand", limit=2)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET locked_until = CASE WHEN id = %s THEN 'infinity'::timestamptz "
            "ELSE '9999-12-31 00:00+00' END WHERE id IN (%s, %s)",
            [held.pk, held.pk, last.pk],
        )
    long = add.enqueue(3, 3)
    Job.objects.claim("long-lease", limit=1, lease=validation.MAX_DELAY)
    waiting = add.using(concurrency_key="user:9").enqueue(4, 4)
    assert Job.objects.claim("w", limit=5) == []  # user:9 is held
    result = Job.objects.reap()
    assert (result.returned, result.buried) == (1, 1)
    rows = {job.pk: job for job in Job.objects.all()}
    assert (rows[held.pk].status, rows[last.pk].status, rows[long.pk].status) == (
        "queued",
        "dead",
        "running",
    )
    assert rows[held.pk].last_error == (
        "LeaseExpired: the lease of worker by-hand on attempt 1 ran to infinity, "
        "longer than any worker holds one"
    )
    assert rows[last.pk].last_error.endswith(
        "ran to 9999-12-31 00:00:00+00, longer than any worker holds one"
    )
    assert "no worker wrote it" in rows[held.pk].errors[-1]["message"]
    assert [job.id for job in Job.objects.claim("w", limit=5)] == [waiting.pk]  # key freed


@pytest.mark.parametrize("retried", [1, 2], ids=["batch-shortened", "batch-emptied"])
def test_prune_goes_on_past_the_rows_a_concurrent_retry_holds(retried: int) -> None:
    """Rows a retry holds (not yet committed) are skipped, not waited for (waiting in
    done_at order on a retry locking in id order could deadlock): prune deletes every
    other old job and counts them, and the retried ones stay. It once waited on them,
    then took a full batch that deleted fewer (or none) for the end: the other old
    jobs stayed, and the count was short."""
    for i in range(6):
        Job.objects.enqueue(add, [i, i], max_attempts=1)
        run = Job.objects.claim("w")[0]
        Job.objects.fail("w", [Failure(run.id, run.run, "E", "boom", "", 0)])
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET done_at = now() - interval '1 day' - id * interval '1 second'"
        )
    oldest = list(Job.objects.order_by("done_at").values_list("id", flat=True)[:retried])
    held, go_on = threading.Event(), threading.Event()
    pruned: dict[str, int] = {}

    def retry_and_hold() -> None:
        try:
            with transaction.atomic():
                assert sorted(Job.objects.retry(oldest)) == sorted(oldest)
                held.set()
                go_on.wait(5)
        finally:
            connections.close_all()

    def prune() -> None:
        try:
            pruned["n"] = Job.objects.prune(3600, batch_size=2)
        finally:
            connections.close_all()

    holder = threading.Thread(target=retry_and_hold)
    holder.start()
    assert held.wait(5)
    pruner = threading.Thread(target=prune)
    pruner.start()
    pruner.join(10)  # while the retry still holds its rows
    assert not pruner.is_alive()
    assert not prune_waits()
    go_on.set()
    holder.join()
    assert sorted(Job.objects.values_list("id", flat=True)) == sorted(oldest)
    assert pruned["n"] == 6 - retried


def prune_waits() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%%DELETE FROM pgqueue_job%%'"
        )
        return bool(cursor.fetchone()[0])


def test_prune_takes_finished_jobs_whose_done_at_no_worker_wrote() -> None:
    """A finished job written by hand with done_at = 'infinity' (or a year past
    9999, or none) was never older than any bound: neither prune nor a worker's
    pruning ever deleted it. Finished at a time no one can tell, it is prunable at
    once, of the statuses asked for; a done_at within a day ahead is not (a prune in
    a transaction open for a while sees jobs finished since as ahead of its now())."""
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(7))
    with connection.cursor() as cursor:
        for job_id, status, done_at in [
            (ids[0], "done", "'infinity'"),
            (ids[1], "dead", "'infinity'"),
            (ids[2], "cancelled", "'10000-01-01 00:00+00'"),
            (ids[6], "done", "NULL"),
            (ids[3], "done", "now() + interval '2 hours'"),
            (ids[4], "done", "now()"),
        ]:
            cursor.execute(
                f"UPDATE pgqueue_job SET status = %s, done_at = {done_at} WHERE id = %s",
                [status, job_id],
            )
        cursor.execute("UPDATE pgqueue_job SET done_at = 'infinity' WHERE id = %s", [ids[5]])
    week = dt.timedelta(days=7)
    assert Job.objects.prune(week, dry_run=True) == 4
    assert Job.objects.prune(week, statuses=["dead"]) == 1
    assert Job.objects.prune(week, batch_size=1) == 3
    assert sorted(Job.objects.values_list("id", flat=True)) == ids[3:6]  # the queued one too


def test_prune_in_a_long_transaction_keeps_jobs_finished_since_it_began(db_url: str) -> None:
    job = add.enqueue(1, 1)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")  # the transaction's now() is taken here
        with psycopg.connect(db_url, autocommit=True) as other:
            other.execute(
                "UPDATE pgqueue_job SET status = 'done', done_at = now() + interval '1 second' "
                "WHERE id = %s",
                [job.pk],
            )
        assert Job.objects.prune(3600, dry_run=True) == 0
        assert Job.objects.prune(3600) == 0
    assert Job.objects.get(pk=job.pk).status == "done"
