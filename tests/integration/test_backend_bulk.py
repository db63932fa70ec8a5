"""enqueue_many: the bulk enqueue Django's Tasks API lacks, on the engine's fast path."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_pgqueue.backend import call, enqueue_many, options
from django_pgqueue.backend.compat import TASKS_APP, TaskResultStatus, task_enqueued
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.models import Job
from django_pgqueue.queue.enqueue import COPY_THRESHOLD
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def test_many_jobs_in_one_call_with_their_ready_results_and_signals() -> None:
    sent: list[Any] = []

    def collect(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append(task_result)

    task_enqueued.connect(collect)
    try:
        results = enqueue_many(djtasks.echo, [call(n, tag=f"t{n}") for n in range(5)])
    finally:
        task_enqueued.disconnect(collect)
    assert [r.status for r in results] == [TaskResultStatus.READY] * 5
    assert [r.args for r in results] == [[n] for n in range(5)]
    assert [r.kwargs for r in results] == [{"tag": f"t{n}"} for n in range(5)]
    assert [r.id for r in sent] == [r.id for r in results]
    rows = Job.objects.order_by("id")
    assert [str(j.id) for j in rows] == [r.id for r in results]
    assert {j.task for j in rows} == {djtasks.echo.module_path}
    assert all(r.enqueued_at == rows[0].created_at for r in results)
    assert djtasks.echo.get_result(results[2].id).args == [2]


@pytest.mark.parametrize("count", [3, COPY_THRESHOLD])
def test_it_joins_the_callers_transaction(count: int, db_url: str) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many(djtasks.noop_task, [call(n) for n in range(count)])
        with psycopg.connect(db_url, autocommit=True) as other:
            assert other.execute("SELECT count(*) FROM pgqueue_job").fetchone() == (0,)
        raise RuntimeError("the request failed")
    assert Job.objects.count() == 0
    with transaction.atomic():
        results = enqueue_many(djtasks.noop_task, [call(n) for n in range(count)])
    assert Job.objects.count() == count == len(results)


def test_the_tasks_options_apply_to_every_job() -> None:
    when = (timezone.now() + dt.timedelta(hours=1)).replace(microsecond=0)
    task = options(
        djtasks.noop_task.using(priority=3, queue_name="emails", run_after=when),
        max_attempts=7,
        concurrency_key="c",
    )
    enqueue_many(task, [call(), call()])
    assert set(
        Job.objects.values_list("priority", "queue", "run_at", "max_attempts", "concurrency_key")
    ) == {(3, "emails", when, 7, "c")}


@pytest.mark.parametrize("count", [1, COPY_THRESHOLD])
def test_a_whole_float_priority_django_accepts_is_written_by_copy_too(count: int) -> None:
    """Django's validation takes priority=5.0 (a whole number). The COPY of a large
    batch wrote it as the text "5.0", which smallint refused with a DataError."""
    task = djtasks.noop_task.using(priority=5.0)  # type: ignore[arg-type]
    results = enqueue_many(task, [call()] * count)
    assert len(results) == count
    assert set(Job.objects.values_list("priority", flat=True)) == {5}


def test_a_unique_key_enqueues_one_job_and_the_rest_are_its_duplicates() -> None:
    task = options(djtasks.noop_task, unique_key="once")
    results = enqueue_many(task, [call(1), call(2), call(3)])
    assert Job.objects.count() == 1
    assert len({r.id for r in results}) == 1


def test_bad_arguments_are_refused_before_anything_is_written() -> None:
    with pytest.raises(TypeError, match=r"args\[0\] is datetime.datetime .*Unsupported type"):
        enqueue_many(djtasks.noop_task, [call(1), call(timezone.now())])
    assert Job.objects.count() == 0


def test_on_another_backend_enqueue_many_enqueues_each_call_there() -> None:
    """Tests that point TASKS at Django's DummyBackend (or ImmediateBackend) keep
    working: one enqueue per call, as that backend does it."""
    framework = "django.tasks" if TASKS_APP is None else "django_tasks"
    dummy = {"dummy": {"BACKEND": f"{framework}.backends.dummy.DummyBackend"}}
    with override_settings(TASKS={**settings.TASKS, **dummy}):
        results = enqueue_many(djtasks.noop_task.using(backend="dummy"), [call(1), call(2)])
    assert [result.args for result in results] == [[1], [2]]
    assert [result.backend for result in results] == ["dummy", "dummy"]
    assert Job.objects.count() == 0


def test_a_unique_key_task_checks_every_call_before_writing_any() -> None:
    task = options(djtasks.fails_with, unique_key="checked-first")
    with pytest.raises(InvalidJobArguments, match=r"calls\[1\] of enqueue_many: .*argument"):
        enqueue_many(task, [call("a"), call("a", "b")])
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("calls", "index"),
    [
        ([call(1), 2], 1),
        ([(1,), call(2)], 0),
        ([call(1), (1, {})], 1),
        ([call(1), call(2), ((1,), {}, 3)], 2),
        ([({"a": 1}, {})], 0),
        (["ab"], 0),
        ([((1,), [("a", 1)])], 0),
    ],
)
def test_a_call_of_the_wrong_shape_is_refused_by_its_index(calls: list[Any], index: int) -> None:
    with pytest.raises(
        InvalidJobArguments, match=rf"calls\[{index}\] of enqueue_many is .*build each with call"
    ):
        enqueue_many(djtasks.noop_task, calls)
    assert Job.objects.count() == 0


def test_aenqueue_many_joins_the_callers_transaction() -> None:
    from asgiref.sync import async_to_sync

    from django_pgqueue.backend import aenqueue_many

    results = async_to_sync(aenqueue_many)(djtasks.echo, [call(1), call(2)])
    assert [(r.args, r.status) for r in results] == [([1], "READY"), ([2], "READY")]
    assert Job.objects.filter(pk__in=[r.id for r in results]).count() == 2
    with pytest.raises(RuntimeError), transaction.atomic():
        async_to_sync(aenqueue_many)(djtasks.echo, [call(3)])
        raise RuntimeError("rolled back")
    assert Job.objects.count() == 2


def test_something_that_is_not_a_task_is_refused_with_what_to_pass() -> None:
    """A plain function (the task's .func, say) gave AttributeError: 'function' object
    has no attribute 'backend'."""
    with pytest.raises(TypeError, match=r"enqueue_many\(\) takes a Task \(a function declared "):
        enqueue_many(djtasks.noop_task.func, [call()])  # type: ignore[arg-type]
    assert Job.objects.count() == 0


def test_a_call_that_does_not_fit_the_signature_is_named_by_its_index() -> None:
    with pytest.raises(InvalidJobArguments, match=r"calls\[2\] of enqueue_many: "):
        enqueue_many(djtasks.fails_with, [call("a"), call("b"), call("a", "b")])
    assert Job.objects.count() == 0


@pytest.mark.slow
def test_a_worker_runs_what_enqueue_many_wrote() -> None:
    results = enqueue_many(djtasks.echo, [call(n) for n in range(COPY_THRESHOLD + 10)])
    with worker_thread(burst=True) as worker:
        assert worker.join(60) == 0
    assert status_counts() == {"done": COPY_THRESHOLD + 10}
    assert djtasks.echo.get_result(results[-1].id).return_value == {
        "args": [COPY_THRESHOLD + 9],
        "kwargs": {},
    }


@pytest.mark.parametrize("unique", [False, True], ids=["plain", "unique_key"])
def test_a_receiver_that_raises_still_hears_of_every_job_then_its_first_error_is_raised(
    unique: bool,
) -> None:
    """As ``enqueue()`` does (the row written, then ``task_enqueued.send``, whose
    receiver's error reaches the caller), every row is written; each job's signal
    is sent, then the first error raised. The signal stopped at the first job, so
    the rest went unheard; with a unique_key, the job was rolled back."""
    heard: list[str] = []

    def fails(sender: Any, task_result: Any, **kwargs: Any) -> None:
        heard.append(task_result.id)
        raise RuntimeError(f"receiver failed on {task_result.id}")

    task = options(djtasks.noop_task, unique_key="k") if unique else djtasks.noop_task
    task_enqueued.connect(fails)
    try:
        with pytest.raises(RuntimeError) as raised:
            enqueue_many(task, [call(n) for n in range(3)])
        with pytest.raises(RuntimeError):  # enqueue() itself: the row stays, as here
            djtasks.noop_task.enqueue("single")
    finally:
        task_enqueued.disconnect(fails)
    ids = [str(pk) for pk in Job.objects.order_by("id").values_list("id", flat=True)]
    assert len(ids) == (1 if unique else 3) + 1  # a unique key: the others are its duplicates
    assert heard == ids
    assert str(raised.value) == f"receiver failed on {ids[0]}"
