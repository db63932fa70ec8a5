"""Jobs claimed ahead (PREFETCH) across a lost connection, with ``runworker``
subprocesses and connections cut from a second connection (pg_terminate_backend,
no restart): a claim the server may have lost is not started from memory."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from django_pgqueue.models import Job
from tests.conftest import run_counts
from tests.testapp.tasks import mark, waits_to_be_stopped
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.test_contract_runtime_faults import cut_every_other_connection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def undo_claim(job_id: int) -> None:
    """Put the job's row back as it was before its claim (snapshotted in the temporary
    table ``before_claim``): what a server crash does to a claim whose commit had not
    reached the disk (ASYNC_COMMIT)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = "
            "'pgqueue_job' AND is_generated = 'NEVER' AND column_name <> 'id'"
        )
        columns = ", ".join(f'"{name}"' for (name,) in cursor.fetchall())
        cursor.execute(
            f"UPDATE pgqueue_job SET ({columns}) = (SELECT {columns} FROM before_claim) "
            "WHERE id = %s",
            [job_id],
        )
        assert cursor.rowcount == 1


def test_a_prefetched_job_whose_claim_was_undone_is_not_started_from_memory(
    start_worker: Start,
) -> None:
    """The worker holds ``ahead`` claimed ahead behind a long job. The server loses that
    claim (emulated: the row put back as it was) and another worker claims the job;
    the worker's connections are cut, and it reconnects. It started ``ahead`` from
    memory as soon as its thread was free: one job running twice at once, and with
    it its concurrency key. Now its heartbeat finds that run lost first."""
    # The blocker holds the only thread for 5 s, with no stop request (whose NOTIFY
    # would renew the leases, and find the loss, before the thread is free).
    blocker = waits_to_be_stopped.using(priority=10).enqueue("reconnect-blocker", seconds=5.0)
    ahead = mark.using(concurrency_key="reconnect").enqueue("reconnect-ahead")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE before_claim AS SELECT * FROM pgqueue_job WHERE id = %s",
            [ahead.pk],
        )
    worker = start_worker(
        "--concurrency", "1", "--prefetch", "2", "--poll-interval", "0.1", "--worker-id", "w1"
    )
    wait_for(lambda: run_counts("reconnect-blocker") == {"reconnect-blocker": 1}, 20, "blocker")
    assert Job.objects.get(pk=ahead.pk).locked_by == "w1"  # claimed with it, waiting

    with transaction.atomic():  # the crash's undo, and another worker's claim after it
        undo_claim(ahead.pk)
        (other,) = Job.objects.claim("w2", limit=1)
    assert other.id == ahead.pk
    assert cut_every_other_connection() >= 1
    worker.wait_for_output("was closed while idle; reconnecting")
    assert run_counts("reconnect-ahead") == {}
    assert Job.objects.get(pk=blocker.pk).status == "running"  # the cut came while it ran

    wait_for(lambda: Job.objects.get(pk=blocker.pk).status == "done", 20, "the blocker's end")
    wait_for(
        lambda: "lost the lease on jobs" in worker.output or bool(run_counts("reconnect-ahead")),
        20,
        "the worker to decide about the job claimed ahead",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert run_counts("reconnect-ahead") == {}  # w2 holds it: w1 never ran it
    assert f"lost the lease on jobs [{ahead.pk}]" in worker.output
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.locked_by, row.attempts) == ("running", "w2", 1)
