"""A running worker: pickup latency, heartbeats, poison rows, job timeouts."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from functools import partial

import pytest
from django.db import connection

from django_pgqueue.models import Job
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import add, mark, tracked
from tests.worker.conftest import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def started_at(label: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM started) FROM testapp_run WHERE label = %s",
                       [label])
        row = cursor.fetchone()
    return float(row[0])


def has_run(label: str) -> bool:
    return run_counts(label) != {}


def pickup_delays(count: int) -> list[float]:
    """Enqueue jobs one at a time into an idle worker; seconds from commit to start."""
    delays = []
    for n in range(count):
        time.sleep(0.3)  # let the worker go idle
        label = f"pickup-{n}"
        mark.enqueue(label)  # autocommit: this returns after the commit
        committed = time.time()
        wait_for(partial(has_run, label), 10, f"{label} to start")
        delays.append(started_at(label) - committed)
    return delays


def test_idle_worker_picks_up_a_job_within_100ms_of_commit(start_worker: Start) -> None:
    worker = start_worker("--poll-interval", "5")
    time.sleep(1.5)  # started and idle; polling alone would take up to 5 s
    delays = pickup_delays(5)
    assert max(delays) < 0.1, delays
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_without_notifications_the_poll_picks_up_within_the_interval(
        start_worker: Start) -> None:
    worker = start_worker("--no-listen", "--poll-interval", "0.5")
    time.sleep(1.5)
    delays = pickup_delays(4)
    assert max(delays) < 0.5 + 0.25, delays  # one poll interval, plus claim and start
    assert min(delays) > 0.0
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_a_long_job_with_a_short_lease_survives_thanks_to_the_heartbeat(
        start_worker: Start) -> None:
    tracked.enqueue("long-haul", sleep=3.0)
    worker = start_worker("--lease", "1", "--burst")
    # A reaper every 0.2 s: without renewals the lease would lapse and the job be taken back.
    reaper = start_worker(command="reapjobs", args=("--loop", "--interval", "0.2"))
    assert worker.wait(30) == 0
    reaper.kill()
    assert "returned 0 jobs to the queue" in reaper.output
    job = Job.objects.get()
    assert (job.status, job.attempts, job.errors) == ("done", 1, [])
    assert run_counts("long-haul") == {"long-haul": 1}


def test_poison_rows_are_buried_and_the_worker_keeps_going(start_worker: Start) -> None:
    with connection.cursor() as cursor:
        for task, args in [("os.system", '["touch /tmp/pgqueue-pwned"]'),
                           ("tests.testapp.tasks.record", '["not-a-task"]'),
                           ("tests.testapp.tasks.add", '"not a list"'),
                           ("tests.testapp.tasks.add", "[1, 2, 3]")]:
            cursor.execute("INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
                           "VALUES (%s, %s::jsonb, '{}', '[]', '[]')", [task, args])
    good = add.enqueue(20, 22)
    worker = start_worker("--burst")
    assert worker.wait(30) == 0
    assert status_counts() == {"dead": 4, "done": 1}
    assert Job.objects.get(pk=good.pk).result == 42
    errors = sorted(Job.objects.dead().values_list("last_error", flat=True))
    assert any("'os' is not in an installed app" in e for e in errors)
    assert any("'tests.testapp.tasks.record' is not a registered task" in e for e in errors)
    assert any("malformed arguments" in e for e in errors)
    assert any("do not match the task's signature" in e for e in errors)
    assert all(job.attempts == 1 for job in Job.objects.dead())
    assert run_counts() == {}


def test_job_timeout_records_a_failure_and_releases_the_lease(start_worker: Start) -> None:
    tracked.using(max_attempts=1).enqueue("stuck", sleep=20)
    worker = start_worker("--job-timeout", "0.5", "--shutdown-timeout", "0")
    waited = wait_for(lambda: Job.objects.dead().exists(), 10, "the job to time out")
    assert waited < 5
    job = Job.objects.get()
    assert job.last_error.startswith(
        "django_pgqueue.worker.runner.JobTimeout: job exceeded the worker's job timeout of 0.5s")
    assert job.locked_until is None
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
