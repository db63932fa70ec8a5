"""Issue 13's first hour, as a new user's mistakes: each one answered where it is made.

What tests/worker/test_first_hour.py and tests/integration/test_first_hour.py left
unpinned: a misspelt PGQUEUE["DATABASE"] met
at enqueue (a shell, a script: where no check runs), and ``runworker`` started on
a database ``migrate`` has not touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from django.test import override_settings
from django.utils.connection import ConnectionDoesNotExist

import django_pgqueue.migrations
from django_pgqueue.models import Job
from tests.testapp import djtasks
from tests.testapp.tasks import add
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db


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
