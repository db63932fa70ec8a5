"""The completer: an outcome the database refuses must not hold up the others."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.db import connections

from django_pgqueue.models import Job
from django_pgqueue.records import Failure, JobSpec, Success
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

    def _write(self, batch: list[Success | Failure]) -> list[Success | Failure]:
        self.written.append([o.job_id for o in batch])
        return []


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


@pytest.mark.slow
def test_a_batch_of_successes_and_failures_never_waits_for_a_row_so_never_deadlocks(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completer writes a batch's successes, then its failures, in one
    transaction; cancel() locks rows in id order. Were the completer to lock the
    success (the later id) and then wait for the failure (the earlier id) that a
    cancel already holds, each would wait for the other until PostgreSQL failed
    one of them. It skips a row another transaction holds instead: the success is
    written, cancel (waiting behind it) runs once, and the failure, kept, is
    written on the next try and ends cancelled."""
    import threading

    import psycopg

    from django_pgqueue.queue import claims
    from django_pgqueue.sql import runner
    from tests.worker.conftest import wait_for

    Job.objects.enqueue_many(JobSpec.build(add, [n, n]) for n in range(2))
    first, second = sorted(Job.objects.claim("w", limit=2), key=lambda job: job.id)
    statements: list[str] = []
    fetch, fail = runner.fetch, claims._fail
    cancelled: list[object] = []

    def counting_fetch(name: str, *args: object, **kwargs: object) -> object:
        statements.append(name)
        return fetch(name, *args, **kwargs)  # type: ignore[arg-type]

    def cancel() -> None:
        try:
            with connections["default"].cursor() as cursor:  # this side finds any deadlock
                cursor.execute("SET deadlock_timeout = '200ms'")
            cancelled.append(Job.objects.cancel([first.id, second.id], reason="stop"))
        finally:
            connections.close_all()  # this thread's own connection

    canceller = threading.Thread(target=cancel)

    def cancel_waits_for(pid: int) -> bool:
        query = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        with psycopg.connect(db_url, autocommit=True) as probe:
            row = probe.execute(query, [pid]).fetchone()
        return row is not None and row[0] > 0

    def fail_once_cancel_waits(*args: object, **kwargs: object) -> object:
        # The completer holds the rows it has locked so far; cancel, started now,
        # locks what it can and waits for the rest.
        pid = connections["default"].connection.info.backend_pid
        canceller.start()
        wait_for(lambda: cancel_waits_for(pid), 10, "cancel to wait for the completer")
        return fail(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "fetch", counting_fetch)
    monkeypatch.setattr(claims, "_fail", fail_once_cancel_waits)
    completer = Completer(
        "w", "default", lambda *args: None, Supervision(fatal=pytest.fail, epoch=ConnectionEpoch())
    )
    with connections["default"].cursor() as cursor:
        cursor.execute("SET deadlock_timeout = '60s'")  # never the one to give up
    try:
        failure = Failure(first.id, first.run, "ValueError", "boom", "", delay=60.0)
        held = completer._write([Success(second.id, second.run, "4"), failure])
        canceller.join(10)
        assert held == [failure]  # cancel held its row: skipped, kept
        monkeypatch.setattr(claims, "_fail", fail)
        assert completer._write(held) == []
    finally:
        connections.close_all()
    assert cancelled == [[first.id]]  # second was done by then; first asked to stop
    assert statements.count("cancel") == 1  # no deadlock, no retry
    assert Job.objects.get(pk=second.id).status == "done"
    assert Job.objects.get(pk=first.id).status == "cancelled"
