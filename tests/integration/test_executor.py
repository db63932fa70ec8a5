"""Poison rows end dead with a reason, and the callable is never invoked."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.records import Success
from django_pgqueue.worker.executor import execute
from tests.conftest import run_counts
from tests.testapp.tasks import (
    add,
    always_fails,
    async_add,
    mark,
    noop,
    raises_interrupt,
    raises_unprintable,
    returns_a_set,
)


def insert_raw(task: str, args: str = "[]", kwargs: str = "{}") -> int:
    """A row written behind the API's back, as an attacker or a bug could."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, max_attempts, errors, worker_ids) "
            "VALUES (%s, %s::jsonb, %s::jsonb, 5, '[]', '[]') RETURNING id",
            [task, args, kwargs],
        )
        (job_id,) = cursor.fetchone()
    return int(job_id)


def run_one() -> Job:
    (claimed,) = Job.objects.claim("w")
    outcome = execute(claimed)
    if isinstance(outcome, Success):
        Job.objects.complete("w", [outcome])
    else:
        Job.objects.fail("w", [outcome])
    return Job.objects.get(pk=claimed.id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("task", "args", "kwargs", "error"),
    [
        (
            "os.system",
            '["touch /tmp/pwned"]',
            "{}",
            "UnknownTask: 'os.system' is not a registered task, and 'os' is not in an "
            "installed app",
        ),
        (
            "tests.testapp.tasks.record",
            '["x"]',
            "{}",
            "UnknownTask: 'tests.testapp.tasks.record' is not a registered task",
        ),
        ("tests.testapp.tasks.add", '{"a": 1}', "{}", "TypeError: malformed arguments"),
        (
            "tests.testapp.tasks.add",
            "[1]",
            '{"c": 2}',
            "TypeError: arguments do not match the task's signature",
        ),
        (
            "tests.testapp.broken_tasks.send",
            "[]",
            "{}",
            "UnknownTask: 'tests.testapp.broken_tasks.send': importing "
            "'tests.testapp.broken_tasks' failed: RuntimeError: settings for the mail provider",
        ),
        # Declared above the line that fails its module's import: it was registered
        # all the same, and ran.
        (
            "tests.testapp.half_tasks.early",
            "[]",
            "{}",
            "UnknownTask: 'tests.testapp.half_tasks.early': importing "
            "'tests.testapp.half_tasks' failed: NameError: name 'MAIL_SETTINGS' is not defined",
        ),
    ],
)
def test_poison_rows_are_buried_at_once_with_a_reason(
    task: str, args: str, kwargs: str, error: str
) -> None:
    job_id = insert_raw(task, args, kwargs)
    job = run_one()
    assert job.pk == job_id
    assert (job.status, job.attempts) == ("dead", 1)  # final: no retries although 5 allowed
    assert job.last_error.startswith(
        "django_pgqueue.exceptions." + error
    ) or job.last_error.startswith(error)
    assert run_counts() == {}


@pytest.mark.django_db(transaction=True)
def test_a_non_json_return_value_fails_the_job_clearly() -> None:
    insert_raw("tests.testapp.tasks.noop")
    Job.objects.filter(task=noop.path).update(args=[])
    job = run_one()
    assert job.status == "done"
    assert job.result is None

    returns_a_set.enqueue()
    job = run_one()
    assert job.status == "dead"
    assert "the return value is builtins.set {1}, which is not JSON" in job.last_error


@pytest.mark.django_db(transaction=True)
def test_async_tasks_run_to_completion() -> None:
    async_add.enqueue(40, 2)
    job = run_one()
    assert (job.status, job.result) == ("done", 42)


@pytest.mark.django_db(transaction=True)
def test_results_are_stored_as_json() -> None:
    add.enqueue(2, 40)
    mark.enqueue("r", sleep=0)
    assert run_one().result == 42
    assert run_one().result == "r"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("backoff", "first", "second"),
    [
        (None, 0.05, 0.1),  # tests.settings: BACKOFF_BASE 0.05, BACKOFF_MAX 0.2
        (0.08, 0.08, 0.16),  # the job's own base, doubling under the cap
        (4.0, 4.0, 4.0),  # above the global cap: the job's own delay, not doubled past it
    ],
)
def test_a_failures_delay_follows_the_jobs_backoff(
    backoff: float | None, first: float, second: float
) -> None:
    from django_pgqueue.worker.executor import failure

    always_fails.using(backoff=backoff, max_attempts=5).enqueue("b")
    (claimed,) = Job.objects.claim("w")
    delays = [failure(claimed, ValueError("x")).delay for _ in range(200)]
    assert first * 0.8 <= min(delays)
    assert max(delays) <= first * 1.2
    later = dataclasses.replace(claimed, attempt=2)
    delays = [failure(later, ValueError("x")).delay for _ in range(200)]
    assert second * 0.8 <= min(delays)
    assert max(delays) <= second * 1.2


@pytest.mark.django_db(transaction=True)
def test_a_task_raising_keyboardinterrupt_fails_its_job_not_the_thread() -> None:
    raises_interrupt.enqueue()
    job = run_one()
    assert (job.status, job.last_error) == ("queued", "KeyboardInterrupt: by hand")


@pytest.mark.django_db(transaction=True)
def test_an_exception_that_cannot_render_its_message_still_fails_the_job() -> None:
    raises_unprintable.enqueue()
    job = run_one()
    assert job.status == "queued"
    assert job.last_error == (
        "tests.testapp.tasks.Unprintable: <tests.testapp.tasks.Unprintable "
        "whose message could not be rendered>"
    )
