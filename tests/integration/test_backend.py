"""The Tasks backend's enqueue and get_result on PostgreSQL.

Mirrors the contract Django's tests/tasks and django-tasks-db's backend tests
check: READY results, transactional enqueue, signals, round trips, missing ids.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend import call, enqueue_many, options
from django_pgqueue.backend.compat import (
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.testapp import djtasks
from tests.testapp.djtasks import pgq
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def enqueued() -> Iterator[list[tuple[type, TaskResult[Any, Any]]]]:
    """Every (sender, task_result) task_enqueued sends during the test."""
    received: list[tuple[type, TaskResult[Any, Any]]] = []

    def receiver(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        received.append((sender, task_result))

    task_enqueued.connect(receiver)
    yield received
    task_enqueued.disconnect(receiver)


@pytest.mark.parametrize("task", [djtasks.noop_task, djtasks.noop_task_async])
def test_enqueue_inserts_one_job_and_returns_it_ready(
    task: Any, enqueued: list[tuple[type, TaskResult[Any, Any]]]
) -> None:
    with CaptureQueriesContext(connection) as queries:
        result = task.enqueue(1, two=3)
    assert len(queries) == 1  # one INSERT ... RETURNING, nothing else
    job = Job.objects.get()
    assert result.id == str(job.id)
    assert (result.status, result.task, result.args, result.kwargs, result.backend) == (
        TaskResultStatus.READY,
        task,
        [1],
        {"two": 3},
        "default",
    )
    assert result.enqueued_at == job.created_at
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None,) * 3
    assert (result.errors, result.worker_ids, result.attempts, result.is_finished) == (
        [],
        [],
        0,
        False,
    )
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert (job.task, job.args, job.kwargs, job.queue, job.priority, job.max_attempts) == (
        task.module_path,
        [1],
        {"two": 3},
        "default",
        0,
        3,
    )
    assert enqueued == [(type(task_backends["default"]), result)]


def test_aenqueue_inserts_one_job() -> None:
    result = async_to_sync(djtasks.calculate_meaning_of_life.aenqueue)()
    assert result.status == TaskResultStatus.READY
    assert [str(pk) for pk in Job.objects.values_list("id", flat=True)] == [result.id]


def test_priority_queue_and_run_after_become_the_jobs_columns() -> None:
    when = (timezone.now() + dt.timedelta(hours=1)).replace(microsecond=0)
    result = djtasks.noop_task.using(priority=-7, queue_name="queue_1", run_after=when).enqueue()
    job = Job.objects.get(pk=result.id)
    assert (job.priority, job.queue, job.run_at) == (-7, "queue_1", when)
    assert djtasks.noop_task.get_result(result.id) == result
    assert Job.objects.claim("w") == []  # not before run_after


@pytest.mark.parametrize("priority", [True, Decimal("5"), Fraction(-3), 7.0])
def test_a_priority_djangos_validation_accepts_is_stored_as_an_int(priority: Any) -> None:
    """Django's own check (a number from -100 to 100 that int() leaves unchanged)
    takes a bool (an int), a Decimal or a Fraction: so does ours, and the row gets
    the int."""
    result = djtasks.noop_task.using(priority=priority).enqueue()
    stored = Job.objects.get(pk=result.id).priority
    assert (stored, type(stored)) == (int(priority), int)
    read = djtasks.noop_task.get_result(result.id)
    assert (read.task.priority, type(read.task.priority)) == (int(priority), int)
    assert enqueue_many(djtasks.noop_task.using(priority=priority), [call()])[0].id


def test_a_run_after_already_past_reads_back_as_it_was_enqueued() -> None:
    """``run_after=timezone.now()`` (or any past moment): get_result() said None, so
    the result no longer equalled the enqueue's, as Django's contract has it. A job
    enqueued without one still reads back None, also from a transaction that began
    before it."""
    past = timezone.now() - dt.timedelta(minutes=5)
    for when in (timezone.now(), past):
        result = djtasks.noop_task.using(run_after=when).enqueue()
        assert task_backends["default"].get_result(result.id) == result
        assert task_backends["default"].get_result(result.id).task.run_after == when
    with transaction.atomic():
        djtasks.noop_task.enqueue()  # from here on now() is behind the statements' time
        late = djtasks.noop_task.enqueue()
        at_once = djtasks.noop_task.using(run_after=timezone.now()).enqueue()
    assert task_backends["default"].get_result(late.id).task.run_after is None
    assert task_backends["default"].get_result(late.id) == late
    assert task_backends["default"].get_result(at_once.id) == at_once
    # Through enqueue_many too, and by the worker's claim (task_started's result).
    bulk = enqueue_many(djtasks.noop_task.using(run_after=past), [call(), call()])
    assert [task_backends["default"].get_result(r.id) for r in bulk] == bulk
    started: list[Any] = []

    def collect(sender: Any, task_result: Any, **kwargs: Any) -> None:
        started.append(task_result)

    task_started.connect(collect)
    try:
        run_jobs()
    finally:
        task_started.disconnect(collect)
    by_id = {r.id: r.task.run_after for r in started}
    assert by_id[result.id] == past
    assert by_id[late.id] is None


def test_with_use_tz_off_a_naive_run_after_is_read_in_time_zone_as_django_does() -> None:
    """Django refuses a naive run_after only when USE_TZ is on; with it off, naive
    datetimes are in TIME_ZONE, on both APIs and for a timedelta too."""
    local = ZoneInfo("Europe/Paris")
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        when = (dt.datetime.now() + dt.timedelta(hours=1)).replace(microsecond=0)
        by_task = djtasks.noop_task.using(run_after=when).enqueue()
        later = options(djtasks.noop_task, run_after=dt.timedelta(hours=2)).enqueue()
        direct = Job.objects.enqueue(add, [1, 2], run_at=when)
    aware = when.replace(tzinfo=local)
    assert Job.objects.get(pk=by_task.id).run_at == aware
    assert Job.objects.get(pk=direct.pk).run_at == aware
    two_hours = Job.objects.get(pk=later.id).run_at - timezone.now()
    assert dt.timedelta(hours=1, minutes=59) < two_hours <= dt.timedelta(hours=2)
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        djtasks.noop_task.using(run_after=when).enqueue()  # USE_TZ on again


def test_with_use_tz_turned_off_enqueued_at_is_naive_in_time_zone_as_the_row_reads() -> None:
    """A connection opened with USE_TZ on read the times our statements return as
    UTC after override_settings(USE_TZ=False): enqueued_at was the local wall time
    labelled UTC (hours off), and COPY wrote that wrong instant as created_at."""
    djtasks.noop_task.enqueue()  # the connection, and the queue's cursor, with USE_TZ on
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        results = [
            djtasks.noop_task.enqueue(),
            *enqueue_many(djtasks.noop_task, [call()]),
            enqueue_many(djtasks.noop_task, [call()] * 500)[0],
        ]
        now = dt.datetime.now()  # naive, in TIME_ZONE (the process's zone here)
        for result in results:
            enqueued_at = result.enqueued_at
            assert enqueued_at is not None
            assert timezone.is_naive(enqueued_at)
            assert abs(enqueued_at - now) < dt.timedelta(minutes=1)
            assert enqueued_at == Job.objects.get(pk=result.id).created_at
    for result in results:
        created = Job.objects.get(pk=result.id).created_at
        assert created is not None
        assert abs(created - timezone.now()) < dt.timedelta(minutes=1)


def test_a_naive_run_after_follows_a_changed_time_zone() -> None:
    """The plan of a task (its options, checked once) held the run_at its naive
    run_after meant in the TIME_ZONE of the first call: after the time zone changed
    (override_settings in a test) the same Task was enqueued for the old instant."""
    when = (dt.datetime.now() + dt.timedelta(hours=1)).replace(microsecond=0)
    ids = {}
    for zone in ("Europe/Paris", "America/New_York"):
        with override_settings(USE_TZ=False, TIME_ZONE=zone):  # equal Tasks each time
            ids[zone] = djtasks.noop_task.using(run_after=when).enqueue().id
    for zone, job_id in ids.items():
        assert Job.objects.get(pk=job_id).run_at == when.replace(tzinfo=ZoneInfo(zone))


def test_a_run_after_outside_years_1_to_9999_in_utc_is_refused_and_writes_nothing() -> None:
    """In UTC these are 0001-12-31 BC and the year 10000. PostgreSQL stored them, and
    reading the row back failed after the insert (a DataError the caller saw, with
    the job committed), and failed every run before its task started."""
    early = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=14)))
    late = dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(-dt.timedelta(hours=14)))
    for when in (early, late):
        with pytest.raises(InvalidTask, match=r"run_after .* from 0001-01-02 to 9999-12-30 UTC"):
            djtasks.noop_task.using(run_after=when).enqueue()
        with pytest.raises(InvalidTask, match="from 0001-01-02 to 9999-12-30 UTC"):
            enqueue_many(djtasks.noop_task.using(run_after=when), [call()])
    assert Job.objects.count() == 0


def test_a_rolled_back_block_leaves_no_job() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        djtasks.noop_task.enqueue()
        assert Job.objects.count() == 1
        raise RuntimeError("the request failed")
    assert Job.objects.count() == 0


def test_the_job_is_invisible_to_workers_until_the_caller_commits(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as other, transaction.atomic():
        result = djtasks.noop_task.enqueue()
        assert result.enqueued_at is not None
        assert other.execute("SELECT count(*) FROM pgqueue_job").fetchone() == (0,)
    with psycopg.connect(db_url, autocommit=True) as other:
        assert other.execute("SELECT id FROM pgqueue_job").fetchone() == (int(result.id),)


def test_arguments_that_are_not_json_write_nothing(
    enqueued: list[tuple[type, TaskResult[Any, Any]]],
) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        djtasks.noop_task.enqueue(dt.datetime.now(tz=dt.UTC))
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(djtasks.noop_task.aenqueue)(when=object())
    with pytest.raises(TypeError, match=r"args\[0\] is builtins.float nan, which is not JSON"):
        djtasks.noop_task.enqueue(float("nan"))
    assert (Job.objects.count(), enqueued) == (0, [])


def test_bytes_and_tuples_are_normalised_as_django_does() -> None:
    result = djtasks.noop_task.enqueue(b"abc", (1, 2), k=(3,))
    assert (result.args, result.kwargs) == (["abc", [1, 2]], {"k": [3]})
    assert Job.objects.values_list("args", "kwargs").get() == (["abc", [1, 2]], {"k": [3]})


def test_the_result_keeps_its_own_copy_of_the_arguments() -> None:
    # As Django's normalize_json copies them: the caller's later changes are not
    # what was enqueued.
    inner: list[int] = [2]
    items: list[Any] = [1, inner]
    options: dict[str, list[str]] = {"to": ["a"]}
    for result in (
        djtasks.noop_task.enqueue(items, options=options),
        *enqueue_many(djtasks.noop_task, [call(items, options=options)]),
    ):
        inner.append(3)
        options["to"].append("b")
        assert (result.args, result.kwargs) == ([[1, [2]]], {"options": {"to": ["a"]}})
        inner.pop()
        options["to"].pop()


def test_the_task_is_validated_again_on_enqueue() -> None:
    task = djtasks.noop_task.using(queue_name="queue_1")
    with override_settings(
        TASKS={
            "default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": ["default"]}
        }
    ):
        with pytest.raises(InvalidTask, match="Queue 'queue_1' is not valid for backend"):
            task.enqueue()
        with pytest.raises(InvalidTask, match="Queue 'queue_1' is not valid for backend"):
            async_to_sync(task.aenqueue)()
    assert Job.objects.count() == 0


def test_a_queue_name_like_a_listed_one_asks_did_you_mean_before_add_it() -> None:
    """A typo of 'emails' was told to be added to QUEUES, typo and all."""
    with pytest.raises(InvalidTask) as caught:
        djtasks.noop_task.using(queue_name="emial")
    assert str(caught.value).endswith(
        "['default', 'emails', 'payments', 'queue_1', 'reports']: did you mean 'emails'? "
        "If not, add 'emial' there."
    )


def test_get_result_returns_what_enqueue_returned() -> None:
    tasks: list[Task[..., Any]] = [
        djtasks.noop_task,
        djtasks.echo.using(queue_name="queue_1", priority=10),
        options(djtasks.noop_task, max_attempts=9, unique_key="u", concurrency_key="c"),
    ]
    for task in tasks:
        result = task.enqueue(1, k="v")
        with CaptureQueriesContext(connection) as queries:
            assert task_backends["default"].get_result(result.id) == result
        assert len(queries) == 1
        assert async_to_sync(task.aget_result)(result.id) == result


def test_a_job_enqueued_late_in_a_transaction_reads_back_equal() -> None:
    with transaction.atomic():
        Job.objects.count()  # the transaction, and so its now(), starts here
        time.sleep(0.01)
        enqueued = djtasks.noop_task.enqueue()
        job = Job.objects.get()
        assert job.run_at <= job.created_at  # now() is fixed when the transaction starts
        assert task_backends["default"].get_result(enqueued.id) == enqueued
    assert djtasks.noop_task.get_result(enqueued.id) == enqueued


def test_refresh_of_an_unchanged_job_changes_nothing() -> None:
    result = djtasks.noop_task.enqueue()
    before = {
        name: getattr(result, name)
        for name in ("status", "enqueued_at", "errors", "worker_ids", "started_at")
    }
    result.refresh()
    async_to_sync(result.arefresh)()
    assert {name: getattr(result, name) for name in before} == before


def test_results_read_back_carry_the_jobs_options() -> None:
    result = pgq(djtasks.noop_task).using(unique_key="u", concurrency_key="c").enqueue()
    task = pgq(task_backends["default"].get_result(result.id).task)
    assert (task.max_attempts, task.unique_key, task.concurrency_key) == (3, "u", "c")
    assert task.backoff is None


def test_backoff_is_reachable_from_the_tasks_api_and_options() -> None:
    result = options(djtasks.noop_task, backoff=30).enqueue()
    assert Job.objects.get(pk=result.id).backoff == 30
    assert pgq(task_backends["default"].get_result(result.id).task).backoff == 30
    from django.conf import settings

    with override_settings(
        TASKS={"default": {**settings.TASKS["default"], "OPTIONS": {"BACKOFF": 2.5}}}
    ):
        plain = task_backends["default"].enqueue(djtasks.noop_task, [], {})
        chosen = task_backends["default"].enqueue(options(djtasks.noop_task, backoff=0), [], {})
    assert Job.objects.get(pk=plain.id).backoff == 2.5
    assert Job.objects.get(pk=chosen.id).backoff == 0  # 0 is a choice, not "unset"
    with pytest.raises(InvalidTask, match="backoff -1 must be a number of seconds"):
        options(djtasks.noop_task, backoff=-1).enqueue()


def test_a_task_bound_to_another_name_than_its_function_is_refused_at_enqueue() -> None:
    """``send_receipt = task(_send_receipt)``: workers look for the Task under the
    function's own name and find the plain function. The job was accepted, its
    get_result said it does not exist, and the worker buried it as UnknownTask."""
    with pytest.raises(InvalidTask) as refused:
        djtasks.send_receipt.enqueue(1)
    assert str(refused.value) == (
        "task 'tests.testapp.djtasks._send_receipt': workers look for a Task under its "
        "function's own name, and 'tests.testapp.djtasks' holds a function, not a Task, by "
        "the name '_send_receipt': decorate the function itself with @task (a Task bound to "
        "another name, as in `x = task(f)`, cannot be found) (TASKS['default'])"
    )
    with pytest.raises(InvalidTask, match="decorate the function itself"):
        enqueue_many(djtasks.send_receipt, [call(1)])
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "result_id",
    [
        "123",
        "0",
        "007",
        "abc",
        "",
        "-1",
        "99999999999999999999",
        "12345678-1234-5678-1234-567812345678",
    ],
)
def test_unknown_and_malformed_ids_do_not_exist(result_id: str) -> None:
    djtasks.noop_task.enqueue()
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(backend.aget_result)(result_id)


def test_a_result_of_another_task_does_not_match() -> None:
    result = djtasks.noop_task.enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        djtasks.calculate_meaning_of_life.get_result(result.id)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        async_to_sync(djtasks.calculate_meaning_of_life.aget_result)(result.id)


def test_a_job_that_is_not_a_tasks_framework_task_has_no_result() -> None:
    from tests.testapp.tasks import add

    job = add.enqueue(1, 2)
    with pytest.raises(TaskResultDoesNotExist, match="which is not a Tasks-framework Task"):
        task_backends["default"].get_result(str(job.id))


def test_a_live_unique_key_returns_the_live_job_without_a_second_insert(
    enqueued: list[tuple[type, TaskResult[Any, Any]]],
) -> None:
    keyed = options(djtasks.noop_task, unique_key="receipt:1")
    first = keyed.enqueue(1)
    second = keyed.enqueue(2)
    assert second == first  # the live job's result: its arguments, not the new ones
    assert second.args == [1]
    assert Job.objects.count() == 1
    assert len(enqueued) == 1  # nothing new was enqueued


def test_a_live_job_whose_json_python_cannot_read_is_named_not_a_valueerror(
    enqueued: list[tuple[type, TaskResult[Any, Any]]],
) -> None:
    """A row another program wrote with a 5,000-digit number: a duplicate enqueue
    and get_result raised Python's "Exceeds the limit (4300 digits)" ValueError."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, unique_key, errors, worker_ids) "
            "VALUES (%s, '[1e5000]'::jsonb, '{}', 'queued', 'huge', '[]', '[]') RETURNING id",
            [djtasks.noop_task.module_path],
        )
        planted = cursor.fetchone()[0]
    cannot = rf"^job {planted} holds JSON that Python cannot read \(Exceeds the limit"
    with pytest.raises(InvalidJob, match=cannot):
        options(djtasks.noop_task, unique_key="huge").enqueue(1)
    with pytest.raises(InvalidJob, match=cannot):
        task_backends["default"].get_result(str(planted))
    assert Job.objects.count() == 1
    assert enqueued == []


def test_a_unique_key_held_by_a_direct_api_job_is_refused_with_the_reason(
    enqueued: list[tuple[type, TaskResult[Any, Any]]],
) -> None:
    from tests.testapp.tasks import add

    held = add.using(unique_key="shared-key").enqueue(1, 2)
    refused = rf"held by live job {held.pk} of 'tests.testapp.tasks.add', which is not a Tasks"
    with pytest.raises(InvalidJob, match=refused):
        options(djtasks.noop_task, unique_key="shared-key").enqueue(5)
    assert Job.objects.count() == 1
    assert enqueued == []


def test_a_unique_key_held_by_another_tasks_job_returns_that_job() -> None:
    first = options(djtasks.echo, unique_key="shared").enqueue(1)
    second = options(djtasks.noop_task, unique_key="shared").enqueue(2)
    assert second.id == first.id
    assert second.task.module_path == djtasks.echo.module_path  # the live job's own task
    assert Job.objects.count() == 1


def test_max_attempts_comes_from_the_task_then_options_then_pgqueue() -> None:
    tasks = {
        "default": {
            "BACKEND": "django_pgqueue.backend.PgQueueBackend",
            "QUEUES": ["default", "queue_1"],
            "OPTIONS": {"MAX_ATTEMPTS": 5},
        }
    }
    djtasks.noop_task.enqueue()
    with override_settings(TASKS=tasks):
        djtasks.noop_task.enqueue()
        pgq(djtasks.noop_task).using(max_attempts=1).enqueue()
    assert list(Job.objects.order_by("id").values_list("max_attempts", flat=True)) == [3, 5, 1]


@contextlib.contextmanager
def heard() -> Iterator[list[tuple[str, Any, str, str | None]]]:
    """What task_started and task_finished said while the block ran: (signal,
    sender, status, the last error's exception class path)."""
    seen: list[tuple[str, Any, str, str | None]] = []

    def receiver(name: str) -> Callable[..., None]:
        def hear(sender: Any, task_result: Any, **kwargs: Any) -> None:
            errors = task_result.errors
            last = errors[-1].exception_class_path if errors else None
            seen.append((name, sender, task_result.status, last))

        return hear

    started, finished = receiver("started"), receiver("finished")
    task_started.connect(started)
    task_finished.connect(finished)
    try:
        yield seen
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)


@pytest.mark.parametrize(
    ("task_name", "status", "error"),
    [
        ("always_snoozes", "dead", "django_pgqueue.exceptions.TooManySnoozes"),
        ("snoozes_after_a_stop_request", "cancelled", "django_pgqueue.control.Cancel"),
    ],
)
def test_a_snooze_that_does_not_run_again_is_reported_failed(
    task_name: str, status: str, error: str
) -> None:
    """A snooze is READY (it runs again), except when the executor ends the job
    instead: buried past MAX_SNOOZES, or cancelled as an operator asked. Those
    were READY too, so failure receivers never heard of them."""
    result = getattr(djtasks, task_name).enqueue()
    with heard() as seen, override_settings(PGQUEUE={"MAX_SNOOZES": 1}):
        run_jobs()
    assert Job.objects.get(pk=result.id).status == status
    finished = [(status, last) for name, _, status, last in seen if name == "finished"]
    if status == "dead":  # one snooze allowed, then buried
        assert finished == [(TaskResultStatus.READY, None), (TaskResultStatus.FAILED, error)]
    else:
        assert finished == [(TaskResultStatus.FAILED, error)]
    assert getattr(djtasks, task_name).get_result(result.id).status == TaskResultStatus.FAILED


def test_a_job_whose_arguments_cannot_be_decoded_is_reported_failed_by_the_signals() -> None:
    """A row whose stored arguments Python cannot read (a 5,001-digit number, past
    Python's limit for int(), planted by hand) is buried at once, and, as one whose
    arguments no longer fit, reported FAILED by task_started then task_finished: it
    sent no signal."""
    result = djtasks.calculate_meaning_of_life.enqueue()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_job SET args = '[1e5000]' WHERE id = %s", [int(result.id)])
    with heard() as seen:
        ran = run_jobs()
    assert ran.dead == [int(result.id)]
    backend = type(task_backends["default"])
    assert seen == [
        ("started", backend, TaskResultStatus.RUNNING, None),
        (
            "finished",
            backend,
            TaskResultStatus.FAILED,
            "django_pgqueue.worker.executor.UndecodableJob",
        ),
    ]
    # (Only these columns: Django itself cannot decode those arguments either.)
    attempts, error = Job.objects.values_list("attempts", "last_error").get(pk=result.id)
    assert (attempts, error.split(":")[0]) == (1, "django_pgqueue.worker.executor.UndecodableJob")


def test_a_job_whose_arguments_no_longer_fit_is_reported_failed_by_the_signals() -> None:
    """Its arguments changed under it (a deploy changed the signature): the worker
    refuses it before it runs, and sent no signal, so a receiver alerting on
    task_finished FAILED never heard of it. It gets task_started then task_finished
    FAILED, with the TypeError, as Django's database worker does."""
    result = djtasks.calculate_meaning_of_life.enqueue()
    Job.objects.filter(pk=result.id).update(args=[1])
    with heard() as seen:
        ran = run_jobs()
    assert ran.dead == [int(result.id)]
    backend = type(task_backends["default"])
    assert seen == [
        ("started", backend, TaskResultStatus.RUNNING, None),
        ("finished", backend, TaskResultStatus.FAILED, "builtins.TypeError"),
    ]
    stored = djtasks.calculate_meaning_of_life.get_result(result.id)
    assert stored.status == TaskResultStatus.FAILED
    assert stored.errors[-1].exception_class_path == "builtins.TypeError"
