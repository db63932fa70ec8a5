"""Worker ids: unique without configuration, and a second live worker with one id refused."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.pooler import alias_through_pooler
from django_pgqueue.queue.presence import lock_key
from django_pgqueue.records import JobSpec
from django_pgqueue.worker import session as session_module
from django_pgqueue.worker.config import WorkerConfig, default_worker_id
from django_pgqueue.worker.session import WorkerSession
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

Start = Callable[..., WorkerProcess]


def test_default_ids_are_host_pid_and_32_random_bits_and_differ() -> None:
    ids = {default_worker_id() for _ in range(1000)}
    assert len(ids) == 1000  # same host and pid: only the random part tells them apart
    assert all(re.fullmatch(r"[^:]+:\d+:[0-9a-f]{8}", worker_id) for worker_id in ids)
    assert WorkerConfig.from_settings().worker_id != WorkerConfig.from_settings().worker_id


def test_lock_keys_are_64_bit_and_differ_by_id() -> None:
    keys = {lock_key(f"host:{pid}:x") for pid in range(10000)}
    assert len(keys) == 10000
    assert all(-(2**63) <= key < 2**63 for key in keys)
    assert lock_key("a") == lock_key("a")


@pytest.mark.slow
def test_a_second_live_worker_with_the_same_id_refuses_to_start(start_worker: Start) -> None:
    first = start_worker("--worker-id", "twin", "--concurrency", "2")
    first.wait_for_output("starting worker twin")
    second = start_worker("--worker-id", "twin", "--concurrency", "2")
    assert second.wait(20) == 1
    # One line, and nothing before it: the worker never got as far as claiming.
    assert second.output.strip().splitlines() == [
        "worker id 'twin' is in use: another live worker holds its lock on database "
        "'default'; give each worker its own --worker-id, or leave it unset "
        "(host:pid:random is unique)"
    ]

    Job.objects.enqueue_many(JobSpec.build(tracked, [f"twin-{i}"]) for i in range(20))
    wait_for(lambda: status_counts() == {"done": 20}, 20, "the first worker to run them")
    assert set(Job.objects.values_list("locked_by", flat=True)) == {"twin"}
    assert run_counts("twin-") == {f"twin-{i}": 1 for i in range(20)}

    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    third = start_worker("--worker-id", "twin", "--burst")  # the id is free again
    assert third.wait(20) == 0, third.output
    assert "in use" not in third.output


def test_a_worker_that_finds_its_id_taken_after_reconnecting_stops(db_url: str) -> None:
    with worker_thread(worker_id="taken", poll_interval=0.2) as worker:
        worker.wait("listening")
        session = worker.worker.session.conn
        assert session is not None
        with psycopg.connect(db_url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [session.info.backend_pid])
            # Queued behind the dying session, this lock is granted before the worker
            # reconnects (its first retry waits 0.2 s).
            other.execute("SELECT pg_advisory_lock(%s)", [lock_key("taken")])
            assert worker.join(15) == 1
        (stopping,) = [data for name, data in worker.recorder.seen if name == "stopping"]
        assert "worker id 'taken' is in use" in stopping["reason"]


def test_a_session_through_a_pooler_takes_no_id_lock_and_is_not_refused(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LISTEN_DATABASE that goes through a pooler (warned about) must not take the
    session-level lock: a transaction pool keeps it on a server connection after the
    worker exits, where it refused every later worker with that id ("in use")."""
    monkeypatch.setattr(session_module, "through_pooler", lambda conn: True)
    with psycopg.connect(db_url, autocommit=True) as leftover:
        # The lock an earlier worker left on a pooled server connection.
        leftover.execute("SELECT pg_advisory_lock(%s)", [lock_key("pooled-id")])
        session = WorkerSession("pooled-id", "default", db_url, "pgqueue_jobs", 1.0)
        session.open()  # not WorkerIdInUse
        try:
            assert session.conn is not None
            assert session.lock_holds is False
            held = leftover.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                [session.conn.info.backend_pid],
            ).fetchone()
            assert held == (0,)  # nothing left behind on the server connection
        finally:
            session.close()


def test_the_session_connection_takes_the_alias_options_as_django_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django passes every OPTIONS key to psycopg.connect(), "autocommit" among them
    (an older project's); the session connection, opened outside Django's pool, passed
    autocommit=True beside it and failed with a TypeError: runworker, and migrate or
    check --database through the pooler look, crashed on settings Django runs with."""
    options = connection.settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "autocommit", True)
    monkeypatch.setitem(options, "application_name", "session-options")
    session = WorkerSession("with-options", "default", None, "pgqueue_jobs", 1.0)
    session.open()
    try:
        assert session.conn is not None
        assert session.conn.autocommit
        assert session.conn.info.parameter_status("application_name") == "session-options"
        assert session.lock_holds
    finally:
        session.close()
    assert alias_through_pooler("default") is False
