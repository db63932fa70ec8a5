"""The worker's bookkeeping commits asynchronously; jobs and enqueues never do."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings

from django_pgqueue.models import Job
from django_pgqueue.sql import PARTS, runner
from django_pgqueue.worker.services import bookkeeping_thread
from tests.testapp.tasks import show_synchronous_commit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def durable_sessions() -> Iterator[None]:
    """New sessions of the test database start with synchronous_commit on, as in
    production (the embedded test server turns it off globally for speed)."""
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" SET synchronous_commit TO on')
    connection.close()
    yield
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" RESET synchronous_commit')


PROBE = """WITH
-- include: _relax_commit
SELECT current_setting('synchronous_commit') AS inside FROM relax"""


def settings_in_thread(mark: bool) -> tuple[str, str]:
    """(the setting inside a bookkeeping statement, the session's setting after it)."""
    seen: list[str] = []

    def run() -> None:
        try:
            if mark:
                bookkeeping_thread()
            text = PROBE.replace("-- include: _relax_commit", PARTS["_relax_commit"])
            (row,) = runner.fetch("probe", {"commit": runner.commit_mode()}, "default", text=text)
            seen.append(row["inside"])
            with connections["default"].cursor() as cursor:
                cursor.execute("SHOW synchronous_commit")
                seen.append(cursor.fetchone()[0])
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen[0], seen[1]


def test_only_bookkeeping_statements_commit_without_waiting_for_the_flush() -> None:
    assert settings_in_thread(mark=True) == ("off", "on")  # nothing stays on the session
    assert settings_in_thread(mark=False) == ("on", "on")
    with override_settings(PGQUEUE={"ASYNC_COMMIT": False}):
        assert settings_in_thread(mark=True) == ("on", "on")


def test_jobs_and_the_caller_keep_the_projects_durability() -> None:
    show_synchronous_commit.enqueue()
    call_command("runworker", "--burst", verbosity=0)
    assert Job.objects.get().result == "on"
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # the in-process worker put it back
