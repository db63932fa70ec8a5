"""Claim, leases, the reaper and fencing, against a real PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import time
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from django_pgqueue.records import ClaimedJob, Failure, JobSpec, Success
from tests.conftest import status_counts
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def ok(job_id: int, run: int, result: str = "null") -> Success:
    return Success(job_id=job_id, run=run, result=result)


def boom(job_id: int, run: int, delay: float = 0.0, final: bool = False) -> Failure:
    return Failure(
        job_id=job_id,
        run=run,
        exception="ValueError",
        message="boom",
        traceback="Traceback...",
        delay=delay,
        final=final,
    )


def test_claim_leases_the_job_to_the_worker() -> None:
    job = add.enqueue(1, 2)
    (claimed,) = Job.objects.claim("w1", lease=30)
    assert (claimed.id, claimed.task, claimed.args, claimed.attempt) == (
        job.pk,
        job.task,
        [1, 2],
        1,
    )
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.locked_by, row.worker_ids) == ("running", 1, "w1", ["w1"])
    assert row.locked_until is not None
    lease = (row.locked_until - timezone.now()).total_seconds()
    assert 28 < lease <= 30
    assert Job.objects.claim("w2") == []  # a running job is out of everyone's view


def test_claim_order_is_priority_then_run_at_then_id() -> None:
    now = timezone.now()
    low = add.using(priority=-5).enqueue(0, 0)
    late = add.using(run_at=now - dt.timedelta(seconds=1)).enqueue(0, 1)
    early = add.using(run_at=now - dt.timedelta(seconds=10)).enqueue(0, 2)
    high = add.using(priority=50).enqueue(0, 3)
    same_time = [add.using(run_at=now - dt.timedelta(seconds=1)).enqueue(1, i) for i in range(3)]
    claimed = [j.id for j in Job.objects.claim("w", limit=10)]
    assert claimed == [high.pk, early.pk, late.pk, *[j.pk for j in same_time], low.pk]


def test_batch_claim_takes_at_most_limit() -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(25))
    first = Job.objects.claim("w", limit=10)
    second = Job.objects.claim("w", limit=10)
    third = Job.objects.claim("w", limit=10)
    assert [len(first), len(second), len(third)] == [10, 10, 5]
    assert len({j.id for j in first + second + third}) == 25


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"worker": None}, "worker must be a non-empty string"),
        ({"worker": ""}, "worker must be a non-empty string"),
        ({"limit": 0}, "limit must be a whole number of at least 1, not 0"),
        ({"limit": -1}, "limit must be a whole number of at least 1, not -1"),
        ({"limit": "2"}, "limit must be a whole number of at least 1, not '2'"),
        ({"lease": 0}, "lease must be a number of seconds above 0 (at most ten years), not 0"),
        ({"lease": 1e308}, "lease must be a number of seconds above 0 (at most ten years)"),
        ({"lease": -5}, "lease must be a number of seconds above 0"),
        ({"queues": []}, "queues must be a non-empty list of queue names"),
        ({"queues": "default"}, "queues must be a non-empty list of queue names"),
        ({"queues": ["a b"]}, "queue 'a b' is not a valid queue name"),
    ],
)
def test_claim_refuses_arguments_that_would_take_the_wrong_jobs(
    args: dict[str, object], message: str
) -> None:
    add.enqueue(1, 1)
    worker = args.pop("worker", "w")
    with pytest.raises(InvalidJob, match=re.escape(message)):
        Job.objects.claim(worker, **args)  # type: ignore[arg-type]
    assert status_counts() == {"queued": 1}  # nothing claimed, no attempt spent


def test_prune_refuses_a_negative_age() -> None:
    with pytest.raises(InvalidJob, match="older_than must be a timedelta or a number of seconds"):
        Job.objects.prune(-1)
    with pytest.raises(InvalidJob, match="older_than"):
        Job.objects.prune(dt.timedelta(seconds=-1))


def test_future_run_at_is_not_claimed_until_due() -> None:
    job = add.using(delay=0.4).enqueue(1, 1)
    assert Job.objects.claim("w") == []
    time.sleep(0.5)
    assert [j.id for j in Job.objects.claim("w")] == [job.pk]


def test_queue_filtering() -> None:
    a = add.using(queue="a").enqueue(0, 0)
    b = add.using(queue="b").enqueue(0, 0)
    c = add.using(queue="c").enqueue(0, 0)
    assert [j.id for j in Job.objects.claim("w", limit=5, queues=["b"])] == [b.pk]
    assert sorted(j.id for j in Job.objects.claim("w", limit=5, queues=["a", "zzz"])) == [a.pk]
    assert [j.id for j in Job.objects.claim("w", limit=5)] == [c.pk]  # None: every queue


def test_complete_stores_the_result() -> None:
    job = add.enqueue(2, 3)
    (claimed,) = Job.objects.claim("w")
    assert Job.objects.complete("w", [ok(claimed.id, claimed.run, "5")]) == {job.pk}
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.locked_until) == ("done", 5, None)
    assert row.done_at is not None


def test_fail_retries_with_delay_then_buries_with_last_error() -> None:
    job = add.using(max_attempts=2).enqueue(1, 1)
    (first,) = Job.objects.claim("w")
    assert Job.objects.fail("w", [boom(first.id, first.run, delay=0.3)]) == {job.pk: "queued"}
    row = Job.objects.get(pk=job.pk)
    assert row.status == "queued"
    assert row.run_at > timezone.now() + dt.timedelta(seconds=0.1)
    assert Job.objects.claim("w") == []  # backing off
    time.sleep(0.35)
    (second,) = Job.objects.claim("w")
    assert second.attempt == 2
    assert Job.objects.fail("w", [boom(second.id, second.run)]) == {job.pk: "dead"}
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == ("dead", 2, "ValueError: boom")
    assert [e["attempt"] for e in row.errors] == [1, 2]
    assert set(row.errors[0]) == {"attempt", "time", "exception", "message", "traceback"}


def test_final_failure_buries_at_once() -> None:
    job = add.using(max_attempts=5).enqueue(1, 1)
    (claimed,) = Job.objects.claim("w")
    assert Job.objects.fail("w", [boom(claimed.id, claimed.run, final=True)]) == {job.pk: "dead"}


def test_reap_before_expiry_returns_nothing_after_expiry_returns_the_job() -> None:
    # backoff 0: the reaper requeues after the job's backoff (test_job_control.py).
    Job.objects.enqueue_many(JobSpec.build(add.using(backoff=0), [i, i]) for i in range(3))
    (held,) = Job.objects.claim("dying", lease=0.2)
    assert status_counts() == {"queued": 2, "running": 1}
    assert Job.objects.reap().returned == 0
    time.sleep(0.3)
    result = Job.objects.reap()
    assert (result.returned, result.buried) == (1, 0)
    assert Job.objects.reap().returned == 0  # idempotent
    # Back behind the others: its run_at is the reap's now() plus the (zero) backoff.
    again = {job.id: job for job in Job.objects.claim("healthy", limit=3)}[held.id]
    assert again.attempt == 2
    row = Job.objects.get(pk=held.id)
    assert row.worker_ids == ["dying", "healthy"]
    assert row.errors[0]["exception"] == "LeaseExpired"


def test_reap_spares_the_runs_named_and_their_holder_renews_them_though_expired() -> None:
    """A worker's own reaper spares the runs it holds: resumed after a pause longer
    than its lease, its heartbeat renews them (the fence reads the run, not the
    lease's end) instead of the reaper giving back jobs still running there."""
    Job.objects.enqueue_many(JobSpec.build(add.using(backoff=0), [i, i]) for i in range(3))
    mine, reclaimed, other = Job.objects.claim("w", limit=3)
    Job.objects.update(locked_until=timezone.now() - dt.timedelta(seconds=1))
    # (reclaimed.id, reclaimed.run + 1): a run of that job the row no longer runs.
    result = Job.objects.reap(spare=[mine.key, (reclaimed.id, reclaimed.run + 1)])
    assert sorted(job.id for job in result.returned_jobs) == sorted([reclaimed.id, other.id])
    assert Job.objects.get(pk=mine.id).status == "running"
    assert Job.objects.heartbeat("w", [mine.key], lease=30) == {mine.key}
    assert Job.objects.reap().returned == 0  # renewed: nothing left to reap
    Job.objects.filter(pk=mine.id).update(locked_until=timezone.now())
    assert Job.objects.reap().returned == 1  # without spare (reapjobs), it is reaped


def test_reap_buries_a_job_whose_attempts_are_spent() -> None:
    job = add.using(max_attempts=1).enqueue(1, 1)
    Job.objects.claim("dying", lease=0.1)
    time.sleep(0.2)
    assert Job.objects.reap().buried == 1
    row = Job.objects.get(pk=job.pk)
    assert row.status == "dead"
    assert row.last_error.startswith(
        "LeaseExpired: the lease expired: worker dying stopped renewing it on attempt "
    )


def test_stale_worker_is_fenced_out_of_the_newer_run() -> None:
    job = add.using(backoff=0).enqueue(1, 1)
    (stale,) = Job.objects.claim("slow", lease=0.1)
    time.sleep(0.2)
    Job.objects.reap()
    (fresh,) = Job.objects.claim("fast", lease=30)
    # The slow worker finishes late: neither its success nor its failure may land.
    assert Job.objects.complete("slow", [ok(stale.id, stale.run, '"stale"')]) == set()
    assert Job.objects.fail("slow", [boom(stale.id, stale.run)]) == {}
    assert Job.objects.heartbeat("slow", [stale.key]) == set()
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.locked_by, row.attempts) == ("running", "fast", 2)
    assert Job.objects.complete("fast", [ok(fresh.id, fresh.run, '"fresh"')]) == {job.pk}
    assert Job.objects.get(pk=job.pk).result == "fresh"


def test_heartbeat_extends_the_lease() -> None:
    job = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w", lease=0.3)
    for _ in range(4):
        time.sleep(0.15)
        assert Job.objects.heartbeat("w", [claimed.key], lease=0.3) == {claimed.key}
        assert Job.objects.reap().returned == 0
    assert Job.objects.get(pk=job.pk).status == "running"


def test_the_worker_calls_take_what_claim_returns_and_refuse_what_they_cannot_store() -> None:
    """heartbeat() and release() take the ClaimedJobs claim() returned as well as
    their (id, run) keys; anything else, and a result that is not JSON text, is an
    InvalidJob naming it, not a database error for the whole batch."""
    first, second = add.enqueue(1, 1), add.enqueue(2, 2)
    claimed = Job.objects.claim("w", limit=2)
    assert Job.objects.heartbeat("w", claimed) == {job.key for job in claimed}
    with pytest.raises(InvalidJob, match=r"expected \(id, run\) pairs.*not 7"):
        Job.objects.heartbeat("w", [7])  # type: ignore[list-item]
    a, b = sorted(claimed, key=lambda job: job.id)
    with pytest.raises(InvalidJob, match="the JSON text of the return value"):
        Job.objects.complete("w", [Success(a.id, a.run, {"a": 1})])  # type: ignore[arg-type]
    for key in [(2**63, a.run), (a.id, "1"), (True, a.run)]:  # past bigint: no run's key
        with pytest.raises(InvalidJob, match="job_id and run the claimed run's"):
            Job.objects.complete("w", [Success(*key, "1")])  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match=r"expected \(id, run\) pairs"):
            Job.objects.release("w", [key])  # type: ignore[list-item]
    for text, problem in [
        ("nope", "is not JSON text"),
        ("NaN", "is not JSON text (NaN is not JSON)"),
        ('"a\\u0000b"', "holds \\u0000 or a lone surrogate, which jsonb cannot store"),
        ("[" * 5000 + "]" * 5000, "nests too deeply to read"),
        # Deeper than the depth rule, but within what this Python decodes (3.12
        # reads 1,000 levels, 3.13 reads 5,000): refused on every Python all the same.
        ("[" * 1000 + "]" * 1000, "nests too deeply to read"),
        ('{"a":' * 300 + "1" + "}" * 300, "nests too deeply to read"),
    ]:
        with pytest.raises(
            InvalidJob, match=re.escape(f"job {a.id}: result {text[:80]!r} {problem}")
        ):
            Job.objects.complete("w", [Success(a.id, a.run, text)])
    huge = "9" * 5000  # more digits than int() reads; jsonb keeps them
    assert Job.objects.complete("w", (Success(a.id, a.run, f"[{huge}]") for _ in [1])) == {first.pk}
    assert Job.objects.heartbeat("w", [[b.id, b.run]]) == {b.key}  # a key read back from JSON
    assert Job.objects.release("w", [b], reason=None) == {second.pk}
    assert status_counts() == {"done": 1, "queued": 1}


def test_fail_refuses_a_failure_the_statement_cannot_store_before_writing_any() -> None:
    """fail() names a bad value of a Failure (a NaN or infinite delay, a missing
    text, a NUL) as an InvalidJob, rather than a database error for the batch."""
    job = add.enqueue(1, 1)
    (run,) = Job.objects.claim("w")

    def failure(**change: Any) -> Failure:
        return dataclasses.replace(Failure(run.id, run.run, "E", "boom", "", 0), **change)

    changes: list[tuple[dict[str, Any], str]] = [
        ({"delay": math.nan}, "delay nan must be a number of seconds"),
        ({"delay": math.inf}, "delay inf must be a number of seconds"),
        ({"delay": None}, "delay None must be a number of seconds"),
        ({"delay": -1}, "delay -1 must be a number of seconds"),
        ({"exception": None}, "exception None must be a string"),
        ({"message": "a\x00b"}, "message 'a\\x00b' must be a string without NUL"),
        ({"traceback": "\ud800"}, "traceback '\\ud800' must be a string without NUL"),
        ({"final": None}, "final must be True or False, not None"),
    ]
    for change, problem in changes:
        with pytest.raises(InvalidJob, match=re.escape(f"job {run.id}: {problem}")):
            Job.objects.fail("w", [failure(), failure(**change)])
    # A key past bigint (a database error for the batch before) is no claimed run's.
    for bad in [run.key, failure(run="1"), failure(job_id=2**63), failure(run=-(2**63) - 1)]:
        with pytest.raises(InvalidJob, match=r"expected Failure\(job_id, run"):
            Job.objects.fail("w", [bad])  # type: ignore[list-item]
    assert Job.objects.get(pk=job.pk).status == "running"  # nothing was written
    other = add.enqueue(2, 2)
    (second,) = Job.objects.claim("w")
    # Any iterable, a delay as a timedelta, and whole and fractional seconds together.
    failures = iter(
        [failure(delay=dt.timedelta(0)), Failure(other.pk, second.run, "E", "", "", 1.5)]
    )
    assert Job.objects.fail("w", failures) == {job.pk: "queued", other.pk: "queued"}


def test_record_takes_whole_and_fractional_delays_in_one_batch() -> None:
    """A retry policy of the user's may give whole seconds (5) where the default
    gives fractions: psycopg refused the list of both ("mixed types") for the batch."""
    first, second = add.enqueue(1, 1), add.enqueue(2, 2)
    a, b = sorted(Job.objects.claim("w", limit=2), key=lambda job: job.id)
    failures = [Failure(a.id, a.run, "E", "", "", 5), Failure(b.id, b.run, "E", "", "", 0.5)]
    recorded = Job.objects.record("w", [], failures)
    assert recorded.failed == {first.pk: "queued", second.pk: "queued"}


def test_release_puts_the_job_back_without_spending_the_attempt() -> None:
    job = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w")
    assert Job.objects.release("w", [claimed.key]) == {job.pk}
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.errors[0]["exception"]) == ("queued", 0, "WorkerShutdown")


def test_release_without_a_reason_records_no_error_unless_the_job_was_cancelled() -> None:
    kept, cancelled = add.enqueue(1, 1), add.enqueue(2, 2)
    claimed = Job.objects.claim("w", limit=2)
    Job.objects.cancel([cancelled.pk], reason="operator")  # running: asked to stop
    assert Job.objects.release("w", [c.key for c in claimed], reason=None) == {
        kept.pk,
        cancelled.pk,
    }
    row = Job.objects.get(pk=kept.pk)
    assert (row.status, row.attempts, row.errors, row.error_count) == ("queued", 0, [], 0)
    row = Job.objects.get(pk=cancelled.pk)
    assert (row.status, row.error_count) == ("cancelled", 1)
    assert row.errors[-1]["traceback"] == "WorkerShutdown: given back before it started"


def test_claim_statement_locks_only_the_rows_it_returns(db_url: str) -> None:
    """The chosen ids are materialised: a claim of 2 leaves every other row unlocked."""
    Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(50))
    with psycopg.connect(db_url) as tx:  # a claim held open in its own transaction
        tx.execute("SET application_name = 'claimer'")
        from django_pgqueue.sql import query

        rows = tx.execute(
            query("claim"),
            {"worker": "w", "limit": 2, "queues": None, "lease": 30, "token": 1, "commit": None},
        ).fetchall()
        assert len(rows) == 2
        with psycopg.connect(db_url, autocommit=True) as other:
            locked = other.execute(
                "SELECT count(*) FROM pgqueue_job WHERE id NOT IN "
                "(SELECT id FROM pgqueue_job FOR UPDATE SKIP LOCKED)"
            ).fetchone()
        tx.rollback()
    assert locked == (2,)


def test_claim_plan_uses_the_partial_index_with_many_finished_rows() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, attempts, max_attempts, "
            "run_at, done_at, errors, worker_ids) SELECT 'tests.testapp.tasks.add', '[]', "
            "'{}', 'done', 1, 3, now(), now(), '[]', '[]' FROM generate_series(1, 100000)"
        )
        cursor.execute("ANALYZE pgqueue_job")
    Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(20))
    from django_pgqueue.sql import query

    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN " + query("claim"),
            {"worker": "w", "limit": 10, "queues": None, "lease": 30, "token": 1, "commit": None},
        )
        plan = "\n".join(r[0] for r in cursor.fetchall())
    assert "pgqueue_job_ready" in plan, plan
    assert "Seq Scan on pgqueue_job" not in plan, plan  # (pgqueue_queue is a few rows)
    assert len(Job.objects.claim("w", limit=10)) == 10


def test_every_field_of_a_claimed_job_is_the_rows() -> None:
    job = add.using(
        queue="emails",
        priority=7,
        max_attempts=4,
        unique_key="once",
        concurrency_key="user:1",
        backoff=2.5,
        retry_on=[ValueError],
    ).enqueue(1, b=2)
    (claimed,) = Job.objects.claim("w1", lease=30, queues=["emails"])
    row = Job.objects.get(pk=job.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT retry_policy::text FROM pgqueue_job WHERE id = %s", [job.pk])
        (policy,) = cursor.fetchone()
    assert row.started_at is not None
    assert row.attempted_at is not None
    expected = ClaimedJob(
        id=row.pk,
        run=row.lease_token,
        task=row.task,
        args=[1],
        kwargs={"b": 2},
        queue="emails",
        priority=7,
        attempt=1,
        max_attempts=4,
        concurrency_key="user:1",
        unique_key="once",
        backoff=2.5,
        problem=None,
        snoozes=0,
        enqueued_at=row.created_at.timestamp(),
        run_at=row.run_at.timestamp(),
        started_at=row.started_at.timestamp(),
        attempted_at=row.attempted_at.timestamp(),
        errors=None,
        worker_ids='["w1"]',
        retry_policy=policy,
    )
    times = ("enqueued_at", "run_at", "started_at", "attempted_at")
    for name in times:
        assert getattr(claimed, name) == pytest.approx(getattr(expected, name), abs=1e-6)
    untimed = {name: 0.0 for name in times}
    assert {**dataclasses.asdict(claimed), **untimed} == {**dataclasses.asdict(expected), **untimed}
    assert "ValueError" in policy


def test_claim_with_a_queue_named_twice_still_claims_up_to_limit() -> None:
    """claim(limit=2, queues=["a", "a"]) must lease 2 of the 2 ready jobs of "a".

    Each listed queue's index range is read separately (claim_queues); a queue
    listed twice is read twice, and rows this statement locked are not skipped
    by its own SKIP LOCKED, so the merged LIMIT fills with the same ids and the
    claim leases fewer jobs than asked (runworker --queues a,a does the same:
    neither dedupes)."""
    for i in range(2):
        Job.objects.enqueue(add, [i, i], queue="a")
    claimed = Job.objects.claim("w", limit=2, queues=["a", "a"])
    assert len(claimed) == 2
