"""Kill, stop and cut off workers: every job still ends done, none is lost."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from django_pgqueue.worker import session as session_module
from django_pgqueue.worker import startup
from django_pgqueue.worker.session import WorkerSession
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker import dbserver
from tests.worker.conftest import WorkerProcess, running_count, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def test_sigkilled_worker_jobs_come_back_after_the_lease_and_run_at_most_twice(
    start_worker: Start,
) -> None:
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"kill-{i}"], {"sleep": 0.5}) for i in range(12)
    )
    victim = start_worker("--concurrency", "4", "--lease", "2", "--worker-id", "victim")
    wait_for(lambda: running_count() == 4, 20, "the victim to hold 4 jobs")
    wait_for(lambda: sum(run_counts("kill-").values()) == 4, 20, "the 4 jobs to start")
    time.sleep(0.2)  # mid-job
    victim.kill()
    held = set(Job.objects.running().values_list("id", flat=True))
    assert len(held) == 4

    rescuer = start_worker("--concurrency", "4", "--lease", "2", "--worker-id", "rescuer")
    wait_for(lambda: status_counts() == {"done": 12}, 60, "every job to finish")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(20) == 0

    runs = run_counts("kill-")
    killed = {Job.objects.get(pk=pk).args[0] for pk in held}
    assert {label for label, n in runs.items() if n == 2} == killed
    assert all(runs[f"kill-{i}"] == 1 for i in range(12) if f"kill-{i}" not in killed)
    for pk in held:
        job = Job.objects.get(pk=pk)
        assert (job.attempts, job.worker_ids) == (2, ["victim", "rescuer"])
        assert job.errors[0]["exception"] == "LeaseExpired"


def test_a_worker_restarted_under_its_id_returns_the_dead_processs_jobs_at_once(
    start_worker: Start,
) -> None:
    """systemd's ``%i`` or a pod's name: a SIGKILLed worker comes back under its id.
    The job the dead process held goes back at once, not after its 120 s lease (the
    registry said the worker was alive, so nothing showed it was orphaned)."""
    job = tracked.enqueue("orphan", sleep=30)
    first = start_worker("--lease", "120", "--worker-id", "fixed")
    wait_for(lambda: run_counts("orphan") == {"orphan": 1}, 20, "the job to start")
    first.kill()
    restarted = start_worker("--lease", "120", "--worker-id", "fixed")
    wait_for(lambda: run_counts("orphan") == {"orphan": 2}, 20, "the job to run again")
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.worker_ids) == ("running", 2, ["fixed", "fixed"])
    assert row.errors[0]["exception"] == "LeaseExpired"
    restarted.signal(signal.SIGTERM)
    restarted.wait_for_output("SIGTERM: finishing running jobs")
    restarted.signal(signal.SIGTERM)  # the second: give the running job back now
    assert restarted.wait(15) == 128 + signal.SIGTERM
    assert "1 job still held by an earlier process with worker id 'fixed'" in (restarted.output)
    assert f"their leases end now, and the reaper returns them: [{job.pk}]" in restarted.output


def test_behind_a_pooled_listen_database_a_starting_worker_ends_no_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a pooler the id's lock proves nothing (its server connection is shared):
    a second process under a live worker's id ended that worker's leases, and the
    reaper handed its running jobs out again, to run twice at once."""
    job = tracked.enqueue("held")
    assert len(Job.objects.claim("fixed", limit=1, lease=300)) == 1  # a live process's
    monkeypatch.setattr(session_module, "through_pooler", lambda conn: True)
    session = WorkerSession("fixed", "default", "default", None, 1.0)
    try:
        assert startup.start_problem("default", session, wait_for_database=False) == (None, True)
        assert session.is_open
        assert not session.lock_holds
    finally:
        session.close()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "running"
    assert row.locked_until is not None
    assert row.locked_until > timezone.now() + dt.timedelta(seconds=200)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_lets_running_jobs_finish_and_exits_zero(
    start_worker: Start, signum: signal.Signals
) -> None:
    """SIGTERM (a process manager) and SIGINT (Ctrl-C) alike."""
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"term-{i}"], {"sleep": 1.0}) for i in range(3)
    )
    worker = start_worker("--concurrency", "3", "--shutdown-timeout", "10")
    # Started, not just claimed: a claimed job no thread has taken yet is given back.
    wait_for(lambda: len(run_counts("term-")) == 3, 20, "three running jobs")
    signalled = time.monotonic()
    worker.signal(signum)
    assert worker.wait(15) == 0
    assert time.monotonic() - signalled < 5
    assert status_counts() == {"done": 3}
    assert run_counts("term-") == {f"term-{i}": 1 for i in range(3)}
    assert f"{signum.name}: finishing running jobs" in worker.output
    assert "Traceback" not in worker.output


def test_sigterm_puts_jobs_past_the_shutdown_timeout_back_in_the_queue(start_worker: Start) -> None:
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"long-{i}"], {"sleep": 30}) for i in range(2))
    worker = start_worker("--concurrency", "2", "--shutdown-timeout", "0.5")
    wait_for(lambda: len(run_counts("long-")) == 2, 20, "two running jobs")
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert time.monotonic() - signalled < 5
    assert status_counts() == {"queued": 2}  # right away, not after the lease
    for job in Job.objects.all():
        assert job.attempts == 0  # the interrupted run does not count against the job
        assert job.errors[-1]["exception"] == "WorkerShutdown"


def test_sigterm_ends_a_job_asked_to_stop_cancelled_and_says_so(start_worker: Start) -> None:
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"stop-{i}"], {"sleep": 30}) for i in range(2))
    worker = start_worker("--concurrency", "2", "--shutdown-timeout", "0.5")
    wait_for(lambda: len(run_counts("stop-")) == 2, 20, "two running jobs")
    stopped, kept = Job.objects.order_by("pk")
    Job.objects.cancel([stopped.pk], reason="not needed")  # the task never looks
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert dict(Job.objects.values_list("pk", "status")) == {
        stopped.pk: "cancelled",
        kept.pk: "queued",
    }
    assert f"put 1 job back in the queue: [{kept.pk}]" in worker.output
    assert f"1 job asked to stop ended cancelled instead of going back: [{stopped.pk}]" in (
        worker.output
    )
    # and the last line counts it (it said "cancelled 0")
    assert "claimed 2, succeeded 0, retried 0, buried 0, cancelled 1" in worker.output


def test_second_signal_gives_the_running_job_back_and_exits_at_once(start_worker: Start) -> None:
    tracked.enqueue("twice", sleep=30)
    worker = start_worker("--shutdown-timeout", "60")
    wait_for(lambda: run_counts("twice") != {}, 20, "a running job")
    worker.signal(signal.SIGTERM)
    time.sleep(0.3)
    second = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(5) == 128 + signal.SIGTERM
    assert time.monotonic() - second < 2.5  # a bounded best effort, then out
    # Given back, not left running until its lease expires; the attempt is not spent.
    assert status_counts() == {"queued": 1}
    assert Job.objects.get().attempts == 0
    assert "send SIGTERM again to exit now" in worker.output
    assert "put 1 job back in the queue" in worker.output


def test_worker_survives_a_database_restart(start_worker: Start) -> None:
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"restart-{i}"], {"sleep": 0.05}) for i in range(200)
    )
    worker = start_worker("--concurrency", "4", "--lease", "5", "--poll-interval", "0.5")
    wait_for(lambda: Job.objects.done().count() >= 20, 30, "the worker to get going")
    server = dbserver.server()
    if server is None:
        worker.kill()
        dbserver.server_or_skip()
        return
    server.stop()
    time.sleep(1.0)  # down for a second: the worker's claims and completions fail
    server.start()
    connection.close()  # ours was cut too; the next query reconnects
    wait_for(lambda: status_counts() == {"done": 200}, 90, "every job done after the restart")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    runs = run_counts("restart-")
    assert len(runs) == 200
    # At least once: a run cut off by the restart may repeat, but only those few.
    assert sum(runs.values()) - 200 <= 8
    assert "claim failed" in worker.output or "recording" in worker.output


def test_four_workers_drain_five_thousand_jobs_without_running_any_twice(
    start_worker: Start,
) -> None:
    # All four listen first, so that each has its share however slowly it started
    # (burst workers started after the jobs: a late one found the queue drained).
    workers = [start_worker("--concurrency", "4", "--worker-id", f"w{n}") for n in range(4)]
    for worker in workers:
        worker.wait_for_output("listening for new jobs")
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"drain-{i}"]) for i in range(5000))
    wait_for(lambda: status_counts() == {"done": 5000}, 180, "every job to be done")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0
    runs = run_counts("drain-")
    assert len(runs) == 5000
    assert max(runs.values()) == 1
    by_worker = {w: Job.objects.filter(locked_by=w).count() for w in ("w0", "w1", "w2", "w3")}
    assert sum(by_worker.values()) == 5000
    assert all(n > 0 for n in by_worker.values()), by_worker


def test_sigterm_gives_prefetched_jobs_back_at_once_and_finishes_the_running_ones(
    start_worker: Start,
) -> None:
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"pre-{i}"], {"sleep": 1.5}) for i in range(6))
    worker = start_worker("--concurrency", "2", "--prefetch", "4", "--shutdown-timeout", "10")
    wait_for(lambda: running_count() == 6, 20, "2 running and 4 prefetched jobs")
    wait_for(lambda: len(run_counts("pre-")) == 2, 20, "two jobs to start")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: Job.objects.queued().count() == 4, 1.0, "the 4 waiting jobs to go back")
    assert worker.wait(15) == 0
    assert status_counts() == {"done": 2, "queued": 4}
    assert sum(run_counts("pre-").values()) == 2  # the prefetched ones never ran
    assert all(job.attempts == 0 for job in Job.objects.queued())
