"""What the peers' own suites (django-tasks-db's tests/tests.py, Django's tests/tasks/)
assert of a backend, where our other tests do not check it yet: a real
``runworker --burst`` running what django-tasks-db's worker tests run (a task that
raises SystemExit or KeyboardInterrupt, a context task, an async task that enqueues
and reads back another), async signal receivers, and the JSON normalisation of
arguments and return values as Django's ``normalize_json`` does it, compared with
Django's ImmediateBackend."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

# tests.testapp.difftasks declares its tasks with Django's own django.tasks (6.0+):
# on Django 5.2 (the backport) this module would stop the whole run at collection.
pytest.importorskip("django.tasks", reason="compares with Django's own Tasks backends")

from django_pgqueue.backend import options
from django_pgqueue.backend.compat import (
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.testapp import difftasks, djtasks, paritytasks
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)

OURS = "django_pgqueue.backend.PgQueueBackend"
IMMEDIATE = "django.tasks.backends.immediate.ImmediateBackend"


@pytest.fixture
def with_immediate() -> Iterator[None]:
    """Ours as "default" (QUEUES unchecked, as Django's empty list says) beside
    Django's ImmediateBackend; a failure is final, as on Django's backends."""
    tasks = {
        "default": {"BACKEND": OURS, "QUEUES": []},
        "immediate": {"BACKEND": IMMEDIATE, "QUEUES": []},
    }
    with override_settings(TASKS=tasks, PGQUEUE={"MAX_ATTEMPTS": 1, "LEASE": 30}):
        yield


def burst(db_url: str, *extra: str) -> None:
    done = django_command(db_url, "runworker", "--burst", "--no-listen", *extra)
    assert done.returncode == 0, done.stderr


# -- django-tasks-db's DatabaseWorkerProcessTestCase, on a real worker -----------------


@pytest.mark.parametrize(
    ("declared", "raised"),
    [(difftasks.raises_system_exit, SystemExit), (djtasks.interrupts, KeyboardInterrupt)],
)
def test_a_task_raising_system_exit_or_interrupt_fails_and_the_worker_goes_on(
    db_url: str, declared: Any, raised: type[BaseException]
) -> None:
    """django-tasks-db's test_system_exit_task / test_keyboard_interrupt_task: the
    run is FAILED with that class, the worker exits 0, the next job still runs."""
    # One attempt, as on django-tasks-db (the worker's settings would retry it).
    failing = options(declared, max_attempts=1).using(priority=10).enqueue()
    after = djtasks.noop_task.enqueue()
    burst(db_url, "--concurrency", "1")
    failing.refresh()
    after.refresh()
    assert failing.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in failing.errors] == [raised]
    assert failing.attempts == 1
    assert after.status == TaskResultStatus.SUCCESSFUL
    assert Job.objects.filter(status="done").count() == 1
    assert Job.objects.filter(status="dead").count() == 1


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_context_and_async_tasks_read_their_own_results_in_a_real_worker(
    db_url: str, concurrency: str
) -> None:
    """django-tasks-db's test_takes_context: the context's result is the job's, and
    its refresh() / arefresh() read RUNNING from the queue; an async task's
    aenqueue() and aget_result() run inside the worker's event loop."""
    in_async = paritytasks.context_async.enqueue()
    in_sync = paritytasks.refreshes_itself.enqueue()
    parent = paritytasks.enqueues_another.enqueue(5)
    burst(db_url, "--concurrency", concurrency)
    for result in (in_async, in_sync, parent):
        result.refresh()
        assert (result.status, result.attempts) == (TaskResultStatus.SUCCESSFUL, 1)
    worker_ids = in_async.worker_ids
    returned: Any = in_async.return_value  # django-stubs types it as the coroutine
    assert returned == {
        "id": in_async.id,
        "attempt": 1,
        "before": TaskResultStatus.RUNNING,
        "refreshed": TaskResultStatus.RUNNING,
        "worker_ids": worker_ids,
    }
    assert in_sync.return_value == {"status": TaskResultStatus.RUNNING, "attempts": 1}
    child_id: Any = parent.return_value
    child = paritytasks.echo_value.get_result(child_id)
    assert (child.status, child.return_value, child.args) == (TaskResultStatus.SUCCESSFUL, 5, [5])
    assert Job.objects.filter(status="done").count() == 4


# -- signals: async receivers, as django-tasks-db's aenqueue awaits them ---------------


def test_async_receivers_of_every_signal_hear_the_run() -> None:
    heard: list[tuple[str, type, TaskResultStatus, int]] = []

    def receiver(name: str) -> Any:
        async def receive(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
            heard.append((name, sender, task_result.status, task_result.attempts))

        return receive

    receivers = {
        signal: receiver(name)
        for signal, name in (
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        )
    }
    for signal, receive in receivers.items():
        signal.connect(receive)
    try:
        sync = djtasks.calculate_meaning_of_life.enqueue()
        in_async = async_to_sync(djtasks.add_async.aenqueue)(1, 2)
        assert len(run_jobs()) == 2
    finally:
        for signal, receive in receivers.items():
            signal.disconnect(receive)
    backend = type(task_backends["default"])
    ready, running = TaskResultStatus.READY, TaskResultStatus.RUNNING
    done = TaskResultStatus.SUCCESSFUL
    assert heard == [
        ("enqueued", backend, ready, 0),
        ("enqueued", backend, ready, 0),
        ("started", backend, running, 1),
        ("finished", backend, done, 1),
        ("started", backend, running, 1),
        ("finished", backend, done, 1),
    ]
    for result, value in ((sync, 42), (in_async, 3)):
        result.refresh()
        assert result.return_value == value


# -- JSON: what Django's normalize_json makes of arguments and return values ----------

ARGUMENTS = {
    "range": range(3),
    "namedtuple": paritytasks.Point(1, 2),
    "deque": paritytasks.returned("deque"),
    "userlist": paritytasks.returned("userlist"),
    "userdict": paritytasks.returned("userdict"),
    "bytearray": bytearray(b"ab"),
    "intenum": paritytasks.Level.HIGH,
    "strenum": paritytasks.Colour.RED,
    "nested tuples": {"t": (1, (2, 3))},
}


@pytest.mark.usefixtures("with_immediate")
@pytest.mark.parametrize("value", list(ARGUMENTS.values()), ids=list(ARGUMENTS))
def test_an_argument_is_stored_and_passed_as_immediate_backend_passes_it(value: Any) -> None:
    theirs = djtasks.echo.using(backend="immediate").enqueue(value, k=value)
    ours = djtasks.echo.enqueue(value, k=value)
    expected = normalize_json(value)
    assert (ours.args, ours.kwargs) == (theirs.args, theirs.kwargs) == ([expected], {"k": expected})
    read = task_backends["default"].get_result(ours.id)
    assert (read.args, read.kwargs) == (ours.args, ours.kwargs)
    assert len(run_jobs()) == 1
    ours.refresh()
    assert (
        ours.return_value == theirs.return_value == {"args": [expected], "kwargs": {"k": expected}}
    )


@pytest.mark.usefixtures("with_immediate")
@pytest.mark.parametrize("kind", paritytasks.RETURNED)
def test_a_return_value_reads_back_as_immediate_backend_keeps_it(kind: str) -> None:
    theirs = paritytasks.returns.using(backend="immediate").enqueue(kind)
    ours = paritytasks.returns.enqueue(kind)
    assert len(run_jobs()) == 1
    ours.refresh()
    assert ours.status == theirs.status == TaskResultStatus.SUCCESSFUL
    assert ours.return_value == theirs.return_value == normalize_json(paritytasks.returned(kind))


# -- QUEUES as Django reads it: any collection of names, set() of it ------------------


@pytest.mark.parametrize(
    "queues", [("default", "x"), {"default", "x"}, frozenset({"default", "x"})]
)
def test_queues_of_any_collection_are_read_as_django_reads_them(queues: Any) -> None:
    with override_settings(TASKS={"default": {"BACKEND": OURS, "QUEUES": queues}}):
        backend = task_backends["default"]
        assert backend.check() == []
        assert backend.queues == {"default", "x"}
        result = djtasks.noop_task.using(queue_name="x").enqueue()
    assert Job.objects.get(pk=result.id).queue == "x"


# -- claim order: django-tasks-db's test_run_after_priority --------------------------


def test_ready_jobs_run_by_priority_then_run_after_as_on_django_tasks_db() -> None:
    now = timezone.now()
    hours = dt.timedelta(hours=1)
    noop = djtasks.noop_task
    old = noop.using(priority=20, run_after=now - 2 * hours).enqueue()
    very_old = noop.using(priority=20, run_after=now - 10 * hours).enqueue()
    noop.using(run_after=now + 10 * hours).enqueue()
    noop.using(priority=10, run_after=now + 10 * hours).enqueue()
    noop.using(run_after=now + 2 * hours).enqueue()
    high = noop.using(priority=10).enqueue()
    low = noop.using(priority=2).enqueue()
    lower = noop.using(priority=-2).enqueue()
    ran = run_jobs()
    assert [str(job_id) for job_id in ran.done] == [r.id for r in (very_old, old, high, low, lower)]
    assert Job.objects.filter(status="queued").count() == 3
