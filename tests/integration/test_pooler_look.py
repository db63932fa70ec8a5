"""With PREPARE, each process looks once per alias whether a connection pooler is
in the way, before its first statement there, and prepares nothing if so. The
pooler is faked: the look's ``pg_backend_pid()`` answers another process's id, as
through PgBouncer (tests/cluster runs a real one)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest
from django.db import DataError, InternalError, connection, connections, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from django_pgqueue.sql import query, runner
from tests.conftest import status_counts
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def fake_pooler(monkeypatch: pytest.MonkeyPatch, *, pause: float = 0.0) -> list[tuple[str, bool]]:
    """A process that has looked nowhere yet, behind a faked pooler whose look takes
    ``pause`` seconds; the (thread, prepared) of each statement the runner runs."""
    monkeypatch.setattr(runner, "_looked", set())
    monkeypatch.setattr(runner, "_unprepared", set())
    real_execute = runner._execute
    look = f"SELECT pg_backend_pid() + 1 AS pid FROM pg_sleep({pause})"
    monkeypatch.setattr(
        "django_pgqueue.pooler.query",
        lambda name: look if name == "backend_pid" else query(name),
    )
    ran: list[tuple[str, bool]] = []

    def execute(*args: Any) -> Any:
        ran.append((threading.current_thread().name, args[-1]))
        return real_execute(*args)

    monkeypatch.setattr(runner, "_execute", execute)
    connection.close()  # the next statement is the first on a new connection
    return ran


def break_the_transaction() -> None:
    with contextlib.suppress(DataError):
        connection.cursor().execute("SELECT 1/0")


def test_the_first_statement_behind_a_pooler_is_not_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = fake_pooler(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        add.enqueue(1, 2)
    assert ran == [("MainThread", False)]
    # The look is not one of the statements assertNumQueries counts.
    assert len(queries) == 1
    assert "pgqueue: enqueue" in queries[0]["sql"]


def test_a_look_in_an_aborted_transaction_fails_as_our_statements_do_and_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The look raised psycopg's own error, not a django.db one; and the alias
    counted as looked at, so the process prepared behind the pooler from then on."""
    ran = fake_pooler(monkeypatch)
    with pytest.raises(InternalError, match="current transaction is aborted"), transaction.atomic():
        break_the_transaction()
        add.enqueue(1, 2)
    add.enqueue(3, 4)
    assert ran == [("MainThread", False)]
    assert runner._unprepared == {"default"}
    assert status_counts() == {"queued": 1}


def test_a_broken_atomic_block_is_refused_before_the_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django refuses a query in an atomic block an inner one broke: so does an
    enqueue there, not with the database's error from the look."""
    fake_pooler(monkeypatch)
    with pytest.raises(TransactionManagementError), transaction.atomic():
        with pytest.raises(DataError), transaction.atomic(savepoint=False):
            connection.cursor().execute("SELECT 1/0")
        add.enqueue(1, 2)
    assert not runner._looked


def test_a_connection_with_its_own_prepare_threshold_is_looked_through_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """psycopg's prepare_threshold (W001 warns about it too) left the threshold set,
    and the look was made only where it was not."""
    options = {**connection.settings_dict.get("OPTIONS", {}), "prepare_threshold": 5}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    ran = fake_pooler(monkeypatch)
    add.enqueue(1, 2)
    assert connection.connection.prepare_threshold == 5
    assert ran == [("MainThread", False)]


def test_a_thread_does_not_prepare_while_another_thread_looks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The alias counted as looked at from the look's start: a second thread's first
    statement, made meanwhile, was prepared behind the pooler."""
    ran = fake_pooler(monkeypatch, pause=0.5)

    def enqueue() -> None:
        try:
            add.enqueue(1, 2)
        finally:
            connections.close_all()

    first = threading.Thread(target=enqueue, name="first")
    second = threading.Thread(target=enqueue, name="second")
    first.start()
    time.sleep(0.15)
    second.start()
    first.join(10)
    second.join(10)
    assert sorted(ran) == [("first", False), ("second", False)]


def test_a_pooler_in_the_way_of_one_alias_leaves_the_others_preparing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process with a pooled alias beside a direct one (a LISTEN_DATABASE, a
    reporting database) stopped preparing everywhere once the pooled one showed."""
    ran = fake_pooler(monkeypatch)
    monkeypatch.setattr(runner, "_looked", {"default"})  # looked at: direct
    runner._stop_preparing("pooled", "it reaches PostgreSQL through a connection pooler")
    add.enqueue(1, 2)
    assert ran == [("MainThread", True)]
    assert runner._unprepared == {"pooled"}
