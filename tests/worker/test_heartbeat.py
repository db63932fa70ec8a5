"""The heartbeat when another transaction holds one of the worker's rows locked:
a real in-process worker and a real second connection."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.utils import timezone

from django_pgqueue.models import Job
from tests.conftest import status_counts
from tests.testapp.tasks import GATES, waits_for_gate
from tests.worker.inprocess import worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_row_locked_elsewhere_does_not_stall_the_other_leases(db_url: str) -> None:
    """An operator's cancel() inside a long atomic block locked job A's row: the
    heartbeat waited for it, every other lease of the worker lapsed meanwhile, and
    another worker (or this one) could start job B a second time."""
    gates = [GATES.setdefault(label, threading.Event()) for label in ("hb-a", "hb-b")]
    a = waits_for_gate.enqueue("hb-a")
    b = waits_for_gate.enqueue("hb-b")
    with worker_thread(concurrency=2, prefetch=0, lease=2.0, heartbeat_interval=0.2) as running:
        try:
            running.wait("started", 2)
            with psycopg.connect(db_url) as operator:  # a transaction left open
                operator.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [a.pk])
                beats = running.recorder.count("heartbeat")
                # Longer than a lease: B's lease must be renewed all the while.
                running.wait("heartbeat", beats + 12, timeout=6)
                row_b = Job.objects.get(pk=b.pk)
                assert row_b.locked_until is not None
                assert row_b.locked_until > timezone.now()
                operator.rollback()
            beats = running.recorder.count("heartbeat")
            running.wait("heartbeat", beats + 2, where=lambda d: len(d["kept"]) == 2)
        finally:
            for gate in gates:
                gate.set()
        running.recorder.wait_total("recorded", "succeeded", 2)
        lost = [data["lost"] for name, data in running.recorder.seen if name == "heartbeat"]
        assert not any(lost), lost
    assert status_counts() == {"done": 2}
    assert Job.objects.get(pk=a.pk).attempts == Job.objects.get(pk=b.pk).attempts == 1


def test_a_beat_that_skipped_a_locked_row_is_followed_by_one_within_a_second(
    db_url: str,
) -> None:
    """The skipped run's lease was not renewed: waiting a whole interval (here 5 s of
    an 8 s lease) for the next beat could let it lapse once the lock is gone."""
    gate = GATES.setdefault("hb-soon", threading.Event())
    job = waits_for_gate.enqueue("hb-soon")
    with worker_thread(concurrency=1, prefetch=0, lease=8.0, heartbeat_interval=5.0) as running:
        try:
            running.wait("started")
            with psycopg.connect(db_url) as operator:
                operator.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [job.pk])
                skipped = running.recorder.count("heartbeat", lambda d: not d["kept"])
                running.worker.heartbeat.hurry("heartbeat")  # a beat while it is locked
                running.wait("heartbeat", skipped + 1, where=lambda d: not d["kept"])
                operator.rollback()
            # The next beat renews it within about a second, not five.
            renewing = running.recorder.count("heartbeat", lambda d: bool(d["kept"]))
            running.wait("heartbeat", renewing + 1, where=lambda d: bool(d["kept"]), timeout=2.5)
        finally:
            gate.set()
        running.recorder.wait_total("recorded", "succeeded", 1)
    assert Job.objects.get(pk=job.pk).status == "done"
