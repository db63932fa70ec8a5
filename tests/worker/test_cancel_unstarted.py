"""A job an operator cancels before its body runs is never counted as a run: not by
auto prefetch's estimate of how long jobs take, not by the duration histogram or
``pgqueue_jobs_running``. In-process workers on the test database; the requests are
real cancel() calls, heard through the worker's NOTIFY and heartbeat."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from django_pgqueue.models import Job
from django_pgqueue.monitoring.metrics import WorkerMetrics
from django_pgqueue.records import ClaimedJob
from tests.conftest import run_counts
from tests.testapp.tasks import mark, waits_to_be_stopped
from tests.worker.conftest import wait_for
from tests.worker.inprocess import WorkerThread, worker_thread

pytestmark = [pytest.mark.django_db(transaction=True)]


def ended(job_ids: set[int], status: str, data: dict[str, Any]) -> bool:
    """A ``recorded`` event that moved one of ``job_ids`` to ``status``."""
    return any(key[0] in job_ids and new == status for key, new in data["statuses"].items())


def test_jobs_cancelled_while_claimed_ahead_leave_auto_prefetch_estimate_alone() -> None:
    """Each cancelled prefetched job was observed as a run of about 0 s, which pulled
    the moving average of job durations down (and the prefetch deeper), though none
    of them ran."""
    with worker_thread(concurrency=1, prefetch="auto", poll_interval=5, lease=600) as worker:
        prefetch = worker.worker.prefetch
        # Jobs of milliseconds: a prefetch of several (two are held ahead below). One
        # after another until the estimate says so: the first pays for its thread's
        # connection, tens of ms on a loaded host, and three jobs did not always
        # bring the moving average back under the 25 ms that a prefetch of 2 needs.
        for n in range(100):
            if prefetch.limit() >= 2:
                break
            mark.enqueue(f"warm-{n}")
            worker.recorder.wait_total("recorded", "succeeded", n + 1, timeout=10)
        assert prefetch.limit() >= 2, f"jobs of {prefetch._average}s on average"
        long = waits_to_be_stopped.using(priority=10).enqueue("long", seconds=20.0)
        ahead = [mark.enqueue(f"ahead-{n}") for n in range(2)]
        ids = {job.pk for job in ahead}
        wait_for(lambda: run_counts("long") == {"long": 1}, 10, "the long job to start")
        wait_for(
            lambda: Job.objects.filter(pk__in=ids, status="running").count() == 2,
            10,
            "two jobs claimed ahead behind it",
        )
        before = prefetch._average
        assert before is not None
        try:
            assert Job.objects.cancel(list(ids), reason="not needed") == sorted(ids)
            for job_id in ids:
                worker.wait("recorded", where=partial(ended, {job_id}, "cancelled"))
            assert run_counts("ahead-") == {}
            assert prefetch._average == before
        finally:
            assert Job.objects.cancel([long.pk], reason="done") == [long.pk]
        worker.wait("recorded", where=partial(ended, {long.pk}, "cancelled"))


def test_a_request_landing_as_the_thread_takes_the_job_is_timed_only_if_the_body_runs() -> None:
    """The worker read the job's stop request as its thread took it (none: "started",
    the metrics' clock running), the request landed, and the executor read it again:
    it ended the job cancelled without running its body, timed as a run of the
    duration histogram all the same. Now the body runs, told at once."""
    registry = CollectorRegistry()
    running = WorkerThread(concurrency=1, prefetch=0, poll_interval=5, lease=600)
    metrics = WorkerMetrics(registry, slots=1)
    metrics.subscribe(running.events)
    told = threading.Event()
    running.events.subscribe("cancel_requested", lambda job, reason: told.set())
    hooked: list[int] = []

    def cancel_now(job: ClaimedJob) -> None:
        """On the job's thread, between the worker's read and the executor's: a real
        cancel(), waited for until the worker has told the job."""
        if hooked:
            return
        hooked.append(job.id)
        assert Job.objects.cancel([job.id], reason="raced") == [job.id]
        assert told.wait(10), "the worker never heard of the request"

    running.events.subscribe("started", cancel_now)
    job = waits_to_be_stopped.enqueue("raced", seconds=20.0)
    running.start()
    try:
        running.wait("recorded", where=partial(ended, {job.pk}, "cancelled"))
        assert running.stop() == 0
        assert hooked == [job.pk]
        timed = registry.get_sample_value(
            "pgqueue_job_duration_seconds_count",
            {"queue": "default", "task": waits_to_be_stopped.path},
        )
        # Timed once, and its body ran once (told of the request at its first look).
        assert (timed, run_counts("raced")) == (1.0, {"raced": 1})
        assert registry.get_sample_value("pgqueue_jobs_running") == 0.0
    finally:
        if running._thread.is_alive():
            running.stop()
        metrics.close()
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.last_error) == ("cancelled", "Cancelled: raced")
