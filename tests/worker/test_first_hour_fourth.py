"""The first hour of a new user, a fourth pass: what ``manage.py check`` and a worker
print for a task declaration Django refuses, from real subprocesses. The API's side
is in tests/integration/test_first_hour_fourth.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.worker.conftest import django_command
from tests.worker.test_first_hour import settings_module

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REFUSED = (
    "a task in the tasks modules cannot be declared: Task takes context but does not "
    "have a first argument of 'context'. (task 'fh4_tasks.second')"
)


def test_a_declaration_django_refuses_is_named_by_check_and_by_the_worker(
    db_url: str, tmp_path: Path
) -> None:
    """Of two tasks, which one lacks its context parameter: E005, and the worker that
    stops at start, gave Django's words alone."""
    (tmp_path / "fh4_tasks.py").write_text(
        "from django_pgqueue.backend.compat import task\n\n\n"
        "@task(takes_context=True)\ndef first(context, n): ...\n\n\n"
        "@task(takes_context=True)\ndef second(n): ...\n"
    )
    env = settings_module(tmp_path, "fh4_settings", "PGQUEUE = {'TASK_MODULES': ['fh4_tasks']}")
    checked = django_command(db_url, "check", env=env)
    assert f"(django_pgqueue.E005) {REFUSED}\n" in checked.stderr, checked.stderr
    worker = django_command(db_url, "runworker", "--burst", "--skip-checks", env=env)
    assert worker.returncode == 1
    assert REFUSED in worker.stdout + worker.stderr, worker.stderr


def test_every_command_run_past_the_checks_on_sqlite_says_e002_in_one_line(
    db_url: str, tmp_path: Path
) -> None:
    """``--skip-checks`` (and ``call_command()``, which skips them) on SQLite: runworker
    ended in a TypeError traceback about ``connect_timeout``, and queuestats and
    schedules said "cannot reach the database: no such function: current_setting"."""
    env = settings_module(
        tmp_path,
        "fh4_sqlite",
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}}",
    )
    e002 = (
        "CommandError: django-pgqueue needs PostgreSQL, but database 'default' is sqlite: "
        "see manage.py check (django_pgqueue.E002)\n"
    )
    for command in (["runworker", "--burst"], ["queuestats"], ["schedules"], ["reapjobs"]):
        done = django_command(db_url, *command, "--skip-checks", env=env)
        assert (done.returncode, done.stdout, done.stderr) == (1, "", e002), command
