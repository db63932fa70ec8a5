"""Django's own Tasks tests (tests/tasks/ of Django 6.1: test_tasks.py,
test_immediate_backend.py, test_dummy_backend.py), ported to ``PgQueueBackend``: what
they assert of a backend that claims the feature, checked here against ours, in our
words. Where Django's assertion runs the task inside ``enqueue()`` (ImmediateBackend),
the job is run by the worker's code (``run_jobs()``) and read back.

What tests/integration/test_contract_backend_differential.py already compares (final
outcomes, signal statuses, enqueue results, InvalidTask triggers) is not repeated:
this file adds the full equality of read-back results, the payload of every signal,
the running result of later attempts, exact tracebacks and log lines, pickling,
``USE_TZ = False``, the backend-settings cases of TaskTestCase, and edge exceptions.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

pytest.importorskip("django.tasks", reason="compares with Django's own Tasks backends")

from django.tasks.exceptions import InvalidTaskBackend

from django_pgqueue.backend import call, enqueue_many, options
from django_pgqueue.backend.compat import (
    TASKS_LOGGER,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultMismatch,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.integration.test_contract_backend_differential import (
    RUN_CASES,
    TASKS,
    outcome,
    ran,
)
from tests.testapp import difftasks, djtasks, edgetasks
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)

OURS = "django_pgqueue.backend.PgQueueBackend"


@pytest.fixture(autouse=True)
def three_backends() -> Iterator[None]:
    """Ours as "default" beside Django's two; a failure is final unless a test's
    task asks for more attempts (Django's backends never retry)."""
    with override_settings(TASKS=TASKS, PGQUEUE={"MAX_ATTEMPTS": 1, "LEASE": 30}):
        yield


def backend() -> Any:
    return task_backends["default"]


def run(declared: Task[Any, Any], *args: Any, **kwargs: Any) -> TaskResult[Any, Any]:
    result = declared.enqueue(*args, **kwargs)
    assert len(run_jobs()) == 1
    result.refresh()
    return result


# -- ImmediateBackendTestCase ----------------------------------------------------------


@pytest.mark.parametrize("declared", [djtasks.noop_task, djtasks.noop_task_async])
def test_a_finished_run_has_the_fields_immediate_backend_asserts(
    declared: Task[Any, Any],
) -> None:
    result = run(declared, 1, two=3)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished is True
    assert None not in (result.started_at, result.last_attempted_at, result.finished_at)
    assert result.enqueued_at <= result.started_at <= result.finished_at  # type: ignore[operator]
    assert result.return_value is None
    assert result.task == declared
    assert (result.args, result.kwargs, result.attempts) == ([1], {"two": 3}, 1)


def test_a_failure_keeps_the_traceback_as_format_exception_wrote_it() -> None:
    """Django asserts the traceback ends with the exception's line and its newline."""
    result = run(djtasks.failing_task_value_error)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match=r"^Task failed$"):
        _ = result.return_value
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert error.traceback.endswith("ValueError: This Task failed due to ValueError\n")
    assert result.task == djtasks.failing_task_value_error
    assert (result.args, result.kwargs) == ([], {})


def test_an_exception_of_an_exception_is_kept_with_its_source_line() -> None:
    result = run(djtasks.complex_exception)
    assert result._return_value is None  # type: ignore[attr-defined]
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_a_run_logs_the_three_lines_immediate_backend_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        good = djtasks.noop_task.enqueue()
        run_jobs()
    lines = [record.getMessage() for record in caplog.records if record.name == TASKS_LOGGER]
    assert len(lines) == 3
    for line, said in zip(lines, ("enqueued", "state=RUNNING", "state=SUCCESSFUL"), strict=True):
        assert said in line
        assert good.id in line
    assert not any("NoneType" in line for line in lines)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        bad = djtasks.failing_task_value_error.enqueue()
        run_jobs()
    errors = [r for r in caplog.records if r.name == TASKS_LOGGER and r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "state=FAILED" in errors[0].getMessage()
    assert bad.id in errors[0].getMessage()
    assert "This Task failed due to ValueError" in caplog.text


def test_a_context_task_gets_its_own_result_and_attempt() -> None:
    assert run(djtasks.check_context, 1).status == TaskResultStatus.SUCCESSFUL
    result = run(djtasks.get_task_id)
    assert result.return_value == result.id


def test_a_task_is_validated_again_at_enqueue_by_the_backend_now_in_force() -> None:
    with override_settings(TASKS={"default": {"BACKEND": OURS, "QUEUES": []}}):
        declared = djtasks.noop_task.using(queue_name="unknown_queue")
    with override_settings(TASKS={"default": {"BACKEND": OURS, "QUEUES": ["queue-1"]}}):
        refused = r"^Queue 'unknown_queue' is not valid for backend"
        with pytest.raises(InvalidTask, match=refused):
            declared.enqueue()
        with pytest.raises(InvalidTask, match=refused):
            async_to_sync(declared.aenqueue)()
    assert Job.objects.count() == 0


def test_the_backend_itself_takes_args_as_a_list_or_a_tuple() -> None:
    results = [
        backend().enqueue(djtasks.calculate_meaning_of_life, [], {}),
        backend().enqueue(djtasks.calculate_meaning_of_life, (), {}),
    ]
    assert len(run_jobs()) == 2
    for result in results:
        result.refresh()
        assert result.return_value == 42


def test_options_are_empty_when_none_are_set() -> None:
    with override_settings(TASKS={"default": {"BACKEND": OURS}}):
        assert backend().options == {}
        assert backend().alias == "default"


# -- TaskTestCase and DummyBackendTestCase ----------------------------------------------


def test_a_result_read_back_equals_the_enqueued_one() -> None:
    """DummyBackend's ``assertEqual(result, new_result)``: the whole dataclass, not
    only what a user reads off it."""
    declared = djtasks.echo.using(priority=7, queue_name="emails")
    result = declared.enqueue(1, (2,), b"x", k={"bb": 1, "a": [2]})
    assert backend().get_result(result.id) == result
    assert djtasks.echo.get_result(result.id) == result


def test_refresh_and_arefresh_leave_an_unchanged_result_as_it_was() -> None:
    result = djtasks.noop_task.enqueue(1, k="v")
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before
    async_to_sync(result.arefresh)()
    assert dataclasses.asdict(result) == before


def test_the_async_variants_read_what_the_sync_ones_read() -> None:
    declared_tasks: list[Task[Any, Any]] = [
        djtasks.noop_task,
        djtasks.noop_task_async,
        djtasks.calculate_meaning_of_life,
    ]

    async def enqueue_all() -> list[TaskResult[Any, Any]]:
        results = []
        for declared in declared_tasks:
            result = await declared.aenqueue()
            assert result.status == TaskResultStatus.READY
            assert (result.args, result.kwargs, result.task) == ([], {}, declared)
            assert await declared.aget_result(result.id) == result
            assert await backend().aget_result(result.id) == result
            results.append(result)
        return results

    results = async_to_sync(enqueue_all)()
    assert len(run_jobs()) == 3

    async def refresh_all() -> None:
        for result in results:
            await result.arefresh()
            assert result.status == TaskResultStatus.SUCCESSFUL
            assert await result.task.aget_result(result.id) == result

    async_to_sync(refresh_all)()
    assert results[2].return_value == 42


def test_a_result_of_another_task_names_it_in_djangos_words() -> None:
    result = backend().enqueue(djtasks.noop_task_async, (), {})
    with pytest.raises(
        TaskResultMismatch,
        match=r"^Task does not match \(received 'tests\.testapp\.djtasks\.noop_task_async'\)$",
    ):
        djtasks.noop_task.get_result(result.id)


def test_an_argument_that_is_not_json_is_a_type_error_with_djangos_words() -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        djtasks.noop_task.enqueue(dt.datetime.now())
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(djtasks.noop_task.aenqueue)(dt.datetime.now())
    assert Job.objects.count() == 0


class _Holder:
    def method(self) -> None: ...


def test_what_task_test_case_asserts_of_the_backend_settings() -> None:
    for function in (any, _Holder().method):
        with pytest.raises(  # Django's words, then which task (ours)
            InvalidTask, match=r"^Task function must be defined at a module level\. \(task '"
        ):
            task()(function)
    with pytest.raises(InvalidTaskBackend, match=r"^The connection 'unknown' doesn't exist\.$"):
        djtasks.noop_task.using(backend="unknown")
    again = djtasks.noop_task.using()
    assert again == djtasks.noop_task
    assert again is not djtasks.noop_task
    with override_settings(TASKS={}), pytest.raises(InvalidTaskBackend):
        djtasks.noop_task.enqueue()
    missing = override_settings(TASKS={"default": {"BACKEND": "does.not.exist"}})
    with missing, pytest.raises(InvalidTaskBackend, match=r"^Could not find backend 'does"):
        djtasks.noop_task.enqueue()
    # QUEUES left out: Django's default, ["default"]; an empty list checks no name.
    unlisted = override_settings(TASKS={"default": {"BACKEND": OURS}})
    with unlisted, pytest.raises(InvalidTask, match=r"^Queue 'queue_1' is not valid for backend\."):
        djtasks.noop_task.using(queue_name="queue_1")
    with override_settings(TASKS={"default": {"BACKEND": OURS, "QUEUES": []}}):
        anywhere = djtasks.noop_task.using(queue_name="queue-2")
        assert anywhere.queue_name == "queue-2"
        assert backend().get_result(anywhere.enqueue().id).task.queue_name == "queue-2"


@pytest.mark.skipif("__reduce__" not in Task.__dict__, reason="Tasks pickle from Django 6.1")
def test_a_task_and_its_results_pickle_with_their_options() -> None:
    when = timezone.now() + dt.timedelta(hours=1)
    declared = options(
        djtasks.echo,
        max_attempts=5,
        unique_key="k",
        concurrency_key="c",
        backoff=2,
        retry_on=(KeyError,),
        discard_on=ValueError,
    ).using(priority=3, queue_name="emails", run_after=when)
    copy = pickle.loads(pickle.dumps(declared))
    assert dataclasses.asdict(copy) == dataclasses.asdict(declared)  # options too
    result = declared.enqueue(1)
    assert pickle.loads(pickle.dumps(result)) == result
    read = backend().get_result(result.id)
    assert pickle.loads(pickle.dumps(read)) == read
    assert dataclasses.asdict(pickle.loads(pickle.dumps(read)).task) == dataclasses.asdict(
        read.task
    )


# -- signals: every payload, as ImmediateBackend sends it -------------------------------


@pytest.mark.parametrize(
    ("declared", "args", "kwargs"),
    [pytest.param(*case, id=name) for name, *case in RUN_CASES],
)
def test_every_signal_carries_the_result_immediate_backend_sends(
    declared: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """The result each of task_enqueued, task_started and task_finished carries, as a
    receiver reads it when it is sent (ImmediateBackend changes one result as it
    goes), and the keywords the receiver gets."""
    heard: dict[str, list[Any]] = {"immediate": [], "default": []}

    def receiver(name: str) -> Callable[..., None]:
        def receive(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
            heard[task_result.backend].append((name, outcome(task_result), sorted(kwargs)))

        return receive

    receivers = [
        (signal, receiver(name))
        for name, signal in (
            ("enqueued", task_enqueued),
            ("started", task_started),
            ("finished", task_finished),
        )
    ]
    for signal, receive in receivers:
        signal.connect(receive)
    try:
        declared.using(backend="immediate").enqueue(*args, **kwargs)
        declared.enqueue(*args, **kwargs)
        assert len(run_jobs()) == 1
    finally:
        for signal, receive in receivers:
            signal.disconnect(receive)
    assert [name for name, _, _ in heard["default"]] == ["enqueued", "started", "finished"]
    assert heard["default"] == heard["immediate"]


def test_a_later_attempts_running_result_is_what_get_result_reads() -> None:
    """The result task_started carries on attempts 2 and 3 (built from the claim)
    against the row: the earlier errors, every claimer, the first start."""
    differences: list[Any] = []
    fields = [field.name for field in dataclasses.fields(TaskResult)]

    def receive(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        read = backend().get_result(task_result.id)
        differing = [name for name in fields if getattr(task_result, name) != getattr(read, name)]
        differences.append((differing, len(task_result.errors), task_result.attempts))

    result = options(djtasks.fails_until, max_attempts=3, backoff=0).enqueue(2)
    task_started.connect(receive)
    try:
        for _ in range(1000):  # each retry is due at once (backoff 0): no waiting
            run_jobs()
            result.refresh()
            if result.is_finished:
                break
    finally:
        task_started.disconnect(receive)
    assert differences == [([], 0, 1), ([], 1, 2), ([], 2, 3)]
    assert (result.status, result.return_value["attempt"], len(result.errors)) == (
        TaskResultStatus.SUCCESSFUL,
        3,
        2,
    )


# -- run_after ---------------------------------------------------------------------------

#: Times Django takes as run_after, far enough from 1970 that epoch seconds in a
#: float cannot hold their microseconds.
FAR_PAST = [
    dt.datetime(year, 1, 1, 0, 0, 0, micro, tzinfo=dt.UTC)
    for year in (2, 1000, 1600, 1800)
    for micro in (1, 123457, 999999)
]


def test_a_far_past_run_after_reads_the_same_in_the_task_as_in_get_result() -> None:
    """The running result (task_started, the task's context) gave a run_after some
    microseconds off the row's: the claim returns times as float epoch seconds."""
    results = [difftasks.reads_itself.using(run_after=when).enqueue() for when in FAR_PAST]
    assert len(run_jobs()) == len(FAR_PAST)
    for result, when in zip(results, FAR_PAST, strict=True):
        result.refresh()
        assert (result.task.run_after, result.return_value) == (when, [])


def test_a_far_past_run_after_reads_the_same_in_a_real_worker(db_url: str) -> None:
    heard: list[Any] = []
    results = [difftasks.reads_itself.using(run_after=when).enqueue() for when in FAR_PAST]
    done = django_command(db_url, "runworker", "--burst", "--no-listen")
    assert done.returncode == 0, done.stderr
    for result in results:
        result.refresh()
        heard.append((result.status, result.return_value))
    assert heard == [(TaskResultStatus.SUCCESSFUL, [])] * len(FAR_PAST)


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_without_use_tz_every_time_is_naive_local_and_in_order(zone: str) -> None:
    """Django checks run_after is aware only with USE_TZ on; off, a naive one is
    taken, and every time a result holds is naive, in TIME_ZONE."""
    seen: list[TaskResult[Any, Any]] = []

    def receive(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        seen.append(dataclasses.replace(task_result))

    with override_settings(USE_TZ=False, TIME_ZONE=zone):
        before = timezone.now()
        plain = djtasks.noop_task.enqueue()
        naive = (timezone.now() - dt.timedelta(minutes=1)).replace(microsecond=0)
        deferred = djtasks.noop_task.using(run_after=naive).enqueue()
        after = timezone.now()
        assert before <= plain.enqueued_at <= after  # type: ignore[operator]
        assert backend().get_result(plain.id) == plain
        assert backend().get_result(deferred.id).task.run_after == naive
        for signal in (task_started, task_finished):
            signal.connect(receive)
        try:
            assert len(run_jobs()) == 2
        finally:
            for signal in (task_started, task_finished):
                signal.disconnect(receive)
        done = timezone.now()
        for result in (plain, deferred):
            result.refresh()
            assert result.enqueued_at <= result.started_at <= result.finished_at <= done  # type: ignore[operator]
        for result in seen:
            times = [result.enqueued_at, result.started_at, result.last_attempted_at]
            assert all(moment is not None and moment.tzinfo is None for moment in times)
            assert before <= result.enqueued_at <= result.started_at <= done  # type: ignore[operator]
        assert [result.task.run_after for result in seen].count(naive) == 2


# -- exceptions at the edges, and bulk results ------------------------------------------


@pytest.mark.parametrize("kind", list(edgetasks.RAISED))
def test_an_edge_exception_reads_back_as_immediate_backend_reports_it(kind: str) -> None:
    theirs, _ = ran("immediate", edgetasks.raises, kind)
    ours, _ = ran("default", edgetasks.raises, kind)
    assert outcome(ours) == outcome(theirs)
    last_lines = [result.errors[0].traceback.splitlines()[-3:] for result in (ours, theirs)]
    assert last_lines[0] == last_lines[1]


def test_a_chained_exception_keeps_its_cause() -> None:
    theirs, _ = ran("immediate", edgetasks.raises_chained)
    ours, _ = ran("default", edgetasks.raises_chained)
    assert outcome(ours) == outcome(theirs)
    assert "The above exception was the direct cause" in ours.errors[0].traceback
    assert "KeyError: 'first'" in ours.errors[0].traceback


@pytest.mark.parametrize("count", [3, 600])  # 600: written with COPY
def test_enqueue_many_results_equal_what_get_result_reads(count: int) -> None:
    variants = [
        djtasks.echo,
        djtasks.echo.using(priority=5.0, queue_name="emails"),  # type: ignore[arg-type]
        djtasks.echo.using(run_after=timezone.now() + dt.timedelta(hours=1)),
        options(djtasks.echo, max_attempts=7, backoff=1),
    ]
    for declared in variants:
        results = enqueue_many(declared, [call(i, k={"bb": i, "a": [i]}) for i in range(count)])
        for result in (results[0], results[-1]):
            read = backend().get_result(result.id)
            assert read == result
            assert read.task.run_after == declared.run_after


def test_an_enqueue_is_one_query_and_a_read_one_more() -> None:
    variants = [
        djtasks.echo,
        djtasks.echo.using(priority=3),
        options(djtasks.echo, max_attempts=4, retry_on=(KeyError,)),
    ]
    for declared in variants:
        with CaptureQueriesContext(connection) as enqueued:
            result = declared.enqueue(1)
        assert len(enqueued) == 1
        with CaptureQueriesContext(connection) as read:
            backend().get_result(result.id)
            result.refresh()
        assert len(read) == 2
