"""Giving prefetched runs back while another transaction holds one of their rows
locked (an operator's cancel() inside a long atomic block): the give-back skips
that row and gives it back once the transaction lets go, and the worker goes on
meanwhile. A real in-process worker and a real second connection."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from django_pgqueue.models import Job
from django_pgqueue.worker import prefetch
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import GATES, mark, waits_for_gate
from tests.worker.conftest import running_count, wait_for
from tests.worker.inprocess import WorkerThread, worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LOCK = "SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE"


def done(job_id: int, data: dict[str, Any]) -> bool:
    return any(key[0] == job_id and new == "done" for key, new in data["statuses"].items())


def released(worker: WorkerThread) -> set[int]:
    """The ids every ``released`` event so far put back in the queue."""
    return {k[0] for name, d in list(worker.recorder.seen) if name == "released" for k in d["keys"]}


def started(worker: WorkerThread) -> list[int]:
    return [d["job"].id for name, d in list(worker.recorder.seen) if name == "started"]


@contextlib.contextmanager
def lapsed_while_locked(
    db_url: str, label: str, ahead: str, max_attempts: int = 3, **options: Any
) -> Iterator[tuple[WorkerThread, psycopg.Connection[Any], Job, threading.Event]]:
    """A worker of one thread running a job that waits for ``label``'s gate, with a
    ``mark(ahead)`` job claimed behind it, whose row a second connection (in an open
    transaction) holds locked until its lease lapses: the heartbeat skips the row.
    Opening the gate lets the thread take the lapsed run, and owe it."""
    gate = GATES.setdefault(label, threading.Event())
    waits_for_gate.enqueue(label)
    job = mark.using(max_attempts=max_attempts).enqueue(ahead)
    settings: dict[str, Any] = {
        "concurrency": 1,
        "prefetch": 1,
        "lease": 2.0,
        "heartbeat_interval": 0.2,
        "poll_interval": 0.2,
        "reap_interval": 600,
        **options,
    }
    with worker_thread(**settings) as worker:
        try:
            worker.wait("started")
            wait_for(lambda: running_count() == 2, 10, "the second job claimed ahead")
            with psycopg.connect(db_url) as operator:
                operator.execute(LOCK, [job.pk])
                beats = worker.recorder.count("heartbeat")
                worker.wait("heartbeat", beats + 15, timeout=10)
                yield worker, operator, job, gate
        finally:
            gate.set()


@pytest.mark.parametrize("stop", [False, True], ids=["running", "at-shutdown"])
def test_a_lapsed_run_whose_row_is_locked_does_not_hold_up_its_job_thread(
    db_url: str, stop: bool
) -> None:
    """The job thread that found the prefetched run's lease lapsed gave it back,
    waiting for the row: the worker's only thread stood still until the operator's
    transaction ended. Now it goes on with the next job; the run goes back once the
    row is free, its attempt not spent, and runs once; or, when the worker stops
    first, its shutdown gives it back (not left running, for the reaper)."""
    with lapsed_while_locked(db_url, f"gbl-first-{stop}", "gbl-ahead") as (
        worker,
        operator,
        ahead,
        gate,
    ):
        after = mark.enqueue("gbl-after")
        gate.set()  # the thread takes the lapsed run, then the next job
        worker.wait("recorded", where=lambda d: done(after.pk, d), timeout=10)
        assert Job.objects.get(pk=ahead.pk).status == "running"  # still owed
        assert ahead.pk not in released(worker)
        if stop:  # the shutdown retries the locked row until it is free
            letting_go = threading.Timer(0.5, operator.rollback)
            letting_go.start()
            assert worker.stop() == 0
            letting_go.join()
        else:
            operator.rollback()
        wait_for(lambda: ahead.pk in released(worker), 5, "the lapsed run to go back")
        if not stop:
            worker.wait("recorded", where=lambda d: done(ahead.pk, d), timeout=10)
    row = Job.objects.get(pk=ahead.pk)
    if stop:
        assert (row.status, row.attempts) == ("queued", 0)
        assert run_counts("gbl-") == {"gbl-after": 1}
        assert worker.worker.ledger.claimed == 2
        return
    assert status_counts() == {"done": 3}
    assert run_counts("gbl-") == {"gbl-ahead": 1, "gbl-after": 1}
    assert (row.attempts, row.error_count) == (1, 0)
    assert worker.worker.ledger.claimed == 3  # given back unstarted: not counted


def test_giving_back_jobs_stuck_behind_long_ones_skips_a_locked_row(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim loop gave the prefetched jobs back in one statement that waited for
    the locked row: no job went back, and the claim loop stood still, until the
    operator's transaction ended. Now the others go back at once and the locked one
    once it is free; each long job runs once."""
    monkeypatch.setattr(prefetch, "GIVE_BACK_AFTER", 3.0)  # time to lock a waiting row
    gate = GATES.setdefault("gbl-long", threading.Event())
    for n in range(200):
        mark.enqueue(f"gbl-short-{n}")
    long = [waits_for_gate.enqueue("gbl-long").pk for _ in range(5)]
    with worker_thread(concurrency=2, reap_interval=600) as worker:
        try:

            def waiting() -> list[int]:
                running = set(Job.objects.running().values_list("pk", flat=True))
                return [pk for pk in long if pk in running and pk not in started(worker)]

            wait_for(
                lambda: len(set(started(worker)) & set(long)) == 2 and len(waiting()) >= 2,
                10,
                "two long jobs running and others waiting behind them",
            )
            assert not released(worker)
            locked, *others = waiting()
            with psycopg.connect(db_url) as operator:
                operator.execute(LOCK, [locked])
                wait_for(lambda: set(others) <= released(worker), 10, "the others to go back")
                looped = worker.worker.loop_at
                wait_for(lambda: worker.worker.loop_at > looped, 5, "the claim loop to go on")
                assert locked not in released(worker)
                assert Job.objects.get(pk=locked).status == "running"
                operator.rollback()
            wait_for(lambda: locked in released(worker), 5, "the locked job to go back")
            row = Job.objects.get(pk=locked)
            # Not claimed again: both threads are busy, and the prefetch stopped.
            assert (row.status, row.attempts, row.error_count) == ("queued", 0, 0)
        finally:
            gate.set()
        worker.recorder.wait_total("recorded", "succeeded", 205, timeout=30)
    assert status_counts() == {"done": 205}
    assert all(started(worker).count(pk) == 1 for pk in long)
    assert set(Job.objects.filter(pk__in=long).values_list("attempts", flat=True)) == {1}


def test_an_idle_worker_gives_an_owed_run_back_soon_after_the_row_is_free(db_url: str) -> None:
    """An owed run goes back "at each look of the claim loop (every quarter second)";
    but an idle worker's claim loop slept its idle wait, up to --poll-interval (2 s
    by default), not the look's: the run waited that long, unrenewed, for the reaper
    to race it."""
    with lapsed_while_locked(
        db_url, "gbl-idle", "gbl-idle-ahead", poll_interval=8.0, listen=False
    ) as (worker, operator, ahead, gate):
        gate.set()  # the thread takes the lapsed run: owed, the worker idles
        wait_for(lambda: worker.recorder.count("idle") >= 7, 20, "the worker idle")
        assert ahead.pk not in released(worker)
        operator.rollback()
        wait_for(lambda: ahead.pk in released(worker), 1.5, "the owed run to go back")


def test_a_burst_worker_does_not_exit_while_it_owes_a_run_to_the_queue(db_url: str) -> None:
    """A burst worker exits once nothing is ready and none of its runs is left; an
    owed run (its give-back skipped a locked row) is still its own, running in the
    table. It exited anyway: its shutdown tried the row for 5 s and left it to the
    reaper, which spends the attempt of a job that never ran (and buries one that
    had no other). Before the skip, the give-back waited for the row, and the
    worker ran the job. It waits for the row now, and runs the job."""
    with lapsed_while_locked(
        db_url, "gbl-burst", "gbl-burst-ahead", max_attempts=1, burst=True
    ) as (worker, operator, _, gate):
        gate.set()  # the thread takes the lapsed run: owed
        time.sleep(7.0)  # past a shutdown's 5 s of tries
        operator.rollback()
        assert worker.join(20) == 0
    assert status_counts() == {"done": 2}
    assert run_counts("gbl-burst") == {"gbl-burst-ahead": 1}
