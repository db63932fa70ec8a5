"""A new user's first hour, a third pass: the quick start, tasks and backend pages
followed as written on a fresh project, and the mistakes made on the way, each
answered where it is made.

What tests/integration/test_first_hour.py, test_contract_first_hour_more.py and
tests/worker/test_*first_hour.py left unpinned: a Tasks-framework task called as
a function (as the direct API's is) is not callable, as Django's own; a typo
in a ``runworker`` flag; the console lines of a task whose return value is not
JSON.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from django_pgqueue.models import Job
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.worker.conftest import ROOT, django_command

pytestmark = pytest.mark.django_db

#: The first line of a log record in the worker's own console format.
STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) ")


# -- a Tasks-framework task called as a function ----------------------------------------------


def test_a_tasks_framework_task_is_not_callable_as_djangos_own_and_call_runs_it() -> None:
    """tasks.md says calling a task runs it (the direct API's); a django.tasks Task is
    not callable, on our backend as on Django's own (ImmediateBackend in tests), so
    that callable() answers alike and templates and pytest leave it alone; backend.md
    says to use .call() or .enqueue()."""
    assert not callable(djtasks.echo)
    with pytest.raises(TypeError, match="object is not callable"):
        djtasks.echo(1, k="v")  # type: ignore[operator]
    assert djtasks.echo.call(1, k="v") == {"args": (1,), "kwargs": {"k": "v"}}
    assert Job.objects.count() == 0


# -- a typo in a runworker flag ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--concurency=2", "--concurrency"),
        ("--brust", "--burst"),
        ("--job-timout", "--job-timeout"),
        ("--nolisten", "--no-listen"),
    ],
)
def test_a_misspelt_runworker_flag_names_the_one_meant(db_url: str, typed: str, meant: str) -> None:
    """argparse said "unrecognized arguments: --brust" and no more."""
    done = django_command(db_url, "runworker", typed)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"CommandError: runworker: unrecognized arguments: {typed} (did you mean {meant}?)\n"
    )


def test_every_command_names_the_flag_meant_and_guesses_no_further(db_url: str) -> None:
    done = django_command(db_url, "prunejobs", "--older-than", "7d", "--dryrun")
    assert (done.returncode, done.stderr) == (
        2,
        "CommandError: prunejobs: unrecognized arguments: --dryrun (did you mean --dry-run?)\n",
    )
    done = django_command(db_url, "runworker", "--debug")  # like no flag of runworker's
    assert (done.returncode, done.stderr) == (
        2,
        "CommandError: runworker: unrecognized arguments: --debug\n",
    )


# -- a return value that is not JSON, on the console --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_non_json_return_value_is_printed_once_with_djangos_words(
    db_url: str, tmp_path: Path
) -> None:
    """commands.md: the console prints a failed run's error once, under Django's
    line, and the worker's line just after it without it. For a return value that is
    not JSON, Django's line showed an error without Django's own words, and the
    worker's line was followed by a second copy of the error, with them."""
    (tmp_path / "fht_settings.py").write_text(
        "from tests.settings import *  # noqa\nLOGGING = {}\n"
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "fht_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    bad = djtasks.complex_return_value.enqueue()
    done = django_command(db_url, "runworker", "--burst", "--no-listen", env=env)
    assert done.returncode == 0, done.stderr
    assert status_counts() == {"dead": 1}
    lines = done.stderr.splitlines()
    errors = [n for n, line in enumerate(lines) if " ERROR " in line]
    assert [lines[n].split(" ERROR ")[1].split(":")[0] for n in errors] == [
        f"Task id={bad.id} path=tests.testapp.djtasks.complex_return_value state=FAILED",
        f"job {bad.id} (tests.testapp.djtasks.complex_return_value) buried dead",
    ]
    django_line, ours = errors
    between = lines[django_line + 1 : ours]
    (error,) = [line for line in between if line.startswith("TypeError: ")]
    assert error.startswith("TypeError: the return value is builtins.function ")
    assert error.endswith("(Unsupported type: <class 'function'>)")  # Django's own words
    assert STAMPED.match(lines[ours + 1]), done.stderr  # ours: no second copy after it
    stored = Job.objects.get(pk=int(bad.id)).last_error
    assert stored == error  # the line printed is the error stored


# -- get_result() before migrate ---------------------------------------------------------------


def test_before_migrate_get_result_says_to_migrate() -> None:
    """enqueue() says to run migrate when the job table is missing; a page that only
    reads a result (get_result) gave the bare ProgrammingError."""
    from django.db import DatabaseError, connection, transaction

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgqueue_job RENAME TO pgqueue_job_away")
    try:
        with pytest.raises(DatabaseError, match="pgqueue_job") as raised, transaction.atomic():
            djtasks.echo.get_backend().get_result("1")
        assert any("run `manage.py migrate`" in note for note in raised.value.__notes__)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pgqueue_job_away RENAME TO pgqueue_job")
