"""Issue 11's testing contract, used as a project's own tests would: a Django
``TestCase``, a ``TransactionTestCase`` and a pytest-django test enqueue through the
Tasks API and the direct API and run the jobs with ``django_pgqueue.testing``."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.db.models import F
from django.test import TestCase, TransactionTestCase

from django_pgqueue import enqueue
from django_pgqueue.backend.compat import TaskResultStatus, task_finished, task_started
from django_pgqueue.models import Job
from django_pgqueue.records import FINISHED, LIVE, JobStatus
from django_pgqueue.testing import Ran, run_jobs
from tests.testapp import djtasks, tasks
from tests.testapp.tasks import run_counts_of


class RunJobsInATestCase(TestCase):
    def test_direct_and_tasks_api_jobs_run_and_read_back(self) -> None:
        job = tasks.add.enqueue(2, 3)
        by_path = enqueue("tests.testapp.tasks.add", [4, 5])
        result = djtasks.echo.enqueue(1, k="v")
        ran = run_jobs()
        assert ran == Ran(done=[job.id, by_path.id, int(result.id)])
        assert {j.status for j in Job.objects.filter(id__in=ran.done)} == {JobStatus.DONE}
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == {"args": [1], "kwargs": {"k": "v"}}
        assert run_jobs() == Ran()

    def test_jobs_enqueued_inside_atomic_are_seen_inside_and_after(self) -> None:
        with transaction.atomic():
            inside = tasks.mark.enqueue("inside-atomic")
            assert run_jobs() == Ran(done=[inside.id])
        with transaction.atomic():
            after = tasks.mark.enqueue("after-atomic")
        assert run_jobs() == Ran(done=[after.id])
        assert run_counts_of("inside-atomic") == 1
        assert run_counts_of("after-atomic") == 1

    def test_a_rolled_back_atomic_leaves_nothing_to_run(self) -> None:
        try:
            with transaction.atomic():
                tasks.mark.enqueue("rolled-back")
                raise RuntimeError("the view failed")
        except RuntimeError:
            pass
        assert run_jobs() == Ran()
        assert Job.objects.count() == 0

    def test_failures_retries_and_death(self) -> None:
        # A failed run's writes are rolled back here (its savepoint), so count
        # attempts by the job's own context, not by rows it wrote.
        retried = djtasks.fails_until.enqueue(1)
        doomed = tasks.always_fails.enqueue("doomed-tc")
        ran = run_jobs()
        assert ran == Ran(retried=[int(retried.id), doomed.id])
        # Not waited for: queued again for after the backoff.
        assert run_jobs() == Ran()
        # The next attempt now (Job.objects.retry() would start the attempts over).
        # Not run_at=timezone.now(): the database's now() stands still in a TestCase.
        Job.objects.filter(id__in=ran.retried).update(run_at=F("created_at"))
        ran = run_jobs()
        assert ran == Ran(done=[int(retried.id)], dead=[doomed.id])
        assert run_counts_of("doomed-tc") == 0  # its runs were rolled back
        dead = Job.objects.get(id=doomed.id)
        assert (dead.status, dead.attempts, len(dead.errors)) == (JobStatus.DEAD, 2, 2)
        retried.refresh()
        assert retried.status == TaskResultStatus.SUCCESSFUL
        assert retried.return_value["attempt"] == 2
        assert retried.return_value["errors"] == ["builtins.RuntimeError"]

    def test_tasks_failure_and_signals(self) -> None:
        seen: list[tuple[str, Any]] = []

        def started(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append(("started", task_result.status))

        def finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append(("finished", task_result.status))

        task_started.connect(started)
        task_finished.connect(finished)
        try:
            result = djtasks.failing_task_value_error.enqueue()
            ran = run_jobs()
        finally:
            task_started.disconnect(started)
            task_finished.disconnect(finished)
        assert ran == Ran(retried=[int(result.id)])
        result.refresh()
        assert result.status == TaskResultStatus.READY  # 3 attempts by default
        assert len(result.errors) == 1
        assert seen == [
            ("started", TaskResultStatus.RUNNING),
            ("finished", TaskResultStatus.FAILED),
        ]

    def test_database_error_in_a_task_leaves_the_test_usable(self) -> None:
        bad = tasks.runs_sql.enqueue("bad-sql", "SELECT * FROM no_such_table")
        assert len(run_jobs()) == 1
        assert run_counts_of("bad-sql") == 0  # rolled back with its savepoint
        assert (
            Job.objects.get(id=bad.id).errors[0]["exception"] == "django.db.utils.ProgrammingError"
        )

    def test_chained_and_async_jobs(self) -> None:
        first = tasks.async_add.enqueue(1, 2)
        aresult = djtasks.add_async.enqueue(3, 4)
        assert run_jobs() == Ran(done=[first.id, int(aresult.id)])
        assert Job.objects.get(id=first.id).result == 3
        aresult.refresh()
        assert aresult.return_value == 7  # type: ignore[comparison-overlap]

    def test_a_snoozing_job_keeps_its_writes_as_in_a_worker(self) -> None:
        # A worker keeps what a snoozing run wrote (a snooze is not a failure), so
        # this job runs twice and is done; rolling its first run back made it
        # snooze MAX_SNOOZES times and end dead.
        snoozed = tasks.snoozes.enqueue("snz-tc", 1)
        assert run_jobs() == Ran(done=[snoozed.id], retried=[snoozed.id])
        assert run_counts_of("snz-tc") == 2
        job = Job.objects.get(id=snoozed.id)
        assert (job.status, job.result, job.attempts) == (JobStatus.DONE, 2, 1)

    def test_cancel(self) -> None:
        cancelled = djtasks.cancels_itself.enqueue()
        assert run_jobs() == Ran(cancelled=[int(cancelled.id)])

    def test_leaked_transaction_in_a_test_case(self) -> None:
        leaky = tasks.leaks_transaction.enqueue("leaky-tc")
        after = tasks.add.enqueue(1, 1)
        ran = run_jobs()
        assert ran == Ran(done=[after.id], dead=[leaky.id])
        assert Job.objects.get(id=after.id).result == 2

    def test_status_sets(self) -> None:
        assert set(FINISHED) == {"done", "dead", "cancelled"}
        assert set(LIVE) == {"queued", "running"}

    def test_runworker_refuses_in_a_test_case(self) -> None:
        tasks.noop.enqueue()
        with pytest.raises(CommandError, match="TestCase"):
            call_command("runworker", "--burst")


class RunJobsInATransactionTestCase(TransactionTestCase):
    def test_run_jobs_and_burst_worker(self) -> None:
        job = tasks.mark.enqueue("ttc-run-jobs")
        result = djtasks.calculate_meaning_of_life.enqueue()
        assert run_jobs() == Ran(done=[job.id, int(result.id)])
        second = tasks.mark.enqueue("ttc-burst")
        call_command("runworker", "--burst")
        assert Job.objects.get(id=second.id).status == JobStatus.DONE
        assert run_counts_of("ttc-burst") == 1
        result.refresh()
        assert result.return_value == 42

    def test_failed_run_keeps_its_writes_in_autocommit(self) -> None:
        doomed = tasks.always_fails.enqueue("doomed-ttc")
        assert run_jobs() == Ran(retried=[doomed.id])
        assert run_counts_of("doomed-ttc") == 1


@pytest.mark.django_db
def test_pytest_django_run_jobs() -> None:
    result = djtasks.echo.enqueue("x")
    job = tasks.add.enqueue(1, 1)
    ran = run_jobs(queues=["default"], max_jobs=1)
    assert len(ran) == 1
    assert len(run_jobs()) == 1
    assert Job.objects.get(id=job.id).result == 2
    assert djtasks.echo.get_result(result.id).return_value == {"args": ["x"], "kwargs": {}}
