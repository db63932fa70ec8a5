"""The statement runner keeps one psycopg cursor per connection, so that its adapters
are looked up once, not on every statement. What one statement leaves on that
cursor (a failure, a result, a closed connection) never reaches the next."""

from __future__ import annotations

import dataclasses
import select
from typing import Any

import psycopg
import pytest
from django.db import DataError, OperationalError, connection, transaction
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.queue import enqueue as queue_enqueue
from django_pgqueue.records import JobSpec
from django_pgqueue.sql import goodbye, runner
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.testapp.models import Run
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def cursor_of_connection() -> psycopg.Cursor[Any] | None:
    cursor: psycopg.Cursor[Any] | None = getattr(connection, runner._CURSOR, None)
    return cursor


def enqueue_params(priority: int) -> dict[str, object]:
    """The enqueue statement's parameters for a job of ``add``, at any priority
    (the statement, not the enqueue's checks, is what these tests drive)."""
    return queue_enqueue.enqueue_params(
        dataclasses.replace(JobSpec.build(add, (1, 2)), priority=priority)
    )


def test_statements_on_one_connection_share_one_cursor() -> None:
    first = add.enqueue(1, 2)
    cursor = cursor_of_connection()
    assert cursor is not None
    second = add.enqueue(3, 4)
    result = djtasks.echo.enqueue("x")
    assert cursor_of_connection() is cursor
    ids = {first.pk, second.pk, int(result.id)}
    assert len(ids) == 3
    assert dict(Job.objects.values_list("pk", "args")) == {
        first.pk: [1, 2],
        second.pk: [3, 4],
        int(result.id): ["x"],
    }


def test_a_new_connection_gets_a_new_cursor() -> None:
    add.enqueue(1, 2)
    old = cursor_of_connection()
    connection.close()
    job = add.enqueue(5, 6)
    new = cursor_of_connection()
    assert new is not None
    assert new is not old
    assert new.connection is connection.connection
    assert Job.objects.get(pk=job.pk).args == [5, 6]
    assert status_counts() == {"queued": 2}


def test_a_failed_statement_leaves_the_next_one_working() -> None:
    add.enqueue(1, 2)
    cursor = cursor_of_connection()
    with pytest.raises(DataError, match="out of range"):
        runner.fetch("enqueue", enqueue_params(priority=2**40), "default")
    (row,) = runner.fetch("enqueue", enqueue_params(priority=7), "default")
    assert cursor_of_connection() is cursor
    assert Job.objects.get(pk=row["id"]).priority == 7
    assert status_counts() == {"queued": 2}


def test_a_statement_without_rows_does_not_return_the_previous_ones() -> None:
    (row,) = runner.fetch("enqueue", enqueue_params(priority=0), "default")
    assert runner.fetch("empty", {}, "default", text="SELECT 1 WHERE false") == []
    update = "UPDATE pgqueue_job SET priority = 5 WHERE id = %(id)s"
    assert runner.fetch("update", {"id": row["id"]}, "default", text=update) == []
    assert Job.objects.get().priority == 5


def test_looking_for_a_hang_up_leaves_a_notification_to_the_listener() -> None:
    """A job thread's kept connections are looked at before each job, and the queue's
    own before each statement (goodbye.hung_up): reading what the server sent unasked
    must not keep a notification from ``notifies()`` on a connection that LISTENs
    (before: it sat parsed in libpq, and a waiter saw it only once more came)."""
    connection.ensure_connection()
    raw = connection.connection
    raw.execute("LISTEN pgqueue_test_hung_up")
    with psycopg.connect(**connection.get_connection_params()) as other:
        other.execute("SELECT pg_notify('pgqueue_test_hung_up', 'one')")
        other.commit()
    assert select.select([raw.fileno()], [], [], 10)[0]  # it has arrived
    assert goodbye.hung_up(raw) is False
    got = [n.payload for n in raw.notifies(timeout=2, stop_after=1)]
    raw.execute("UNLISTEN *")
    assert got == ["one"]


def test_a_connection_the_server_said_goodbye_on_is_seen_hung_up_at_once() -> None:
    """``pg_terminate_backend``, ``idle_session_timeout``: the server sends a FATAL
    error, then closes the stream a moment later. Looked at in between, the
    connection was called healthy (its goodbye read and dropped as a notice), so
    the statement about to run on it failed (reproduced: most of 40 tries)."""
    for _ in range(10):
        connection.ensure_connection()
        raw = connection.connection
        assert goodbye.hung_up(raw) is False
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [raw.info.backend_pid])
        assert select.select([raw.fileno()], [], [], 10)[0]  # the goodbye has arrived
        assert goodbye.hung_up(raw) is True
        connection.close()


def test_an_enqueue_in_a_transaction_the_server_ended_fails_instead_of_committing_alone() -> None:
    """Autocommit off (``transaction.set_autocommit(False)``), a write, then the server
    ends the session (``idle_in_transaction_session_timeout``, an operator): the
    transaction is gone. The enqueue that was to join it must fail, not reconnect
    and commit the job on its own (reproduced: the job written, the write lost, and
    ``commit()`` raised nothing)."""
    transaction.set_autocommit(False)
    try:
        Run.objects.create(label="order", started=timezone.now(), finished=timezone.now())
        raw = connection.connection
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [raw.info.backend_pid])
        assert select.select([raw.fileno()], [], [], 10)[0]  # the goodbye has arrived
        with pytest.raises(OperationalError):
            add.enqueue(1, 2)
    finally:
        connection.close()  # autocommit is back on the next connection
    assert (Job.objects.count(), Run.objects.count()) == (0, 0)
