"""Job control in a running worker, in process: aborting sync and async tasks (woken by
NOTIFY, or at the heartbeat), Snooze, Cancel, retry_on and discard_on, paused queues.
Each test waits on the worker's events; the delays are measured and asserted with
margins (docs/guarantees.md#stopping-a-running-job states them)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from functools import partial
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from django_pgqueue.models import Job
from django_pgqueue.records import RunOutcome
from django_pgqueue.signals import job_finished
from django_pgqueue.testing import run_jobs
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import (
    GATES,
    awaits_to_be_stopped,
    discards_lookups,
    fails_after_gate,
    gives_up,
    gives_up_with,
    mark,
    retries_io_only,
    returns_after_a_stop_request,
    snoozes,
    waits_to_be_stopped,
)
from tests.worker.conftest import running_count, wait_for
from tests.worker.inprocess import WorkerThread, worker_thread
from tests.worker.test_joblog import collected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def run_starts(label: str) -> list[float]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM started) FROM testapp_run WHERE label = %s ORDER BY 1",
            [label],
        )
        return [float(start) for (start,) in cursor.fetchall()]


def has_started(label: str) -> bool:
    return run_counts(label) == {label: 1}


def abort(worker: WorkerThread, job_id: int, label: str, reason: str = "operator") -> float:
    """Once the job's task runs, ask it to stop; seconds from the request's commit to the
    job's thread returning."""
    wait_for(partial(has_started, label), 10, f"{label} to start")
    finished = worker.recorder.count("finished")
    asked = time.monotonic()
    assert Job.objects.cancel([job_id], reason=reason) == [job_id]  # autocommit: committed
    worker.wait("finished", finished + 1, timeout=15)
    return time.monotonic() - asked


def test_a_polling_task_woken_by_notify_stops_within_100ms_and_ends_cancelled() -> None:
    job = waits_to_be_stopped.enqueue("poller")
    # The heartbeat every 10 s (a third of the tests' 30 s lease): only NOTIFY is quick.
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        delay = abort(worker, job.pk, "poller", reason="customer left")
        worker.wait("recorded")
    assert delay < 0.1, delay
    assert worker.recorder.count("cancel_requested") == 1
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error, row.result) == (
        "cancelled",
        1,
        "Cancelled: customer left",
        None,  # it returned "stopped": a run that stopped because it was asked stores nothing
    )
    assert row.errors[-1]["exception"] == "Cancelled"


def test_an_async_task_is_cancelled_at_its_await_within_100ms() -> None:
    job = awaits_to_be_stopped.enqueue("sleeper")
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        delay = abort(worker, job.pk, "sleeper")
        worker.wait("recorded")
    assert delay < 0.1, delay
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == ("cancelled", 1, "Cancelled: operator")
    assert "CancelledError" in row.errors[-1]["traceback"]  # raised at its await


def test_without_notify_the_request_arrives_within_one_heartbeat_interval() -> None:
    sync = waits_to_be_stopped.enqueue("unwoken-sync")
    coroutine = awaits_to_be_stopped.enqueue("unwoken-async")
    with worker_thread(listen=False, heartbeat_interval=0.5, concurrency=2) as worker:
        delays = [abort(worker, sync.pk, "unwoken-sync")]
        delays.append(abort(worker, coroutine.pk, "unwoken-async"))
        worker.wait("recorded", timeout=5, where=lambda d: d["settled"])
        wait_for(lambda: status_counts() == {"cancelled": 2}, 5, "both cancelled")
    assert max(delays) < 0.5 + 0.25, delays  # one interval, plus the run's own unwinding
    assert worker.recorder.count("cancel_requested") == 2


def ended(job_id: int, status: str, data: dict[str, Any]) -> bool:
    """A ``recorded`` event that moved job ``job_id`` to ``status``."""
    return any(key[0] == job_id and new == status for key, new in data["statuses"].items())


def test_cancel_raised_after_a_stop_request_ends_with_the_operators_reason() -> None:
    """The task saw the request and raised Cancel("its own"): the job ended with the
    task's reason, where the docs (tasks.md, guarantees.md) give the operator's, the
    first reason given, as a second cancel() keeps the first."""
    job = waits_to_be_stopped.enqueue("own reason", cancel="its own")
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        abort(worker, job.pk, "own reason", reason="customer left")
        worker.wait("recorded", where=partial(ended, job.pk, "cancelled"))
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.last_error, row.cancel_reason) == (
        "cancelled",
        "Cancelled: customer left",
        "customer left",
    )
    assert (row.errors[-1]["exception"], row.errors[-1]["message"]) == (
        "Cancelled",
        "customer left",
    )
    assert "Cancel: its own" in row.errors[-1]["traceback"]  # the task's own, kept


def test_a_prefetched_job_asked_to_stop_ends_cancelled_at_once_without_running() -> None:
    """A job claimed ahead, waiting for the one thread behind a long job, ends
    cancelled when the request arrives, not when the thread frees."""
    long = waits_to_be_stopped.enqueue("long")
    waiting = mark.enqueue("never runs")
    with worker_thread(concurrency=1, prefetch=1, poll_interval=5) as worker:
        wait_for(partial(has_started, "long"), 10, "the long job to start")
        wait_for(
            lambda: Job.objects.get(pk=waiting.pk).status == "running",
            10,
            "the second job to be claimed ahead",
        )
        asked = time.monotonic()
        assert Job.objects.cancel([waiting.pk], reason="not needed") == [waiting.pk]
        worker.wait("recorded", where=partial(ended, waiting.pk, "cancelled"))
        delay = time.monotonic() - asked
        assert Job.objects.get(pk=long.pk).status == "running"  # the thread never freed
        assert run_counts("never runs") == {}
        abort(worker, long.pk, "long")
        worker.wait("recorded", where=partial(ended, long.pk, "cancelled"))
    assert delay < 1.0, delay  # woken by NOTIFY; the thread would have waited 30 s
    row = Job.objects.get(pk=waiting.pk)
    assert (row.status, row.last_error) == ("cancelled", "Cancelled: not needed")
    assert status_counts() == {"cancelled": 2}


def test_a_failure_the_request_turned_into_a_cancellation_is_logged_as_one() -> None:
    """The run raised before the worker heard of the stop request (no NOTIFY, no
    heartbeat yet): it is logged as failing and retrying, and the record says
    cancelled. A line now says what the record says."""
    gate = GATES["unheard"] = threading.Event()
    job = fails_after_gate.enqueue("unheard")
    with (
        collected() as log,
        worker_thread(listen=False, lease=60, heartbeat_interval=50) as worker,
    ):
        try:
            worker.wait("started")
            assert Job.objects.cancel([job.pk], reason="not needed") == [job.pk]
        finally:
            gate.set()
        worker.wait("recorded", where=partial(ended, job.pk, "cancelled"))
    assert worker.recorder.count("cancel_requested") == 0  # it never heard
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.last_error) == ("cancelled", "Cancelled: not needed")
    messages = [(r.levelno, r.getMessage()) for r in log.records]
    assert (
        logging.INFO,
        f"jobs [{job.pk}] ended cancelled: an operator had asked them to stop before "
        "their failure was recorded",
    ) in messages, messages


def test_a_task_that_does_not_look_finishes_anyway_and_ends_done() -> None:
    job = mark.enqueue("busy", sleep=0.5)
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        wait_for(lambda: Job.objects.running().exists(), 10, "the job to run")
        Job.objects.cancel([job.pk], reason="too late")
        worker.wait("cancel_requested")
        worker.wait("recorded")
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.cancel_reason) == ("done", "busy", "too late")


def test_snooze_runs_again_later_without_spending_attempts() -> None:
    job = snoozes.enqueue("snoozer", times=2, seconds=0.2)  # max_attempts=3
    # Not --burst: a snoozed job waits for its run_at, which a burst does not wait for.
    with worker_thread(poll_interval=0.05) as worker:
        wait_for(lambda: status_counts() == {"done": 1}, 10, "the job to finish")
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.attempts, row.snoozes, row.errors) == (
        "done",
        3,
        1,
        2,
        [],
    )
    assert run_counts("snoozer") == {"snoozer": 3}
    starts = run_starts("snoozer")
    assert all(later - earlier >= 0.19 for earlier, later in itertools.pairwise(starts)), starts
    started = [data["job"] for name, data in worker.recorder.seen if name == "started"]
    assert [j.attempt for j in started] == [1, 1, 1]  # the same attempt each time


@override_settings(PGQUEUE={"BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2, "MAX_SNOOZES": 2})
def test_a_job_that_snoozes_past_max_snoozes_is_buried_with_the_reason() -> None:
    job = snoozes.enqueue("sleepy", times=100)
    outcomes: list[object] = []

    def finished(sender: object, outcome: object, **kwargs: object) -> None:
        outcomes.append(outcome)

    job_finished.connect(finished, weak=False)
    try:
        with worker_thread(burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        job_finished.disconnect(finished)
    # What job_finished says matches the row: two snoozes, then buried.
    assert outcomes == [RunOutcome.RETRIED, RunOutcome.RETRIED, RunOutcome.DEAD]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.snoozes) == ("dead", 1, 2)
    assert row.last_error.startswith(
        "django_pgqueue.exceptions.TooManySnoozes: the job snoozed 2 times, the most "
        "PGQUEUE['MAX_SNOOZES'] allows"
    )
    assert run_counts("sleepy") == {"sleepy": 3}


def test_a_task_that_returns_when_asked_to_stop_is_reported_cancelled() -> None:
    """The job ends cancelled; job_finished said it succeeded (with its value)."""
    job = returns_after_a_stop_request.enqueue("asked")
    seen: list[tuple[object, object]] = []

    def finished(sender: object, outcome: object, result: object, **kwargs: object) -> None:
        seen.append((outcome, result))

    job_finished.connect(finished, weak=False)
    try:
        ran = run_jobs()
    finally:
        job_finished.disconnect(finished)
    assert ran.cancelled == [job.pk]
    assert seen == [(RunOutcome.CANCELLED, None)]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result) == ("cancelled", None)
    assert run_counts("asked") == {"asked": 1}


def test_cancel_raised_by_the_task_ends_it_cancelled_at_once() -> None:
    job = gives_up.enqueue("quitter")  # max_attempts=5
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == (
        "cancelled",
        1,
        "Cancelled: quitter: nothing left to do",
    )
    assert "raise Cancel(" in row.errors[-1]["traceback"]
    assert run_counts("quitter") == {"quitter": 1}


def test_a_cancel_reason_that_is_not_text_is_taken_as_its_text() -> None:
    """Cancel(42) buried the job dead with a TypeError, against the task's intent."""
    number = gives_up_with.enqueue(42)
    listed = gives_up_with.enqueue(["out", "of", "stock"])
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    rows = {job.pk: (job.status, job.last_error) for job in Job.objects.all()}
    assert rows == {
        number.pk: ("cancelled", "Cancelled: 42"),
        listed.pk: ("cancelled", "Cancelled: ['out', 'of', 'stock']"),
    }


def test_retry_on_retries_only_the_listed_exceptions() -> None:
    io = retries_io_only.enqueue("io", "io")
    value = retries_io_only.enqueue("value", "value")
    # Not --burst, which would not wait for a retry's backoff.
    with worker_thread(poll_interval=0.05):
        wait_for(lambda: status_counts() == {"dead": 2}, 10, "both jobs to be buried")
    assert run_counts() == {"io": 3, "value": 1}
    io_row, value_row = Job.objects.get(pk=io.pk), Job.objects.get(pk=value.pk)
    assert (io_row.status, io_row.attempts, len(io_row.errors)) == ("dead", 3, 3)
    assert io_row.last_error == "ConnectionError: io"
    assert (value_row.status, value_row.attempts, value_row.last_error) == (
        "dead",
        1,
        "ValueError: value",
    )


def test_a_row_without_a_policy_takes_its_tasks() -> None:
    """A job queued before rows kept their policy (column empty) obeys its task's."""
    value = retries_io_only.enqueue("value", "value")
    Job.objects.filter(pk=value.pk).update(retry_policy=None)
    with worker_thread(poll_interval=0.05):
        wait_for(lambda: status_counts() == {"dead": 1}, 10, "the job to be buried")
    assert run_counts() == {"value": 1}  # a ValueError is not in retry_on: not retried


def test_discard_on_buries_at_once_and_other_errors_are_retried() -> None:
    lookup = discards_lookups.enqueue("lookup", "lookup")
    other = discards_lookups.enqueue("other", "other")
    with worker_thread(poll_interval=0.05):
        wait_for(lambda: status_counts() == {"dead": 2}, 10, "both jobs to be buried")
    assert run_counts() == {"lookup": 1, "other": 3}
    assert Job.objects.get(pk=lookup.pk).attempts == 1
    assert Job.objects.get(pk=lookup.pk).last_error == "KeyError: 'lookup'"
    assert (Job.objects.get(pk=other.pk).status, Job.objects.get(pk=other.pk).attempts) == (
        "dead",
        3,
    )


def test_burst_does_not_wait_on_a_paused_queue() -> None:
    held = mark.using(queue="emails").enqueue("held")
    free = mark.using(queue="default").enqueue("free")
    Job.objects.pause_queue("emails")
    started = time.monotonic()
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    assert time.monotonic() - started < 5
    assert Job.objects.get(pk=free.pk).status == "done"
    row = Job.objects.get(pk=held.pk)
    assert (row.status, row.attempts, row.worker_ids) == ("queued", 0, [])


def test_pausing_a_queue_gives_back_its_jobs_claimed_ahead_at_once() -> None:
    """Jobs a worker claimed ahead (prefetched, no thread yet) when their queue is
    paused go back to it, woken by the pause's NOTIFY, not after the running job;
    they started one after the other once the thread freed."""
    first = mark.using(queue="emails").enqueue("first", sleep=1.0)
    ahead = [mark.using(queue="emails").enqueue(f"ahead-{n}").pk for n in range(3)]
    with worker_thread(concurrency=1, prefetch=3, poll_interval=5, lease=600) as worker:
        worker.wait("started")
        wait_for(lambda: running_count() == 4, 10, "three jobs claimed ahead")
        asked = time.monotonic()
        assert Job.objects.pause_queue("emails")
        worker.wait("released")
        delay = time.monotonic() - asked
        assert Job.objects.get(pk=first.pk).status == "running"  # it was still running
        worker.wait("recorded", where=partial(ended, first.pk, "done"))
    assert delay < 1.0, delay  # the heartbeat is 200 s away: the NOTIFY woke it
    assert run_counts("ahead-") == {}
    rows = Job.objects.filter(pk__in=ahead)
    assert {(r.status, r.attempts, r.error_count) for r in rows} == {("queued", 0, 0)}
    assert Job.objects.get(pk=first.pk).status == "done"
    assert worker.worker.ledger.claimed == 1  # given back unstarted: not counted


def test_prefetched_runs_lost_before_a_thread_took_them_free_their_slots() -> None:
    """Runs lost while they waited for a thread (another worker holds them now: a
    reaper ran while this worker was frozen past its lease) were skipped by the
    thread that took them without freeing their slot: each one took a slot away for
    the life of the worker. The heartbeat that frees them wakes the claim loop, which
    fills them with the jobs waiting in the queue at once, not at its next poll."""
    long = mark.enqueue("long", sleep=6.0)
    ahead = [mark.enqueue(f"ahead-{n}").pk for n in range(2)]
    with worker_thread(
        concurrency=1, prefetch=2, poll_interval=30, lease=3, listen=False
    ) as worker:
        worker.wait("started")
        wait_for(lambda: running_count() == 3, 10, "two jobs claimed ahead")
        # Two more, ready while every slot is taken (no NOTIFY: the worker polls).
        behind = [mark.enqueue(f"behind-{n}").pk for n in range(2)]
        Job.objects.filter(pk__in=ahead).update(locked_by="other")
        worker.wait("heartbeat", where=lambda data: len(data["lost"]) == 2)
        # Freed by that heartbeat, while the long job still runs (not when a thread
        # reaches them behind it), and filled with the two jobs behind them.
        # The rows are running once the claim commits; the worker's ledger records
        # them a moment later, in the claim loop's thread.
        wait_for(
            lambda: (
                Job.objects.filter(pk__in=behind, status="running").count() == 2
                and worker.worker.ledger.busy == 3
            ),
            4,
            "the freed slots to take the jobs behind",
        )
        assert Job.objects.get(pk=long.pk).status == "running"
        worker.wait("recorded", where=partial(ended, long.pk, "done"))
        wait_for(lambda: worker.worker.ledger.busy == 0, 5, "every slot to be free")
    assert run_counts("ahead-") == {}  # not run here: they are the other worker's


def test_a_prefetched_job_that_shutdown_ends_cancelled_counts_as_claimed_and_cancelled() -> None:
    """A stop request the worker has not heard of yet (no NOTIFY, no heartbeat
    since) when it shuts down: giving the prefetched job back ends it cancelled,
    and the last line counts it once as claimed and once as cancelled."""
    long = mark.enqueue("long", sleep=1.5)
    waiting = mark.enqueue("never runs")
    with worker_thread(
        concurrency=1, prefetch=1, poll_interval=5, lease=600, shutdown_timeout=10
    ) as worker:
        worker.wait("started")
        wait_for(
            lambda: Job.objects.get(pk=waiting.pk).status == "running",
            10,
            "the second job to be claimed ahead",
        )
        with connection.cursor() as cursor:  # what cancel() writes, without its NOTIFY
            cursor.execute(
                "UPDATE pgqueue_job SET cancel_requested_at = now(), "
                "cancel_reason = 'not needed' WHERE id = %s",
                [waiting.pk],
            )
        assert worker.stop() == 0
    assert worker.recorder.count("cancel_requested") == 0  # it learnt of it by giving back
    ledger = worker.worker.ledger
    assert (ledger.claimed, ledger.succeeded, ledger.retried, ledger.buried, ledger.cancelled) == (
        2,
        1,
        0,
        0,
        1,
    )
    assert dict(Job.objects.values_list("pk", "status")) == {
        long.pk: "done",
        waiting.pk: "cancelled",
    }
    assert run_counts("never runs") == {}


def test_a_give_back_that_fails_keeps_the_jobs_until_it_succeeds(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs were forgotten before the release: a transient error (here a real
    one, the statement cancelled by the server) left them to the reaper, which
    spent their attempt and buried a one-attempt job that never ran. The first two
    releases fail here: the jobs stay with the worker, and the next heartbeat gives
    them back. (A connection the server closed before the release no longer fails
    it: the statement runner sees the goodbye and reconnects first.)"""
    from django.db import connections

    from django_pgqueue.queue import claims

    release, failures = claims.release, [2]

    def release_cancelled_by_the_server(*args: Any, **kwargs: Any) -> dict[int, str | None]:
        if not failures[0]:
            return release(*args, **kwargs)
        failures[0] -= 1
        alias = connections["default"]
        alias.ensure_connection()
        # The table held by another transaction, the release waits past its timeout.
        with psycopg.connect(db_url) as holder:
            holder.execute("LOCK TABLE pgqueue_job IN ACCESS EXCLUSIVE MODE")
            alias.connection.execute("SET statement_timeout = 50")
            try:
                return release(*args, **kwargs)
            finally:
                with contextlib.suppress(psycopg.Error):
                    alias.connection.execute("SET statement_timeout = 0")

    monkeypatch.setattr(claims, "release", release_cancelled_by_the_server)
    first = mark.using(queue="emails").enqueue("first", sleep=1.5)
    ahead = mark.using(queue="emails", max_attempts=1).enqueue("ahead")
    with worker_thread(concurrency=1, prefetch=1, heartbeat_interval=0.2, lease=5) as worker:
        worker.wait("started")
        wait_for(lambda: running_count() == 2, 10, "one job claimed ahead")
        assert Job.objects.pause_queue("emails")
        worker.wait("released", timeout=5)
        worker.wait("recorded", where=partial(ended, first.pk, "done"))
    assert failures == [0]
    assert run_counts("ahead") == {}
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.attempts, row.error_count) == ("queued", 0, 0)
