"""Adaptive prefetch when short jobs give way to long ones: the jobs prefetched
while the jobs were short go back to the queue once they have waited a second
for a thread, for any worker with a free thread, and this worker stops running
ahead. Two real workers, in process, against the test database."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from django_pgqueue.models import Job
from django_pgqueue.worker import prefetch
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.ledger import Ledger
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import mark
from tests.worker.inprocess import worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SHORT, LONG, LONG_SECONDS = 200, 6, 3.0


def test_prefetched_jobs_stuck_behind_long_ones_go_back_for_another_worker() -> None:
    for n in range(SHORT):
        mark.enqueue(f"short-{n}")
    for n in range(LONG):
        mark.enqueue(f"long-{n}", sleep=LONG_SECONDS)
    with worker_thread(worker_id="first", concurrency=2) as first:
        # The short jobs taught it to run ahead: it claims the long ones with
        # them, two start and four wait behind them.
        first.wait("released", timeout=30)
        (released,) = [data["keys"] for name, data in first.recorder.seen if name == "released"]
        assert len(released) == LONG - 2
        # Back in the queue as if never claimed: the attempt not spent, no error.
        # (The first worker claims nothing more while its two long jobs run.)
        rows = Job.objects.filter(pk__in=[job_id for job_id, _ in released])
        assert {(r.status, r.attempts, r.error_count, tuple(r.errors)) for r in rows} == {
            ("queued", 0, 0, ())
        }
        assert all(r.task.endswith(".mark") and r.kwargs["sleep"] for r in rows)
        with worker_thread(worker_id="second", concurrency=2, burst=True) as second:
            assert second.join(30) == 0
        ran_second = second.worker.ledger.succeeded
        assert ran_second >= 2  # it started while the first worker's long jobs ran
        first.recorder.wait_total("recorded", "succeeded", SHORT + LONG - ran_second, timeout=30)
    assert status_counts() == {"done": SHORT + LONG}
    assert set(run_counts("long-").values()) == {1}  # each long job ran once
    assert len(run_counts("long-")) == LONG
    ran_by = Job.objects.filter(kwargs__sleep=LONG_SECONDS).values_list("worker_ids", flat=True)
    assert [ids[-1] for ids in ran_by].count("second") == ran_second


@pytest.mark.parametrize("path", ["lapsed", "owed"])
def test_a_prefetched_run_the_reaper_returned_before_its_give_back_is_no_warning(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A prefetched run whose lease lapsed unrenewed (or an owed one, its row locked
    that long) that the reaper returned first is fenced out of the give-back: it never
    started here, yet the give-back warned it "may run again elsewhere", beside the
    lapsed run's own warning. Still counted as a lost lease."""
    mark.enqueue("returned")
    (job,) = Job.objects.claim("w-lapsed")
    Job.objects.filter(pk=job.id).update(status="queued", locked_by=None, locked_until=None)
    config = WorkerConfig.from_settings(worker_id="w-lapsed")
    ledger, events = Ledger(), Events()
    recorded: list[dict[str, Any]] = []
    events.subscribe("recorded", lambda **data: recorded.append(data))
    with caplog.at_level(logging.INFO, logger="django_pgqueue"):
        if path == "lapsed":
            prefetch.give_back_lapsed(config, ledger, events, job)
        else:
            ledger.owe([job])
            assert prefetch.give_back_owed(config, ledger, events) is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any("run again" in message for message in warnings), warnings
    assert len(warnings) == (1 if path == "lapsed" else 0), warnings  # the lapsed run's own
    assert [d["statuses"] for d in recorded] == [{job.key: None}]  # counted lost
    assert Job.objects.get(pk=job.id).status == "queued"
