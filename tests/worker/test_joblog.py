"""Failed runs in the log (WARNING to retry, ERROR when buried, with the exception and
structured fields), and the direct API's signals, from a real worker in process."""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_pgqueue.exceptions import JobTimeout, TooManySnoozes
from django_pgqueue.models import Job
from django_pgqueue.records import RunOutcome
from django_pgqueue.signals import job_finished, job_started
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import (
    add,
    always_fails,
    gives_up,
    mark,
    retries_io_only,
    returns_a_set,
    snoozes,
)
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(record)

    def about(self, job_id: int, level: int = logging.INFO) -> list[logging.LogRecord]:
        """The records about one job at ``level`` and above (-v 2's lines per job
        claimed and finished carry its fields too, at DEBUG)."""
        with self._lock:
            return [
                r
                for r in self.records
                if getattr(r, "job_id", None) == job_id and r.levelno >= level
            ]


@contextmanager
def collected() -> Iterator[Collect]:
    handler = Collect()
    logger = logging.getLogger("django_pgqueue")
    level = logger.level  # runworker -v 0 in an earlier test may have raised it
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_failed_attempt_warns_and_a_buried_job_errs_with_the_exception_and_fields() -> None:
    job = always_fails.enqueue("logged")  # max_attempts=2
    with collected() as log, worker_thread(worker_id="w-log") as running:
        running.wait("recorded", where=lambda d: d["buried"] == 1)
    assert status_counts() == {"dead": 1}
    first, last = log.about(job.pk)
    assert (first.levelno, last.levelno) == (logging.WARNING, logging.ERROR)
    assert first.getMessage().startswith(
        f"job {job.pk} ({always_fails.path}) failed on attempt 1 of 2, retrying in "
    )
    assert first.getMessage().endswith("s: ValueError: logged: this task always fails")
    assert last.getMessage() == (
        f"job {job.pk} ({always_fails.path}) buried dead after attempt 2 of 2: "
        "ValueError: logged: this task always fails"
    )
    for record, attempt in ((first, 1), (last, 2)):
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], ValueError)
        assert record.exc_info[2] is not None  # the traceback, for error trackers
        fields = {k: getattr(record, k) for k in ("job_id", "task", "queue", "attempt", "worker")}
        assert fields == {
            "job_id": job.pk,
            "task": always_fails.path,
            "queue": "default",
            "attempt": attempt,
            "worker": "w-log",
        }


def test_jobs_buried_without_a_retry_are_logged_at_error_too() -> None:
    unknown = Job.objects.create(task="tests.testapp.tasks.nope", args=[], kwargs={})
    bad_value = returns_a_set.enqueue()
    with collected() as log, worker_thread() as running:
        running.wait("recorded", where=lambda d: d["buried"] >= 1)
        if status_counts() != {"dead": 2}:
            running.wait("recorded", 2)
    assert status_counts() == {"dead": 2}
    for job, what in ((unknown, "UnknownTask"), (bad_value, "TypeError: the return value")):
        (record,) = log.about(job.pk)
        assert record.levelno == logging.ERROR
        assert "buried dead: it cannot succeed by retrying: " in record.getMessage()
        assert what in record.getMessage()
        assert record.exc_info is not None
        # A refusal: the exception for error trackers, without the queue's own frames
        # (a traceback through the executor and the registry told nothing).
        assert record.exc_info[2] is None
        assert "Traceback" not in logging.Formatter().format(record)


def test_a_job_buried_for_its_timeout_or_its_snoozes_errs_with_the_exception_and_fields() -> None:
    """Runs the worker itself fails (past the job timeout, past MAX_SNOOZES) are
    logged as any failed run: ERROR when they bury the job, with exc_info and fields."""
    slow = mark.using(max_attempts=1).enqueue("slow", sleep=1.0)
    snoozer = snoozes.enqueue("snoozer", 5)
    with (
        override_settings(PGQUEUE={"MAX_SNOOZES": 0}),
        collected() as log,
        worker_thread(job_timeout=0.3, worker_id="w-late") as running,
    ):
        running.recorder.wait_total("recorded", "buried", 2)
    assert status_counts() == {"dead": 2}
    for job, exception, message in (
        (slow, JobTimeout, "past the worker's job timeout of 0.3s"),
        (snoozer, TooManySnoozes, "the most PGQUEUE['MAX_SNOOZES'] allows"),
    ):
        (record,) = log.about(job.pk, logging.ERROR)  # the timeout's WARNING came first
        assert record.levelno == logging.ERROR
        assert f"job {job.pk} " in record.getMessage()
        assert "buried dead" in record.getMessage()
        assert message in record.getMessage()
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], exception)
        assert (record.job_id, record.worker) == (job.pk, "w-late")  # type: ignore[attr-defined]


def test_a_job_the_reaper_buries_errs_with_its_fields() -> None:
    job = mark.using(max_attempts=1).enqueue("lost")
    Job.objects.claim("w-gone", limit=1)
    Job.objects.filter(pk=job.pk).update(locked_until=timezone.now() - dt.timedelta(seconds=1))
    with collected() as log, worker_thread() as running:
        running.wait("reaped", where=lambda d: d["result"].buried == 1)
    assert status_counts() == {"dead": 1}
    (record,) = log.about(job.pk)
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        f"job {job.pk} ({mark.path}) buried dead after attempt 1 of 1: LeaseExpired: the "
        "lease expired: worker w-gone stopped renewing it before recording an outcome"
    )
    fields = {k: getattr(record, k) for k in ("job_id", "task", "queue", "attempt", "worker")}
    assert fields == {
        "job_id": job.pk,
        "task": mark.path,
        "queue": "default",
        "attempt": 1,
        "worker": "w-gone",
    }


def test_a_job_the_reaper_returns_to_the_queue_warns_with_its_fields() -> None:
    """A lease the reaper finds expired is a failed attempt: it was counted only in
    the reaper's INFO line, with no line naming the job."""
    job = mark.using(max_attempts=3, queue="lost").enqueue("lost")
    Job.objects.claim("w-gone", limit=1)
    Job.objects.filter(pk=job.pk).update(locked_until=timezone.now() - dt.timedelta(seconds=1))
    # A worker of another queue: its reaper returns the job, and it never claims it.
    with collected() as log, worker_thread(queues=["elsewhere"]) as running:
        running.wait("reaped", where=lambda d: d["result"].returned == 1)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("queued", 1)
    (record,) = log.about(job.pk)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    _head, delay, tail = re.fullmatch(
        rf"(job {job.pk} \({mark.path}\) failed on attempt 1 of 3, retrying in )([\d.]+)(s: .*)",
        message,
    ).groups()  # type: ignore[union-attr]
    assert tail == (
        "s: LeaseExpired: the lease expired: worker w-gone stopped renewing it before "
        "recording an outcome"
    ), message
    # The delay it says is the one the row was given.
    waited = (row.run_at - timezone.now()).total_seconds()
    assert float(delay) - 2 <= waited <= float(delay) + 0.1, (delay, waited)
    fields = {k: getattr(record, k) for k in ("job_id", "task", "queue", "attempt", "worker")}
    assert fields == {
        "job_id": job.pk,
        "task": mark.path,
        "queue": "lost",
        "attempt": 1,
        "worker": "w-gone",
    }


def test_direct_tasks_send_started_and_finished_with_the_outcome() -> None:
    seen: list[tuple[str, Any, int, str | None, Any]] = []

    def started(sender: Any, job: Any, **data: Any) -> None:
        seen.append(("started", sender, job.id, None, None))

    def finished(sender: Any, job: Any, outcome: RunOutcome, **data: Any) -> None:
        seen.append(("finished", sender, job.id, outcome, data["result"]))

    def broken(**data: Any) -> None:
        raise RuntimeError("a receiver's bug")

    job_started.connect(started, weak=False)
    job_finished.connect(finished, weak=False)
    job_finished.connect(broken, sender=add, weak=False)
    try:
        ok = add.enqueue(2, 3)
        failing = always_fails.enqueue("signalled")
        with collected() as log, worker_thread(concurrency=1) as running:
            running.wait("recorded", where=lambda d: d["buried"] == 1)
            if status_counts() != {"done": 1, "dead": 1}:
                running.wait("recorded", 3)
    finally:
        job_started.disconnect(started)
        job_finished.disconnect(finished)
        job_finished.disconnect(broken, sender=add)
    assert status_counts() == {"done": 1, "dead": 1}
    assert Job.objects.get(pk=ok.pk).result == 5  # the raising receiver changed nothing
    assert [s for s in seen if s[2] == ok.pk] == [
        ("started", add, ok.pk, None, None),
        ("finished", add, ok.pk, RunOutcome.SUCCEEDED, 5),
    ]
    assert [s for s in seen if s[2] == failing.pk] == [
        ("started", always_fails, failing.pk, None, None),
        ("finished", always_fails, failing.pk, RunOutcome.RETRIED, None),
        ("started", always_fails, failing.pk, None, None),
        ("finished", always_fails, failing.pk, RunOutcome.DEAD, None),
    ]
    (complaint,) = [r for r in log.records if "signal receiver" in r.getMessage()]
    assert complaint.levelno == logging.ERROR
    assert complaint.exc_info is not None
    assert run_counts("signalled") == {"signalled": 2}


def test_job_finished_says_what_the_executor_makes_of_the_exception() -> None:
    """A snooze is a retry, a Cancel cancels, and an exception the retry policy does not
    retry buries the job on its first attempt: the signal says so as the row does."""
    seen: dict[int, list[RunOutcome]] = {}

    def finished(sender: Any, job: Any, outcome: RunOutcome, **data: Any) -> None:
        seen.setdefault(job.id, []).append(outcome)

    snoozing = snoozes.enqueue("snoozing", 1)
    cancelling = gives_up.enqueue("cancelling")
    not_retried = retries_io_only.enqueue("not-retried", "value")
    job_finished.connect(finished, weak=False)
    try:
        with worker_thread(poll_interval=0.05):
            wait_for(
                lambda: status_counts() == {"done": 1, "cancelled": 1, "dead": 1},
                10,
                "the three jobs to finish",
            )
    finally:
        job_finished.disconnect(finished)
    assert seen == {
        snoozing.pk: [RunOutcome.RETRIED, RunOutcome.SUCCEEDED],
        cancelling.pk: [RunOutcome.CANCELLED],
        not_retried.pk: [RunOutcome.DEAD],
    }
