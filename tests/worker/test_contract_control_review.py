"""A user's review of issue 14 (job control) with real ``runworker`` processes:
cancelling jobs in every state a user meets, snoozing on the last attempt, the
retry policy on an exception's subclass, a pause while a worker claims ahead, and
a task that gives up (``Cancel``) after running past ``--job-timeout``; each ends
with exact counts by status and by run."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from django.db import connection

from django_pgqueue.backend.compat import TaskResult, TaskResultStatus, task_finished
from django_pgqueue.backend.task import options
from django_pgqueue.models import Job
from django_pgqueue.records import FINISHED, ClaimedJob, RunOutcome
from django_pgqueue.signals import job_finished
from tests.conftest import run_counts
from tests.testapp import djtasks
from tests.testapp.tasks import (
    always_fails,
    discards_lookups,
    gives_up_late,
    mark,
    retries_io_only,
    snoozes,
    waits_to_be_stopped,
)
from tests.worker.conftest import WorkerProcess, django_command, wait_for
from tests.worker.inprocess import worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def statuses(prefix: str) -> Counter[str]:
    return Counter(Job.objects.filter(args__0__startswith=prefix).values_list("status", flat=True))


def status_of(pk: int) -> str:
    return str(Job.objects.get(pk=pk).status)


def test_cancel_in_every_state_a_user_meets(start_worker: Start) -> None:
    """One worker, one thread, one job claimed ahead: cancel a queued job, the job
    claimed ahead, a running job that looks, one that never looks, one on its last
    attempt, and jobs already done or dead (nothing to cancel: an empty list)."""
    done = mark.enqueue("cx-done")
    dead = always_fails.using(max_attempts=1).enqueue("cx-dead")
    worker = start_worker("--concurrency", "1", "--prefetch", "1", "--lease", "30")
    wait_for(lambda: status_of(done.pk) == "done" and status_of(dead.pk) == "dead", 20, "both")
    assert Job.objects.cancel([done.pk, dead.pk], reason="too late") == []
    assert (status_of(done.pk), status_of(dead.pk)) == ("done", "dead")

    looks = waits_to_be_stopped.enqueue("cx-looks", seconds=60)
    wait_for(lambda: status_of(looks.pk) == "running", 20, "the looking job to start")
    ahead = mark.enqueue("cx-ahead")
    wait_for(lambda: status_of(ahead.pk) == "running", 20, "the next job to be claimed ahead")
    queued = mark.using(queue="unserved").enqueue("cx-queued")
    assert Job.objects.cancel([queued.pk, ahead.pk], reason="not wanted") == sorted(
        [queued.pk, ahead.pk]
    )
    assert status_of(queued.pk) == "cancelled"  # at once: no worker involved
    wait_for(lambda: status_of(ahead.pk) == "cancelled", 5, "the job claimed ahead to end")
    assert run_counts("cx-ahead") == {}  # it never ran
    assert Job.objects.cancel([looks.pk], reason="stop") == [looks.pk]
    wait_for(lambda: status_of(looks.pk) == "cancelled", 5, "the looking job to stop")

    blind = mark.enqueue("cx-blind", sleep=1.0)
    wait_for(lambda: run_counts("cx-blind") == {} and status_of(blind.pk) == "running", 20, "it")
    assert Job.objects.cancel([blind.pk], reason="ignored") == [blind.pk]
    wait_for(lambda: status_of(blind.pk) == "done", 20, "the blind job to finish anyway")

    last = waits_to_be_stopped.using(max_attempts=1).enqueue("cx-last", seconds=60)
    wait_for(lambda: status_of(last.pk) == "running", 20, "the last attempt to start")
    assert Job.objects.cancel(last, reason="final") == [last.pk]
    wait_for(lambda: status_of(last.pk) == "cancelled", 5, "the last attempt to stop")

    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    rows = {j.pk: j for j in Job.objects.all()}
    assert statuses("cx-") == {"cancelled": 4, "done": 2, "dead": 1}
    assert [rows[j.pk].last_error for j in (queued, ahead, looks, last)] == [
        "Cancelled: not wanted",
        "Cancelled: not wanted",
        "Cancelled: stop",
        "Cancelled: final",
    ]
    assert [rows[j.pk].attempts for j in (queued, ahead, looks, blind, last)] == [0, 1, 1, 1, 1]
    assert run_counts("cx-") == {
        "cx-done": 1,
        "cx-dead": 1,
        "cx-looks": 1,
        "cx-blind": 1,
        "cx-last": 1,
    }


def test_snooze_on_the_last_attempt_spends_nothing_and_runs_again(start_worker: Start) -> None:
    """``snoozes`` has max_attempts 1 here: each snooze gives the attempt back, so a
    job on its only attempt runs three times and ends done on attempt 1."""
    job = snoozes.using(max_attempts=1).enqueue("sn-last", times=2, seconds=0.2)
    worker = start_worker("--poll-interval", "0.05")  # not --burst: a snoozed job is not ready
    wait_for(lambda: status_of(job.pk) == "done", 30, "the snoozing job to finish")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.snoozes, row.error_count) == ("done", 1, 2, 0)
    assert run_counts("sn-") == {"sn-last": 3}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM started) FROM testapp_run WHERE label = 'sn-last' "
            "ORDER BY started"
        )
        starts = [float(row[0]) for row in cursor.fetchall()]
    assert all(b - a >= 0.2 for a, b in pairwise(starts))  # the delay held


def test_the_retry_policy_matches_subclasses_and_never_retries_what_it_must_not(
    start_worker: Start,
) -> None:
    """retry_on=(ConnectionError, ...) retries ConnectionError (and would its
    subclasses); a ValueError buries at once; discard_on=LookupError buries a KeyError
    (a subclass) at once and retries a RuntimeError to the last attempt."""
    io = retries_io_only.using(backoff=0).enqueue("rp-io", "io")
    other = retries_io_only.enqueue("rp-value", "value")
    lookup = discards_lookups.enqueue("rp-lookup", "lookup")
    runtime = discards_lookups.using(backoff=0).enqueue("rp-runtime", "runtime")
    worker = start_worker("--burst", "--poll-interval", "0.05")
    assert worker.wait(60) == 0, worker.output
    rows = {j.pk: j for j in Job.objects.all()}
    assert [(rows[j.pk].status, rows[j.pk].attempts) for j in (io, other, lookup, runtime)] == [
        ("dead", 3),
        ("dead", 1),
        ("dead", 1),
        ("dead", 3),
    ]
    assert run_counts("rp-") == {"rp-io": 3, "rp-value": 1, "rp-lookup": 1, "rp-runtime": 3}
    assert rows[lookup.pk].last_error == "KeyError: 'rp-lookup'"


def test_a_policy_that_never_retries_on_both_paths(start_worker: Start) -> None:
    """``retry_on=()`` retries nothing: a ConnectionError its task would retry buries
    the job on its first attempt, by ``@task`` ``.using()`` and by the Tasks API's
    ``using()``; ``options(..., retry_on=OSError)`` retries ConnectionError, a subclass."""
    direct = retries_io_only.using(retry_on=()).enqueue("nr-direct", "io")
    never = djtasks.pgq(djtasks.fails_with).using(retry_on=()).enqueue("io")
    wider = options(djtasks.fails_with, retry_on=OSError, backoff=0).enqueue("io")
    worker = start_worker("--burst", "--poll-interval", "0.05")
    assert worker.wait(60) == 0, worker.output
    row = Job.objects.get(pk=direct.pk)
    assert (row.status, row.attempts, row.last_error) == ("dead", 1, "ConnectionError: nr-direct")
    assert run_counts("nr-") == {"nr-direct": 1}
    never.refresh()
    wider.refresh()
    assert (never.status, never.attempts) == (TaskResultStatus.FAILED, 1)
    assert (wider.status, wider.attempts) == (TaskResultStatus.FAILED, 3)
    assert [e.exception_class_path for e in wider.errors] == ["builtins.ConnectionError"] * 3


def test_pause_while_jobs_run_and_a_worker_claims_ahead(start_worker: Start, db_url: str) -> None:
    """A worker with one thread holds a running job and two claimed ahead when the
    queue is paused: the running one finishes, the two go back unspent and wait;
    resumed, they run once each."""
    running = mark.using(queue="emails").enqueue("pz-running", sleep=1.5)
    worker = start_worker("--queues", "emails", "--concurrency", "1", "--prefetch", "2")
    wait_for(lambda: status_of(running.pk) == "running", 20, "the first job to start")
    ahead = [mark.using(queue="emails").enqueue(f"pz-ahead-{i}") for i in range(2)]
    wait_for(lambda: Job.objects.running().count() == 3, 20, "two jobs claimed ahead")
    Job.objects.pause_queue("emails")
    wait_for(lambda: [status_of(j.pk) for j in ahead] == ["queued", "queued"], 5, "the give-back")
    wait_for(lambda: status_of(running.pk) == "done", 20, "the running job to finish")
    assert [Job.objects.get(pk=j.pk).attempts for j in ahead] == [0, 0]
    assert run_counts("pz-") == {"pz-running": 1}
    assert Job.objects.queued().count() == 2  # paused: still there, not claimed
    assert django_command(db_url, "resumequeue", "emails").returncode == 0
    wait_for(lambda: statuses("pz-") == {"done": 3}, 20, "the queue to drain")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    assert run_counts("pz-") == {"pz-running": 1, "pz-ahead-0": 1, "pz-ahead-1": 1}
    assert [Job.objects.get(pk=j.pk).attempts for j in ahead] == [1, 1]


def test_a_job_asked_to_stop_that_shutdown_gives_back_ends_cancelled(start_worker: Start) -> None:
    """A task that never looks is still running when its worker stops: given back at
    the shutdown timeout, the one asked to stop ends cancelled, the other is queued
    again with its attempt unspent; neither is run again by anyone."""
    asked = mark.enqueue("sd-asked", sleep=4)
    other = mark.enqueue("sd-other", sleep=4)
    worker = start_worker("--concurrency", "2", "--shutdown-timeout", "0.5")
    wait_for(lambda: Job.objects.running().count() == 2, 20, "both jobs to start")
    assert Job.objects.cancel(asked, reason="leaving") == [asked.pk]
    worker.wait_for_output("asked to stop (leaving)", 10)
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    rows = {j.pk: j for j in Job.objects.all()}
    assert (rows[asked.pk].status, rows[asked.pk].attempts, rows[asked.pk].last_error) == (
        "cancelled",
        1,
        "Cancelled: leaving",
    )
    assert (rows[other.pk].status, rows[other.pk].attempts) == ("queued", 0)
    assert run_counts("sd-") == {}  # neither finished its body (mark records at its end)


def test_cancel_through_a_tasks_result_from_another_process(start_worker: Start) -> None:
    """The Tasks API's handle: ``Job.objects.cancel(result)`` stops a running
    ``takes_context`` task; the result reads back FAILED with the reason as its error."""
    result = djtasks.stops_when_asked.enqueue(seconds=60)
    worker = start_worker()
    wait_for(lambda: status_of(int(result.id)) == "running", 20, "the task to start")
    assert Job.objects.cancel(result, reason="by result") == [int(result.id)]
    wait_for(lambda: status_of(int(result.id)) == "cancelled", 5, "the task to stop")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [(e.exception_class_path, e.traceback.splitlines()[-1]) for e in result.errors] == [
        ("django_pgqueue.control.Cancel", "Cancelled: by result")
    ]
    assert Job.objects.cancel(result, reason="again") == []  # finished: nothing to do
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output


def test_cancel_raised_past_the_job_timeout_still_ends_the_job_cancelled(
    start_worker: Start,
) -> None:
    """``raise Cancel`` means no retry, whatever attempts are left: a task that gives
    up after running past ``--job-timeout`` ends cancelled on its one run, not
    retried as a timed-out failure (which would run the work it gave up on again)."""
    job = gives_up_late.using(backoff=0).enqueue("late-cancel", seconds=1.5)
    worker = start_worker("--job-timeout", "0.5", "--poll-interval", "0.05")
    wait_for(lambda: status_of(job.pk) in FINISHED, 20, "the job to end")
    worker.wait_for_output("exceeded the job timeout", 5)
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == (
        "cancelled",
        1,
        "Cancelled: late-cancel: nothing left to do",
    )
    assert run_counts("late-") == {"late-cancel": 1}


def test_a_late_cancel_is_reported_by_both_kinds_of_signal_as_it_is_recorded() -> None:
    """job_finished (direct API) says CANCELLED with the Cancel, task_finished (Tasks
    API) FAILED with the Cancel: what each row then holds, not a JobTimeout retry."""
    direct: list[tuple[RunOutcome, str]] = []
    tasks: list[tuple[str, list[str]]] = []

    def on_job(sender: Any, job: ClaimedJob, outcome: RunOutcome, **kwargs: Any) -> None:
        direct.append((outcome, type(kwargs["exception"]).__name__))

    def on_task(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        tasks.append((task_result.status, [e.exception_class_path for e in task_result.errors]))

    job = gives_up_late.enqueue("late-signal", seconds=0.8)
    result = djtasks.gives_up_late.enqueue(seconds=0.8)
    job_finished.connect(on_job)
    task_finished.connect(on_task)
    try:
        with worker_thread(job_timeout=0.3, concurrency=2, burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        job_finished.disconnect(on_job)
        task_finished.disconnect(on_task)
    assert direct == [(RunOutcome.CANCELLED, "Cancel")]
    assert tasks == [(TaskResultStatus.FAILED, ["django_pgqueue.control.Cancel"])]
    assert status_of(job.pk) == "cancelled"
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
    assert status_of(int(result.id)) == "cancelled"
