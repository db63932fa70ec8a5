"""A second contract audit of issue 14 (job control), on what the first left unpinned:
cancel racing a claim on a second connection, edge values of cancel and Snooze, a
Snooze or Cancel subclass of the task's own, the retry policy of ``async def`` tasks
on both APIs, and a cancelled Tasks-framework job read back as a FAILED result."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

import django_pgqueue
from django_pgqueue import Cancel, Snooze
from django_pgqueue.exceptions import JobTimeout
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import add, record, run_counts_of, waits_to_be_stopped
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

#: Tasks of this module are enqueued under this setting (outside an installed app).
HERE = {"PGQUEUE": {"TASK_MODULES": [__name__], "BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2}}


@pytest.fixture(autouse=True)
def _here() -> Any:
    with override_settings(**HERE):
        yield


class Later(Snooze):
    """A snooze of the task's own whose ``__init__`` does not call Snooze's."""

    def __init__(self, why: str) -> None:
        self.why = why


class GiveUp(Cancel):
    """A cancel of the task's own whose ``__init__`` does not call Cancel's."""

    def __init__(self, why: str) -> None:
        self.why = why


@django_pgqueue.task
def snoozes_by_its_own_class(label: str) -> int:
    record(label)
    runs = run_counts_of(label)
    if runs == 1:
        raise Later("the provider is busy")
    return runs


@django_pgqueue.task
def cancels_by_its_own_class() -> None:
    raise GiveUp("nothing to do")


@django_pgqueue.task(max_attempts=3, retry_on=(LookupError,), discard_on=(KeyError,))
async def async_with_policy(error: str) -> None:
    raise {"key": KeyError, "index": IndexError, "value": ValueError}[error](error)


@django_pgqueue.task
async def async_gives_up() -> None:
    raise Cancel("the order is gone")


@django_pgqueue.task(max_attempts=3, retry_on=(ConnectionError,))
def overruns_retrying_io(label: str) -> None:
    record(label)
    time.sleep(0.6)


@django_pgqueue.task(max_attempts=3, retry_on=(ConnectionError, JobTimeout))
def overruns_retrying_timeouts(label: str) -> None:
    record(label)
    time.sleep(0.6)


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``call`` on a connection of its own (a thread's); its value or exception."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def waiting_on_a_lock(db_url: str) -> Callable[[], bool]:
    def waits() -> bool:
        with psycopg.connect(db_url, autocommit=True) as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
        return row is not None and row[0] > 0

    return waits


def ended(job_id: int) -> bool:
    return Job.objects.get(pk=job_id).status in {"done", "dead", "cancelled"}


# -- cancel racing a claim ---------------------------------------------------------------


def test_a_job_claimed_while_cancel_waits_for_its_row_is_asked_to_stop_not_missed(
    db_url: str,
) -> None:
    job = add.enqueue(1, 2)
    with transaction.atomic():
        (claimed,) = Job.objects.claim("worker a")  # not committed yet: the row is locked
        thread, out = in_thread(lambda: Job.objects.cancel([job.pk], reason="race"))
        wait_for(waiting_on_a_lock(db_url), 10, "cancel to wait for the claimed row")
    thread.join(10)
    assert out == {"value": [job.pk]}
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.locked_by, row.cancel_reason) == ("running", "worker a", "race")
    assert row.cancel_requested_at is not None
    assert Job.objects.renew("worker a", [claimed.key]).cancel_requested == {claimed.key: "race"}


def test_a_claim_while_cancel_holds_the_row_skips_it_and_the_job_ends_cancelled() -> None:
    job = add.enqueue(1, 2)
    with transaction.atomic():
        assert Job.objects.cancel([job.pk], reason="first") == [job.pk]
        thread, out = in_thread(lambda: Job.objects.claim("worker b"))
        thread.join(10)
    assert out == {"value": []}  # skipped (SKIP LOCKED), not waited for
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == ("cancelled", 0, "Cancelled: first")
    assert Job.objects.claim("worker b") == []


# -- edge values of cancel ---------------------------------------------------------------


def test_cancel_among_a_million_ids_acts_on_the_live_ones_only() -> None:
    queued, done = add.enqueue(1, 1), add.enqueue(2, 2)
    Job.objects.filter(pk=done.pk).update(status="done", done_at=timezone.now())
    ids = [*range(queued.pk + 10, queued.pk + 10 + 1_000_000), done.pk, queued.pk, -1, 0]
    assert Job.objects.cancel(ids, reason="bulk") == [queued.pk]
    assert Job.objects.cancel(ids, reason="bulk") == []  # cancelled is finished
    assert status_counts() == {"cancelled": 1, "done": 1}
    assert Job.objects.get(pk=done.pk).last_error == ""


def test_a_cancel_with_an_empty_reason_writes_the_bare_name() -> None:
    job = add.enqueue(1, 1)
    assert Job.objects.cancel(str(job.pk), reason="") == [job.pk]  # a Tasks-style id
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.last_error, row.errors[-1]["message"]) == ("cancelled", "Cancelled", "")


# -- Snooze and Cancel of the task's own -------------------------------------------------


def test_a_snooze_subclass_that_skips_snoozes_init_snoozes_at_once() -> None:
    """Reproduced: 'Later' object has no attribute 'seconds'; the worker buried the job
    as an error of its own, and run_jobs() raised it."""
    job = snoozes_by_its_own_class.enqueue("own-snooze")
    with worker_thread(poll_interval=0.05):
        wait_for(lambda: ended(job.pk), 10, "the job to end")
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.snoozes, row.result) == ("done", 1, 1, 2)
    assert row.errors == []
    assert Later("x").seconds == 0.0
    assert str(Later("x")) == "snoozed for 0s"


def test_a_snooze_subclass_is_run_again_by_run_jobs_too() -> None:
    job = snoozes_by_its_own_class.enqueue("own-snooze-run-jobs")
    ran = run_jobs()
    assert ran.done == [job.pk]
    assert Job.objects.get(pk=job.pk).snoozes == 1


def test_a_cancel_subclass_that_skips_cancels_init_ends_cancelled_by_the_task() -> None:
    job = cancels_by_its_own_class.enqueue()
    assert run_jobs().cancelled == [job.pk]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.last_error) == ("cancelled", "Cancelled: cancelled by the task")


# -- the retry policy and Cancel in async def tasks, direct API ----------------------------


def test_an_async_tasks_retry_on_and_discard_on_hold_as_a_sync_tasks_do() -> None:
    listed = async_with_policy.enqueue("index")  # LookupError's subclass: retried
    discarded = async_with_policy.enqueue("key")  # KeyError: in both, discard_on wins
    other = async_with_policy.enqueue("value")  # not in retry_on: buried at once
    with worker_thread(concurrency=3, poll_interval=0.05):
        wait_for(
            lambda: Job.objects.filter(status="dead").count() == 3, 20, "the three to be buried"
        )
    attempts = dict(Job.objects.values_list("id", "attempts"))
    assert attempts == {listed.pk: 3, discarded.pk: 1, other.pk: 1}
    assert Job.objects.get(pk=discarded.pk).last_error == "KeyError: 'key'"
    assert Job.objects.get(pk=other.pk).last_error == "ValueError: value"


def test_cancel_raised_by_an_async_task_ends_it_cancelled_at_once() -> None:
    job = async_gives_up.using(max_attempts=5).enqueue()
    assert run_jobs().cancelled == [job.pk]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == (
        "cancelled",
        1,
        "Cancelled: the order is gone",
    )


# -- a stop request settled by a reaper while the task still runs --------------------------


def test_a_task_whose_job_a_reaper_cancelled_is_still_told_to_stop() -> None:
    """Reproduced: the job's lease lapsed after an operator asked it to stop (its worker
    stopped, or its heartbeat late), so a reaper ended it cancelled; the worker's next
    heartbeat found the run lost and never told the task, which ran its whole body
    (30 s here) after its job had ended cancelled."""
    job = waits_to_be_stopped.enqueue("reaped-abort", seconds=30)
    with worker_thread(lease=1.5, listen=False, reap_interval=3600) as worker:
        wait_for(lambda: run_counts("reaped-abort") == {"reaped-abort": 1}, 10, "the job to start")
        with transaction.atomic():  # the worker's heartbeat skips the row until this commits
            assert Job.objects.cancel([job.pk], reason="stuck") == [job.pk]
            Job.objects.filter(pk=job.pk).update(
                locked_until=timezone.now() - dt.timedelta(seconds=5)
            )
            assert Job.objects.reap().cancelled == 1
        lost = time.monotonic()
        worker.wait("heartbeat", where=lambda data: bool(data["lost"]), timeout=5)
        worker.wait("cancel_requested", timeout=5)
        worker.wait("finished", timeout=5)
        assert time.monotonic() - lost < 5  # told at that beat, not after its 30 s
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == ("cancelled", 1, "Cancelled: stuck")
    assert run_counts("reaped-abort") == {"reaped-abort": 1}


# -- the job timeout under a retry policy --------------------------------------------------


def test_a_job_timeout_is_retried_only_where_retry_on_lists_it() -> None:
    unlisted = overruns_retrying_io.enqueue("timeout-unlisted")
    listed = overruns_retrying_timeouts.enqueue("timeout-listed")
    with worker_thread(concurrency=2, poll_interval=0.05, job_timeout=0.2) as worker:
        wait_for(lambda: ended(unlisted.pk) and ended(listed.pk), 20, "both to be buried")
        # Each run's thread sleeps on past its timeout: none is left for the next test.
        worker.wait("finished", count=4, timeout=10)
    for job, attempts in ((unlisted, 1), (listed, 3)):
        row = Job.objects.get(pk=job.pk)
        assert (row.status, row.attempts) == ("dead", attempts)
        assert row.last_error.startswith("django_pgqueue.exceptions.JobTimeout: job ran"), row
    assert run_counts("timeout-") == {"timeout-unlisted": 1, "timeout-listed": 3}
