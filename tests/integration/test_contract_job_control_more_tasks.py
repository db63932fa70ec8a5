"""The second job-control contract audit's Tasks-framework half (``django.tasks``
``@task`` through PgQueueBackend): the retry policy of an ``async def`` task set with
``options()``, a job cancelled by its TaskResult read back as FAILED, and a Snooze
subclass of the task's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend import options
from django_pgqueue.backend.compat import TaskResult, TaskResultStatus, task, task_finished
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.integration.test_contract_job_control_more import Later
from tests.testapp.tasks import record, run_counts_of
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

#: Tasks of this module are enqueued under this setting (outside an installed app).
HERE = {"PGQUEUE": {"TASK_MODULES": [__name__], "BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2}}


@pytest.fixture(autouse=True)
def _here() -> Iterator[None]:
    with override_settings(**HERE):
        yield


@pytest.fixture
def finished() -> Iterator[list[str]]:
    """The status of each task_finished sent."""
    seen: list[str] = []

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        seen.append(task_result.status)

    task_finished.connect(on_finished)
    yield seen
    task_finished.disconnect(on_finished)


@task
async def fetches(error: str) -> None:
    raise {"key": KeyError, "index": IndexError, "value": ValueError}[error](error)


fetches = options(fetches, max_attempts=3, retry_on=(LookupError,), discard_on=(KeyError,))


@task
def waits_its_turn(label: str) -> int:
    record(label)
    runs = run_counts_of(label)
    if runs == 1:
        raise Later("not yet")
    return runs


def test_an_async_tasks_policy_set_with_options_holds_in_a_worker() -> None:
    listed = fetches.enqueue("index")  # a LookupError: retried
    discarded = fetches.enqueue("key")  # in both: discard_on wins
    other = fetches.enqueue("value")  # not in retry_on: buried at once
    with worker_thread(concurrency=3, poll_interval=0.05):
        wait_for(
            lambda: Job.objects.filter(status="dead").count() == 3, 20, "the three to be buried"
        )
    attempts = dict(Job.objects.values_list("id", "attempts"))
    assert attempts == {int(listed.id): 3, int(discarded.id): 1, int(other.id): 1}
    for result, path in (
        (listed, "builtins.IndexError"),
        (discarded, "builtins.KeyError"),
        (other, "builtins.ValueError"),
    ):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert result.errors[-1].exception_class_path == path


def test_a_job_cancelled_by_its_task_result_reads_back_failed_with_the_reason(
    finished: list[str],
) -> None:
    result = fetches.enqueue("index")
    assert Job.objects.cancel(result, reason="customer left") == [int(result.id)]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "django_pgqueue.control.Cancel"
    assert error.traceback.endswith("Cancelled: customer left\n")
    assert run_jobs().done == []  # nothing left to run
    assert finished == []  # it never started


def test_a_snooze_subclass_of_the_tasks_own_reports_ready_then_runs_again(
    finished: list[str],
) -> None:
    result = waits_its_turn.enqueue("own-snooze-tasks")
    assert run_jobs().done == [int(result.id)]
    assert finished == [TaskResultStatus.READY, TaskResultStatus.SUCCESSFUL]
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 2)
    assert Job.objects.get(pk=int(result.id)).snoozes == 1
