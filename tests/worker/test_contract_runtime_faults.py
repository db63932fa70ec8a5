"""Issues 3 and 10's fault paths as a user meets them, on any server: connections
cut from a second connection (pg_terminate_backend, no restart), workers stopped
and resumed. Exact final states and how many times each job ran."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def cut_every_other_connection() -> int:
    """Terminate every other session on the test database (the worker's); how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (count,) = cursor.fetchone()
    return int(count)


def finished() -> int:
    return Job.objects.filter(status__in=["done", "dead"]).count()


def test_cut_connections_are_the_workers_problem_not_the_jobs(start_worker: Start) -> None:
    """Every connection of a busy worker cut (its threads', listener's, completer's):
    it reconnects, and no job allowed a single attempt is charged for it."""
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"warm-{n}"]) for n in range(8))
    worker = start_worker("--concurrency", "4", "--poll-interval", "0.2")
    wait_for(lambda: Job.objects.done().count() == 8, 20, "the threads to hold connections")
    assert cut_every_other_connection() >= 4
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"after-{n}"], max_attempts=1) for n in range(8)
    )
    wait_for(lambda: finished() == 16, 60, "the jobs enqueued after the cut")
    # Cut again while jobs run: they finish, and their outcomes are written.
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"mid-{n}"], {"sleep": 1.0}, max_attempts=1) for n in range(4)
    )
    wait_for(lambda: len(run_counts("mid-")) == 4, 20, "four running jobs")
    assert cut_every_other_connection() >= 1
    wait_for(lambda: finished() == 20, 60, "the jobs running through the cut")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert status_counts() == {"done": 20}
    assert run_counts("after-") == {f"after-{n}": 1 for n in range(8)}
    assert run_counts("mid-") == {f"mid-{n}": 1 for n in range(4)}
    assert "claimed 20, succeeded 20, retried 0, buried 0" in worker.output


def test_a_worker_stopped_within_its_lease_resumes_and_nothing_runs_twice(
    start_worker: Start,
) -> None:
    """SIGSTOP for less than the lease, a second worker reaping meanwhile: on SIGCONT
    the first worker finishes its jobs; none is reaped, none runs twice."""
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"stop-{n}"], {"sleep": 1.0}) for n in range(2)
    )
    # The pause lasts the second worker's start (seconds on a loaded machine) and 2 s
    # more, from a renewal up to a third of the lease old: 20 s keeps it within.
    paused = start_worker("--concurrency", "2", "--lease", "20", "--worker-id", "paused")
    wait_for(lambda: len(run_counts("stop-")) == 2, 20, "two running jobs")
    paused.signal(signal.SIGSTOP)
    try:
        other = start_worker("--worker-id", "other", "--poll-interval", "0.1")
        other.wait_for_output("listening for new jobs")
        time.sleep(2.0)  # the jobs' sleeps end unobserved; the leases still hold
        assert Job.objects.running().count() == 2
    finally:
        paused.signal(signal.SIGCONT)
    wait_for(lambda: Job.objects.done().count() == 2, 20, "the resumed worker's outcomes")
    for proc in (paused, other):
        proc.signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    assert run_counts("stop-") == {"stop-0": 1, "stop-1": 1}
    assert [(row.worker_ids, row.attempts) for row in Job.objects.all()] == [(["paused"], 1)] * 2
