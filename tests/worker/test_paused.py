"""A lone worker stopped (SIGSTOP) past its lease, then resumed (SIGCONT).

Nobody else reaped its jobs while it was stopped, so its heartbeat can still renew
them (the fence checks the run, not the lease's end): its own reaper, waking at the
same moment, must not give back the runs its own threads are still running, or the
claim loop takes them up again and the work is done twice at once.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.records import FINISHED
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]

#: A reaper that looks ten times a second: at a resume it is due as soon as the heartbeat.
QUICK_REAPER = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"REAP_INTERVAL": 0.1})}


def leases_lapsed() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT bool_and(locked_until < now()) FROM pgqueue_job WHERE status = 'running'"
        )
        row = cursor.fetchone()
        return bool(row and row[0])


@pytest.mark.parametrize("round", range(3))
def test_a_lone_worker_stopped_past_its_lease_runs_its_job_once(
    start_worker: Start, round: int
) -> None:
    job = tracked.enqueue("frozen", sleep=4)
    worker = start_worker("--lease", "1", "--worker-id", "frozen", env=QUICK_REAPER)
    wait_for(lambda: run_counts("frozen") == {"frozen": 1}, 20, "the job to start")
    worker.signal(signal.SIGSTOP)
    try:
        wait_for(leases_lapsed, 20, "the lease to lapse while the worker is stopped")
    finally:
        worker.signal(signal.SIGCONT)
    wait_for(lambda: Job.objects.get(pk=job.pk).status in FINISHED, 30, "the job to end")
    assert run_counts("frozen") == {"frozen": 1}, worker.output  # not taken up again
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.worker_ids) == ("done", 1, ["frozen"])
    assert row.errors == []
    assert "lost the lease" not in worker.output
    assert "returned to the queue" not in worker.output
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert status_counts() == {"done": 1}


def test_another_workers_reaper_still_takes_back_the_jobs_of_a_stopped_worker(
    start_worker: Start,
) -> None:
    """What a reaper spares is its own worker's runs: a stopped worker's jobs are
    taken back by the reaper of any other (a run again after a lost lease)."""
    job = tracked.enqueue("taken", sleep=2)
    frozen = start_worker("--lease", "1", "--worker-id", "frozen", env=QUICK_REAPER)
    wait_for(lambda: run_counts("taken") == {"taken": 1}, 20, "the job to start")
    frozen.signal(signal.SIGSTOP)
    try:
        rescuer = start_worker(
            "--lease", "30", "--worker-id", "rescuer", "--poll-interval", "0.1", env=QUICK_REAPER
        )
        wait_for(
            lambda: Job.objects.get(pk=job.pk).locked_by == "rescuer",
            30,
            "the rescuer's reaper to take the job back and the rescuer to claim it",
        )
    finally:
        frozen.signal(signal.SIGCONT)
    wait_for(lambda: Job.objects.get(pk=job.pk).status in FINISHED, 30, "the job to end")
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.worker_ids) == ("done", 2, ["frozen", "rescuer"])
    assert "reaper: 1 job with an expired lease returned to the queue" in rescuer.output
    assert run_counts("taken") == {"taken": 2}
    for worker in (frozen, rescuer):
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0
