"""A second contract audit of issue 14 with real ``runworker`` processes: a stop
request for a running job whose worker is stopped (SIGSTOP), reached by the
worker's own heartbeat once it resumes, or settled by ``reapjobs`` once the lease
lapsed, its task then told too."""

from __future__ import annotations

import io
import signal
import time
from collections.abc import Callable

import pytest
from django.core.management import call_command

from django_pgqueue.models import Job
from django_pgqueue.records import FINISHED
from tests.conftest import run_counts
from tests.testapp.tasks import waits_to_be_stopped
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.test_paused import QUICK_REAPER, leases_lapsed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def test_a_stop_request_made_while_the_worker_is_stopped_ends_the_job_once_it_resumes(
    start_worker: Start,
) -> None:
    job = waits_to_be_stopped.enqueue("frozen-abort", seconds=60)
    worker = start_worker("--lease", "30", "--worker-id", "frozen")
    wait_for(lambda: run_counts("frozen-abort") == {"frozen-abort": 1}, 20, "the job to start")
    worker.signal(signal.SIGSTOP)
    try:
        assert Job.objects.cancel([job.pk], reason="while frozen") == [job.pk]
        time.sleep(0.3)  # the NOTIFY sent while it was stopped waits in its socket
        assert Job.objects.get(pk=job.pk).status == "running"
    finally:
        worker.signal(signal.SIGCONT)
        resumed = time.monotonic()
    wait_for(lambda: Job.objects.get(pk=job.pk).status in FINISHED, 10, "the job to end")
    # Woken by the NOTIFY waiting in its socket, not at its next heartbeat (10 s away).
    assert time.monotonic() - resumed < 5
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == (
        "cancelled",
        1,
        "Cancelled: while frozen",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output


def test_reapjobs_cancels_a_job_asked_to_stop_whose_worker_is_stopped_past_its_lease(
    start_worker: Start,
) -> None:
    job = waits_to_be_stopped.enqueue("lapsed-abort", seconds=60)
    worker = start_worker("--lease", "1", "--worker-id", "frozen", env=QUICK_REAPER)
    wait_for(lambda: run_counts("lapsed-abort") == {"lapsed-abort": 1}, 20, "the job to start")
    worker.signal(signal.SIGSTOP)
    try:
        assert Job.objects.cancel([job.pk], reason="stuck") == [job.pk]
        wait_for(leases_lapsed, 20, "the lease to lapse while the worker is stopped")
        out = io.StringIO()
        call_command("reapjobs", stdout=out)
        assert out.getvalue() == "returned 0 jobs to the queue, buried 0, cancelled 1\n"
    finally:
        worker.signal(signal.SIGCONT)
    # Resumed, its heartbeat finds the run lost and still tells the task, which stops
    # (it would have run 60 s); its outcome is dropped, as any of a lost run.
    assert worker.wait_for_output("cancelled on attempt 1: stuck", 10) < 10
    worker.wait_for_output("its outcome is dropped", 10)
    assert "may run again elsewhere" not in worker.output  # it ended cancelled: it will not
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == ("cancelled", 1, "Cancelled: stuck")
    assert run_counts("lapsed-abort") == {"lapsed-abort": 1}


def test_a_lost_run_whose_job_was_given_back_then_cancelled_is_told_to_stop(
    start_worker: Start,
) -> None:
    """The reaper gives the job of a stopped worker back (no stop request yet), an
    operator then cancels it while it is queued, and the worker resumes: its task is
    told to stop too, as no later claim took the job (it would have run 60 s)."""
    job = waits_to_be_stopped.enqueue("requeued-abort", seconds=60)
    worker = start_worker("--lease", "1", "--worker-id", "frozen", env=QUICK_REAPER)
    wait_for(lambda: run_counts("requeued-abort") == {"requeued-abort": 1}, 20, "the job to start")
    worker.signal(signal.SIGSTOP)
    try:
        wait_for(leases_lapsed, 20, "the lease to lapse while the worker is stopped")
        out = io.StringIO()
        call_command("reapjobs", stdout=out)
        assert out.getvalue() == "returned 1 job to the queue, buried 0\n"
        assert Job.objects.cancel([job.pk], reason="gone") == [job.pk]
    finally:
        worker.signal(signal.SIGCONT)
    assert worker.wait_for_output("cancelled on attempt 1: gone", 10) < 10
    assert "may run again elsewhere" not in worker.output  # it ended cancelled: it will not
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.last_error) == ("cancelled", "Cancelled: gone")
    assert run_counts("requeued-abort") == {"requeued-abort": 1}
