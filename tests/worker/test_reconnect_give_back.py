"""A give-back that fails on a lost connection counts as the worker's lost connection:
the runs it keeps (their leases still hold) were claimed before it, and a crash may
have undone their claims. In-process worker on the test database; the give-back's
statement is held (a trigger waits on an advisory lock the test holds) and its
session cut from a second connection (pg_terminate_backend)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from django_pgqueue.models import Job
from tests.conftest import run_counts
from tests.testapp.tasks import GATES, mark, records_then_waits_for_gate
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.test_reconnect_prefetch import undo_claim

pytestmark = [pytest.mark.django_db(transaction=True)]

#: The advisory lock the held give-backs wait for.
HOLD = 4242
WAITING = (
    "FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
)


@pytest.fixture
def held_give_backs() -> Iterator[None]:
    """Until the end of the test, a statement giving back runs that never started
    waits for the test's advisory lock before it writes anything."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION hold_give_back() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF current_query() LIKE '%%given back before it started%%' THEN "
            f"PERFORM pg_advisory_xact_lock_shared({HOLD}); END IF; RETURN NULL; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER hold_give_back BEFORE UPDATE ON pgqueue_job "
            "FOR EACH STATEMENT EXECUTE FUNCTION hold_give_back()"
        )
        cursor.execute("SELECT pg_advisory_lock(%s)", [HOLD])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
            cursor.execute("DROP TRIGGER hold_give_back ON pgqueue_job")
            cursor.execute("DROP FUNCTION hold_give_back()")


def held() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) {WAITING}")
        return int(cursor.fetchone()[0])


def cut_held() -> int:
    """End the session of the held give-back, and wait until it has ended."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(pg_terminate_backend(pid, 10000)) {WAITING}")
        return int(cursor.fetchone()[0])


def test_a_give_back_failing_on_a_lost_connection_starts_no_lost_claim(
    held_give_backs: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker holds ``ahead`` claimed ahead behind a job on its only thread; its
    queue is paused, and the heartbeat gives it back. The server goes away during
    that statement, twice (the second try on a fresh connection), losing the claim
    (the row put back as it was), and another worker claims the job. The give-back
    kept the run (its lease holds) and the worker started it from memory as soon as
    its thread was free, beside the other worker: no thread of its own had counted
    the lost connection. Now the heartbeat finds it lost first."""
    gate = GATES.setdefault("revG-blocker", threading.Event())
    records_then_waits_for_gate.using(priority=10).enqueue("revG-blocker")
    ahead = mark.using(queue="revG", concurrency_key="revG").enqueue("revG-ahead")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE before_claim AS SELECT * FROM pgqueue_job WHERE id = %s",
            [ahead.pk],
        )
    with worker_thread(concurrency=1, prefetch=2, poll_interval=600, lease=600) as worker:
        wait_for(lambda: run_counts("revG-blocker") == {"revG-blocker": 1}, 10, "the blocker")
        assert Job.objects.get(pk=ahead.pk).locked_by == "inproc"  # claimed with it, waiting
        Job.objects.pause_queue("revG")  # the heartbeat gives it back (held)
        wait_for(lambda: held() == 1, 10, "the give-back")
        assert cut_held() == 1
        wait_for(lambda: held() == 1, 10, "the give-back's second try")
        Job.objects.resume_queue("revG")
        with transaction.atomic():  # the crash's undo, and another worker's claim after it
            undo_claim(ahead.pk)
            (other,) = Job.objects.claim("w2", limit=1)
        assert other.id == ahead.pk
        assert cut_held() == 1
        wait_for(lambda: "could not give back jobs" in caplog.text, 10, "the give-back to fail")
        gate.set()  # the blocker returns: the thread is free for the run kept

        def decided() -> bool:
            rec = worker.recorder
            started = rec.count("started", lambda d: d["job"].id == ahead.pk)
            return bool(started or rec.count("heartbeat", lambda d: bool(d["lost"])))

        wait_for(decided, 20, "the worker to decide about the job claimed ahead")
        assert worker.recorder.count("started", lambda d: d["job"].id == ahead.pk) == 0
    assert run_counts("revG-ahead") == {}  # w2 holds it: this worker never ran it
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.locked_by, row.attempts) == ("running", "w2", 1)
