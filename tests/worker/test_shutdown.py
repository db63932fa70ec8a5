"""A worker's shutdown where the timing is against it: real in-process workers
against the test database, with the moment that matters forced by a gate."""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connections

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


def test_call_command_returns_while_a_job_whose_lease_was_lost_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runworker ends its own process at once when a job thread outlives the worker
    (asgiref's loop thread would hold the exit); under call_command() the process is
    the caller's, a test's: it must return, not exit, though the job still runs."""
    gate = GATES["lost-row"] = threading.Event()
    job = waits_for_gate.enqueue("lost-row")

    def delete_the_row_once_running() -> None:
        try:
            for _ in range(200):
                if Job.objects.filter(pk=job.pk, status="running").exists():
                    Job.objects.filter(pk=job.pk).delete()  # its lease is lost
                    return
                time.sleep(0.05)
        finally:
            connections.close_all()

    def exit_now(status: int) -> None:
        raise AssertionError(f"runworker ended the caller's process (os._exit({status}))")

    monkeypatch.setattr(os, "_exit", exit_now)
    deleter = threading.Thread(target=delete_the_row_once_running)
    deleter.start()
    try:
        # A burst worker does not wait for a run it no longer holds: it stops while
        # the job's thread is still inside the job.
        call_command("runworker", "--burst", "--lease", "1.5", verbosity=0)
    finally:
        gate.set()
        deleter.join(15)
    assert not Job.objects.filter(pk=job.pk).exists()
