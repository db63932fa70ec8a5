"""The settings checks by id (the pooler warnings, which connect, are in tests/cluster)."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import override_settings

from django_pgqueue.backend.compat import TASKS_APP
from django_pgqueue.checks import check_pooler, check_settings
from django_pgqueue.pooler import shown
from tests import outside


def ids() -> list[str]:
    return [str(message.id) for message in check_settings()]


def test_a_valid_configuration_passes() -> None:
    assert ids() == []
    with override_settings(PGQUEUE={"LISTEN_DATABASE": "default"}):
        assert ids() == []


def test_listen_database_must_be_an_alias_of_databases() -> None:
    with override_settings(PGQUEUE={"LISTEN_DATABASE": "direct"}):
        (message,) = check_settings()
    assert message.id == "django_pgqueue.E003"
    assert message.msg == "PGQUEUE['LISTEN_DATABASE'] = 'direct' is not in DATABASES"
    with override_settings(PGQUEUE={"LISTEN_DATABASE": "defualt"}):
        (message,) = check_settings()
    assert message.msg == (
        "PGQUEUE['LISTEN_DATABASE'] = 'defualt' is not in DATABASES (did you mean 'default'?)"
    )


def test_listen_database_may_be_a_dsn_that_parses() -> None:
    for dsn in ("postgres://postgres@127.0.0.1:5432/app", "host=127.0.0.1 dbname=app"):
        with override_settings(PGQUEUE={"LISTEN_DATABASE": dsn}):
            assert ids() == []
    for bad in ("host=127.0.0.1 dbname='app", "postgres://u:s3cr%zzet@h/db"):
        with override_settings(PGQUEUE={"LISTEN_DATABASE": bad}):
            (message,) = check_settings()
        assert message.id == "django_pgqueue.E003"
        # libpq's own words would quote the token it stopped at: a password, maybe.
        assert message.msg == "PGQUEUE['LISTEN_DATABASE'] looks like a DSN but cannot be parsed"


def test_a_dsn_is_shown_without_its_secrets() -> None:
    assert shown("postgres://u:s3cret@h:5432/db?sslpassword=kp") == (
        "user=u dbname=db host=h port=5432"
    )
    assert shown("host=h password=s3cret dbname=d") == "dbname=d host=h"
    assert shown("default") == "default"


def test_database_must_be_an_alias_of_databases() -> None:
    with override_settings(PGQUEUE={"DATABASE": "queue"}):
        assert ids() == ["django_pgqueue.E002"]


def test_every_task_module_must_be_importable() -> None:
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.tasks"]}):
        assert ids() == []
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside", "nope.tasks"]}):
        (message,) = check_settings()
    assert message.id == "django_pgqueue.E004"
    assert message.msg == (
        "PGQUEUE['TASK_MODULES'] names 'nope.tasks', which cannot be imported: "
        "No module named 'nope'"
    )
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.missing"]}):
        (message,) = check_settings()
    assert message.msg == (
        "PGQUEUE['TASK_MODULES'] names 'tests.outside.missing', which cannot be imported: "
        "no such module"
    )


REFUSED = (
    "a task in the tasks modules cannot be declared: Queue 'not_listed' is not valid for "
    "backend. Task tests.outside.refused.refused uses it, and TASKS['default']['QUEUES'] is "
    "['default', 'emails', 'payments', 'queue_1', 'reports']: add 'not_listed' there."
)


def test_a_task_its_backend_refuses_is_reported_by_check() -> None:
    """The worker imports every tasks module at start: a Task declared on a queue its
    backend does not list would stop it there, so check says it first."""
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.refused"]}):
        (message,) = check_settings()
    assert message.id == "django_pgqueue.E005"
    assert message.msg == REFUSED


def test_a_misspelt_default_tasks_alias_is_reported_by_check() -> None:
    """TASKS with 'defualt' for 'default': every @task declared without backend=
    fails to import, and check said nothing (the worker stopped at start on "The
    connection 'default' doesn't exist")."""
    ours = settings.TASKS["default"]
    modules = {"TASK_MODULES": ["tests.outside.on_default"]}
    with override_settings(PGQUEUE=modules, TASKS={"defualt": ours}):
        (message,) = check_settings()
    assert message.id == "django_pgqueue.E005"
    assert message.msg == (
        "a task in the tasks modules names a TASKS entry that does not exist: The "
        "connection 'default' doesn't exist. (TASKS has no 'default' entry, the backend "
        "of every task declared without backend=: did you mean 'defualt'?)"
    )
    with override_settings(PGQUEUE=modules, TASKS={"queue": ours}):
        (message,) = check_settings()
    assert message.msg.endswith(
        "(TASKS has no 'default' entry, the backend of every task declared without backend=)"
    )
    with override_settings(PGQUEUE=modules):
        assert ids() == []


def test_a_task_another_backend_refuses_says_no_tasks_entry_is_ours() -> None:
    from django_pgqueue.backend.compat import BaseTaskBackend

    package = BaseTaskBackend.__module__.rpartition(".")[0]  # django.tasks.backends
    immediate = {"default": {"BACKEND": f"{package}.immediate.ImmediateBackend"}}
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.refused"]}, TASKS=immediate):
        (message,) = [m for m in check_settings() if m.id == "django_pgqueue.E005"]
    assert message.msg.endswith(
        "No TASKS entry is PgQueueBackend, so another backend declares these tasks, and no "
        "worker would run them: set TASKS['default']['BACKEND'] to "
        "'django_pgqueue.backend.PgQueueBackend' and list the queues in its QUEUES."
    ), message.msg
    # A refusal that is not about a queue is not told to list queues.
    modules = {"TASK_MODULES": ["tests.outside.refused_priority"]}
    with override_settings(PGQUEUE=modules, TASKS=immediate):
        (message,) = [m for m in check_settings() if m.id == "django_pgqueue.E005"]
    assert "priority" in message.msg
    assert message.msg.endswith(
        "set TASKS['default']['BACKEND'] to 'django_pgqueue.backend.PgQueueBackend'."
    ), message.msg


def test_a_tasks_module_that_fails_to_import_is_a_warning_saying_where() -> None:
    """An import that fails in a tasks module: check said "no issues", and the
    worker then stopped at start with a traceback. It is a warning (the module may
    need what only the workers' environment has), naming the module's line."""
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.broken_import"]}):
        (message,) = check_settings()
    assert message.id == "django_pgqueue.W004"
    assert message.msg == (
        "importing the tasks modules failed: ModuleNotFoundError: No module named "
        f"'a_dependency_that_is_not_installed' ({outside.__path__[0]}/broken_import.py, "
        "line 6)"
    )


def test_the_pooler_check_connects_only_when_asked_for_the_database() -> None:
    assert check_pooler() == []  # no databases: Django runs it without, and it must not connect
    assert check_pooler(databases=["other"]) == []


def test_on_django_5_2_the_backports_app_missing_is_e106_from_our_own_check() -> None:
    """The backport registers the Tasks check in its app's ready(): without its app
    nothing checked TASKS at all (E106 was never said, nor E103 to E108)."""
    without = [app for app in settings.INSTALLED_APPS if app != "django_tasks"]
    with override_settings(INSTALLED_APPS=without):
        said = [(m.id, m.msg, m.hint) for m in check_settings() if m.id == "django_pgqueue.E106"]
    if TASKS_APP is None:  # Django 6.0+: the framework is Django's, with no app to add
        assert said == []
        return
    assert said == [
        (
            "django_pgqueue.E106",
            "TASKS['default'] uses the django-tasks backport, but 'django_tasks' is not in "
            "INSTALLED_APPS.",
            "Add 'django_tasks' to INSTALLED_APPS.",
        )
    ]
    with override_settings(INSTALLED_APPS=[*without, "django_tasks"]):
        assert "django_pgqueue.E106" not in ids()
    # A project's subclass of ours is ours too; another backend is not.
    for backend, expected in [
        ("tests.testapp.backends.ProjectBackend", ["django_pgqueue.E106"]),
        ("django_tasks.backends.dummy.DummyBackend", []),
        ("no.such.Backend", []),
    ]:
        with override_settings(INSTALLED_APPS=without, TASKS={"default": {"BACKEND": backend}}):
            assert [m.id for m in check_settings() if m.id == "django_pgqueue.E106"] == expected


def test_on_django_5_2_without_the_backport_installed_tasks_naming_ours_is_e106(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django 5.2 without django-tasks: nothing read TASKS, check said nothing, and a
    worker died on the import of a task module (as Django 5.2 has no django.tasks)."""
    from django_pgqueue import checks as our_checks

    monkeypatch.setattr(our_checks, "find_spec", lambda name: None)  # neither framework
    said = [(m.id, m.msg, m.hint) for m in check_settings() if m.id == "django_pgqueue.E106"]
    assert said == [
        (
            "django_pgqueue.E106",
            "TASKS['default'] uses PgQueueBackend, but this Django has no Tasks framework: "
            "Django 5.2 needs the django-tasks backport.",
            "pip install \"django-pgqueue[backport]\", and add 'django_tasks' to INSTALLED_APPS.",
        )
    ]


def test_tasks_on_another_backend_are_w003_and_marked_in_the_workers_banner() -> None:
    """TASKS left out (Django's ImmediateBackend): check said nothing, enqueue() ran
    the task in the caller's process, and the worker listed it as one it serves."""
    from django_pgqueue.backend.compat import BaseTaskBackend
    from django_pgqueue.backend.worker import check_unqueued_tasks
    from django_pgqueue.worker.banner import banner
    from django_pgqueue.worker.config import WorkerConfig

    assert check_unqueued_tasks() == []
    package = BaseTaskBackend.__module__.rpartition(".")[0]  # django.tasks.backends
    immediate = {"default": {"BACKEND": f"{package}.immediate.ImmediateBackend"}}
    # Our backend beside it (the project chose where each task goes), or tests on
    # DummyBackend: nothing to say.
    ours = {"pgq": {"BACKEND": "tests.testapp.backends.ProjectBackend"}}
    dummy = {"default": {"BACKEND": f"{package}.dummy.DummyBackend"}}
    for quiet in ({**immediate, **ours}, dummy):
        with override_settings(TASKS=quiet):
            assert check_unqueued_tasks() == []
    with override_settings(TASKS=immediate):
        (warning,) = check_unqueued_tasks()
        started = banner(WorkerConfig.from_settings())
    assert warning.id == "django_pgqueue.W003"
    assert warning.msg.startswith("TASKS['default'] is ImmediateBackend, not PgQueueBackend, and ")
    # The example's five at least (other tests may have registered more), three named.
    counted = re.search(
        r" and (\d+) tasks of the tasks modules use it \((.*) and (\d+) more\)", warning.msg
    )
    assert counted is not None, warning.msg
    assert int(counted[1]) >= 5
    assert len(counted[2].split(", ")) == 3
    assert int(counted[3]) == int(counted[1]) - 3
    assert "does not reach the job queue, and no worker runs them" in warning.msg
    assert (
        "  . example_project.shop.tasks.tally_orders  (TASKS['default'] is ImmediateBackend: "
        "not queued)" in started.splitlines()
    )
    assert "  . tests.testapp.tasks.add  (queue default)" in started.splitlines()
