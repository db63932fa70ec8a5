"""A django-pgqueue worker running Tasks-framework Tasks: signals, context, async,
return values, and the retry and lease behaviour Django's own backends lack."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend import PgQueueBackend, options
from django_pgqueue.backend.compat import (
    TASKS_LOGGER,
    TaskError,
    TaskResult,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from django_pgqueue.backend.results import running_result
from django_pgqueue.exceptions import LeaseExpired
from django_pgqueue.models import Job
from django_pgqueue.records import ClaimedJob, Failure, Success
from django_pgqueue.worker.executor import execute
from tests.testapp import djtasks
from tests.testapp.djtasks import pgq

pytestmark = pytest.mark.django_db(transaction=True)


def claim(worker: str = "w", *, lease: float | None = None, wait: float = 3.0) -> ClaimedJob:
    """The next ready job, waiting (with a bound) for a retry's backoff to pass."""
    deadline = time.monotonic() + wait
    while True:
        claimed = Job.objects.claim(worker, lease=lease)
        if claimed:
            return claimed[0]
        assert time.monotonic() < deadline, "no job became ready"
        time.sleep(0.01)


def run(job: ClaimedJob, worker: str = "w") -> Success | Failure:
    outcome = execute(job)
    if isinstance(outcome, Success):
        assert Job.objects.complete(worker, [outcome]) == {job.id}
    else:
        assert set(Job.objects.fail(worker, [outcome])) == {job.id}
    return outcome


def run_next(worker: str = "w") -> Success | Failure:
    return run(claim(worker), worker)


def result(task_result: TaskResult[Any, Any]) -> TaskResult[Any, Any]:
    return task_backends["default"].get_result(task_result.id)


@pytest.fixture
def signals() -> Iterator[list[tuple[str, type, str, list[str]]]]:
    """(signal, sender, status, worker_ids) as each was sent: the result object is
    updated in place as the run goes on, so its state is copied on receipt."""
    seen: list[tuple[str, type, str, list[str]]] = []

    def on_started(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        seen.append(("started", sender, task_result.status, list(task_result.worker_ids)))

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        seen.append(("finished", sender, task_result.status, list(task_result.worker_ids)))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    yield seen
    task_started.disconnect(on_started)
    task_finished.disconnect(on_finished)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in self.records]


@pytest.fixture
def tasks_log() -> Iterator[Records]:
    """What the Tasks framework's own signal receivers log."""
    handler, logger = Records(), logging.getLogger(TASKS_LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_a_run_is_reported_running_then_successful(
    signals: list[tuple[str, type, str, list[str]]], tasks_log: Records
) -> None:
    enqueued = djtasks.calculate_meaning_of_life.enqueue()
    assert isinstance(run_next("w1"), Success)
    assert signals == [
        ("started", PgQueueBackend, TaskResultStatus.RUNNING, ["w1"]),
        ("finished", PgQueueBackend, TaskResultStatus.SUCCESSFUL, ["w1"]),
    ]
    assert enqueued.status == TaskResultStatus.READY  # a result is a snapshot...
    enqueued.refresh()  # ...until refreshed from the job row
    assert (
        enqueued.status,
        enqueued.return_value,
        enqueued.attempts,
        enqueued.worker_ids,
        enqueued.errors,
    ) == (TaskResultStatus.SUCCESSFUL, 42, 1, ["w1"], [])
    assert enqueued.enqueued_at is not None
    assert enqueued.started_at is not None
    assert enqueued.finished_at is not None
    assert enqueued.enqueued_at <= enqueued.started_at <= enqueued.finished_at
    assert enqueued.last_attempted_at == enqueued.started_at
    path = djtasks.calculate_meaning_of_life.module_path
    assert tasks_log.lines() == [
        ("DEBUG", f"Task id={enqueued.id} path={path} enqueued backend=default"),
        ("INFO", f"Task id={enqueued.id} path={path} state=RUNNING"),
        ("INFO", f"Task id={enqueued.id} path={path} state=SUCCESSFUL"),
    ]


def test_async_tasks_run_and_tuples_come_back_as_lists() -> None:
    added = djtasks.add_async.enqueue(2, 40)
    echoed = djtasks.echo.enqueue(1, k=2)
    run_next()
    run_next()
    assert result(added).return_value == 42
    assert result(echoed).return_value == {"args": [1], "kwargs": {"k": 2}}


def test_a_failing_run_is_reported_failed_with_its_error(
    signals: list[tuple[str, type, str, list[str]]], tasks_log: Records
) -> None:
    failed = options(djtasks.failing_task_value_error, max_attempts=1).enqueue()
    assert isinstance(run_next(), Failure)
    assert [s[:3] for s in signals] == [
        ("started", PgQueueBackend, TaskResultStatus.RUNNING),
        ("finished", PgQueueBackend, TaskResultStatus.FAILED),
    ]
    failed.refresh()
    assert (failed.status, failed.is_finished, failed.attempts) == (
        TaskResultStatus.FAILED,
        True,
        1,
    )
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value
    (error,) = failed.errors
    assert error.exception_class is ValueError
    assert error.traceback.endswith("ValueError: This Task failed due to ValueError\n")
    # Sent inside the except block, so the framework's receiver logs the exception.
    (record,) = [r for r in tasks_log.records if r.levelno == logging.ERROR]
    assert record.getMessage().endswith("state=FAILED")
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "This Task failed due to ValueError"


def test_a_keyboard_interrupt_raised_by_the_task_is_reported_failed(
    signals: list[tuple[str, type, str, list[str]]],
) -> None:
    """It fails the run like any exception (in a job's thread only the task raises
    one), and task_finished says so: it used to be re-raised before the signal, as
    Django's ImmediateBackend does in the caller's process, so no FAILED was sent."""
    failed = options(djtasks.interrupts, max_attempts=1).enqueue()
    assert isinstance(run_next(), Failure)
    assert [s[:3] for s in signals] == [
        ("started", PgQueueBackend, TaskResultStatus.RUNNING),
        ("finished", PgQueueBackend, TaskResultStatus.FAILED),
    ]
    failed.refresh()
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in failed.errors] == ["builtins.KeyboardInterrupt"]


def test_a_nested_exception_keeps_its_traceback() -> None:
    failed = options(djtasks.complex_exception, max_attempts=1).enqueue()
    run_next()
    (error,) = result(failed).errors
    assert error.exception_class is ValueError
    assert 'raise ValueError(ValueError("This task failed"))' in error.traceback


def test_a_return_value_that_is_not_json_fails_the_job_at_once(
    signals: list[tuple[str, type, str, list[str]]],
) -> None:
    bad = djtasks.complex_return_value.enqueue()  # three attempts allowed
    run_next()
    assert signals[-1][:3] == ("finished", PgQueueBackend, TaskResultStatus.FAILED)
    job = Job.objects.get(pk=bad.id)
    assert (job.status, job.attempts) == ("dead", 1)  # final: not retried
    assert "the return value is builtins.function" in job.last_error
    assert "which is not JSON" in job.last_error
    bad.refresh()
    assert bad.status == TaskResultStatus.FAILED
    assert "which is not JSON" in bad.errors[0].traceback


@pytest.mark.parametrize(
    ("task", "django_says"),
    [
        (djtasks.complex_return_value, "TypeError: Unsupported type: <class 'function'>"),
        (djtasks.bytes_return_value, "ValueError: Unsupported value: <class 'bytes'>"),
    ],
)
def test_a_return_value_django_cannot_store_fails_with_djangos_class_and_words(
    task: Any, django_says: str
) -> None:
    """Django's ImmediateBackend reports the exception its normalize_json raised
    (its tests look for "Unsupported type" in the traceback); the worker reported
    only its own TypeError, with neither the words nor, for bytes, the class."""
    finished: list[TaskError] = []

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        finished.extend(task_result.errors)

    bad = task.enqueue()
    task_finished.connect(on_finished)
    try:
        run_next()
    finally:
        task_finished.disconnect(on_finished)
    bad.refresh()
    exception_class, _, words = django_says.partition(": ")
    for error in (finished[-1], bad.errors[-1]):
        assert error.exception_class_path == f"builtins.{exception_class}"
        assert error.traceback.startswith(f"{exception_class}: ") or (
            f"\n{exception_class}: " in error.traceback
        )
        assert f"({words})" in error.traceback
        assert "which is not JSON" in error.traceback  # and which part, in our words
    assert Job.objects.get(pk=bad.id).status == "dead"  # final: not retried


def test_a_return_value_whose_normalizing_raises_an_odd_error_still_fails_the_job_at_once(
    signals: list[tuple[str, type, str, list[str]]],
) -> None:
    """The refusal was remade as the class normalize_json raised, with one message:
    UnicodeDecodeError (five arguments) raised TypeError out of the invoker, so the
    run counted as the task's failure and was retried, its side effects again."""
    bad = djtasks.undecodable_mapping_return_value.enqueue()  # three attempts allowed
    outcome = run_next()
    assert isinstance(outcome, Failure)
    assert outcome.final, outcome
    job = Job.objects.get(pk=bad.id)
    assert (job.status, job.attempts) == ("dead", 1)  # final: not retried
    assert "which is not JSON" in job.last_error
    assert "'utf-8' codec can't decode" in job.last_error  # normalize_json's words
    assert job.errors[0]["exception"] == "ValueError"  # its builtin base
    assert signals[-1][:3] == ("finished", PgQueueBackend, TaskResultStatus.FAILED)


@pytest.mark.parametrize("levels", [500, 2000])
def test_a_return_value_nested_too_deep_fails_the_job_at_once_not_with_a_recursion_error(
    levels: int,
) -> None:
    # Django's normalize_json recurses: 2,000 levels raised RecursionError in the
    # worker, a failure retried (the task ran three times) instead of the clear error.
    bad = djtasks.deeply_nested_return_value.enqueue(levels)  # three attempts allowed
    run_next()
    job = Job.objects.get(pk=bad.id)
    assert (job.status, job.attempts) == ("dead", 1)  # final: not retried
    assert "the return value is nested more than 200 levels deep" in job.last_error
    assert "RecursionError" not in job.last_error


def test_takes_context_tasks_get_their_result_and_attempt() -> None:
    with_id = djtasks.get_task_id.enqueue()
    checked = djtasks.check_context.enqueue(attempt=1)
    assert isinstance(run_next(), Success)
    assert isinstance(run_next(), Success)
    assert result(with_id).return_value == with_id.id
    assert result(checked).status == TaskResultStatus.SUCCESSFUL


def test_a_pending_retry_reads_ready_with_its_error_then_succeeds() -> None:
    flaky = djtasks.fails_until.enqueue(1)
    assert isinstance(run_next("w1"), Failure)
    pending = result(flaky)
    assert (pending.status, pending.worker_ids, pending.finished_at) == (
        TaskResultStatus.READY,
        ["w1"],
        None,
    )
    assert pending.started_at is not None
    assert [e.exception_class for e in pending.errors] == [RuntimeError]
    assert pending.errors[0].traceback.endswith("RuntimeError: planned failure on attempt 1\n")
    assert pending.task.run_after is not None  # the retry's backoff, read from run_at

    assert isinstance(run_next("w2"), Success)
    done = result(flaky)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {
        "attempt": 2,
        "max_attempts": 3,
        "is_last_attempt": False,
        "worker_ids": ["w1", "w2"],
        "errors": ["builtins.RuntimeError"],
    }
    assert done.started_at == pending.started_at  # the first attempt's start
    assert done.last_attempted_at is not None
    assert pending.last_attempted_at is not None
    assert done.last_attempted_at > pending.last_attempted_at


def test_the_last_attempt_knows_it_is_the_last() -> None:
    flaky = pgq(djtasks.fails_until).using(max_attempts=2).enqueue(1)
    run_next()
    run_next()
    assert result(flaky).return_value["is_last_attempt"] is True


def test_spent_attempts_read_failed_with_every_error() -> None:
    doomed = options(djtasks.fails_until, max_attempts=2).enqueue(5)
    run_next("w1")
    run_next("w2")
    failed = result(doomed)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.worker_ids == ["w1", "w2"]
    assert [e.traceback.splitlines()[-1] for e in failed.errors] == [
        "RuntimeError: planned failure on attempt 1",
        "RuntimeError: planned failure on attempt 2",
    ]
    assert Job.objects.get(pk=doomed.id).status == "dead"


def test_a_claimed_job_reads_running_and_an_expired_lease_reads_ready_again() -> None:
    task_result = djtasks.calculate_meaning_of_life.enqueue()
    claim("w1", lease=0.05)  # the worker "dies" here: no heartbeat, no outcome
    running = result(task_result)
    assert (running.status, running.worker_ids, running.attempts) == (
        TaskResultStatus.RUNNING,
        ["w1"],
        1,
    )
    time.sleep(0.1)
    assert Job.objects.reap().returned == 1
    back = result(task_result)
    assert (back.status, back.worker_ids) == (TaskResultStatus.READY, ["w1"])
    (error,) = back.errors
    assert error.exception_class_path == "django_pgqueue.exceptions.LeaseExpired"
    assert error.exception_class is LeaseExpired  # importable, as Django's TaskError wants
    assert error.traceback == (
        "LeaseExpired: the lease expired: worker w1 stopped renewing it before recording an "
        "outcome: it died, hung or lost the database, and the run may have finished\n"
    )
    run_next("w2")
    assert result(task_result).worker_ids == ["w1", "w2"]


def test_a_run_given_back_at_shutdown_does_not_count_as_an_attempt() -> None:
    checked = djtasks.check_context.enqueue(attempt=1)
    job = claim("w1")
    assert Job.objects.release("w1", [job.key]) == {job.id}
    assert isinstance(run_next("w2"), Success)  # context.attempt == 1 on the second claim
    done = result(checked)
    assert (done.status, done.attempts) == (TaskResultStatus.SUCCESSFUL, 2)


def test_a_raising_receiver_does_not_change_the_outcome() -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    task_finished.connect(broken)
    task_started.connect(broken)
    try:
        task_result = djtasks.calculate_meaning_of_life.enqueue()
        assert isinstance(run_next(), Success)
    finally:
        task_finished.disconnect(broken)
        task_started.disconnect(broken)
    assert result(task_result).return_value == 42
    assert Job.objects.get(pk=task_result.id).attempts == 1  # ran once, not retried


def test_with_use_tz_off_the_workers_results_are_naive_in_time_zone_as_get_result() -> None:
    """The claim's times came back aware in UTC while ``finished_at`` (and every time
    Django gives with ``USE_TZ = False``) is naive: a receiver's ``finished_at -
    started_at`` raised TypeError."""
    seen: list[TaskResult[Any, Any]] = []

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        seen.append(task_result)

    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        enqueued = djtasks.calculate_meaning_of_life.enqueue()
        task_finished.connect(on_finished)
        try:
            assert isinstance(run_next(), Success)
        finally:
            task_finished.disconnect(on_finished)
        stored = result(enqueued)
    (finished,) = seen
    moments = ("enqueued_at", "started_at", "last_attempted_at", "finished_at")
    assert all(timezone.is_naive(getattr(finished, name)) for name in moments)
    assert finished.finished_at is not None
    assert finished.started_at is not None
    assert finished.finished_at - finished.started_at < dt.timedelta(seconds=30)
    for name in ("enqueued_at", "started_at", "last_attempted_at"):
        assert getattr(finished, name) == getattr(stored, name), name
    assert stored.enqueued_at == enqueued.enqueued_at


def test_a_history_python_cannot_read_does_not_stop_the_task_from_running(
    signals: list[tuple[str, type, str, list[str]]],
) -> None:
    """Rows written by hand: an error history nested too deep, worker ids with a
    number of 5,000 digits, a creation time of -infinity. Building the result failed
    before the task ran, on every attempt, until the job was buried."""
    enqueued = djtasks.calculate_meaning_of_life.enqueue()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET errors = %s::jsonb, worker_ids = %s::jsonb, "
            "created_at = '-infinity' WHERE id = %s",
            ["[" * 3000 + "]" * 3000, "[" + "9" * 5000 + "]", enqueued.id],
        )
    assert isinstance(run_next("w1"), Success)
    assert [s[:3] for s in signals] == [
        ("started", PgQueueBackend, TaskResultStatus.RUNNING),
        ("finished", PgQueueBackend, TaskResultStatus.SUCCESSFUL),
    ]
    assert Job.objects.filter(pk=enqueued.id, status="done").exists()


@pytest.mark.parametrize(
    ("zone", "created"),
    [("America/New_York", "0001-01-01 03:00+00"), ("Asia/Tokyo", "9999-12-31 20:00+00")],
)
def test_with_use_tz_off_a_time_the_zone_takes_out_of_range_does_not_stop_the_task(
    zone: str, created: str
) -> None:
    """In range in UTC, out of it once read in TIME_ZONE: the run failed before its task
    started, on every attempt."""
    with override_settings(USE_TZ=False, TIME_ZONE=zone):
        enqueued = djtasks.calculate_meaning_of_life.enqueue()
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE pgqueue_job SET created_at = %s WHERE id = %s", [created, enqueued.id]
            )
        assert isinstance(run_next(), Success)
    assert Job.objects.filter(pk=enqueued.id, status="done").exists()


def test_jobs_sharing_a_concurrency_key_do_not_run_together() -> None:
    keyed = options(djtasks.noop_task, concurrency_key="account:1")
    first, second = keyed.enqueue(1), keyed.enqueue(2)
    claimed = Job.objects.claim("w", limit=2)
    assert [str(job.id) for job in claimed] == [first.id]
    assert result(second).status == TaskResultStatus.READY


def test_queue_and_priority_order_the_claim() -> None:
    low = djtasks.noop_task.enqueue()
    high = djtasks.on_queue_1.enqueue()  # priority 10, queue_1
    assert [str(j.id) for j in Job.objects.claim("w", limit=2)] == [high.id, low.id]
    assert Job.objects.claim("w", queues=["queue_1"]) == []


def test_runworker_runs_tasks_framework_tasks_in_its_threads() -> None:
    from django.core.management import call_command

    answer = djtasks.calculate_meaning_of_life.enqueue()
    added = djtasks.add_async.enqueue(1, 2)
    with_id = djtasks.get_task_id.enqueue()
    failed = options(djtasks.failing_task_value_error, max_attempts=1).enqueue()
    call_command(
        "runworker",
        "--burst",
        "--concurrency",
        "2",
        "--no-listen",
        "--worker-id",
        "burst-1",
        verbosity=0,
    )
    done = [result(task_result) for task_result in (answer, added, with_id, failed)]
    assert [r.worker_ids for r in done] == [["burst-1"]] * 4
    assert [r.return_value for r in done[:3]] == [42, 3, with_id.id]
    assert done[3].status == TaskResultStatus.FAILED
    assert done[3].errors[0].exception_class is ValueError


def test_a_job_sent_to_another_alias_runs_in_a_queue_only_that_alias_allows(
    settings: Any,
) -> None:
    """``using(backend="other", queue_name="bulk")``: "other" lists no QUEUES, so it
    takes any queue, but the task's own alias does not list "bulk". The worker
    checked the job against the task's own alias as it built the RUNNING result,
    so every attempt failed with InvalidTask before the task started; and
    get_result raised InvalidTask as well."""
    settings.TASKS = {
        **settings.TASKS,
        "other": {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": []},
    }
    sent = djtasks.echo.using(backend="other", queue_name="bulk").enqueue(7)
    assert task_backends["default"].get_result(sent.id).status == TaskResultStatus.READY
    started: list[str] = []

    def on_started(sender: Any, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        started.append(task_result.task.queue_name)

    task_started.connect(on_started)
    try:
        outcome = run_next()
    finally:
        task_started.disconnect(on_started)
    assert isinstance(outcome, Success), outcome
    assert started == ["bulk"]
    done = sent.task.get_result(sent.id)
    assert (done.status, done.return_value, done.backend) == (
        TaskResultStatus.SUCCESSFUL,
        {"args": [7], "kwargs": {}},
        "other",
    )


@pytest.mark.parametrize("backoff", ["NaN", "Infinity"])
def test_a_backoff_that_is_no_number_of_seconds_is_reported_as_none(backoff: str) -> None:
    """The worker counts NaN and Infinity (a row written by hand) as no backoff; the
    results said the task had a backoff of nan (or inf), which enqueue refuses."""
    enqueued = djtasks.noop_task.enqueue()
    Job.objects.filter(pk=enqueued.id).update(backoff=float(backoff))
    assert pgq(djtasks.noop_task.get_result(enqueued.id).task).backoff is None
    (claimed,) = Job.objects.claim("w1")
    assert pgq(running_result(djtasks.noop_task, claimed, "default").task).backoff is None
