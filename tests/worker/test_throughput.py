"""The throughput line carries the claim latency and the queue lag of its window."""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading

import pytest
from django.utils import timezone

from django_pgqueue.models import Job
from tests.testapp.tasks import add
from tests.worker.conftest import wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.test_joblog import collected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LINE = re.compile(
    r"throughput: (\d+) jobs in [\d.]+s \([\d.]+/s\): 3 succeeded, 0 retried, 0 buried; "
    r"0 running; claims (\d+) \(avg [\d.]+ ms\), queue lag avg ([\d.]+)s, max ([\d.]+)s; "
    r"totals: claimed 3, succeeded 3, retried 0, buried 0"
)


def test_the_throughput_line_has_claim_latency_and_queue_lag() -> None:
    late = [add.enqueue(i, 1).pk for i in range(3)]
    Job.objects.filter(pk__in=late[:1]).update(run_at=timezone.now() - dt.timedelta(seconds=20))
    with collected() as log, worker_thread() as running:
        # In one batch or several: the completer writes whatever is waiting.
        running.recorder.wait_total("recorded", "succeeded", 3)
        running.worker.housekeeping.log_throughput()
        running.worker.housekeeping.log_throughput()  # a window with nothing in it
    lines = [
        r.getMessage()
        for r in log.records
        if r.levelno == logging.INFO and r.getMessage().startswith("throughput:")
    ]
    match = LINE.fullmatch(lines[0])
    assert match, lines[0]
    assert int(match[1]) == 3
    assert int(match[2]) >= 1
    assert 20 / 3 <= float(match[3]) < 20 / 3 + 2  # one job 20 s late, two on time
    assert 20 <= float(match[4]) < 22
    assert lines[1].split("; ")[2].endswith("queue lag -")  # no job started in it


def test_the_stop_line_counts_every_kind_of_outcome() -> None:
    """It said "claimed 4, succeeded 1, buried 1": the retried and cancelled runs
    were missing from the sum."""
    from tests.testapp.tasks import always_fails, gives_up, snoozes

    add.enqueue(1, 2)
    always_fails.using(max_attempts=1).enqueue("once")
    snoozes.enqueue("later", 1, 3600.0)  # queued again, for an hour later: retried
    gives_up.enqueue("stop")
    with collected() as log, worker_thread(concurrency=1) as running:
        ledger = running.worker.ledger
        wait_for(
            lambda: ledger.claimed == 4 and not ledger.own_work_left(), 10, "four runs settled"
        )
        running.worker.housekeeping.log_throughput()
    messages = [r.getMessage() for r in log.records]
    (line,) = [m for m in messages if m.startswith("stopped ")]
    assert line.endswith(": claimed 4, succeeded 1, retried 1, buried 1, cancelled 1"), line
    (throughput,) = [m for m in messages if m.startswith("throughput")]
    assert ": 1 succeeded, 1 retried, 1 buried, 1 cancelled; " in throughput, throughput
    assert throughput.endswith("totals: claimed 4, succeeded 1, retried 1, buried 1, cancelled 1")


def test_an_outcome_the_fence_refused_is_not_counted_as_done() -> None:
    """The reaper gave the job back and another worker claimed it while it ran: its
    outcome is refused, and it counted as done in the registry's jobs_done and as
    "1 job ... 0 succeeded" in the throughput line."""
    from tests.testapp.tasks import GATES, waits_for_gate

    gate = GATES["fenced"] = threading.Event()
    job = waits_for_gate.enqueue("fenced")
    # No heartbeat before the outcome (it would find the lease lost and drop it
    # itself), and no claim beyond the one job.
    with (
        collected() as log,
        worker_thread(
            lease=60, heartbeat_interval=50, concurrency=1, prefetch=0, reap_interval=3600
        ) as running,
    ):
        try:
            # The worker's own reaper runs once, at start, and not again: the test's
            # reap below is the one that gives the job back.
            running.wait("reaped")
            running.wait("started")
            past = timezone.now() - dt.timedelta(seconds=1)
            Job.objects.filter(pk=job.pk).update(locked_until=past)
            assert Job.objects.reap().returned == 1
            Job.objects.filter(pk=job.pk).update(run_at=past)  # no backoff: claim it now
            (newer,) = Job.objects.claim("w-other")
            assert newer.id == job.pk
        finally:
            gate.set()
        running.wait("recorded")
        running.worker.housekeeping.log_throughput()
        assert running.worker.presence.done == 0
        ledger = running.worker.ledger
        assert (ledger.succeeded, ledger.retried, ledger.buried) == (0, 0, 0)
    messages = [r.getMessage() for r in log.records]
    assert any("were refused: their leases had expired" in m for m in messages), messages
    (throughput,) = [m for m in messages if m.startswith("throughput")]
    assert throughput.startswith("throughput: 0 jobs in "), throughput
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.locked_by) == ("running", "w-other")  # the newer run's
