"""Runs a shutdown still holds while it waits for running jobs: claimed ahead and
not started, their give-back skipped because another transaction held their rows
locked (an operator's cancel() in a long atomic block). Real ``runworker``
subprocesses on the test database, a real second connection holding the row, a
short lease and a long shutdown timeout."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection

from django_pgqueue.models import Job
from tests.conftest import run_counts
from tests.testapp.tasks import mark, waits_to_be_stopped
from tests.worker.conftest import WorkerProcess, running_count, wait_for
from tests.worker.test_reconnect_give_back import held, holding

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LOCK = "SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE"
#: The text of every give-back statement (claims.release).
GIVE_BACK = "given back before it started"


def giving_back() -> int:
    """Give-back statements under way on the server (another session's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND pid <> pg_backend_pid() AND strpos(query, %s) > 0",
            [GIVE_BACK],
        )
        return int(cursor.fetchone()[0])


def lapsed(job_id: int) -> bool:
    """Whether the job's lease ended in the table (not renewed since)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT locked_until < now() FROM pgqueue_job WHERE id = %s", [job_id])
        return bool(cursor.fetchone()[0])


def test_a_run_whose_row_was_locked_at_the_shutdown_goes_back_once_free(
    db_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    """The shutdown gave back the run claimed ahead, whose row was locked: it tried
    for 5 s, then left it "for the reaper" while it went on waiting for the running
    job, the lease no longer renewed. Once the row was free the reaper (the worker's
    own, here) took it back, spending the attempt of a job that never ran: buried,
    for a job of one attempt. Now the shutdown keeps giving it back while it waits,
    and it goes back unstarted, its attempt not spent."""
    blocker = waits_to_be_stopped.using(priority=10).enqueue("sho-blocker", 120.0)
    ahead = mark.using(max_attempts=1).enqueue("sho-ahead")
    settings: dict[str, Any] = {"REAP_INTERVAL": 0.3}
    worker = start_worker(
        *("--concurrency", "1", "--prefetch", "1", "--lease", "2", "--no-listen"),
        *("--shutdown-timeout", "60"),
        env={"PGQUEUE_TEST_PGQUEUE": json.dumps(settings)},
    )
    wait_for(lambda: run_counts("sho-") == {"sho-blocker": 1}, 20, "the blocker running")
    wait_for(lambda: running_count() == 2, 10, "a job claimed ahead behind it")
    with psycopg.connect(db_url) as operator:
        operator.execute(LOCK, [ahead.pk])
        worker.signal(signal.SIGTERM)
        worker.wait_for_output("waiting up to", 20)  # for the blocker, the give-back done
        wait_for(lambda: lapsed(ahead.pk), 10, "the run's lease to end, unrenewed")
        operator.rollback()
    wait_for(lambda: Job.objects.get(pk=ahead.pk).status != "running", 10, "the run to go back")
    Job.objects.cancel([blocker.pk])  # the blocker returns: the worker exits
    assert worker.wait(20) == 0
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.attempts, row.error_count) == ("queued", 0, 1)
    # As any run the shutdown gives back unstarted: no LeaseExpired.
    assert [(e["exception"], e["message"]) for e in row.errors] == [
        ("WorkerShutdown", "worker shut down before the job started")
    ]
    assert Job.objects.get(pk=blocker.pk).status == "cancelled"
    assert run_counts("sho-") == {"sho-blocker": 1}


def test_the_heartbeats_give_back_ends_before_the_shutdowns_last(
    db_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    """The heartbeat was giving back a run claimed ahead (its queue paused), its
    statement slow (held here), when the worker was asked to stop. The shutdown
    waited 2 s for the heartbeat thread, made its last give-back (nothing owed yet)
    and exited; the heartbeat's statement then skipped the run's row (locked by
    another transaction), owing a run nobody was left to give back: it stayed
    ``running``, for a reaper to take once its lease expired, spending the attempt
    of a job that never ran. Now the shutdown waits for a give-back under way (up
    to its bound), then gives back what it left owed."""
    blocker = mark.using(priority=10).enqueue("shh-blocker", sleep=1.0)
    ahead = mark.using(queue="shh").enqueue("shh-ahead")
    settings: dict[str, Any] = {"HEARTBEAT_INTERVAL": 0.2}
    worker = start_worker(
        *("--concurrency", "1", "--prefetch", "1", "--no-listen"),
        env={"PGQUEUE_TEST_PGQUEUE": json.dumps(settings)},
    )
    wait_for(lambda: running_count() == 2, 20, "the blocker running and a job claimed ahead")
    # (The trigger is dropped once the operator's transaction no longer holds the table.)
    with holding(GIVE_BACK), psycopg.connect(db_url) as operator:
        Job.objects.pause_queue("shh")  # the heartbeat gives the run back: held
        wait_for(lambda: held() == 1, 10, "the heartbeat's give-back")
        operator.execute(LOCK, [ahead.pk])
        worker.signal(signal.SIGTERM)
        wait_for(lambda: Job.objects.get(pk=blocker.pk).status == "done", 10, "the blocker")
        with contextlib.suppress(subprocess.TimeoutExpired):  # the shutdown's 2 s for
            worker.proc.wait(3.0)  # the heartbeat thread (it exited after them)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
        # The heartbeat's statement goes on, and skips the row: the run is owed.
        wait_for(lambda: giving_back() == 0, 10, "the heartbeat's give-back to end")
        operator.rollback()
    assert worker.wait(20) == 0
    row = Job.objects.get(pk=ahead.pk)
    assert (row.status, row.locked_until, row.attempts) == ("queued", None, 0), worker.output
    assert Job.objects.get(pk=blocker.pk).status == "done"
    assert run_counts("shh-") == {"shh-blocker": 1}
