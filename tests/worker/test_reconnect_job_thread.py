"""A lost connection that a job thread meets first (its job's own statements, or its
idle check before the next job) counts as a lost connection for the runs claimed
ahead, as one the worker's own threads meet does. In-process worker on the test
database; the connections are cut from a second one (pg_terminate_backend)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from django_pgqueue.models import Job
from tests.conftest import run_counts
from tests.testapp.tasks import GATES, mark, records_then_waits_for_gate
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.test_reconnect_prefetch import undo_claim

pytestmark = [pytest.mark.django_db(transaction=True)]


def cut_job_connection() -> None:
    """Terminate the job thread's session once it sits idle (its run's row shows a
    moment before it reports so), and return once the backend has exited.

    pg_terminate_backend alone only signals the backend: on a busy host the gate
    opened before it acted, the thread found its connection still fine before the
    next job, and started the job claimed ahead (the worker could not know: a
    crash ends the connections before another worker can claim, this emulation
    only afterwards). Given a timeout it waits for the exit, the goodbye sent."""
    pids: list[int] = []

    def idle() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND query LIKE 'INSERT INTO testapp_run%%' AND state = 'idle'"
            )
            pids[:] = [pid for (pid,) in cursor.fetchall()]
        return bool(pids)

    wait_for(idle, 10, "the job thread's session to sit idle")
    (pid,) = pids  # the job thread's, and no other
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s, 20000)", [pid])  # PostgreSQL 14+
        assert cursor.fetchone() == (True,)


def test_a_job_thread_meeting_the_lost_connection_first_does_not_start_a_lost_claim() -> None:
    """The worker holds ``ahead`` claimed ahead behind a job on its only thread. The
    server loses that claim (the row put back as it was) and another worker claims
    the job; the job thread's connection is the one found lost first (the server's
    restart met by the job's own statements, or found as the thread looks before
    its next job, while the worker's own threads sit idle). It started ``ahead``
    from memory: one job running twice at once. Now a heartbeat finds it lost first."""
    gate = GATES.setdefault("revA-blocker", threading.Event())
    blocker = records_then_waits_for_gate.using(priority=10).enqueue("revA-blocker")
    ahead = mark.using(concurrency_key="revA").enqueue("revA-ahead")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE before_claim AS SELECT * FROM pgqueue_job WHERE id = %s",
            [ahead.pk],
        )
    with worker_thread(concurrency=1, prefetch=2, poll_interval=600, lease=600) as worker:
        wait_for(lambda: run_counts("revA-blocker") == {"revA-blocker": 1}, 10, "the blocker")
        assert Job.objects.get(pk=ahead.pk).locked_by == "inproc"  # claimed with it, waiting
        with transaction.atomic():  # the crash's undo, and another worker's claim after it
            undo_claim(ahead.pk)
            (other,) = Job.objects.claim("w2", limit=1)
        assert other.id == ahead.pk
        cut_job_connection()
        gate.set()  # the blocker returns; its thread looks at its connection again

        def decided() -> bool:
            rec = worker.recorder
            started = rec.count("started", lambda d: d["job"].id == ahead.pk)
            return bool(started or rec.count("heartbeat", lambda d: bool(d["lost"])))

        wait_for(decided, 20, "the worker to decide about the job claimed ahead")
        assert worker.recorder.count("started", lambda d: d["job"].id == ahead.pk) == 0
        (lost,) = [
            d["lost"] for name, d in worker.recorder.seen if name == "heartbeat" and d["lost"]
        ]
        assert [job_id for job_id, _ in lost] == [ahead.pk]
    assert run_counts("revA-ahead") == {}  # w2 holds it: this worker never ran it
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.locked_by, row.attempts) == ("running", "w2", 1)
    assert Job.objects.get(pk=blocker.pk).status == "done"
