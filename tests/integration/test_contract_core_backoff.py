"""Contract of issue 2's retries, as a real worker (in process) makes them:
exponential backoff with jitter, capped, then dead after max_attempts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from django_pgqueue.models import Job
from tests.conftest import run_counts
from tests.testapp.tasks import always_fails
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_retries_with_doubling_jittered_delays_capped_then_buries(
    settings: Any,
) -> None:
    """Backoff, as a worker computes it: BACKOFF_BASE doubled per failure, moved by up
    to BACKOFF_JITTER either way, never past BACKOFF_MAX; dead after max_attempts."""
    settings.PGQUEUE = {**settings.PGQUEUE, "BACKOFF_BASE": 10, "BACKOFF_MAX": 25}
    job = Job.objects.enqueue(always_fails, ["contract-backoff"], max_attempts=4)
    delays = []
    with worker_thread(poll_interval=0.05) as worker:
        for attempt in (1, 2, 3):
            worker.recorder.wait_total("recorded", "retried", attempt)
            row = Job.objects.get(pk=job.pk)
            assert (row.status, row.attempts) == ("queued", attempt)
            failed_at = dt.datetime.fromisoformat(row.errors[-1]["time"])
            delays.append((row.run_at - failed_at).total_seconds())
            Job.objects.filter(pk=job.pk).update(run_at=timezone.now())  # due at once
        worker.recorder.wait_total("recorded", "buried", 1)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.error_count) == ("dead", 4, 4)
    assert row.last_error == "ValueError: contract-backoff: this task always fails"
    assert run_counts("contract-backoff") == {"contract-backoff": 4}
    first, second, third = delays
    assert 8 <= first <= 12  # 10 s, +-20 %
    assert 16 <= second <= 24  # 20 s
    assert 20 <= third <= 25  # 40 s, capped at 25 before the jitter and after it
