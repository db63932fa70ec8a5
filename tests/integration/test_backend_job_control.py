"""Job control for Tasks-framework tasks: the context's cancel_requested, async tasks
cancelled at their await, Snooze and Cancel through the framework's signals, the
cancelled state as a FAILED result, and the retry policy set with options()."""

from __future__ import annotations

import pickle
import sys
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue import Cancel, task
from django_pgqueue.backend import options
from django_pgqueue.backend.compat import (
    TASKS_LOGGER,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from django_pgqueue.backend.results import running_result
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from django_pgqueue.records import Failure
from tests.conftest import status_counts
from tests.integration.test_backend_worker import claim, run, run_next
from tests.testapp import djtasks
from tests.testapp.djtasks import pgq
from tests.testapp.tasks import retries_io_only
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def finished() -> Iterator[list[tuple[str, str | None]]]:
    """(status, last error's class path) of each task_finished sent."""
    seen: list[tuple[str, str | None]] = []

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        last = task_result.errors[-1].exception_class_path if task_result.errors else None
        seen.append((task_result.status, last))

    task_finished.connect(on_finished)
    yield seen
    task_finished.disconnect(on_finished)


def fetch(result: TaskResult[Any, Any]) -> TaskResult[Any, Any]:
    return task_backends["default"].get_result(result.id)


def is_running(job_id: str) -> bool:
    return Job.objects.filter(pk=int(job_id), status="running").exists()


@pytest.mark.slow
def test_a_takes_context_task_sees_cancel_requested_and_its_result_is_failed(
    finished: list[tuple[str, str | None]],
) -> None:
    enqueued = djtasks.stops_when_asked.enqueue()
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        worker.wait("started")
        wait_for(partial(is_running, enqueued.id), 10, "the job to run")
        time.sleep(0.05)  # polling by now
        Job.objects.cancel([int(enqueued.id)], reason="operator")
        worker.wait("recorded")
    result = fetch(enqueued)
    assert result.status == TaskResultStatus.FAILED
    error = result.errors[-1]
    assert error.exception_class_path == "django_pgqueue.control.Cancel"
    assert error.exception_class is Cancel
    assert error.traceback.endswith("Cancelled: operator\n")
    assert Job.objects.get(pk=int(enqueued.id)).status == "cancelled"
    assert finished == [(TaskResultStatus.FAILED, "django_pgqueue.control.Cancel")]


@pytest.mark.slow
def test_a_job_cancelled_before_it_starts_sends_no_signal() -> None:
    """Cancelled while queued, or while claimed ahead behind a long job: neither ran,
    so neither sends task_started or task_finished (docs/backend.md); each reads
    FAILED with its Cancel error. The long job, asked to stop, sends both."""
    sent: list[tuple[str, str]] = []

    def on_started(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        sent.append(("started", task_result.id))

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        sent.append(("finished", task_result.id))

    queued = djtasks.echo.enqueue("cancelled while queued")
    Job.objects.cancel([int(queued.id)], reason="not needed")
    long = djtasks.stops_when_asked.enqueue()
    ahead = djtasks.echo.enqueue("cancelled while claimed ahead")
    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        with worker_thread(concurrency=1, prefetch=1, poll_interval=5) as worker:
            wait_for(partial(is_running, long.id), 10, "the long job to run")
            wait_for(partial(is_running, ahead.id), 10, "the other to be claimed ahead")
            Job.objects.cancel([int(ahead.id)], reason="not needed")
            wait_for(lambda: fetch(ahead).status == TaskResultStatus.FAILED, 10, "the cancel")
            Job.objects.cancel([int(long.id)], reason="operator")
            wait_for(lambda: fetch(long).status == TaskResultStatus.FAILED, 10, "the stop")
            worker.wait("recorded")
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    assert sent == [("started", long.id), ("finished", long.id)]
    for cancelled in (queued, ahead):
        error = fetch(cancelled).errors[-1]
        assert error.exception_class_path == "django_pgqueue.control.Cancel"
        assert error.traceback.endswith("Cancelled: not needed\n")
    assert status_counts() == {"cancelled": 3}


@pytest.mark.slow
def test_an_async_task_is_cancelled_at_its_await() -> None:
    enqueued = djtasks.sleeps_async.enqueue()
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        worker.wait("started")
        wait_for(partial(is_running, enqueued.id), 10, "the job to run")
        started = time.monotonic()
        Job.objects.cancel([int(enqueued.id)], reason="operator")
        worker.wait("finished")
        assert time.monotonic() - started < 0.1
        worker.wait("recorded")
    result = fetch(enqueued)
    assert result.status == TaskResultStatus.FAILED
    assert "CancelledError" in result.errors[-1].traceback


def test_snooze_reports_ready_and_the_job_runs_again_on_its_first_attempt(
    finished: list[tuple[str, str | None]],
) -> None:
    enqueued = djtasks.snoozes_once.enqueue(f"snooze-{time.time_ns()}")
    first = run_next()
    assert isinstance(first, Failure)
    assert first.snooze
    assert fetch(enqueued).status == TaskResultStatus.READY
    second = claim()
    assert second.attempt == 1  # the snooze did not spend it
    run(second)
    result = fetch(enqueued)
    assert (result.status, result.return_value, result.errors) == (
        TaskResultStatus.SUCCESSFUL,
        "woke",
        [],
    )
    assert finished == [(TaskResultStatus.READY, None), (TaskResultStatus.SUCCESSFUL, None)]


def test_django_logs_a_snooze_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    djtasks.snoozes_once.enqueue(f"snooze-{time.time_ns()}")
    with caplog.at_level("DEBUG", logger=TASKS_LOGGER):  # the backport's logger on 5.2
        first = run_next()
    assert isinstance(first, Failure)
    assert first.snooze
    (line,) = [r for r in caplog.records if r.name == TASKS_LOGGER and "READY" in r.getMessage()]
    assert (line.levelname, line.exc_info) == ("INFO", None)


def test_cancel_raised_by_a_task_ends_it_cancelled_and_failed() -> None:
    enqueued = djtasks.cancels_itself.enqueue()
    run_next()
    result = fetch(enqueued)
    assert (result.status, result.errors[-1].exception_class_path) == (
        TaskResultStatus.FAILED,
        "django_pgqueue.control.Cancel",
    )
    assert result.errors[-1].traceback.endswith("Cancelled: the order is gone\n")
    assert status_counts() == {"cancelled": 1}


def test_retry_on_set_with_options_where_the_task_is_declared() -> None:
    io = djtasks.fails_with.enqueue("io")  # retried: max_attempts 3
    for _ in range(3):
        run(claim())
    value = djtasks.fails_with.enqueue("value")  # not retried
    run(claim())
    assert (
        Job.objects.get(pk=int(io.id)).attempts,
        Job.objects.get(pk=int(value.id)).attempts,
    ) == (
        3,
        1,
    )
    assert status_counts() == {"dead": 2}
    # A copy keeps the declared policy, so it may carry other options.
    assert djtasks.fails_with.using(priority=5).enqueue("io").status == TaskResultStatus.READY


def test_a_retry_policy_given_at_the_call_site_is_the_jobs_own() -> None:
    """Each job keeps its policy (exception class paths, on the row): a copy made
    with options() at the call site is obeyed as the declared one is."""
    strict = options(djtasks.fails_with, retry_on=(ValueError,)).enqueue("value")  # retried
    loose = options(djtasks.fails_with, discard_on=ValueError).enqueue("value")  # buried
    for _ in range(3 + 1):  # the strict job's three attempts, the loose job's one
        run(claim())
    assert status_counts() == {"dead": 2}
    assert Job.objects.get(pk=int(strict.id)).attempts == 3
    assert Job.objects.get(pk=int(loose.id)).attempts == 1
    assert Job.objects.get(pk=int(strict.id)).retry_policy == {
        "retry_on": ["builtins.ValueError"],
        "discard_on": [],
    }
    with pytest.raises(InvalidTask, match="retry_on 'ValueError' must be an exception class"):
        options(djtasks.noop_task, retry_on="ValueError")  # type: ignore[arg-type]


def test_a_result_reads_back_the_retry_policy_its_job_keeps() -> None:
    """get_result() (and a running job's TaskResult) showed the module task's
    retry_on and discard_on, not those the job was enqueued with (and the worker
    applies), as it shows the job's own queue, priority and max_attempts."""
    strict = options(djtasks.fails_with, retry_on=(ValueError,), discard_on=KeyError)
    enqueued = strict.enqueue("value")
    declared = djtasks.fails_with.enqueue("io")  # the policy declared with the task
    read = pgq(djtasks.fails_with.get_result(enqueued.id).task)
    assert (read.retry_on, read.discard_on) == ((ValueError,), (KeyError,))
    assert read.retry_policy == pgq(strict).retry_policy
    (claimed,) = Job.objects.claim("w")
    running = pgq(running_result(djtasks.fails_with, claimed, "default").task)
    assert (running.retry_on, running.discard_on) == ((ValueError,), (KeyError,))
    assert pgq(djtasks.fails_with.get_result(declared.id).task).retry_on == (ConnectionError,)
    # A class no module imported here holds (a row written by hand): not imported,
    # it stands in under its path, so the policy reads back as the worker applies it.
    Job.objects.filter(pk=enqueued.id).update(
        retry_policy={"retry_on": ["nowhere.errors.Gone"], "discard_on": []}
    )
    gone = pgq(djtasks.fails_with.get_result(enqueued.id).task)
    assert gone.retry_policy.retry_on == ("nowhere.errors.Gone",)
    assert gone.discard_on == ()
    assert "nowhere" not in sys.modules
    if "__reduce__" in Task.__dict__:  # Django 6.1's Tasks pickle: the stand-in by its path
        assert pgq(pickle.loads(pickle.dumps(gone))).retry_policy == gone.retry_policy


def test_the_direct_api_takes_the_policy_at_the_decorator_or_per_enqueue() -> None:
    picky = retries_io_only.using(retry_on=(KeyError,))
    assert picky.retry_policy.retry_on == ("builtins.KeyError",)
    enqueued = picky.enqueue("picky", "io")
    stored = {"retry_on": ["builtins.KeyError"], "discard_on": []}
    assert Job.objects.get(pk=enqueued.pk).retry_policy == stored
    assert enqueued.retry_policy == stored  # the Job returned says what the row holds
    with pytest.raises(InvalidJob, match="discard_on 3 must be an exception class"):
        task(discard_on=3)  # type: ignore[call-overload]
    assert retries_io_only.retry_policy.retry_on == (
        "builtins.ConnectionError",
        "builtins.TimeoutError",
    )
