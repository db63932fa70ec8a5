"""Every log line about one job carries the structured fields (``job_id``, ``task``,
``queue``, ``attempt``, ``worker``) that a JSON formatter prints: the cancellation and
stop-request lines and ``-v 2``'s per-job lines, as the failed and buried ones do."""

from __future__ import annotations

import logging

import pytest

from django_pgqueue.models import Job
from tests.conftest import status_counts
from tests.testapp.tasks import add, gives_up, mark, waits_to_be_stopped
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.test_joblog import collected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FIELDS = ("job_id", "task", "queue", "attempt", "worker")


def test_cancellation_stop_request_and_per_job_lines_carry_the_fields() -> None:
    ok = add.enqueue(1, 2)
    gave_up = gives_up.enqueue("fields")
    stopped = waits_to_be_stopped.enqueue("fields-stop", 30)
    with (
        collected() as log,
        worker_thread(worker_id="w-fields", lease=2.0, heartbeat_interval=0.1) as running,
    ):
        running.wait("started", where=lambda d: d["job"].id == stopped.pk)
        Job.objects.cancel([stopped.pk], reason="enough")
        wait_for(lambda: status_counts() == {"done": 1, "cancelled": 2}, 10, "every job to end")
    messages = {
        job.pk: [(r.levelno, r.getMessage()) for r in log.about(job.pk, logging.DEBUG)]
        for job in (ok, gave_up, stopped)
    }
    assert messages == {
        ok.pk: [
            (logging.DEBUG, f"job {ok.pk} {add.path} attempt 1 claimed"),
            (logging.DEBUG, f"job {ok.pk} {add.path} succeeded"),
        ],
        gave_up.pk: [
            (logging.DEBUG, f"job {gave_up.pk} {gives_up.path} attempt 1 claimed"),
            (
                logging.INFO,
                f"job {gave_up.pk} ({gives_up.path}) cancelled on attempt 1: "
                "fields: nothing left to do",
            ),
            (logging.DEBUG, f"job {gave_up.pk} {gives_up.path} cancelled"),
        ],
        stopped.pk: [
            (logging.DEBUG, f"job {stopped.pk} {waits_to_be_stopped.path} attempt 1 claimed"),
            (
                logging.INFO,
                f"job {stopped.pk} ({waits_to_be_stopped.path}): asked to stop (enough)",
            ),
            (
                logging.INFO,
                f"job {stopped.pk} ({waits_to_be_stopped.path}) cancelled on attempt 1: enough",
            ),
            (logging.DEBUG, f"job {stopped.pk} {waits_to_be_stopped.path} cancelled"),
        ],
    }
    for job, task in ((ok, add), (gave_up, gives_up), (stopped, waits_to_be_stopped)):
        for record in log.about(job.pk, logging.DEBUG):
            assert {k: getattr(record, k) for k in FIELDS} == {
                "job_id": job.pk,
                "task": task.path,
                "queue": "default",
                "attempt": 1,
                "worker": "w-fields",
            }


def test_the_job_timeout_warning_carries_the_fields() -> None:
    late = mark.enqueue("fields-late", sleep=1.0)
    Job.objects.filter(pk=late.pk).update(max_attempts=1)  # one run: buried for its timeout
    with (
        collected() as log,
        worker_thread(worker_id="w-late", job_timeout=0.2) as running,
    ):
        running.wait("recorded", where=lambda d: d["buried"] == 1)
    (warning,) = [r for r in log.about(late.pk) if "exceeded the job timeout" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert {k: getattr(warning, k) for k in FIELDS} == {
        "job_id": late.pk,
        "task": mark.path,
        "queue": "default",
        "attempt": 1,
        "worker": "w-late",
    }
