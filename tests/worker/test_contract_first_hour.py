"""Issue 13's first hour, as a new user's mistakes: each one answered where it is made.

What tests/worker/test_first_hour.py and tests/integration/test_first_hour.py left
unpinned: a lambda as a task (on both APIs), the job model imported without the
app (step 6 of the quick start), a misspelt PGQUEUE["DATABASE"] met
at enqueue (a shell, a script: where no check runs), and ``runworker`` started on
a database ``migrate`` has not touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.test import override_settings
from django.utils.connection import ConnectionDoesNotExist

import django_pgqueue.migrations
from django_pgqueue import custom_names, registry
from django_pgqueue import task as pgqueue_task
from django_pgqueue.backend.compat import InvalidTask
from django_pgqueue.backend.compat import task as django_task
from django_pgqueue.installed import NOT_INSTALLED
from django_pgqueue.models import Job
from tests.testapp import djtasks
from tests.testapp.tasks import add
from tests.worker.conftest import django_command
from tests.worker.test_first_hour import manage, settings_module

pytestmark = pytest.mark.django_db


def module_level_lambda() -> Any:
    """``double = task(lambda n: n * 2)`` at the top of an app's tasks.py: a lambda
    whose qualified name is ``<lambda>`` in a module a worker imports."""
    namespace: dict[str, Any] = {"__name__": "tests.testapp.tasks"}
    exec("double = lambda n: n * 2", namespace)
    return namespace["double"]


# -- a lambda as a task ---------------------------------------------------------------------


def test_a_lambda_is_refused_as_a_direct_task_where_it_is_declared() -> None:
    """Two lambdas of one module were both 'module.<lambda>': the worker ran the last
    one registered for the jobs of both (double(2) returned 6)."""
    double = module_level_lambda()
    with pytest.raises(TypeError) as raised:
        pgqueue_task(double)
    assert str(raised.value) == (
        "@task cannot register 'tests.testapp.tasks.<lambda>': a worker finds a task by its "
        "module and name, and every lambda of a module has the same one. Define it with def, "
        "or give it a name of its own: @task(name='app.tasks.double')"
    )
    path = "tests.testapp.tasks.fh_double"
    try:
        named = pgqueue_task(name=path)(double)  # a name of its own
        assert named.path == path
    finally:  # declared by this test's body, which no worker runs: E006 for the session
        registry._registry.pop(path, None)
        custom_names._declared_by.pop(path, None)
    assert Job.objects.count() == 0


def test_a_lambda_is_refused_as_a_tasks_framework_task_where_it_is_declared() -> None:
    with pytest.raises(InvalidTask) as raised:
        django_task(module_level_lambda())
    assert str(raised.value) == (
        "Task 'tests.testapp.tasks.<lambda>' is a lambda: a worker finds a task by its module "
        "and name, and every lambda of a module has the same one. Define it with def at the "
        "top level of its module."
    )


# -- a misspelt PGQUEUE["DATABASE"] ------------------------------------------------------------


def test_a_misspelt_database_alias_is_named_with_its_setting_at_enqueue_on_both_apis() -> None:
    """Django's bare "The connection 'defualt' doesn't exist." named neither the
    setting nor the alias meant; the check (E002) does, but no check runs in a shell."""
    with override_settings(PGQUEUE={"DATABASE": "defualt"}):
        for enqueue in (lambda: add.enqueue(1, 2), djtasks.noop_task.enqueue):
            with pytest.raises(ConnectionDoesNotExist) as raised:  # Django's class, kept
                enqueue()
            assert str(raised.value) == (
                "The connection 'defualt' doesn't exist: PGQUEUE['DATABASE'] = 'defualt' is not "
                "in DATABASES (did you mean 'default'?): see manage.py check "
                "(django_pgqueue.E002)"
            )
    assert Job.objects.count() == 0


# -- runworker before migrate ---------------------------------------------------------------


def migration_names() -> list[str]:
    folder = Path(django_pgqueue.migrations.__file__).parent
    return sorted(path.stem for path in folder.glob("[0-9][0-9][0-9][0-9]_*.py"))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_runworker_on_a_database_never_migrated_stops_at_once_naming_the_fix(
    db_url: str,
) -> None:
    empty = f"pgqueue_fh_unmigrated_{os.getpid()}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {empty}")
    try:
        url = db_url.rsplit("/", 1)[0] + f"/{empty}"
        done = django_command(url, "runworker", "--burst", "--no-listen")
        assert done.returncode == 1, done.stdout + done.stderr
        output = done.stdout + done.stderr
        (line,) = [line for line in output.splitlines() if "migrations" in line]
        assert line.endswith(
            "django_pgqueue's migrations are not all applied to database 'default' "
            f"({', '.join(migration_names())}): run `manage.py migrate`"
        ), line
        assert "Traceback" not in output
        assert "starting worker" not in output  # nothing claimed, no banner
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {empty} WITH (FORCE)")


# -- the app missing, and the quick start's "see what happened" -----------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_importing_the_job_model_without_the_app_says_what_to_add(
    db_url: str, tmp_path: Path
) -> None:
    """Django's "Model class django_pgqueue.monitoring.models.RegisteredWorker doesn't
    declare an explicit app_label" named another model than the one imported, and
    not the fix."""
    env = settings_module(
        tmp_path,
        "fh_contract_no_app",
        "INSTALLED_APPS = [a for a in INSTALLED_APPS if a not in "
        "('django_pgqueue', 'tests.testapp', 'example_project.shop')]",
    )
    script = (
        "try:\n    from django_pgqueue.models import Job\nexcept Exception as exc:\n"
        "    print(type(exc).__name__ + ': ' + str(exc))\n"
    )
    output = manage(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert output.strip() == f"ImproperlyConfigured: {NOT_INSTALLED}"
