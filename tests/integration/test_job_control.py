"""Job control at the queue's level, against a real PostgreSQL: the cancelled state, stop
requests on running jobs and every way out of running that honours them, snoozes,
the reaper's backoff, paused queues."""

from __future__ import annotations

import datetime as dt
import io
import json
import time
from collections.abc import Callable

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import Client
from django.utils import timezone

from django_pgqueue import validation
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from django_pgqueue.queue import pauses
from django_pgqueue.records import Failure, JobSpec
from tests.conftest import status_counts
from tests.testapp.tasks import add
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def boom(job_id: int, run: int, *, delay: float = 0.0) -> Failure:
    return Failure(job_id, run, "ValueError", "boom", "Traceback...\nValueError: boom\n", delay)


def snooze(job_id: int, run: int, seconds: float) -> Failure:
    return Failure(job_id, run, "Snooze", f"snoozed for {seconds:g}s", "", seconds, snooze=True)


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_ends_queued_jobs_cancelled_and_asks_running_ones_to_stop() -> None:
    running = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w", limit=1)
    queued = add.enqueue(2, 2)
    done = add.enqueue(3, 3)
    Job.objects.filter(pk=done.pk).update(status="done", done_at=timezone.now())
    acted = Job.objects.cancel([queued.pk, running.pk, done.pk, 10**9], reason="customer left")
    assert acted == sorted([queued.pk, running.pk])
    row = Job.objects.get(pk=queued.pk)
    assert (row.status, row.last_error, row.errors[-1]["exception"]) == (
        "cancelled",
        "Cancelled: customer left",
        "Cancelled",
    )
    assert row.cancel_reason == "customer left"  # as for a running job (it was '')
    assert row.cancel_requested_at is None  # no worker was asked: nothing held it
    assert row.done_at is not None
    held = Job.objects.get(pk=running.pk)
    assert (held.status, held.cancel_reason) == ("running", "customer left")
    assert held.cancel_requested_at is not None
    # The worker holding it hears of it at its heartbeat; a second request keeps the first.
    assert Job.objects.cancel([running.pk], reason="again") == [running.pk]
    renewal = Job.objects.renew("w", [claimed.key])
    assert renewal.kept == {claimed.key}
    assert renewal.cancel_requested == {claimed.key: "customer left"}
    assert Job.objects.heartbeat("w", [claimed.key]) == {claimed.key}  # the plain API is kept
    assert Job.objects.get(pk=done.pk).status == "done"


def test_cancel_notifies_the_worker_holding_a_running_job(db_url: str) -> None:
    add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("worker a", limit=1)
    queued = add.enqueue(2, 2)
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_jobs")
        Job.objects.cancel([queued.pk])  # queued only: no worker to tell
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        Job.objects.cancel([claimed.id], reason="stop")
        (note,) = listener.notifies(timeout=2, stop_after=1)
    # JSON: no queue name can look like it (a queue name has no braces).
    assert json.loads(note.payload) == {"abort": "worker a"}


def test_a_running_job_asked_to_stop_is_never_retried_whichever_way_its_run_ends() -> None:
    """fail, snooze, release and reap each end it cancelled, with the operator's reason."""
    Job.objects.enqueue_many(JobSpec.build(add.using(backoff=0), [n, n]) for n in range(4))
    runs = {job.id: job for job in Job.objects.claim("w", limit=4, lease=0.3)}
    ids = sorted(runs)
    Job.objects.cancel(ids, reason="operator")
    failed, snoozed, released, reaped = (runs[i] for i in ids)
    assert Job.objects.fail("w", [boom(failed.id, failed.run)]) == {failed.id: "cancelled"}
    assert Job.objects.fail("w", [snooze(snoozed.id, snoozed.run, 60)]) == {snoozed.id: "cancelled"}
    assert Job.objects.release("w", [released.key]) == {released.id}
    time.sleep(0.4)
    assert Job.objects.reap().cancelled == 1
    assert status_counts() == {"cancelled": 4}
    for job in Job.objects.all():
        assert job.last_error == "Cancelled: operator"
        assert job.errors[-1]["exception"] == "Cancelled"
        assert job.errors[-1]["message"] == "operator"
    # What actually happened to each run is kept in the entry.
    assert Job.objects.get(pk=failed.id).errors[-1]["traceback"].endswith("ValueError: boom\n")
    assert "WorkerShutdown" in Job.objects.get(pk=released.id).errors[-1]["traceback"]
    assert "LeaseExpired" in Job.objects.get(pk=reaped.id).errors[-1]["traceback"]


def test_a_run_that_finishes_anyway_ends_done() -> None:
    from tests.integration.test_claim import ok

    add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w")
    Job.objects.cancel([claimed.id], reason="too late")
    assert Job.objects.complete("w", [ok(claimed.id, claimed.run, "2")]) == {claimed.id}
    row = Job.objects.get(pk=claimed.id)
    assert (row.status, row.result, row.cancel_reason) == ("done", 2, "too late")


def test_a_stale_run_asked_to_stop_cannot_touch_the_newer_run() -> None:
    """The fence holds for the new outcomes: a run whose lease was lost gets no stop
    request, and nothing it records lands on the run after it."""
    add.using(backoff=0).enqueue(1, 1)
    (stale,) = Job.objects.claim("slow", lease=0.1)
    time.sleep(0.2)
    assert Job.objects.reap().returned == 1
    (fresh,) = Job.objects.claim("fast", lease=30)
    Job.objects.cancel([fresh.id], reason="stop the new one")
    assert Job.objects.renew("slow", [stale.key]).cancel_requested == {}
    stopped = Failure(stale.id, stale.run, "Cancelled", "x", "", 0.0, final=True, cancel=True)
    assert Job.objects.fail("slow", [stopped]) == {}
    assert Job.objects.fail("slow", [snooze(stale.id, stale.run, 1)]) == {}
    row = Job.objects.get(pk=fresh.id)
    assert (row.status, row.locked_by) == ("running", "fast")
    assert Job.objects.renew("fast", [fresh.key]).cancel_requested == {
        fresh.key: "stop the new one"
    }


def test_cancelled_jobs_are_finished_prunable_and_retryable() -> None:
    job = add.using(unique_key="k").enqueue(1, 1)
    assert Job.objects.cancel([job.pk]) == [job.pk]
    assert add.using(unique_key="k").enqueue(2, 2).duplicate is False  # the key is free
    Job.objects.filter(unique_key="k", status="queued").delete()
    assert list(Job.objects.cancelled()) == list(Job.objects.finished())
    assert Job.objects.retry([job.pk]) == [job.pk]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.snoozes, row.cancel_requested_at) == (
        "queued",
        0,
        0,
        None,
    )
    assert Job.objects.cancel(Job.objects.all(), reason="again") == [job.pk]
    Job.objects.filter(pk=job.pk).update(done_at=timezone.now() - dt.timedelta(days=2))
    assert Job.objects.prune(dt.timedelta(days=1), statuses=["cancelled"], dry_run=True) == 1
    assert Job.objects.prune(dt.timedelta(days=1)) == 1
    with pytest.raises(InvalidJob, match="only deletes done, dead, cancelled jobs"):
        Job.objects.prune(dt.timedelta(days=1), statuses=["queued"])


def test_cancel_and_retry_refuse_what_is_not_a_job_or_a_reason_before_writing() -> None:
    job = add.enqueue(1, 1)
    for bad in (None, 4.0, object()):
        with pytest.raises(InvalidJob, match="expected job ids, Job instances or a queryset"):
            Job.objects.cancel(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match="expected job ids, Job instances or a queryset"):
            Job.objects.retry(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match=r"got 'x1'"):
        Job.objects.cancel(["x1"])  # named whole, not walked letter by letter
    with pytest.raises(InvalidJob, match=r"no job has the id 1180591620717411303424"):
        Job.objects.retry([2**70])  # no database error about a bigint
    with pytest.raises(
        InvalidJob, match=r"reason must be a string PostgreSQL can store .*, not None"
    ):
        Job.objects.cancel([job.pk], reason=None)  # type: ignore[arg-type]
    assert Job.objects.get(pk=job.pk).status == "queued"
    # A Tasks-framework result's id is the job's id as text: taken as that id.
    assert Job.objects.cancel(str(job.pk), reason="by result id") == [job.pk]
    from tests.testapp import djtasks

    result = djtasks.noop_task.enqueue()
    assert Job.objects.cancel(result, reason="by result") == [int(result.id)]  # a TaskResult
    assert Job.objects.cancel([result]) == []  # cancelled already
    assert Job.objects.retry([str(job.pk)]) == [job.pk]
    assert Job.objects.get(pk=job.pk).status == "queued"


def test_the_status_constraint_takes_cancelled_and_refuses_the_unknown() -> None:
    from django.db import IntegrityError

    job = add.enqueue(1, 1)
    Job.objects.filter(pk=job.pk).update(status="cancelled")
    with pytest.raises(IntegrityError, match="pgqueue_job_status_valid"):
        Job.objects.filter(pk=job.pk).update(status="aborted")


# -- snooze and the reaper's backoff ----------------------------------------------------------


def test_snooze_requeues_later_without_spending_the_attempt_or_recording_a_failure() -> None:
    job = add.using(max_attempts=1).enqueue(1, 1)
    (claimed,) = Job.objects.claim("w")
    before = timezone.now()
    assert Job.objects.fail("w", [snooze(claimed.id, claimed.run, 30)]) == {job.pk: "queued"}
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.snoozes, row.errors, row.last_error) == (
        "queued",
        0,
        1,
        [],
        "",
    )
    assert row.run_at >= before + dt.timedelta(seconds=29)
    assert Job.objects.claim("w") == []  # not before its run_at
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now())
    (again,) = Job.objects.claim("w")
    assert (again.attempt, again.snoozes) == (1, 1)  # max_attempts=1, still its first attempt


def test_the_reaper_requeues_an_expired_lease_after_the_jobs_backoff() -> None:
    """A job that kills its worker must not be taken up again at once by the next one."""
    job = add.using(backoff=60).enqueue(1, 1)
    Job.objects.claim("dying", lease=0.1)
    time.sleep(0.2)
    reaped_at = timezone.now()
    assert Job.objects.reap().returned == 1
    row = Job.objects.get(pk=job.pk)
    assert row.status == "queued"
    # backoff 60 s for the first failure, with the tests' 20 % jitter at most.
    assert reaped_at + dt.timedelta(seconds=47) <= row.run_at
    assert row.run_at <= reaped_at + dt.timedelta(seconds=73)
    assert Job.objects.claim("healthy") == []


# -- paused queues ------------------------------------------------------------------------------


def test_a_paused_queue_is_skipped_by_both_claims_and_served_again_on_resume(db_url: str) -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [n, n], queue="emails") for n in range(3))
    other = add.using(queue="default").enqueue(9, 9)
    assert Job.objects.pause_queue("emails") is True
    assert Job.objects.pause_queue("emails") is False
    assert Job.objects.paused_queues() == ["emails"]
    assert [j.id for j in Job.objects.claim("w", limit=10)] == [other.pk]
    assert Job.objects.claim("w", limit=10, queues=["emails", "default"]) == []
    assert Job.objects.claim("w", limit=10, queues=["emails"]) == []
    assert status_counts() == {"queued": 3, "running": 1}
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_jobs")
        assert Job.objects.resume_queue("emails") is True
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert heard == ["emails"]  # idle workers serving it wake at once
    assert Job.objects.resume_queue("emails") is False
    assert Job.objects.paused_queues() == []
    assert len(Job.objects.claim("w", limit=10, queues=["emails"])) == 3


def test_a_pause_written_by_hand_at_infinity_fails_no_reader(admin_client: Client) -> None:
    """``paused_at`` takes ``infinity`` and ``-infinity`` (a row written by hand), which
    Python cannot load: queuestats (every form) and the metrics view failed, and
    each worker serving metrics logged a traceback a second."""
    add.using(queue="emails").enqueue(1, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_queue (name, paused_at) "
            "VALUES ('emails', 'infinity'), ('reports', '-infinity')"
        )
    assert pauses.paused("default") == {
        "emails": validation.LATEST,
        "reports": validation.EARLIEST,
    }
    assert Job.objects.claim("w", limit=10) == []  # paused all the same
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    assert "emails (paused)" in out.getvalue()
    call_command("queuestats", "--json", stdout=out)
    call_command("queuestats", "--check", stdout=out)  # a paused queue's jobs wait on purpose
    assert admin_client.get("/admin/django_pgqueue/job/").status_code == 200
    assert admin_client.get("/pgqueue/metrics").status_code == 200


def test_pausing_checks_the_queue_name() -> None:
    with pytest.raises(InvalidJob, match="is not a valid queue name"):
        Job.objects.pause_queue("no spaces")
    assert Job.objects.pause_queue("later") is True  # a queue with no jobs yet
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pgqueue_queue WHERE paused_at IS NOT NULL")
        assert cursor.fetchall() == [("later",)]


def test_a_job_run_by_the_executor_alone_is_current_too() -> None:
    from django_pgqueue.records import Success
    from django_pgqueue.worker.executor import execute
    from tests.testapp.tasks import waits_to_be_stopped

    waits_to_be_stopped.enqueue("direct", seconds=0)  # asserts current_job() is not None
    (claimed,) = Job.objects.claim("w")
    outcome = execute(claimed)
    assert isinstance(outcome, Success)
    assert outcome.result == '"finished"'


@pytest.mark.slow
def test_cancel_picked_as_a_deadlock_victim_is_retried(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cancel() locks running rows that a worker may be writing (a batch of outcomes
    in one transaction); if PostgreSQL breaks a deadlock by failing cancel, it tries
    again rather than failing the operator's call."""
    import threading

    from django_pgqueue.sql import runner

    Job.objects.enqueue_many(JobSpec.build(add, [n, n]) for n in range(2))
    first, second = sorted(job.id for job in Job.objects.claim("w", limit=2))
    result: list[object] = []
    statements: list[str] = []
    fetch = runner.fetch

    def counting_fetch(name: str, *args: object, **kwargs: object) -> object:
        statements.append(name)
        return fetch(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "fetch", counting_fetch)

    def cancel() -> None:
        try:
            with connection.cursor() as cursor:  # this side finds the deadlock, and soon
                cursor.execute("SET deadlock_timeout = '200ms'")
            result.append(Job.objects.cancel([first, second], reason="stop"))
        finally:
            connections.close_all()  # this thread's own connection

    with psycopg.connect(db_url) as worker:  # a transaction, like the completer's
        worker.execute("SET deadlock_timeout = '60s'")  # never the one to give up
        worker.execute("UPDATE pgqueue_job SET priority = 1 WHERE id = %s", [second])
        pid = worker.info.backend_pid
        canceller = threading.Thread(target=cancel)
        canceller.start()  # locks the first row, then waits for the second

        def cancel_waits() -> bool:
            query = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
            with psycopg.connect(db_url, autocommit=True) as probe:
                row = probe.execute(query, [pid]).fetchone()
            return row is not None and row[0] > 0

        wait_for(cancel_waits, 10, "cancel to wait for the worker's row")
        # Now each waits for the other: cancel checks first, so it is the victim.
        worker.execute("UPDATE pgqueue_job SET priority = 1 WHERE id = %s", [first])
        worker.commit()
        canceller.join(10)
    assert result == [[first, second]]
    assert statements.count("cancel") >= 2  # the deadlock happened, and was retried
    assert set(Job.objects.values_list("cancel_reason", flat=True)) == {"stop"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("writer", "asked_to_stop"),
    [("complete", "none"), ("fail", "both"), ("release", "both")],
)
def test_a_write_of_many_running_rows_takes_them_in_id_order_as_cancel_does(
    db_url: str, monkeypatch: pytest.MonkeyPatch, writer: str, asked_to_stop: str
) -> None:
    """A worker's statement over many running rows, given them out of order, would
    lock a later id and then wait for an earlier one that a cancel() holds while the
    cancel waits for the later one: a deadlock, which PostgreSQL breaks by failing
    one of the two. Both lock in id order, so cancel waits behind the worker once.
    (The heartbeat waits for no row: see the test after this one.)"""
    import threading

    from django_pgqueue.records import Success
    from django_pgqueue.sql import runner

    Job.objects.enqueue_many(JobSpec.build(add, [n, n]) for n in range(2))
    first, second = sorted(Job.objects.claim("w", limit=2), key=lambda job: job.id)
    # Enough other rows that the statements find theirs by primary key, in the
    # order given, as on any real table (on a tiny one they read it in its order).
    Job.objects.enqueue_many(JobSpec.build(add, [n, n], queue="idle") for n in range(2000))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    backwards = [second, first]
    writes = {
        "complete": lambda: Job.objects.complete(
            "w", [Success(j.id, j.run, "1") for j in backwards]
        ),
        "fail": lambda: Job.objects.fail("w", [boom(j.id, j.run, delay=60) for j in backwards]),
        "release": lambda: Job.objects.release("w", [j.key for j in backwards], reason="stop"),
    }
    statements: list[str] = []
    fetch = runner.fetch
    cancelled: list[object] = []

    def counting_fetch(name: str, *args: object, **kwargs: object) -> object:
        statements.append(name)
        return fetch(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "fetch", counting_fetch)

    def in_thread(
        deadlock_timeout: str, work: Callable[[], object], out: list[object]
    ) -> threading.Thread:
        def run() -> None:
            try:
                with connection.cursor() as cursor:  # the cancel is the side that checks
                    cursor.execute(f"SET deadlock_timeout = '{deadlock_timeout}'")
                out.append(work())
            finally:
                connections.close_all()  # this thread's own connection

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def waiting() -> int:
        query = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0"
        )
        with psycopg.connect(db_url, autocommit=True) as probe:
            row = probe.execute(query).fetchone()
        return int(row[0]) if row else 0

    written: list[object] = []
    with psycopg.connect(db_url) as holder:  # holds the later row until both wait
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [second.id])
        worker = in_thread("60s", writes[writer], written)
        wait_for(lambda: waiting() == 1, 10, f"{writer} to wait for the held row")
        canceller = in_thread(
            "200ms", lambda: Job.objects.cancel([first.id, second.id], reason="stop"), cancelled
        )
        wait_for(lambda: waiting() == 2, 10, "cancel to wait too")
        holder.commit()
    worker.join(10)
    canceller.join(10)
    assert len(written) == 1
    assert cancelled == [[first.id, second.id] if asked_to_stop == "both" else []]
    assert statements.count("cancel") == 1  # no deadlock, no retry


@pytest.mark.parametrize("writer", ["record", "release"])
def test_the_workers_writes_skip_a_row_locked_elsewhere_and_write_the_rest(
    db_url: str, writer: str
) -> None:
    """A worker's write of many running rows waited for a row another transaction
    held (an operator's cancel() inside an open atomic block): every other outcome
    of the batch waited with it, and a SIGTERM then overran its bound. The
    completer's record() and a stopping worker's release skip the held row now,
    write the rest at once, and say which they skipped; the row, once free, is
    written. (Job.objects.complete(), fail() and release() wait, in id order: the
    test before this one.)"""
    from django_pgqueue.queue import claims
    from django_pgqueue.records import Success

    Job.objects.enqueue_many(JobSpec.build(add, [n, n]) for n in range(2))
    first, second = sorted(Job.objects.claim("w", limit=2), key=lambda job: job.id)
    writes: dict[str, Callable[[], object]] = {
        "record": lambda: Job.objects.record(
            "w", [Success(second.id, second.run, "1")], [boom(first.id, first.run, delay=60)]
        ),
        "release": lambda: claims.release(
            "w", [second.key, first.key], "stop", "default", wait=False
        ),
    }
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '5s'")  # the old statements waited forever
    try:
        with psycopg.connect(db_url) as holder:
            holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [second.id])
            result = writes[writer]()
            holder.rollback()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")
    expected = {
        "record": (set(), {first.id: "queued"}, {second.id}),
        "release": {first.id: "queued", second.id: None},
    }
    assert result == expected[writer]
    row = Job.objects.get(pk=second.id)
    assert (row.status, row.lease_token, row.locked_by) == ("running", second.run, "w")
    assert (
        writes[writer]()
        == {  # the row is free now: written
            "record": ({second.id}, {}, set()),
            "release": {second.id: "queued"},
        }[writer]
    )


def test_the_heartbeat_skips_a_row_locked_elsewhere_and_renews_the_rest(db_url: str) -> None:
    """Waiting for a row another transaction held (an operator's cancel() in an open
    atomic block) stalled the renewal of every other lease in the statement."""
    Job.objects.enqueue_many(JobSpec.build(add, [n, n]) for n in range(3))
    first, second, gone = sorted(Job.objects.claim("w", limit=3), key=lambda job: job.id)
    Job.objects.filter(pk=gone.id).update(locked_by="other")  # no longer this worker's
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '5s'")  # the old statement waited forever
    try:
        with psycopg.connect(db_url) as holder:
            holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [second.id])
            renewal = Job.objects.renew("w", [first.key, second.key, gone.key])
            holder.rollback()
        assert (renewal.kept, renewal.busy) == ({first.key}, {second.key})
        with psycopg.connect(db_url) as holder:  # the public call: both are still held
            holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [second.id])
            held = Job.objects.heartbeat("w", [first.key, second.key, gone.key])
            holder.rollback()
        assert held == {first.key, second.key}
        again = Job.objects.renew("w", [first.key, second.key, gone.key])
        assert (again.kept, again.busy) == ({first.key, second.key}, set())
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")


def test_a_tasks_own_cancel_written_after_a_stop_request_ends_with_the_operators_reason() -> None:
    """The worker had not heard of the request yet when the task raised Cancel("own"):
    the outcome carried the task's reason, and the row took it, where every other
    way out after a request ends with the operator's (the first request's) reason."""
    job = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w", limit=1)
    assert Job.objects.cancel([job.pk], reason="customer left") == [job.pk]
    own = Failure(
        job.pk, claimed.run, "Cancelled", "own", "Cancel: own", delay=0.0, final=True, cancel=True
    )
    assert Job.objects.fail("w", [own]) == {job.pk: "cancelled"}
    row = Job.objects.get(pk=job.pk)
    assert row.last_error == "Cancelled: customer left"
    entry = row.errors[-1]
    assert (entry["exception"], entry["message"], entry["traceback"]) == (
        "Cancelled",
        "customer left",
        "Cancel: own",  # the task's own reason is kept here
    )
