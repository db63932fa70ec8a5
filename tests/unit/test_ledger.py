"""The worker's ledger: slots, attempts and timeouts, without a database."""

from __future__ import annotations

import time

from django_pgqueue.records import ClaimedJob
from django_pgqueue.worker.ledger import Ledger


def job(job_id: int = 1, attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(id=job_id, task="t.t", args=[], kwargs={}, queue="default", priority=0,
                      attempt=attempt, max_attempts=3, concurrency_key=None, unique_key=None)


def test_a_reclaimed_job_is_a_new_entry_the_old_attempt_cannot_touch() -> None:
    ledger = Ledger()
    first = job(attempt=1)
    ledger.add([first])
    assert ledger.start(first)
    assert ledger.abandon_running(started_before=time.monotonic() + 1) == [first]  # timed out
    ledger.recorded([(1, 1)], succeeded=0, buried=0)  # its timeout failure is written
    second = job(attempt=2)  # the same worker claims it again
    ledger.add([second])
    assert ledger.start(second)
    assert ledger.finish(first) is False  # the old thread returns at last: dropped
    ledger.recorded([(1, 1)], succeeded=0, buried=0)  # a stale settle changes nothing
    assert ledger.lease_ids() == [1]  # attempt 2's lease is still renewed
    assert ledger.finish(second) is True
    ledger.recorded([(1, 2)], succeeded=1, buried=0)
    assert (ledger.lease_ids(), ledger.busy, ledger.succeeded) == ([], 0, 1)


def test_a_prefetched_job_is_not_timed_out_before_it_runs() -> None:
    ledger = Ledger()
    waiting = job()
    ledger.add([waiting])
    assert ledger.abandon_running(started_before=time.monotonic() + 3600) == []
    assert not ledger.running_own()
    assert ledger.own_work_left()  # burst mode waits for it
    assert ledger.lease_ids() == [1]  # and its lease is renewed while it waits
    assert ledger.start(waiting)
    assert ledger.running_own()


def test_forgotten_jobs_free_their_slots_once() -> None:
    ledger = Ledger()
    a, b = job(1), job(2)
    ledger.add([a, b])
    ledger.forget([b])  # given back at shutdown before any thread took it
    assert ledger.busy == 1
    assert ledger.start(b) is False
    assert ledger.busy == 1
    assert ledger.start(a)
    assert ledger.finish(a)
    assert ledger.busy == 0
