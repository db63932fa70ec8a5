"""A run parked after a lost connection (claimed ahead before it, it waits for a
heartbeat to confirm its claim) is confirmed by a heartbeat, which hands it to the
pool. Not when that heartbeat learned its queue was paused, nor once the shutdown
has given back the runs waiting for a thread: it goes back to the queue unstarted,
as the other waiting runs do. In-process worker on the test database; the job
thread's connection is cut from a second one (pg_terminate_backend), and the
heartbeat is held at the point where the race lies (a hook on the worker's pool or
ledger), so that a pool thread is there first."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.records import ClaimedJob
from tests.conftest import run_counts
from tests.testapp.tasks import GATES, mark, records_then_waits_for_gate
from tests.worker.conftest import wait_for
from tests.worker.inprocess import WorkerThread, worker_thread
from tests.worker.test_reconnect_job_thread import cut_job_connection

pytestmark = [pytest.mark.django_db(transaction=True)]


def decided(worker: WorkerThread, job_id: int) -> Callable[[], bool]:
    """Whether the worker started ``job_id`` or gave it back."""

    def seen() -> bool:
        rec = worker.recorder
        started = rec.count("started", lambda d: d["job"].id == job_id)
        back = rec.count("released", lambda d: any(key[0] == job_id for key in d["keys"]))
        return bool(started or back)

    return seen


def enqueue(prefix: str, **ahead_options: Any) -> tuple[threading.Event, int]:
    """``prefix-blocker``, which waits for the gate returned, and ``prefix-ahead``, to
    be claimed ahead behind it; the id of the latter."""
    gate = GATES.setdefault(f"{prefix}-blocker", threading.Event())
    records_then_waits_for_gate.using(priority=10).enqueue(f"{prefix}-blocker")
    return gate, mark.using(**ahead_options).enqueue(f"{prefix}-ahead").pk


def parked_behind_a_blocker(prefix: str, ahead: int) -> None:
    """Once ``ahead`` is claimed ahead behind the blocker on the worker's only thread,
    cut that thread's connection: when the blocker returns (the caller opens its gate)
    the thread finds the connection lost, and parks the run claimed ahead until a
    heartbeat confirms it."""
    wait_for(lambda: run_counts(f"{prefix}-blocker") == {f"{prefix}-blocker": 1}, 10, "it")
    assert Job.objects.get(pk=ahead).locked_by == "inproc"  # claimed with it, waiting
    assert cut_job_connection("INSERT INTO testapp_run%") == 1


def assert_given_back(ahead: int, prefix: str) -> None:
    assert run_counts(f"{prefix}-ahead") == {}  # never ran
    row = Job.objects.get(pk=ahead)
    assert (row.status, row.locked_until, row.attempts, row.errors) == ("queued", None, 0, [])


def test_a_parked_run_of_a_queue_paused_meanwhile_goes_back_unstarted() -> None:
    """The queue of the run parked was paused (no NOTIFY here: the heartbeat the
    parking hurries is the first to learn it). That heartbeat handed the run to the
    pool before it gave back the waiting runs of paused queues, and a free thread
    started it (here: held just after the hand-over until it does)."""
    gate, ahead = enqueue("parkP", queue="parkP")
    with worker_thread(
        concurrency=1, prefetch=2, poll_interval=600, lease=600, listen=False
    ) as worker:
        parked_behind_a_blocker("parkP", ahead)
        Job.objects.pause_queue("parkP")
        pool = worker.worker.pool
        submit = pool.submit

        def held_submit(jobs: Sequence[ClaimedJob]) -> Any:
            refused = submit(jobs)
            if any(job.id == ahead for job in jobs):  # a free thread takes it meanwhile
                wait_for(decided(worker, ahead), 10, "a thread to start it")
            return refused

        pool.submit = held_submit  # type: ignore[method-assign]
        gate.set()  # the blocker returns; its thread finds the connection lost

        wait_for(decided(worker, ahead), 20, "the worker to start it or give it back")
        assert worker.recorder.count("started", lambda d: d["job"].id == ahead) == 0
        assert worker.stop() == 0
    assert_given_back(ahead, "parkP")
    assert run_counts("parkP-blocker") == {"parkP-blocker": 1}


def test_a_run_confirmed_after_the_shutdown_gave_back_the_waiting_ones_goes_back() -> None:
    """The heartbeat took the parked run to start it; the shutdown (asked meanwhile)
    then took the runs waiting for a thread, and the parked ones, to give them back:
    not this one. The heartbeat handed it to the pool, whose thread started it after
    the shutdown began."""
    gate, ahead = enqueue("parkS")
    with worker_thread(concurrency=1, prefetch=2, poll_interval=600, lease=600) as worker:
        parked_behind_a_blocker("parkS", ahead)
        ledger = worker.worker.ledger
        unpark = ledger.unpark
        confirmed, took = threading.Event(), threading.Event()

        def held_unpark(epoch: int | None) -> list[ClaimedJob]:
            jobs = unpark(epoch)
            if epoch is not None and any(job.id == ahead for job in jobs):
                confirmed.set()  # the heartbeat: held until the shutdown took the waiting runs
                took.wait(10) or pytest.fail("the shutdown did not give back the waiting runs")
            elif epoch is None and took.is_set():  # the shutdown's second look: after the start
                wait_for(decided(worker, ahead), 10, "a thread to start it")
            elif epoch is None:
                took.set()
            return jobs

        ledger.unpark = held_unpark  # type: ignore[method-assign]
        gate.set()  # the blocker returns; its thread finds the connection lost
        confirmed.wait(10) or pytest.fail("no heartbeat confirmed the parked run")
        worker.worker.request_stop()
        assert worker.join(15) == 0
        assert worker.recorder.count("started", lambda d: d["job"].id == ahead) == 0
    assert_given_back(ahead, "parkS")
    assert run_counts("parkS-blocker") == {"parkS-blocker": 1}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgqueue_job WHERE status = 'running'")
        assert cursor.fetchone() == (0,)
