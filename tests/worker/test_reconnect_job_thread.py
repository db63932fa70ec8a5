"""A lost connection that a job thread meets first (its job's own statements, or its
idle check before the next job) counts as a lost connection for the runs claimed
ahead, as one the worker's own threads meet does. In-process worker on the test
database; the connections are cut from a second one (pg_terminate_backend)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from django_pgqueue.models import Job
from tests.conftest import run_counts
from tests.testapp.tasks import (
    GATES,
    mark,
    records_then_waits_for_gate,
    waits_for_gate_in_transaction,
)
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.test_reconnect_prefetch import undo_claim

pytestmark = [pytest.mark.django_db(transaction=True)]


def cut_job_connection(query: str, state: str = "idle") -> int:
    """Terminate the session of the job thread whose last statement is like ``query``,
    once it reports ``state`` (its statement's rows show a moment before it does), and
    return once the backend has exited, its goodbye sent. pg_terminate_backend alone
    only signals the backend: on a busy host the gate opened before it acted, the
    thread found its connection still fine, and started the job claimed ahead (the
    worker could not know: a crash ends the connections before another worker can
    claim, this emulation only afterwards)."""
    pids: list[int] = []

    def found() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND query LIKE %s AND state = %s",
                [query, state],
            )
            pids[:] = [pid for (pid,) in cursor.fetchall()]
        return bool(pids)

    wait_for(found, 10, f"the job thread's session to report {state!r}")
    with connection.cursor() as cursor:  # given a timeout, it waits for the exit (PG 14+)
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 20000)) "
            "FROM unnest(%s::int[]) AS pid",
            [pids],
        )
        (count,) = cursor.fetchone()
    return int(count)


def not_started_from_memory(worker: Any, job_id: int) -> None:
    """Wait until the worker starts ``job_id`` or a heartbeat finds claims lost, and
    assert that it did not start it."""

    def decided() -> bool:
        rec = worker.recorder
        started = rec.count("started", lambda d: d["job"].id == job_id)
        return bool(started or rec.count("heartbeat", lambda d: bool(d["lost"])))

    wait_for(decided, 20, "the worker to decide about the job claimed ahead")
    assert worker.recorder.count("started", lambda d: d["job"].id == job_id) == 0


def lost_claim_ahead(
    prefix: str, blocker_waits: Callable[[], object], cut: Callable[[], int]
) -> None:
    """The worker holds ``ahead`` claimed ahead behind a job on its only thread (enqueued
    by the caller, then waited for by ``blocker_waits``). The server loses that claim
    (the row put back as it was) and another worker claims the job; ``cut`` ends the
    job thread's connection, the one found lost first, while the worker's own threads
    sit idle. It must not start ``ahead`` from memory (one job running twice at once):
    a heartbeat finds it lost first."""
    ahead = mark.using(concurrency_key=prefix).enqueue(f"{prefix}-ahead")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE before_claim AS SELECT * FROM pgqueue_job WHERE id = %s",
            [ahead.pk],
        )
    with worker_thread(concurrency=1, prefetch=2, poll_interval=600, lease=600) as worker:
        blocker_waits()
        assert Job.objects.get(pk=ahead.pk).locked_by == "inproc"  # claimed with it, waiting
        with transaction.atomic():  # the crash's undo, and another worker's claim after it
            undo_claim(ahead.pk)
            (other,) = Job.objects.claim("w2", limit=1)
        assert other.id == ahead.pk
        assert cut() == 1
        GATES[f"{prefix}-blocker"].set()  # the blocker goes on; its thread then meets the loss

        not_started_from_memory(worker, ahead.pk)
        (lost,) = [
            d["lost"] for name, d in worker.recorder.seen if name == "heartbeat" and d["lost"]
        ]
        assert [job_id for job_id, _ in lost] == [ahead.pk]
    assert run_counts(f"{prefix}-ahead") == {}  # w2 holds it: this worker never ran it
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.locked_by, row.attempts) == ("running", "w2", 1)


def test_a_job_thread_meeting_the_lost_connection_first_does_not_start_a_lost_claim() -> None:
    """The job thread's connection is found lost as the thread looks before its next
    job (the blocker returned without a statement since the cut)."""
    GATES.setdefault("revA-blocker", threading.Event())
    blocker = records_then_waits_for_gate.using(priority=10).enqueue("revA-blocker")
    lost_claim_ahead(
        "revA",
        lambda: wait_for(lambda: run_counts("revA-blocker") == {"revA-blocker": 1}, 10, "it"),
        lambda: cut_job_connection("INSERT INTO testapp_run%"),
    )
    assert Job.objects.get(pk=blocker.pk).status == "done"


def test_a_job_meeting_the_lost_connection_in_a_transaction_does_not_start_a_lost_claim() -> None:
    """The blocker's own statement meets the loss inside transaction.atomic(), whose exit
    closes the broken connection: the thread found no connection left to look at, and
    started the job claimed ahead from memory, beside the worker that holds it now."""
    GATES.setdefault("revT-blocker", threading.Event())
    entered = GATES.setdefault("revT-blocker:in", threading.Event())
    blocker = waits_for_gate_in_transaction.using(priority=10).enqueue("revT-blocker")
    lost_claim_ahead(
        "revT",
        lambda: entered.wait(10) or pytest.fail("the blocker did not start"),
        lambda: cut_job_connection('%"revT-blocker"%', "idle in transaction"),
    )
    row = Job.objects.get(pk=blocker.pk)  # its statement failed: the job's failure
    assert (row.status, row.last_error.split(":")[0]) == (
        "dead",
        "django.db.utils.OperationalError",
    )
