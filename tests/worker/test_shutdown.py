"""A worker's shutdown where the timing is against it: real in-process workers
against the test database, with the moment that matters forced by a gate."""

from __future__ import annotations

import threading

import pytest

from django_pgqueue.models import Job
from tests.testapp.tasks import GATES, waits_for_gate
from tests.worker.inprocess import worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_job_that_returns_after_the_completer_stopped_is_still_recorded() -> None:
    """The job outlived the shutdown timeout and returned while the worker's threads
    stopped: its outcome was neither written nor given back, the row stayed
    ``running``, and the reaper later buried the one-attempt job that had succeeded."""
    gate = GATES["late-return"] = threading.Event()
    job = waits_for_gate.using(max_attempts=1).enqueue("late-return")
    with worker_thread(concurrency=1, prefetch=0, shutdown_timeout=0.2) as running:
        running.wait("started")
        completer = running.worker.completer
        stop_completer = completer.stop

        def stop_then_let_the_job_return() -> None:
            stop_completer()
            completer.join(5)
            gate.set()
            running.wait("finished")

        completer.stop = stop_then_let_the_job_return  # type: ignore[method-assign]
        assert running.stop() == 0
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("done", 1)
    assert row.result == "late-return"
