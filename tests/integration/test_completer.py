"""The completer: an outcome the database refuses must not hold up the others."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.db import connections

from django_pgqueue.models import Job
from django_pgqueue.records import Failure, Success
from django_pgqueue.worker.completer import Completer
from django_pgqueue.worker.services import ConnectionEpoch, Supervision
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_unstorable_outcome_is_buried_with_the_reason_and_the_rest_recorded() -> None:
    good, bad = add.enqueue(1, 1), add.enqueue(2, 2)
    claimed = {j.id: j for j in Job.objects.claim("w", limit=2)}
    settled: list[tuple[int, int]] = []
    completer = Completer(
        "w",
        "default",
        lambda pairs, done, buried, retried, statuses: settled.extend(pairs),
        Supervision(fatal=pytest.fail, epoch=ConnectionEpoch()),
    )
    outcomes: list[Success | Failure] = [
        Success(good.pk, claimed[good.pk].run, "2"),
        # jsonb refuses the NUL escape: a DataError, not a lost connection
        Success(bad.pk, claimed[bad.pk].run, '"a\\u0000b"'),
    ]
    try:
        completer._write(outcomes)  # settled, not retried forever
    finally:
        connections.close_all()
    assert sorted(settled) == sorted([claimed[good.pk].key, claimed[bad.pk].key])
    assert (Job.objects.get(pk=good.pk).status, Job.objects.get(pk=good.pk).result) == ("done", 2)
    refused = Job.objects.get(pk=bad.pk)
    assert refused.status == "dead"
    assert refused.last_error.startswith("OutcomeNotStored: DataError")


class Gathering(Completer):
    """A completer whose writes are only recorded."""

    def __init__(self, in_flight: Callable[[], int] | None = None) -> None:
        supervision = Supervision(fatal=pytest.fail, epoch=ConnectionEpoch())
        super().__init__("w", "default", lambda *args: None, supervision, in_flight)
        self.written: list[list[int]] = []

    def _write(self, batch: list[Success | Failure]) -> None:
        self.written.append([o.job_id for o in batch])


def test_a_lone_outcome_waits_the_short_linger_and_a_stream_gathers_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chain of jobs sharing a concurrency key keeps the short linger's pace; a
    stream of short jobs shares one statement per LINGER_BUSY."""
    from django_pgqueue.worker import completer as module

    completer = Gathering()
    slept: list[float] = []
    arrivals: list[list[int]] = []  # the outcomes that finish during each wait

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        for job_id in arrivals.pop(0) if arrivals else []:
            completer.put(Success(job_id, 1, "null"))

    monkeypatch.setattr(time, "sleep", sleep)  # the completer's waits only: no other thread here
    completer.put(Success(1, 1, "null"))
    completer.step()
    assert (completer.written, slept) == ([[1]], [module.LINGER])

    slept.clear()
    stream = list(range(3, 3 + module.BUSY))
    arrivals.extend([stream, [50, 51]])
    completer.put(Success(2, 1, "null"))
    completer.step()
    assert slept == [module.LINGER, module.LINGER_BUSY - module.LINGER]
    assert completer.written[1] == [2, *stream, 50, 51]  # one statement for all

    slept.clear()
    arrivals.extend([stream[:-2], [60]])  # fewer than BUSY: no second wait
    completer.put(Success(2, 1, "null"))
    completer.step()
    assert slept == [module.LINGER]
    assert completer.written[2] == [2, *stream[:-2]]


def test_with_no_job_left_in_flight_the_outcomes_are_written_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing could join the statement: the last outcome of a drain, or an idle
    worker's one job, is recorded at once, and the next job of a concurrency-key
    chain becomes claimable that much sooner."""
    from django_pgqueue.worker import completer as module

    running = [0]
    completer = Gathering(in_flight=lambda: running[0])
    slept: list[float] = []
    arrivals: list[list[int]] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        for job_id in arrivals.pop(0) if arrivals else []:
            completer.put(Success(job_id, 1, "null"))
        running[0] = 0  # the jobs that were still running have all returned

    monkeypatch.setattr(time, "sleep", sleep)
    completer.put(Success(1, 1, "null"))
    completer.put(Success(2, 1, "null"))  # handed over before the completer woke
    completer.step()
    assert (completer.written, slept) == ([[1, 2]], [])

    # Jobs still running: the short linger, as before; they return during it,
    # so the stream's longer wait is skipped although it brought BUSY outcomes.
    running[0] = module.BUSY
    stream = list(range(10, 10 + module.BUSY))
    arrivals.append(stream)
    completer.put(Success(3, 1, "null"))
    completer.step()
    assert slept == [module.LINGER]
    assert completer.written[1] == [3, *stream]
