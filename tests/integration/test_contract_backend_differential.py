"""A differential contract of the Tasks backend (issues 4 and 12): the same task code
and the same calls on ``PgQueueBackend`` and on Django's own backends
(``ImmediateBackend``, ``DummyBackend``), comparing what a user observes. Where the
two differ on purpose, the test says so and docs/backend.md documents it.

Django's ``ImmediateBackend`` runs a task inside ``enqueue()``; here the same task is
enqueued on our backend and run by the worker's own code (``run_jobs()``, or a real
``runworker --burst`` subprocess), then read back with ``refresh()``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

# The references are Django's own backends (Django 6+); the backport's are its own.
pytest.importorskip("django.tasks", reason="compares with Django's own Tasks backends")

from django_pgqueue.backend import options
from django_pgqueue.backend.compat import (
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.testapp import difftasks, djtasks
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ["default", "queue_1", "emails", "payments", "reports"]
TASKS = {
    "default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": QUEUES},
    "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": QUEUES},
    "dummy": {"BACKEND": "django.tasks.backends.dummy.DummyBackend", "QUEUES": QUEUES},
}
REFERENCES = ("immediate", "dummy")


@pytest.fixture(autouse=True)
def three_backends() -> Iterator[None]:
    """Our backend as "default" beside Django's two, every failure final (the reference
    backends never retry)."""
    pgqueue = {"BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2, "LEASE": 30, "MAX_ATTEMPTS": 1}
    with override_settings(TASKS=TASKS, PGQUEUE=pgqueue):
        yield


def test_the_queue_name_check_reads_the_same_on_every_backend() -> None:
    for alias in ("default", *REFERENCES):
        with pytest.raises(InvalidTask, match=r"^Queue 'nope' is not valid for backend\."):
            djtasks.noop_task.using(backend=alias, queue_name="nope")


def test_a_queue_name_no_queue_can_have_is_not_to_be_added_to_queues() -> None:
    """Not listed and not a valid name: adding it to QUEUES, as the message said, only
    traded this error for E105 and then for enqueue's "not a valid queue name"."""
    with pytest.raises(InvalidTask) as caught:
        djtasks.noop_task.using(queue_name="bad name!")
    assert str(caught.value) == (
        "Queue 'bad name!' is not valid for backend. Task tests.testapp.djtasks.noop_task "
        "uses it, and TASKS['default']['QUEUES'] is ['default', 'emails', 'payments', "
        "'queue_1', 'reports']: rename it: queue 'bad name!' is not a valid queue name "
        "(1-64 letters, digits, _ . : -)."
    )
    with pytest.raises(InvalidTask) as typo:
        djtasks.noop_task.using(queue_name="emails ")
    assert str(typo.value).endswith(
        "did you mean 'emails'? If not, rename it: queue 'emails ' is not a valid queue "
        "name (1-64 letters, digits, _ . : -)."
    )


# -- what a user observes --------------------------------------------------------------


def outcome(result: TaskResult[Any, Any]) -> dict[str, Any]:
    """What a user reads off a result, less what differs by backend by design: the id's
    form, the alias, the worker ids' form, the exact times (their order is kept)."""
    try:
        returned: Any = ("returned", result.return_value)
    except ValueError as exc:  # "Task failed" / "Task has not finished yet"
        returned = ("raised", str(exc))
    times = (result.enqueued_at, result.started_at, result.last_attempted_at, result.finished_at)
    known = [moment for moment in times if moment is not None]
    return {
        "status": result.status,
        "is_finished": result.is_finished,
        "returned": returned,
        "args": result.args,
        "kwargs": result.kwargs,
        "attempts": result.attempts,
        "worker_ids": len(result.worker_ids),
        "errors": [
            (error.exception_class_path, error.traceback.rstrip().rpartition("\n")[2])
            for error in result.errors
        ],
        "times_set": [moment is not None for moment in times],
        "times_in_order": known == sorted(known),
        "last_attempt_is_the_start": result.last_attempted_at == result.started_at,
        "task": (
            result.task.module_path,
            result.task.priority,
            result.task.queue_name,
            result.task.run_after,
            result.task.takes_context,
        ),
    }


class Heard:
    """The Tasks signals sent while it listens: (signal, sender, status) in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, type, TaskResultStatus]] = []
        self._receivers = [(signal, self._receiver(name)) for name, signal in SIGNALS.items()]

    def _receiver(self, name: str) -> Callable[..., None]:
        def receive(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
            self.sent.append((name, sender, task_result.status))

        return receive

    def __enter__(self) -> Heard:
        for signal, receiver in self._receivers:
            signal.connect(receiver)
        return self

    def __exit__(self, *exc: object) -> None:
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)


SIGNALS = {"enqueued": task_enqueued, "started": task_started, "finished": task_finished}


def ran(alias: str, declared: Task[Any, Any], *args: Any, **kwargs: Any) -> tuple[Any, Heard]:
    """``declared`` enqueued on ``alias`` and run: by ImmediateBackend within the
    enqueue, or by the worker's code (run_jobs()) for ours, then refreshed."""
    with Heard() as heard:
        result = declared.using(backend=alias).enqueue(*args, **kwargs)
        if alias == "default":
            assert len(run_jobs()) == 1
            result.refresh()
    return result, heard


def statuses(heard: Heard) -> list[tuple[str, str, TaskResultStatus]]:
    return [(name, sender.__name__, status) for name, sender, status in heard.sent]


type Run = tuple[str, Task[Any, Any], tuple[Any, ...], dict[str, Any]]
RUN_CASES: list[Run] = [
    ("echo-normalised", djtasks.echo, (1, (2, 3), b"x"), {"k": {"a": (1,)}}),
    ("returns-42", djtasks.calculate_meaning_of_life, (), {}),
    ("async-def", djtasks.add_async, (1, 2), {}),
    ("takes-context", difftasks.context_report, ("x",), {"k": 1}),
    ("async-takes-context", difftasks.async_context, (5,), {}),
    ("raises-ValueError", djtasks.failing_task_value_error, (), {}),
    ("raises-exception-of-exception", djtasks.complex_exception, (), {}),
    ("raises-unimportable-class", difftasks.raises_local, (), {}),
    ("raises-unpicklable", difftasks.raises_unpicklable, (), {}),
    ("raises-unprintable", difftasks.raises_bad_str, (), {}),
    ("async-raises", difftasks.raises_async, (), {}),
    ("raises-SystemExit", difftasks.raises_system_exit, (), {}),
    ("raises-CancelledError", difftasks.raises_cancelled_error, (), {}),
    *(
        (f"returns-{kind}", difftasks.returns, (kind,), {})
        for kind in ("tuple", "ordered", "range", "intenum", "bool", "none", "float", "bytes")
    ),
]
RUNS = [pytest.param(*case, id=name) for name, *case in RUN_CASES]


@pytest.mark.parametrize(("declared", "args", "kwargs"), RUNS)
def test_a_run_reads_back_as_immediate_backend_reports_it(
    declared: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    theirs, heard_theirs = ran("immediate", declared, *args, **kwargs)
    ours, heard_ours = ran("default", declared, *args, **kwargs)
    assert outcome(ours) == outcome(theirs)
    assert ours.backend == "default"
    assert statuses(heard_ours) == [
        (name, "PgQueueBackend", status) for name, _, status in statuses(heard_theirs)
    ]
    assert [status for _, _, status in heard_ours.sent][1:] == [
        TaskResultStatus.RUNNING,
        ours.status,
    ]


NOT_JSON = [
    pytest.param(djtasks.complex_return_value, (), id="a-lambda"),
    pytest.param(djtasks.bytes_return_value, (), id="bytes-not-utf8"),
    *(
        pytest.param(difftasks.returns, (kind,), id=kind)
        for kind in ("enum", "frozenset", "exception")
    ),
]


@pytest.mark.parametrize(("declared", "args"), NOT_JSON)
def test_a_return_value_that_is_not_json_fails_the_run_with_djangos_exception_class(
    declared: Task[Any, Any], args: tuple[Any, ...]
) -> None:
    """Same status, same error class; our message names the value, then quotes
    Django's (its traceback is that one line: nothing raised it)."""
    theirs, _ = ran("immediate", declared, *args)
    ours, _ = ran("default", declared, *args)
    mine = {**outcome(ours), "errors": [path for path, _ in outcome(ours)["errors"]]}
    assert mine == {**outcome(theirs), "errors": [path for path, _ in outcome(theirs)["errors"]]}
    (error,) = ours.errors
    (django_says,) = theirs.errors
    assert error.traceback.startswith(
        error.exception_class_path.rpartition(".")[2] + ": the return value"
    )
    django_words = django_says.traceback.rstrip().rpartition("\n")[2].partition(": ")[2]
    assert error.traceback.rstrip().endswith(f"({django_words})")


@pytest.mark.parametrize("kind", ["int_keys", "nan", "nul"])
def test_a_return_value_django_keeps_but_json_cannot_fails_here(kind: str) -> None:
    """A documented difference (docs/backend.md, "The return value must be JSON"):
    ImmediateBackend keeps ``{1: "a"}``, NaN and a NUL in memory; the job table cannot
    keep them as they are, so the run fails for good with a TypeError saying so."""
    theirs, _ = ran("immediate", difftasks.returns, kind)
    ours, _ = ran("default", difftasks.returns, kind)
    assert theirs.status == TaskResultStatus.SUCCESSFUL
    assert ours.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in ours.errors] == ["builtins.TypeError"]
    assert "the return value" in ours.errors[0].traceback


def test_the_running_result_a_task_gets_is_what_get_result_reads_meanwhile() -> None:
    """TaskContext.task_result (built from the claim, issue 12) against the row read
    while the task runs, for plain, moved, deferred and optioned jobs."""
    tasks = [
        difftasks.reads_itself,
        difftasks.reads_itself.using(priority=7, queue_name="emails"),
        difftasks.reads_itself.using(run_after=timezone.now() - dt.timedelta(days=1)),
        djtasks.pgq(difftasks.reads_itself).using(max_attempts=4, unique_key="u", backoff=1),
    ]
    results = [declared.enqueue(1, k={"a": [2]}) for declared in tasks]
    assert len(run_jobs()) == 4
    for result in results:
        result.refresh()
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, [])


# -- enqueue, and results before a run ---------------------------------------------------


def test_enqueue_returns_what_dummy_backend_returns() -> None:
    when = timezone.now() + dt.timedelta(hours=1)
    declared = djtasks.echo.using(priority=7, queue_name="emails", run_after=when)
    before = timezone.now()
    with Heard() as heard:
        theirs = declared.using(backend="dummy").enqueue(1, (2,), b"x", k=(3,))
        ours = declared.enqueue(1, (2,), b"x", k=(3,))
    assert outcome(ours) == outcome(theirs)
    assert outcome(ours)["returned"] == ("raised", "Task has not finished yet")
    assert outcome(ours)["times_set"] == [True, False, False, False]
    assert (ours.args, ours.kwargs) == ([1, [2], "x"], {"k": [3]})
    assert isinstance(ours.id, str)
    assert ours.task is declared
    assert ours.enqueued_at is not None
    assert before <= ours.enqueued_at <= timezone.now()
    assert statuses(heard) == [
        ("enqueued", "DummyBackend", TaskResultStatus.READY),
        ("enqueued", "PgQueueBackend", TaskResultStatus.READY),
    ]
    for alias, result in (("dummy", theirs), ("default", ours)):
        read = task_backends[alias].get_result(result.id)
        assert outcome(read) == outcome(theirs)
        assert read.task == declared.using(backend=alias)


def test_aenqueue_aget_result_and_arefresh_behave_as_on_dummy_backend() -> None:
    async def both() -> list[dict[str, Any]]:
        seen = []
        for alias in ("dummy", "default"):
            declared = djtasks.noop_task.using(backend=alias)
            result = await declared.aenqueue(1, key="v")
            read = await declared.aget_result(result.id)
            await result.arefresh()
            seen.append({**outcome(result), "read": outcome(read)})
            with pytest.raises(TaskResultMismatch):
                await djtasks.calculate_meaning_of_life.using(backend=alias).aget_result(result.id)
            with pytest.raises(TaskResultDoesNotExist):
                await task_backends[alias].aget_result("no-such-id")
        return seen

    dummy, ours = async_to_sync(both)()
    assert ours == dummy
    assert ours["status"] == TaskResultStatus.READY


@pytest.mark.parametrize("result_id", ["abc", "999999", "", "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_id_raises_task_result_does_not_exist_as_on_dummy_backend(
    result_id: str,
) -> None:
    djtasks.noop_task.enqueue()  # one job exists: the id still names none
    for alias in ("dummy", "default"):
        with pytest.raises(TaskResultDoesNotExist):
            task_backends[alias].get_result(result_id)
        with pytest.raises(TaskResultDoesNotExist):
            djtasks.noop_task.using(backend=alias).get_result(result_id)


def test_a_result_of_another_task_raises_task_result_mismatch_as_on_dummy_backend() -> None:
    for alias in ("dummy", "default"):
        result = djtasks.noop_task.using(backend=alias).enqueue()
        with pytest.raises(TaskResultMismatch, match=r"tests\.testapp\.djtasks\.noop_task"):
            djtasks.echo.using(backend=alias).get_result(result.id)


def test_get_result_and_refresh_follow_the_run_stage_by_stage() -> None:
    """READY, then (in the task) RUNNING, then SUCCESSFUL or FAILED, with
    return_value raising Django's ValueErrors until it succeeded."""
    good = difftasks.context_report.enqueue("a")
    bad = djtasks.failing_task_value_error.enqueue()
    for result in (good, bad):
        assert task_backends["default"].get_result(result.id).status == TaskResultStatus.READY
        with pytest.raises(ValueError, match=r"^Task has not finished yet$"):
            _ = result.return_value
    run_jobs()
    for result in (good, bad):
        result.refresh()
    assert good.return_value["status"] == TaskResultStatus.RUNNING  # what the task saw
    assert good.status == TaskResultStatus.SUCCESSFUL
    assert bad.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match=r"^Task failed$"):
        _ = bad.return_value
    assert bad.errors[0].exception_class is ValueError


# -- validation: InvalidTask where Django's backends raise it ------------------------------


def nested() -> Task[Any, Any]:
    def inner() -> None: ...

    return task(inner)


NAIVE = dt.datetime(2030, 1, 1)
INVALID = [
    pytest.param(
        lambda t: t.using(run_after=NAIVE),
        "run_after must be an aware datetime.",
        id="naive-run_after",
    ),
    pytest.param(
        lambda t: t.using(priority=101),
        "priority must be a whole number between -100 and 100",
        id="priority-101",
    ),
    pytest.param(
        lambda t: t.using(priority=1.5),
        "priority must be a whole number between -100 and 100",
        id="priority-1.5",
    ),
    pytest.param(
        lambda t: t.using(queue_name="nope"),
        "Queue 'nope' is not valid for backend.",
        id="unknown-queue",
    ),
]


@pytest.mark.parametrize(("change", "django_says"), INVALID)
def test_invalid_task_has_the_same_triggers_and_djangos_words_first(
    change: Callable[[Task[Any, Any]], Any], django_says: str
) -> None:
    for alias in ("dummy", "default"):
        with pytest.raises(InvalidTask) as caught:
            change(djtasks.noop_task.using(backend=alias))
        assert str(caught.value).startswith(django_says)


def test_declarations_django_refuses_are_refused_on_every_backend() -> None:
    """In Django's words; ours then names the task, as its other refusals do."""
    for alias in ("default", *REFERENCES):
        ours = r" \(task 'tests\.[a-z_.<>]+'\)" if alias == "default" else ""
        with override_settings(TASKS={"default": TASKS[alias]}):
            with pytest.raises(
                InvalidTask, match=rf"^Task function must be defined at a module level\.{ours}$"
            ):
                nested()
            no_context = "Task takes context but does not have a first argument of 'context'"
            with pytest.raises(InvalidTask, match=rf"^{no_context}\.{ours}$"):
                task(takes_context=True)(djtasks.noop_task.func)


def test_run_after_is_taken_as_on_dummy_backend_not_refused_as_on_immediate() -> None:
    """supports_defer: ImmediateBackend refuses run_after; DummyBackend and ours keep it."""
    when = timezone.now() + dt.timedelta(hours=1)
    with pytest.raises(InvalidTask, match=r"^Backend does not support run_after\.$"):
        djtasks.noop_task.using(backend="immediate", run_after=when)
    for alias in ("dummy", "default"):
        result = djtasks.noop_task.using(backend=alias, run_after=when).enqueue()
        assert task_backends[alias].get_result(result.id).task.run_after == when
    assert len(run_jobs()) == 0  # not before its time


def test_call_and_acall_run_the_function_here_on_every_backend() -> None:
    for alias in ("default", *REFERENCES):
        added: Any = djtasks.add_async.using(backend=alias).call(1, 2)
        assert added == 3
        assert async_to_sync(djtasks.calculate_meaning_of_life.using(backend=alias).acall)() == 42
    assert Job.objects.count() == 0


# -- documented differences --------------------------------------------------------------


def test_arguments_that_do_not_fit_are_refused_at_enqueue_not_failed_at_run() -> None:
    """docs/backend.md, "A call that fits": ImmediateBackend runs the call and reports
    the TypeError as a FAILED result; ours refuses it before anything is written."""
    theirs = djtasks.calculate_meaning_of_life.using(backend="immediate").enqueue(1)  # type: ignore[call-arg]
    assert theirs.status == TaskResultStatus.FAILED
    assert theirs.errors[0].exception_class_path == "builtins.TypeError"
    with Heard() as heard, pytest.raises(InvalidJobArguments, match="too many positional"):
        djtasks.calculate_meaning_of_life.enqueue(1)  # type: ignore[call-arg]
    assert heard.sent == []
    assert Job.objects.count() == 0


def test_enqueued_at_is_the_enqueuing_transactions_start() -> None:
    """docs/backend.md, Results: enqueued_at is PostgreSQL's now(), when the caller's
    transaction began; Django's backends take the clock at the call."""
    with transaction.atomic():
        first = djtasks.noop_task.enqueue()
        called = timezone.now()
        second = djtasks.noop_task.enqueue()
        theirs = djtasks.noop_task.using(backend="dummy").enqueue()
    assert None not in (first.enqueued_at, theirs.enqueued_at)
    assert first.enqueued_at == second.enqueued_at < called < theirs.enqueued_at  # type: ignore[operator]


# -- a real worker -----------------------------------------------------------------------


def test_runworker_burst_leaves_what_immediate_backend_reports(db_url: str) -> None:
    """The same runs by a ``runworker --burst`` subprocess, read back with get_result()."""
    runs = [case[1:] for case in RUN_CASES]
    ours = [declared.enqueue(*args, **kwargs) for declared, args, kwargs in runs]
    done = django_command(
        db_url,
        "runworker",
        "--burst",
        "--no-listen",
        "--worker-id",
        "burst-1",
        env={"PGQUEUE_TEST_PGQUEUE": json.dumps({"MAX_ATTEMPTS": 1})},
    )
    assert done.returncode == 0, done.stderr
    for result, (declared, args, kwargs) in zip(ours, runs, strict=True):
        theirs, _ = ran("immediate", declared, *args, **kwargs)
        read = task_backends["default"].get_result(result.id)
        assert outcome(read) == outcome(theirs), declared.module_path
        assert read.worker_ids == ["burst-1"]


def test_errors_keep_the_newest_twenty_failed_attempts() -> None:
    """docs/backend.md, Results: ``errors`` is the job's error history, which keeps
    the newest 20 entries, oldest first; ``attempts`` still counts every claim."""
    failing = options(djtasks.failing_task_value_error, max_attempts=22, backoff=0)
    result = failing.enqueue()
    runs = 0
    for _ in range(10_000):  # each retry is due at once (backoff 0): no waiting
        runs += len(run_jobs())
        if runs == 22:
            break
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == (
        TaskResultStatus.FAILED,
        22,
        20,
    )
    assert {error.exception_class_path for error in result.errors} == {"builtins.ValueError"}
    assert Job.objects.get(pk=result.id).error_count == 22


def test_using_variants_change_what_they_name_as_on_dummy_backend() -> None:
    """``using()`` keeps what it is not given (None keeps too), chains, and moves a
    task between backends; the result's task says so on ours as on DummyBackend."""
    when = timezone.now() + dt.timedelta(hours=1)

    def variants(alias: str) -> list[Task[Any, Any]]:
        base = djtasks.echo.using(backend=alias)
        return [
            base.using(),
            base.using(priority=None, queue_name=None, run_after=None),
            base.using(priority=-100),
            base.using(priority=100, queue_name="emails").using(run_after=when),
            base.using(queue_name="queue_1").using(priority=3),
        ]

    fields = ("priority", "queue_name", "run_after", "takes_context", "module_path")
    for theirs, ours in zip(variants("dummy"), variants("default"), strict=True):
        assert ours.backend == "default"
        assert [getattr(ours, name) for name in fields] == [
            getattr(theirs, name) for name in fields
        ]
        for alias, declared in (("dummy", theirs), ("default", ours)):
            read = task_backends[alias].get_result(declared.enqueue(1).id).task
            assert [getattr(read, name) for name in fields] == [
                getattr(theirs, name) for name in fields
            ]
    moved = djtasks.echo.using(priority=5).using(backend="dummy")
    assert (moved.backend, moved.priority, type(moved.get_backend()).__name__) == (
        "dummy",
        5,
        "DummyBackend",
    )


def test_task_enqueued_is_sent_at_the_enqueue_not_at_commit() -> None:
    """docs/backend.md, "One statement": a rolled-back block's job was announced."""
    with Heard() as heard, transaction.atomic():
        result = djtasks.noop_task.enqueue()
        transaction.set_rollback(True)
    assert statuses(heard) == [("enqueued", "PgQueueBackend", TaskResultStatus.READY)]
    assert Job.objects.count() == 0
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()
