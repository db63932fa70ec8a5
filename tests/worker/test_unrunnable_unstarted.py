"""A claimed job that cannot run at all (its task unknown, its arguments undecodable
or of the wrong shape) is buried without running: it never counts as started. Not in
the ``started`` event, the queue lag of the throughput line, ``pgqueue_jobs_running``
or the duration histogram, nor in auto prefetch's estimate of how long jobs run.
Rows planted by hand, run by a real in-process burst worker on the test database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from django_pgqueue.monitoring.metrics import WorkerMetrics
from tests.conftest import run_counts
from tests.testapp.tasks import mark
from tests.worker.inprocess import WorkerThread
from tests.worker.planted import outcome, plant

pytestmark = [pytest.mark.django_db(transaction=True)]

UNKNOWN = "tests.testapp.tasks.no_such_task"


@contextmanager
def burst(**overrides: Any) -> Iterator[tuple[WorkerThread, CollectorRegistry]]:
    """A burst worker run to its end, its metrics in a registry of their own."""
    registry = CollectorRegistry()
    running = WorkerThread(burst=True, listen=False, poll_interval=5, **overrides)
    metrics = WorkerMetrics(registry, slots=running.worker.config.concurrency)
    metrics.subscribe(running.events)
    try:
        assert running.start().join(30) == 0
        yield running, registry
    finally:
        metrics.close()


def test_a_job_of_an_unknown_task_is_not_counted_as_started() -> None:
    """The worker emitted ``started`` for it (it was buried without running): counted in
    the queue lag, in ``pgqueue_jobs_running`` until it ended, and timed as a run of
    the duration histogram under the unknown task's name."""
    unknown = plant(UNKNOWN, ["x"])
    known = mark.enqueue("known-1")
    with burst(concurrency=1, prefetch=0) as (running, registry):
        assert outcome(unknown) == ("dead", 1, "django_pgqueue.exceptions.UnknownTask")
        assert run_counts("known-") == {"known-1": 1}
        started = [data["job"].id for name, data in running.recorder.seen if name == "started"]
        finished = [data["job"].id for name, data in running.recorder.seen if name == "finished"]
        assert (started, sorted(finished)) == ([known.pk], sorted([unknown, known.pk]))
        timed = {
            task: registry.get_sample_value(
                "pgqueue_job_duration_seconds_count", {"queue": "default", "task": task}
            )
            for task in (UNKNOWN, mark.path)
        }
        assert timed == {UNKNOWN: None, mark.path: 1.0}
        assert registry.get_sample_value("pgqueue_jobs_running") == 0.0
        completed = registry.get_sample_value(
            "pgqueue_jobs_completed_total",
            {"queue": "default", "task": UNKNOWN, "outcome": "dead"},
        )
        assert completed == 1.0  # it still counts as a job the worker handled
        window = running.worker.housekeeping.latency.take()
        assert window.started == 1


@pytest.mark.parametrize(
    ("task", "args", "exception"),
    [
        (UNKNOWN, ["x"], "django_pgqueue.exceptions.UnknownTask"),
        ("tests.testapp.tasks.mark", ["a", "b", "c", "d"], "TypeError"),
        ("tests.testapp.tasks.mark", {"not": "a list"}, "TypeError"),
    ],
    ids=["unknown_task", "too_many_arguments", "malformed_arguments"],
)
def test_unrunnable_jobs_leave_auto_prefetch_estimate_alone(
    task: str, args: Any, exception: str
) -> None:
    """Each was observed by ``PREFETCH = "auto"`` as a run of about 0 s, pulling its
    estimate of job length down (and the prefetch deeper), though none of them ran."""
    ids = [plant(task, args) for _ in range(3)]
    with burst(concurrency=1, prefetch="auto") as (running, _):
        pass
    assert [outcome(job_id) for job_id in ids] == [("dead", 1, exception)] * 3
    assert running.worker.prefetch._average is None
    assert running.worker.pool.pacing._ratios == []
    assert running.recorder.count("started") == 0
    assert running.recorder.count("finished") == 3
