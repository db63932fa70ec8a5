"""A give-back that fails on a lost connection counts as the worker's lost connection:
the runs it keeps (their leases still hold) were claimed before it, and a crash may
have undone their claims. In-process worker on the test database; the give-back's
statement is held (a trigger waits on an advisory lock the test holds) and its
session cut from a second connection (pg_terminate_backend)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from django_pgqueue.models import Job
from django_pgqueue.worker import prefetch
from tests.conftest import run_counts
from tests.testapp.tasks import GATES, mark, records_then_waits_for_gate
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.test_reconnect_job_thread import cut_job_connection, not_started_from_memory
from tests.worker.test_reconnect_prefetch import undo_claim

pytestmark = [pytest.mark.django_db(transaction=True)]

#: The advisory lock the held give-backs wait for.
HOLD = 4242
WAITING = (
    "FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
)


@contextlib.contextmanager
def holding(marker: str) -> Iterator[None]:
    """Meanwhile, a statement of the worker's whose text holds ``marker`` waits for
    the test's advisory lock before it writes anything (a trigger)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION hold_statement() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF strpos(current_query(), '{marker}') > 0 THEN "
            f"PERFORM pg_advisory_xact_lock_shared({HOLD}); END IF; RETURN NULL; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER hold_statement BEFORE UPDATE ON pgqueue_job "
            "FOR EACH STATEMENT EXECUTE FUNCTION hold_statement()"
        )
        cursor.execute("SELECT pg_advisory_lock(%s)", [HOLD])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
            cursor.execute("DROP TRIGGER hold_statement ON pgqueue_job")
            cursor.execute("DROP FUNCTION hold_statement()")


@pytest.fixture
def give_backs_held() -> Iterator[None]:
    with holding("given back before it started"):  # (prefetched runs' give-backs)
        yield


def held() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) {WAITING}")
        return int(cursor.fetchone()[0])


def cut_held() -> int:
    """End the session of the held give-back, and wait until it has ended."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(pg_terminate_backend(pid, 10000)) {WAITING}")
        return int(cursor.fetchone()[0])


@pytest.mark.usefixtures("give_backs_held")
def test_a_give_back_failing_on_a_lost_connection_starts_no_lost_claim(
    caplog: pytest.LogCaptureFixture,
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

        not_started_from_memory(worker, ahead.pk)
    assert run_counts("revG-ahead") == {}  # w2 holds it: this worker never ran it
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.locked_by, row.attempts) == ("running", "w2", 1)


def test_a_run_waiting_for_its_claim_to_be_confirmed_is_not_stuck_behind_long_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run held back after a lost connection waits for a heartbeat, not for a
    thread (here the heartbeat's statement is held). The adaptive prefetch took it
    for one stuck behind long jobs: a second after its claim, it gave back the jobs
    claimed ahead just then, as if they had waited that long, and claimed no more
    ahead (its estimate of a job's length set to that second): with one thread,
    whose slot the run held back keeps, it claimed nothing more until the heartbeat
    came back, and the jobs it gave back waited for another worker."""
    # The short ones wait for the thread behind the half-second job: on a loaded host
    # longer than the second a prefetched job may wait ("gave back 4 prefetched jobs
    # that waited 1.7s"). Three seconds here; the run held back outlasts them (below).
    monkeypatch.setattr(prefetch, "GIVE_BACK_AFTER", 3.0)
    with worker_thread(concurrency=1, poll_interval=600, lease=600) as worker:
        for n in range(50):  # short jobs: it learns to claim ahead
            mark.enqueue(f"revS-warm-{n}")
        worker.recorder.wait_total("recorded", "succeeded", 50, timeout=30)
        # The half-second job and its four short ones are claimed together only with a
        # prefetch of five or more, learnt from jobs of 10 ms at most: on a loaded host
        # (CI's side-by-side runs) they took longer, fewer were claimed with it, after it
        # the prefetch was none, and the rest waited for the held heartbeat (the run held
        # back keeps the only thread's slot). What a quiet host learns from them:
        learnt = worker.worker.prefetch
        for _ in range(100):
            if learnt.limit() >= 5:
                break
            learnt.observe(0.001)
        assert learnt.limit() >= 5
        with holding("true AS kept"):  # the heartbeat's renewal waits
            # The job thread's connection found closed before the next job: a lost
            # connection, so the job claimed before it waits for the heartbeat.
            assert cut_job_connection("INSERT INTO testapp_run%") == 1
            parked = mark.enqueue("revS-parked")
            wait_for(lambda: held() == 1, 10, "the heartbeat hurried for the run held back")
            claimed = time.monotonic()
            wait_for(
                lambda: time.monotonic() - claimed > prefetch.GIVE_BACK_AFTER + prefetch.LOOK_EVERY,
                10,
                "the run held back for longer than a prefetched job may wait",
            )
            # A job of half a second, with short ones claimed ahead behind it.
            with transaction.atomic():
                half = mark.using(priority=10).enqueue("revS-half", sleep=0.5)
                for n in range(4):
                    mark.enqueue(f"revS-short-{n}")
            worker.wait("finished", where=lambda d: d["job"].id == half.pk)
            assert worker.recorder.count("released") == 0  # none went back
            # They run (their outcomes wait: the heartbeat holds the worker's writes).
            worker.wait("finished", 55, where=lambda d: d["job"].id != parked.pk)
        worker.recorder.wait_total("recorded", "succeeded", 56, timeout=10)
    assert Job.objects.get(pk=parked.pk).status == "done"
    assert set(run_counts("revS-").values()) == {1}
