"""The fence, the constraints and the error history, against a real PostgreSQL.

Each test here reproduces a fault path of the first version: a fence that an
operator's retry made repeat, a row whose counters made the claim fail for
everyone, an error history that grew without bound.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_pgqueue.models import Job
from django_pgqueue.queue.maintenance import RETRY_BATCH
from django_pgqueue.records import Failure, JobSpec, Success
from django_pgqueue.schema import MAX_ERROR_COUNT
from tests.conftest import status_counts
from tests.testapp.tasks import add
from tests.worker.inprocess import worker_thread
from tests.worker.planted import insert

pytestmark = pytest.mark.django_db(transaction=True)


def fail(claimed_id: int, run: int, *, final: bool = False, message: str = "boom") -> Failure:
    return Failure(claimed_id, run, "ValueError", message, "Traceback...", delay=0.0, final=final)


def test_a_stale_run_is_fenced_out_even_after_an_operators_retry_reset_the_attempts() -> None:
    """retry() sets attempts back to 0, so (id, attempt, worker) repeated; the claim
    token never does."""
    job = add.using(max_attempts=1).enqueue(1, 1)
    (stale,) = Job.objects.claim("w")
    # The run is buried (its timeout, say), an operator retries the job, and the
    # same worker claims it again: attempt 1 once more, but a new run.
    assert Job.objects.fail("w", [fail(stale.id, stale.run, final=True)]) == {job.pk: "dead"}
    assert Job.objects.retry([job.pk]) == [job.pk]
    (fresh,) = Job.objects.claim("w")
    assert fresh.attempt == stale.attempt
    assert fresh.run > stale.run
    # The stale thread finally returns: nothing it says may land.
    assert Job.objects.complete("w", [Success(stale.id, stale.run, '"stale"')]) == set()
    assert Job.objects.heartbeat("w", [stale.key]) == set()
    assert Job.objects.heartbeat("w", [fresh.key]) == {fresh.key}
    assert Job.objects.release("w", [stale.key]) == set()
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.lease_token) == ("running", None, fresh.run)
    assert Job.objects.complete("w", [Success(fresh.id, fresh.run, '"fresh"')]) == {job.pk}
    assert Job.objects.get(pk=job.pk).result == "fresh"


def test_a_claim_lost_with_its_transaction_never_gives_its_token_to_the_next_claim() -> None:
    """A crash can roll back a claim whose commit was not flushed (ASYNC_COMMIT): a
    count kept by the row would then repeat, and a stale outcome held by the worker
    would match the next run. The worker's own token cannot repeat."""
    job = add.enqueue(1, 1)
    with pytest.raises(RuntimeError), transaction.atomic():
        (lost,) = Job.objects.claim("w")
        raise RuntimeError("the claim's commit never reached the disk")
    (fresh,) = Job.objects.claim("w")
    assert (fresh.id, fresh.attempt) == (lost.id, lost.attempt)  # the same claim, again
    assert fresh.run != lost.run
    assert Job.objects.complete("w", [Success(lost.id, lost.run, '"stale"')]) == set()
    assert Job.objects.get(pk=job.pk).status == "running"


def plant(**columns: Any) -> int:
    """Insert a job row by hand, as anyone with database access could."""
    values = {
        "task": "tests.testapp.tasks.add",
        "args": "[1, 2]",
        "kwargs": "{}",
        "errors": "[]",
        "worker_ids": "[]",
        **columns,
    }
    return insert(values)


@pytest.mark.parametrize(
    "columns",
    [
        {"attempts": 2147483647},
        {"attempts": 5, "max_attempts": 3},
        {"max_attempts": 2000000},
        {"error_count": 2**31 - 1},
        {"errors": '{"not": "a list"}'},
        {"worker_ids": '"w"'},
    ],
)
def test_counters_and_lists_the_statements_cannot_handle_are_refused_at_the_door(
    columns: dict[str, object],
) -> None:
    with pytest.raises(IntegrityError, match="pgqueue_job_"):
        plant(**columns)


def test_no_row_the_constraints_allow_makes_the_claim_or_the_outcomes_fail_for_the_others() -> None:
    good = [add.enqueue(i, i).pk for i in range(3)]
    spent = plant(attempts=3, max_attempts=3)  # queued with no attempt left
    worn = plant(lease_token=2**63 - 1, error_count=MAX_ERROR_COUNT)
    claimed = {c.id: c for c in Job.objects.claim("w", limit=10)}
    assert set(claimed) == {*good, spent, worn}
    assert claimed[spent].attempt == 3  # capped, not past max_attempts
    outcomes = [fail(c.id, c.run) for c in claimed.values()]
    assert len(Job.objects.fail("w", outcomes)) == 5
    assert Job.objects.get(pk=spent).status == "dead"  # its one last attempt failed
    assert Job.objects.get(pk=worn).error_count == MAX_ERROR_COUNT


def test_the_error_history_keeps_the_newest_entries_and_counts_all_of_them() -> None:
    job = add.using(max_attempts=50).enqueue(1, 1)
    for n in range(1, 31):
        (claimed,) = Job.objects.claim("w")
        Job.objects.fail("w", [fail(claimed.id, claimed.run, message=f"failure {n}")])
    row = Job.objects.get(pk=job.pk)
    assert row.error_count == 30
    assert [e["message"] for e in row.errors] == [f"failure {n}" for n in range(11, 31)]
    assert row.last_error == "ValueError: failure 30"


def test_an_oversized_entry_written_by_hand_cannot_break_the_reaper_for_everyone() -> None:
    huge = '[{"exception": "X", "message": "' + "x" * 200_000 + '"}]'
    bloated = plant(
        status="running",
        locked_until="2000-01-01T00:00:00Z",
        locked_by="gone",
        attempts=1,
        errors=huge,
    )
    ordinary = plant(
        status="running", locked_until="2000-01-01T00:00:00Z", locked_by="gone", attempts=1
    )
    assert Job.objects.reap().returned == 2
    for pk in (bloated, ordinary):
        row = Job.objects.get(pk=pk)
        assert row.status == "queued"
        assert [e["exception"] for e in row.errors] == ["LeaseExpired"]


@pytest.mark.parametrize("backoff", ["1e300", "Infinity", "NaN"])
def test_a_backoff_written_by_hand_past_enqueues_limit_breaks_no_reap_and_no_fail(
    backoff: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The column only checks backoff >= 0 (NaN >= 0 is true in PostgreSQL): its reap
    delay (now() + 1e300 s) failed the whole statement ("timestamp out of range"),
    and the row, oldest first, came back in every batch, so no expired lease
    anywhere was reaped again; a failed run of it was buried on its first attempt.
    1e300 counts as the year enqueue allows. NaN and Infinity, which say no number
    of seconds, waited that year too, without a word; they count as none
    (PGQUEUE["BACKOFF_BASE"]), with a warning naming the job."""
    odd = plant(
        status="running",
        locked_until="2000-01-01T00:00:00Z",
        locked_by="gone",
        attempts=1,
        max_attempts=3,
        backoff=backoff,
    )
    ordinary = plant(
        status="running", locked_until="2000-01-02T00:00:00Z", locked_by="gone", attempts=1
    )
    finite = backoff == "1e300"
    with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
        assert Job.objects.reap().returned == 2
    assert status_counts() == {"queued": 2}
    later = Job.objects.get(pk=odd)
    if finite:
        assert later.run_at > later.created_at + dt.timedelta(days=250)  # a year, jittered
    else:
        assert later.run_at < later.created_at + dt.timedelta(minutes=1)  # BACKOFF_BASE
    said = f"job {odd} has backoff = {backoff}, no number of seconds"
    assert (said in caplog.text) is not finite, caplog.text
    Job.objects.filter(pk__in=[odd, ordinary]).delete()
    caplog.clear()
    failing = plant(
        task="tests.testapp.tasks.always_fails", args='["odd"]', max_attempts=3, backoff=backoff
    )
    with (
        caplog.at_level(logging.WARNING, logger="django_pgqueue"),
        worker_thread(burst=True) as worker,
    ):
        assert worker.join(30) == 0
    row = Job.objects.get(pk=failing)
    if finite:
        assert (row.status, row.attempts, row.errors[0]["exception"]) == ("queued", 1, "ValueError")
        assert row.run_at > row.created_at + dt.timedelta(days=250)
    else:  # retried after BACKOFF_BASE (0.05 s here), perhaps by this burst worker
        assert row.errors[0]["exception"] == "ValueError"
        assert row.run_at < row.created_at + dt.timedelta(minutes=1)
        said = f"job {failing} has backoff = {backoff}, no number of seconds"
        assert said in caplog.text, caplog.text


def test_long_messages_and_tracebacks_are_cut_to_their_limits() -> None:
    job = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w")
    Job.objects.fail(
        "w", [Failure(claimed.id, claimed.run, "E", "m" * 5000, "t" * 50_000 + "END", delay=0.0)]
    )
    (entry,) = Job.objects.get(pk=job.pk).errors
    assert len(entry["message"]) == 2000
    assert entry["traceback"].endswith("END")  # the end says what failed: it is kept
    assert len(entry["traceback"]) == 10_003
    assert len(Job.objects.get(pk=job.pk).last_error) == 2000


def test_retry_of_thousands_of_jobs_is_a_few_statements_and_keeps_one_per_key() -> None:
    count = 2 * RETRY_BATCH + 500
    ids = Job.objects.enqueue_many(
        JobSpec.build(add, [n, n], unique_key=f"k{n // 2}") if n % 2 else JobSpec.build(add, [n, n])
        for n in range(count)
    )
    with connection.cursor() as cursor:  # bury them all at once
        cursor.execute("UPDATE pgqueue_job SET status = 'dead', done_at = now()")
    # Unique keys: only the odd rows have one, so each key is held by one job;
    # add a second dead job per key for the first 100 keys.
    extra = Job.objects.enqueue_many(
        JobSpec.build(add, [0, 0], unique_key=f"k{n}") for n in range(100)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'dead', done_at = now() WHERE id = ANY(%s)", [extra]
        )
    with CaptureQueriesContext(connection) as queries:
        retried = Job.objects.retry([*ids, *extra])
    assert len([q for q in queries if "pgqueue: retry" in q["sql"]]) == 3  # one per batch
    # Of two dead jobs holding one key, the newer (the extra one) is retried.
    assert set(extra) <= set(retried)
    assert len(retried) == count
    assert status_counts() == {"queued": count, "dead": 100}


def test_retry_and_cancel_take_a_queryset_or_jobs_as_well_as_ids() -> None:
    jobs = [add.using(delay=3600).enqueue(n, n) for n in range(3)]
    assert Job.objects.retry(Job.objects.filter(pk=jobs[0].pk)) == [jobs[0].pk]
    assert Job.objects.cancel([jobs[1]], reason="not needed") == [jobs[1].pk]
    assert Job.objects.cancel(Job.objects.queued(), reason="all") == sorted(
        [jobs[0].pk, jobs[2].pk]
    )


NESTED = "[" * 3000 + "]" * 3000  # past what Python 3.12's JSON decoder reads


def outcome(job_id: int) -> tuple[str, int, str]:
    """Status, attempts and the last error's exception, read without decoding JSON."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, attempts, errors -> -1 ->> 'exception' FROM pgqueue_job WHERE id = %s",
            [job_id],
        )
        status, attempts, exception = cursor.fetchone()
        return str(status), int(attempts), str(exception)


@pytest.mark.parametrize(
    "column",
    [
        # A policy no worker can read gives way to the task's (the default, here).
        {"retry_policy": '{"retry_on": ' + NESTED + "}"},
        # Python 3.13 decodes that nesting: a list of lists is no policy either.
        {"retry_policy": '{"retry_on": [["builtins.ValueError"]], "discard_on": []}'},
        # joblog.worker_of names no worker when it cannot read the list.
        {"worker_ids": "[" + NESTED + "]"},
    ],
    ids=["retry_policy", "retry_policy_not_names", "worker_ids"],
)
def test_json_nested_past_the_decoder_in_a_row_does_not_bury_its_job(
    column: dict[str, str],
) -> None:
    """Written by hand: RecursionError (not the ValueError those caught) escaped to
    the executor's backstop, which buried the job on its first failure."""
    failing = plant(
        task="tests.testapp.tasks.always_fails",
        args='["deep"]',
        max_attempts=3,
        backoff=3600,  # the retry waits: the burst worker ends after one run
        **column,
    )
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    # Not through the model: Django's JSONField cannot read the column either.
    assert outcome(failing) == ("queued", 1, "ValueError"), outcome(failing)
