"""The Tasks backend without a database: options, validation, checks, result mapping."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import pickle
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue import known, validation
from django_pgqueue.backend import PgQueueBackend, PgQueueTask, PgQueueTaskContext, options
from django_pgqueue.backend.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task,
    task_backends,
)
from django_pgqueue.backend.core import parse_id
from django_pgqueue.backend.taskerrors import task_error
from tests.testapp import djtasks
from tests.testapp.djtasks import pgq

PGQUEUE_TASKS = {"default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend"}}
FRAMEWORK = Task.__module__.rpartition(".")[0]  # django.tasks, or the backport's django_tasks
DUMMY_TASKS = {"default": {"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"}}


def backend_with(**params: Any) -> PgQueueBackend:
    return PgQueueBackend("pgq", {"BACKEND": "django_pgqueue.backend.PgQueueBackend", **params})


def error_ids(backend: PgQueueBackend) -> list[str]:
    return [str(message.id) for message in backend.check()]


def test_the_backend_claims_every_feature() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, PgQueueBackend)
    assert isinstance(backend, BaseTaskBackend)  # Django's
    assert (
        backend.supports_defer,
        backend.supports_priority,
        backend.supports_get_result,
        backend.supports_async_task,
    ) == (True, True, True, True)
    assert backend.task_class is PgQueueTask
    assert isinstance(djtasks.noop_task, PgQueueTask)
    assert isinstance(djtasks.noop_task_async, Task)  # coroutine functions are accepted


def test_using_takes_our_options_beside_djangos() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    task = pgq(djtasks.noop_task).using(
        priority=5, run_after=when, max_attempts=7, unique_key="k", concurrency_key="c"
    )
    assert (
        task.priority,
        task.run_after,
        task.max_attempts,
        task.unique_key,
        task.concurrency_key,
    ) == (5, when, 7, "k", "c")
    again = task.using(queue_name="queue_1")  # None keeps what was set, as in Django
    assert (again.queue_name, again.max_attempts, again.unique_key) == ("queue_1", 7, "k")
    assert pgq(djtasks.noop_task).max_attempts is None  # a copy: the declared task is untouched


def test_our_options_do_not_take_part_in_equality() -> None:
    task = pgq(djtasks.noop_task).using(max_attempts=2, unique_key="k")
    assert task == djtasks.noop_task
    assert hash(task) == hash(djtasks.noop_task)
    assert task.using(priority=1) != djtasks.noop_task  # Django's own options still do


def test_options_given_no_django_task_says_what_it_takes() -> None:
    """A django_pgqueue task or a plain function got a TypeError about dataclasses or
    about internal field names."""
    from tests.testapp.tasks import add

    def plain(n: int) -> int:
        return n

    with pytest.raises(TypeError) as direct:
        options(add, max_attempts=2)  # type: ignore[type-var]
    assert str(direct.value) == (
        f"options() takes a Task of django.tasks (declared with its @task), not {add!r}: "
        "on a django_pgqueue task, call .using(max_attempts=..., ...) instead"
    )
    with pytest.raises(TypeError, match=r"decorate the function with @task from django\.tasks"):
        options(plain, max_attempts=2)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"^options\(\) takes a Task of django\.tasks .*, not 3$"):
        options(3, max_attempts=2)  # type: ignore[type-var]


def test_options_turns_a_task_of_any_backend_into_ours() -> None:
    with override_settings(TASKS=DUMMY_TASKS):
        plain: Task[Any, Any] = Task(
            func=djtasks.noop_task.func,
            priority=0,
            backend="default",
            queue_name="default",
            run_after=None,
        )
        assert type(plain) is Task
        task = pgq(options(plain, max_attempts=4, concurrency_key="c"))
        assert (task.func, task.max_attempts, task.concurrency_key, task.unique_key) == (
            plain.func,
            4,
            "c",
            None,
        )
    assert pgq(options(djtasks.noop_task, unique_key="u")).unique_key == "u"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_attempts": 0}, "max_attempts 0 must be a whole number from 1 to 1,000,000"),
        ({"max_attempts": True}, "max_attempts True must be"),
        ({"unique_key": ""}, "unique_key '' must be a non-empty string"),
        ({"concurrency_key": "x" * 256}, "concurrency_key 'xxx"),
        ({"queue_name": "elsewhere"}, "Queue 'elsewhere' is not valid for backend"),
        ({"priority": 101}, "priority must be a whole number between -100 and 100"),
        ({"run_after": dt.datetime(2030, 1, 1)}, "run_after must be an aware datetime"),
        ({"priority": "5"}, "priority must be a whole number between -100 and 100, not '5'"),
        (
            {"priority": float("nan")},
            "priority must be a whole number between -100 and 100, not nan",
        ),
        (  # a Decimal NaN raises InvalidOperation (an ArithmeticError) when compared
            {"priority": Decimal("NaN")},
            r"priority must be a whole number between -100 and 100, not Decimal\('NaN'\)",
        ),
        ({"priority": Decimal("sNaN")}, "priority must be a whole number"),
        (
            {"run_after": 60},
            r"run_after 60 must be an aware datetime or a timedelta: for 60 seconds from now, "
            r"pass run_after=timedelta\(seconds=60\)",
        ),
    ],
)
def test_invalid_options_are_refused_when_the_task_is_made(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTask, match=message):
        pgq(djtasks.noop_task).using(**changes)


@pytest.mark.skipif(
    inspect.Parameter.VAR_KEYWORD
    not in {p.kind for p in inspect.signature(task).parameters.values()},
    reason="Django 6.0's @task takes no other keyword: it refuses one itself",
)
def test_a_keyword_the_task_does_not_take_is_named_where_it_is_declared() -> None:
    with pytest.raises(
        TypeError,
        match=r"@task\(\) got unexpected keyword argument\(s\) queue: a "
        r"task on PgQueueBackend takes priority, queue_name, .*\(queue is queue_name\)",
    ):

        @task(queue="emails")  # type: ignore[call-overload, untyped-decorator]
        def misspelled() -> None: ...

    with pytest.raises(TypeError, match=r"max_attemps: .*max_attempts"):
        task(max_attemps=5)(djtasks.noop_task.func)  # type: ignore[call-overload]


def test_a_queue_refused_at_declaration_names_a_misspelt_queues_key() -> None:
    """TASKS with "QUEUE" (for "QUEUES"), and a URLconf importing the tasks: check
    crashed on the declaration's InvalidTask, which said to add the queue to QUEUES;
    E109's did-you-mean was never shown."""
    misspelt = {k: v for k, v in PGQUEUE_TASKS["default"].items() if k != "QUEUES"}
    tasks = {"default": {**misspelt, "QUEUE": ["default", "emails"]}}
    with override_settings(TASKS=tasks), pytest.raises(InvalidTask) as refused:
        task(queue_name="emails")(djtasks.noop_task.func)
    assert str(refused.value).endswith(  # the key to rename, not a QUEUES to add
        "TASKS['default'] sets no QUEUES, so it has Django's default, ['default']: "
        "TASKS['default'] has unknown key(s) 'QUEUE' (did you mean 'QUEUES'?)."
    ), str(refused.value)


def test_queue_names_must_suit_the_queue_even_with_queue_validation_off() -> None:
    with override_settings(TASKS={"default": {**PGQUEUE_TASKS["default"], "QUEUES": []}}):
        assert djtasks.noop_task.using(queue_name="anything").queue_name == "anything"
        with pytest.raises(InvalidTask, match="'a/b' is not valid for django-pgqueue"):
            djtasks.noop_task.using(queue_name="a/b")


@pytest.mark.skipif("__reduce__" not in Task.__dict__, reason="Tasks pickle from Django 6.1")
def test_a_task_pickles_with_our_options() -> None:
    task = options(djtasks.noop_task, max_attempts=2, unique_key="k", concurrency_key="c")
    copy = pgq(pickle.loads(pickle.dumps(task)))
    assert copy == task
    assert (copy.max_attempts, copy.unique_key, copy.concurrency_key) == (2, "k", "c")


def result_of(task: Task[Any, Any], worker_ids: list[str]) -> TaskResult[Any, Any]:
    return TaskResult(
        task=task,
        id="1",
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=[],
        kwargs={},
        backend="default",
        errors=[],
        worker_ids=worker_ids,
    )


def test_the_context_attempt_is_the_one_counted_against_max_attempts() -> None:
    # Two claims, the first given back at shutdown: Django would count 2.
    result = result_of(djtasks.noop_task, ["w1", "w2"])
    context = PgQueueTaskContext(task_result=result, job_attempt=1, max_attempts=2)
    assert (context.attempt, context.task_result.attempts, context.is_last_attempt) == (1, 2, False)
    last = dataclasses.replace(context, job_attempt=2)
    assert (last.attempt, last.is_last_attempt) == (2, True)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", 1),
        ("9223372036854775807", 2**63 - 1),
        (42, 42),
        ("0", None),
        ("007", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1.0", None),
        ("\u0661", None),  # an Arabic-Indic digit: isdigit() but not a job id
        ("9223372036854775808", None),
        ("", None),
        ("abc", None),
        (True, None),
        (None, None),
        ("12345678-1234-5678-1234-567812345678", None),
    ],
)
def test_result_ids_are_canonical_job_ids(raw: object, expected: int | None) -> None:
    assert parse_id(raw) == expected


@pytest.mark.parametrize(
    ("entry", "path", "trace"),
    [
        (
            {
                "exception": "ValueError",
                "message": "m",
                "traceback": "Traceback...\nValueError: m\n",
            },
            "builtins.ValueError",
            "Traceback...\nValueError: m\n",
        ),
        (
            {
                "exception": "django_pgqueue.exceptions.UnknownTask",
                "message": "'x.y' is not",
                "traceback": "",
            },
            "django_pgqueue.exceptions.UnknownTask",
            "UnknownTask: 'x.y' is not\n",
        ),
        (
            {
                "exception": "LeaseExpired",
                "message": "worker w stopped renewing its lease",
                "traceback": "",
            },
            "django_pgqueue.exceptions.LeaseExpired",
            "LeaseExpired: worker w stopped renewing its lease\n",
        ),
        (
            {"exception": "WorkerShutdown", "message": "given back", "traceback": ""},
            "django_pgqueue.exceptions.WorkerShutdown",
            "WorkerShutdown: given back\n",
        ),
    ],
)
def test_error_history_entries_become_task_errors(
    entry: dict[str, Any], path: str, trace: str
) -> None:
    error = task_error(entry)
    assert (error.exception_class_path, error.traceback) == (path, trace)


def test_a_builtin_error_path_imports_as_django_expects() -> None:
    assert task_error({"exception": "KeyError", "traceback": "x"}).exception_class is KeyError


def test_a_valid_configuration_passes_the_checks() -> None:
    assert error_ids(backend_with(QUEUES=["default", "emails"], OPTIONS={"MAX_ATTEMPTS": 5})) == []


def test_check_reports_unknown_and_invalid_options() -> None:
    backend = backend_with(
        OPTIONS={"MAX_ATTEMPTS": 0, "RETRIES": 2, "BACKOFF": -1, "BACKOFF_MAX": 9}
    )
    messages = {str(m.id): m.msg for m in backend.check()}
    assert set(messages) == {"django_pgqueue.E103", "django_pgqueue.E104", "django_pgqueue.E107"}
    assert messages["django_pgqueue.E103"] == (  # not "did you mean 'BACKOFF'?": a delay
        "TASKS['pgq']['OPTIONS'] has unknown key(s) 'BACKOFF_MAX', 'RETRIES' (a PGQUEUE "
        "setting, for every backend: set PGQUEUE['BACKOFF_MAX'] instead)."
    )
    assert "MAX_ATTEMPTS'] = 0" in messages["django_pgqueue.E104"]
    assert messages["django_pgqueue.E107"] == (
        "TASKS['pgq']['OPTIONS']['BACKOFF'] = -1: expected a number of seconds from 0 to "
        "31,536,000 (a year)."
    )


def test_an_unknown_option_that_looks_like_a_known_one_is_named() -> None:
    """E103 says which key a typo meant, in any case, as PGQUEUE's own check does."""
    backend = backend_with(OPTIONS={"max_attempts": 5, "BACKOF": 2, "RETRIES": 2})
    assert [m.msg for m in backend.check() if m.id == "django_pgqueue.E103"] == [
        "TASKS['pgq']['OPTIONS'] has unknown key(s) 'BACKOF', 'RETRIES', 'max_attempts' "
        "(did you mean 'BACKOFF' for 'BACKOF', 'MAX_ATTEMPTS' for 'max_attempts'?)."
    ]


def test_check_and_enqueue_agree_on_an_option_the_queue_refuses() -> None:
    """One rule per option: what check() passes, enqueue accepts, and the other way round."""
    backend = backend_with(OPTIONS={"BACKOFF": 1e8})
    assert error_ids(backend) == ["django_pgqueue.E107"]
    with pytest.raises(InvalidTask, match=r"backoff 100000000.0 must be a number of seconds"):
        backend.enqueue(djtasks.noop_task, [], {})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"OPTIONS": None}, "TASKS['pgq']['OPTIONS'] must be a dict, not None"),
        ({"OPTIONS": []}, "TASKS['pgq']['OPTIONS'] must be a dict, not []"),
        (
            {"QUEUES": "default"},
            "TASKS['pgq']['QUEUES'] is the string 'default': give a list of queue names, "
            "such as ['default']",
        ),
        ({"QUEUES": None}, "TASKS['pgq']['QUEUES'] must be a list of queue names, not None"),
    ],
)
def test_check_and_enqueue_name_options_or_queues_of_the_wrong_shape(
    params: dict[str, Any], message: str
) -> None:
    backend = backend_with(**params)
    (error,) = backend.check()
    assert (error.id, error.msg) == ("django_pgqueue.E108", f"{message}.")
    assert error.hint is not None
    assert error.hint.startswith(
        "Give OPTIONS as a dict" if "OPTIONS" in message else "Give QUEUES"
    )
    with pytest.raises(InvalidTask) as refused:
        backend.enqueue(djtasks.noop_task, [], {})
    assert str(refused.value) == message


def test_check_reports_each_part_of_the_wrong_shape_and_still_checks_the_other() -> None:
    """One mistake does not hide the next: a bad OPTIONS and a bad QUEUES are two
    errors, and the part of the right shape is still checked."""
    both = backend_with(OPTIONS=None, QUEUES="emails")
    assert [(e.id, e.msg.split("]")[1]) for e in both.check()] == [
        ("django_pgqueue.E108", "['OPTIONS'"),
        ("django_pgqueue.E108", "['QUEUES'"),
    ]
    assert error_ids(backend_with(OPTIONS=None, QUEUES=["a b"])) == [
        "django_pgqueue.E108",
        "django_pgqueue.E105",
    ]
    assert error_ids(backend_with(OPTIONS={"RETRIES": 3}, QUEUES=None)) == [
        "django_pgqueue.E103",
        "django_pgqueue.E108",
    ]


def test_check_reports_queue_names_the_queue_cannot_store() -> None:
    assert error_ids(backend_with(QUEUES=["default", "a b", "x" * 65])) == ["django_pgqueue.E105"]


WITHOUT_THE_APP = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "tests.testapp",
    *(["django_tasks"] if FRAMEWORK == "django_tasks" else []),
]


def test_check_reports_the_app_missing() -> None:
    with override_settings(INSTALLED_APPS=WITHOUT_THE_APP):
        assert error_ids(backend_with()) == ["django_pgqueue.E101"]


def settings_errors() -> list[Any]:
    from django_pgqueue.checks import check_settings

    return check_settings()


def test_a_missing_database_is_one_error() -> None:
    with override_settings(PGQUEUE={"DATABASE": "queue"}):
        assert backend_with().check() == []  # the app's own check says it: E002
        (message,) = settings_errors()
    assert message.id == "django_pgqueue.E002"
    assert message.msg == "PGQUEUE['DATABASE'] = 'queue' is not in DATABASES"
    with override_settings(PGQUEUE={"DATABASE": "defualt"}):
        (message,) = settings_errors()
    assert message.msg.endswith("is not in DATABASES (did you mean 'default'?)"), message.msg
    with override_settings(PGQUEUE={"DATABASE": "queue"}, INSTALLED_APPS=WITHOUT_THE_APP):
        assert settings_errors() == []  # not registered without the app: E101 and E102 say it
        assert error_ids(backend_with()) == ["django_pgqueue.E101", "django_pgqueue.E102"]


@pytest.fixture
def sqlite_alias(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A configured (never opened) SQLite database alias."""
    monkeypatch.setitem(
        connections.settings, "lite", {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    )
    yield "lite"
    if "lite" in connections.settings:
        connections["lite"].close()


def test_sqlite_is_one_error_whose_hint_says_what_a_separate_database_costs(
    sqlite_alias: str,
) -> None:
    with override_settings(PGQUEUE={"DATABASE": sqlite_alias}):
        assert backend_with().check() == []
        (message,) = settings_errors()
    assert message.id == "django_pgqueue.E002"
    assert (
        message.msg == "django-pgqueue needs PostgreSQL, but PGQUEUE['DATABASE'] = 'lite' is sqlite"
    )
    assert message.hint.startswith("Use PostgreSQL for the database your application writes to")
    assert "every job commits on its own, apart from your data" in message.hint


class ToLite:
    """A router that sends every write (the job table's too) to the SQLite alias."""

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "lite"


def test_the_routers_choice_is_checked_when_database_is_unset(sqlite_alias: str) -> None:
    with override_settings(DATABASE_ROUTERS=[f"{__name__}.ToLite"]):
        (message,) = settings_errors()
    assert message.msg == (
        "django-pgqueue needs PostgreSQL, but the database the routers pick for jobs "
        "(db_for_write), 'lite', is sqlite"
    )


def test_djangos_check_framework_runs_ours_for_every_alias() -> None:
    from django.core import checks

    tasks = {
        "default": PGQUEUE_TASKS["default"],
        "other": {**PGQUEUE_TASKS["default"], "OPTIONS": {"NOPE": 1}},
    }
    with override_settings(TASKS=tasks):
        found = checks.run_checks()
    # The backends' own ids (E1xx); E006 reports this test session's own custom-named
    # tasks, which tests/testapp declares where no worker looks on purpose.
    ids = [m.id for m in found if str(m.id).startswith("django_pgqueue.E1")]
    assert ids == ["django_pgqueue.E103"]


def test_a_tasks_plan_is_made_once_and_made_again_when_settings_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_pgqueue.backend import enqueueing

    backend = task_backends["default"]
    task = pgq(djtasks.noop_task).using(priority=7)
    validated: list[Task[Any, Any]] = []
    real = PgQueueBackend.validate_task

    def counting(self: PgQueueBackend, task: Task[Any, Any]) -> None:
        validated.append(task)
        real(self, task)

    monkeypatch.setattr(PgQueueBackend, "validate_task", counting)
    first = enqueueing.plan(backend, task)
    assert enqueueing.plan(backend, task) is first
    assert validated == [task]
    # An equal task with other delivery options (which equality ignores) has a plan
    # of its own.
    other = task.using(max_attempts=9)
    assert other == task
    assert enqueueing.plan(backend, other).max_attempts == 9
    assert enqueueing.plan(backend, task).max_attempts == first.max_attempts
    with override_settings(PGQUEUE={"MAX_ATTEMPTS": 4}):
        assert enqueueing.plan(backend, task).max_attempts == 4
    assert enqueueing.plan(backend, task).max_attempts == first.max_attempts


def test_a_refused_task_is_refused_on_every_enqueue() -> None:
    from django_pgqueue.backend import enqueueing

    task = pgq(djtasks.noop_task)
    refusing = backend_with(OPTIONS={"MAX_ATTEMPTS": 0})
    for _ in range(2):
        with pytest.raises(InvalidTask, match="max_attempts 0"):
            enqueueing.plan(refusing, task)


def test_a_task_finds_its_backend_again_after_tasks_change_in_every_thread() -> None:
    import threading

    from django_pgqueue.backend.task import backend_named

    seen: dict[str, object] = {}
    go, looked = threading.Event(), threading.Event()

    def other_thread() -> None:
        seen["before"] = backend_named("default")
        looked.set()
        go.wait(10)
        seen["after"] = backend_named("default")

    thread = threading.Thread(target=other_thread)
    thread.start()
    try:
        assert looked.wait(10)
        mine = djtasks.noop_task.get_backend()
        assert mine is task_backends["default"]
        assert djtasks.noop_task.get_backend() is mine
        with override_settings(TASKS=DUMMY_TASKS):
            go.set()
            thread.join(10)
            assert type(seen["after"]).__name__ == "DummyBackend"
            assert type(djtasks.noop_task.get_backend()).__name__ == "DummyBackend"
        assert isinstance(seen["before"], PgQueueBackend)
        assert isinstance(djtasks.noop_task.get_backend(), PgQueueBackend)
    finally:
        go.set()
        thread.join(10)


@pytest.mark.parametrize("bare", [True, False], ids=["set-directly", "constructor"])
def test_the_running_result_is_what_the_constructor_makes(
    bare: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_pgqueue.backend import results
    from django_pgqueue.records import ClaimedJob

    if bare and not results._BARE:
        pytest.skip("this TaskResult has other fields: the constructor is always used")
    monkeypatch.setattr(results, "_BARE", bare)
    at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()
    job = ClaimedJob(
        id=7, run=3, task=djtasks.echo.module_path, args=[1, [2, {"a": None}]],
        kwargs={"k": "v"}, queue="default", priority=5, attempt=2, max_attempts=4,
        concurrency_key=None, unique_key="u", enqueued_at=at, run_at=at + 60,
        started_at=at + 61, attempted_at=at + 90,
        errors='[{"exception": "ValueError", "message": "m", "traceback": "t"}]',
        worker_ids='["w1", "w2"]',
    )  # fmt: skip
    result = results.running_result(djtasks.echo, job, "default")
    expected: TaskResult[Any, Any] = TaskResult(
        task=results.task_with(
            djtasks.echo, "default", 5, "default", results._moment(at + 60), 4, "u", None, None
        ),
        id="7",
        status=TaskResultStatus.RUNNING,
        enqueued_at=results._moment(at),
        started_at=results._moment(at + 61),
        finished_at=None,
        last_attempted_at=results._moment(at + 90),
        args=[1, [2, {"a": None}]],
        kwargs={"k": "v"},
        backend="default",
        errors=[task_error({"exception": "ValueError", "message": "m", "traceback": "t"})],
        worker_ids=["w1", "w2"],
    )
    for field in dataclasses.fields(TaskResult):
        assert getattr(result, field.name) == getattr(expected, field.name), field.name
    assert type(result) is TaskResult
    assert result.worker_ids is not results.running_result(djtasks.echo, job, "default").worker_ids


def test_the_post_init_is_skipped_only_while_it_only_normalises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_pgqueue.backend import results

    assert results._may_skip_post_init()  # the supported versions take the fast path

    def validating(self: Any) -> None:
        object.__setattr__(self, "args", normalize_json(self.args))
        if not self.id:
            raise ValueError("a result needs an id")

    monkeypatch.setattr(TaskResult, "__post_init__", validating)
    assert not results._may_skip_post_init()


def test_check_names_a_key_of_the_entry_no_backend_reads() -> None:
    """Django ignores unknown TASKS keys: "QUEUE" left every queue but the default
    refused, with nothing to say why."""
    (error,) = backend_with(QUEUE=["emails"]).check()
    assert (error.id, error.msg) == (
        "django_pgqueue.E109",
        "TASKS['pgq'] has unknown key(s) 'QUEUE' (did you mean 'QUEUES'?).",
    )
    assert error.hint == (
        "A TASKS entry has BACKEND, QUEUES, OPTIONS; the backend's own settings go in OPTIONS."
    )
    assert error_ids(backend_with(QUEUES=["default"], OPTIONS={})) == []


def test_the_task_extras_are_the_fields_pgqueuetask_adds_to_djangos_task() -> None:
    """One list (validation.TASK_EXTRAS): the backend's error messages and the direct
    API's defaults for a Tasks-framework Task enqueued by its path both read it."""
    from django_pgqueue import validation

    added = {f.name for f in dataclasses.fields(PgQueueTask)} - {
        f.name for f in dataclasses.fields(Task)
    }
    assert added == set(validation.TASK_EXTRAS)


@pytest.mark.parametrize("priority", [True, Decimal("5"), 7.0])
def test_a_framework_tasks_priority_is_the_direct_apis_int(priority: Any) -> None:
    """A job enqueued by the path of a Task declared with such a priority (Django
    accepts it) takes the int the row stores, which the direct API's rule accepts."""
    defaults = known.framework_defaults(pgq(djtasks.noop_task).using(priority=priority))
    assert defaults is not None
    assert (defaults["priority"], type(defaults["priority"])) == (int(priority), int)
    assert validation.PRIORITY.is_valid(defaults["priority"])
