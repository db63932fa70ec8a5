"""Issue 2's reap is idempotent: reapers racing over the same expired leases (each
on its own connection, as workers' timers and ``reapjobs`` run) return every job
exactly once, and charge each one LeaseExpired entry."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec, ReapResult
from tests.conftest import status_counts
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def test_racing_reapers_return_each_expired_job_exactly_once() -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, i], max_attempts=3) for i in range(300))
    Job.objects.enqueue_many(JobSpec.build(add, [i, -i], max_attempts=1) for i in range(100))
    assert len(Job.objects.claim("gone", limit=400, lease=0.01)) == 400
    time.sleep(0.05)
    start = threading.Barrier(4)
    results: list[ReapResult] = []
    lock = threading.Lock()

    def reaper() -> None:
        try:
            start.wait(10)
            mine = [Job.objects.reap(batch_size=50) for _ in range(4)]
            with lock:
                results.extend(mine)
        finally:
            connection.close()

    threads = [threading.Thread(target=reaper) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 16
    assert (sum(r.returned for r in results), sum(r.buried for r in results)) == (300, 100)
    assert status_counts() == {"queued": 300, "dead": 100}
    returned = [j.id for r in results for j in r.returned_jobs]
    buried = [j.id for r in results for j in r.buried_jobs]
    assert len(set(returned)) == len(returned) == 300
    assert len(set(buried)) == len(buried) == 100
    assert Job.objects.reap() == ReapResult()
    for errors in Job.objects.values_list("errors", flat=True):
        assert [e["exception"] for e in errors] == ["LeaseExpired"]
