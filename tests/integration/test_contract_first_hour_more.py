"""Issue 13's first hour, more of a new user's mistakes: each answered where it is made.

What tests/worker/test_contract_first_hour.py and tests/integration/test_first_hour.py
left unpinned: a task defined in a class, or inside a function, on both APIs; a typo
in TASKS' OPTIONS (or the OPTIONS key itself) met at enqueue; a task added to a
tasks module while a worker runs; queues given to ``runworker`` space-separated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from django_pgqueue.backend import call, enqueue_many
from django_pgqueue.backend.compat import InvalidTask
from django_pgqueue.models import Job
from tests.testapp import djtasks
from tests.worker.conftest import ROOT, WorkerProcess, django_command, wait_for

pytestmark = pytest.mark.django_db


def declare(source: str) -> dict[str, Any]:
    """Run ``source`` as the top of an app's tasks.py (a module a worker imports)."""
    namespace: dict[str, Any] = {"__name__": "tests.testapp.tasks"}
    exec(source, namespace)
    return namespace


DIRECT = "from django_pgqueue import task\n"
FRAMEWORK = "from django_pgqueue.backend.compat import task\n"
IN_A_CLASS = "class Mailer:\n    @task\n    def send(n):\n        return n\n"
IN_A_FUNCTION = (
    "def make():\n    @task\n    def send(n):\n        return n\n    return send\nsend = make()\n"
)


# -- a task defined in a class, or inside a function ---------------------------------------


def test_a_direct_task_defined_in_a_class_is_refused_where_it_is_declared() -> None:
    """Accepted at declaration and enqueue, then buried by a worker that had not
    imported the module: 'module 'shop.tasks.Mailer' cannot be imported'."""
    with pytest.raises(TypeError) as raised:
        declare(DIRECT + IN_A_CLASS)
    assert str(raised.value) == (
        "@task cannot register 'tests.testapp.tasks.Mailer.send': it is defined in the "
        "class 'Mailer', and a worker finds a task by its module and a name at the top "
        "level of that module. Define it with def at the top level of its module."
    )
    assert Job.objects.count() == 0


def test_a_direct_task_defined_inside_a_function_is_refused_where_it_is_declared() -> None:
    """Its path, 'module.make.<locals>.send', names nothing a worker can import: every
    job of it was buried."""
    with pytest.raises(TypeError) as raised:
        declare(DIRECT + IN_A_FUNCTION)
    assert str(raised.value) == (
        "@task cannot register 'tests.testapp.tasks.make.<locals>.send': it is defined "
        "inside the function 'make', and a worker finds a task by its module and a name at "
        "the top level of that module. Define it with def at the top level of its module."
    )


def test_a_direct_task_in_a_class_with_a_name_of_its_own_is_declared() -> None:
    named = declare(
        DIRECT + "class Mailer:\n    @task(name='tests.testapp.tasks.fhm_send')\n"
        "    def send(n):\n        return n\n"
    )["Mailer"].send
    assert named.path == "tests.testapp.tasks.fhm_send"


def test_a_tasks_framework_task_defined_in_a_class_is_refused_where_it_is_declared() -> None:
    """Django's own check refuses a function inside another, not one in a class body."""
    with pytest.raises(InvalidTask) as raised:
        declare(FRAMEWORK + IN_A_CLASS)
    assert str(raised.value) == (
        "Task 'tests.testapp.tasks.Mailer.send' is defined in the class 'Mailer', and a "
        "worker finds a task by its module and a name at the top level of that module. "
        "Define it with def at the top level of its module."
    )


# -- a typo in TASKS' OPTIONS, met at enqueue (a shell, a script: where no check runs) ------


def tasks_with(**entry: Any) -> dict[str, Any]:
    return {"default": {**settings.TASKS["default"], **entry}}


def test_an_unknown_options_key_is_refused_at_enqueue_as_check_reports_it() -> None:
    """OPTIONS={"MAX_ATTEMPT": 5} (for MAX_ATTEMPTS): check said E103, but enqueue in
    a shell wrote the job with the default 3 attempts, the 5 meant never read."""
    with override_settings(TASKS=tasks_with(OPTIONS={"MAX_ATTEMPT": 5})):
        with pytest.raises(InvalidTask) as raised:
            djtasks.noop_task.enqueue()
        with pytest.raises(InvalidTask):
            enqueue_many(djtasks.noop_task, [call()])
    assert str(raised.value) == (
        "TASKS['default']['OPTIONS'] has unknown key(s) 'MAX_ATTEMPT' (did you mean "
        "'MAX_ATTEMPTS'?): PgQueueBackend reads BACKOFF, MAX_ATTEMPTS (django_pgqueue.E103)"
    )
    assert Job.objects.count() == 0


def test_an_unknown_tasks_key_is_refused_at_enqueue_as_check_reports_it() -> None:
    """'OPTION' for 'OPTIONS': the options meant were never read (E109)."""
    with (
        override_settings(TASKS=tasks_with(OPTION={"MAX_ATTEMPTS": 5})),
        pytest.raises(InvalidTask) as raised,
    ):
        djtasks.noop_task.enqueue()
    assert str(raised.value) == (
        "TASKS['default'] has unknown key(s) 'OPTION' (did you mean 'OPTIONS'?) "
        "(django_pgqueue.E109)"
    )
    assert Job.objects.count() == 0


def test_a_silenced_unknown_key_is_left_alone_at_enqueue() -> None:
    with override_settings(
        TASKS=tasks_with(OPTIONS={"MAX_ATTEMPT": 5}, EXTRA=1),
        SILENCED_SYSTEM_CHECKS=["django_pgqueue.E103", "django_pgqueue.E109"],
    ):
        result = djtasks.noop_task.enqueue()
    assert Job.objects.get(pk=result.id).max_attempts == 3


# -- a task added while the worker runs ------------------------------------------------------

ADDED = """
from django_pgqueue import task


@task
def first() -> int:
    return 1
"""


@pytest.mark.django_db(transaction=True)
def test_a_task_added_while_the_worker_runs_is_buried_saying_to_restart_it(
    db_url: str, tmp_path: Path
) -> None:
    """The worker imported the tasks module before the task was written: its job was
    buried as "'...second' is not a registered task", with nothing pointing at the
    worker's age."""
    (tmp_path / "fhm_added.py").write_text(ADDED)
    (tmp_path / "fhm_settings.py").write_text(
        "from tests.settings import *  # noqa\n"
        'PGQUEUE = {**PGQUEUE, "TASK_MODULES": ["fhm_added"]}\n'
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "fhm_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    args = ("--no-listen", "--poll-interval", "0.2", "--settings=fhm_settings")
    worker = WorkerProcess(db_url, *args, env=env)
    try:
        worker.wait_for_output("  . fhm_added.first")
        added = ADDED + "\n\n@task\ndef second() -> int:\n    return 2\n"
        (tmp_path / "fhm_added.py").write_text(added)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
                "VALUES ('fhm_added.second', '[]', '{}', '[]', '[]') RETURNING id"
            )
            (job_id,) = cursor.fetchone()
        wait_for(lambda: Job.objects.get(pk=job_id).status == "dead", 20, "the job's burial")
    finally:
        worker.kill()
    assert Job.objects.get(pk=job_id).last_error == (
        "django_pgqueue.exceptions.UnknownTask: 'fhm_added.second' is not a registered "
        "task: 'fhm_added' holds nothing by that name, and its file has changed since this "
        "process started: if the task is new, restart the process to load it (`runworker "
        "--reload` does so on every change while you develop)"
    )


# -- queues given space-separated, as RQ's worker takes them --------------------------------


@pytest.mark.django_db(transaction=True)
def test_queues_given_space_separated_say_how_to_give_several(db_url: str) -> None:
    done = django_command(db_url, "runworker", "--queues", "emails", "default", "--burst")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "CommandError: runworker: unrecognized arguments: default (queues are given with "
        "--queues, several as one comma-separated list: --queues a,b)\n"
    )
