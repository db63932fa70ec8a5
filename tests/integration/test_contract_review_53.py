"""A review of the fixes merged in this stop: the defects they left, each reproduced
on real second connections holding real locks."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from django.utils import timezone

from django_pgqueue.models import Job
from tests.integration.test_contract_jc_53 import lock_waiters
from tests.integration.test_contract_job_control_more import in_thread
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.testapp.tasks.add"


def blocked_by(db_url: str, pid: int) -> int:
    """How many sessions wait for a lock that session ``pid`` holds."""
    with psycopg.connect(db_url, autocommit=True) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid]
        ).fetchone()
    return 0 if row is None else int(row[0])


# -- retry()'s one-by-one pass meeting cancel ----------------------------------------------


def test_a_retry_that_met_an_enqueue_of_its_key_and_a_cancel_do_not_deadlock(
    db_url: str,
) -> None:
    """When an enqueue of the same unique_key committed while a retry waited for it,
    the retry's batch failed (IntegrityError), its savepoint rolled back and let its
    row locks go, and it went on one job at a time, newest first: it took the newer
    rows again before the older ones, while a cancel of the same jobs took them
    oldest first, and PostgreSQL failed the retry with 'deadlock detected'. The
    one-by-one pass now takes its rows in id order first, as the batch did."""
    d = Job.objects.enqueue(ADD, args=[1, 2], unique_key="k").id
    Job.objects.filter(pk=d).update(status="dead", done_at=timezone.now())
    p, m, q = (Job.objects.enqueue(ADD, args=[1, 2]).id for _ in "pmq")
    later = timezone.now() + dt.timedelta(hours=1)  # retry() takes queued jobs waiting
    Job.objects.filter(pk__in=[p, q]).update(run_at=later)
    holder = psycopg.connect(db_url)  # holds m: the cancel stops there, holding p
    enqueuer = psycopg.connect(db_url)  # an enqueue of key k, not yet committed
    try:  # closed whatever fails: a lock left held would hang every test after this one
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [m])
        enqueuer.execute(
            "INSERT INTO pgqueue_job (task, unique_key) VALUES (%s, 'k') RETURNING id", [ADD]
        )
        retrying, retry = in_thread(lambda: Job.objects.retry([d, p, q]))
        wait_for(lambda: lock_waiters(db_url) == 1, 10, "the retry to wait for the enqueue")
        cancelling, cancel = in_thread(lambda: Job.objects.cancel([p, m, q], reason="race"))
        wait_for(lambda: lock_waiters(db_url) == 2, 10, "the cancel to wait for job p")
        enqueuer.commit()  # the retry's batch fails; it goes on one job at a time
        holder_pid = holder.info.backend_pid

        def settled() -> bool:
            """The cancel waits for job m. The retry waits for job p again, which the
            cancel took as the retry's savepoint let it go; or, on a loaded host, the
            retry took p back before the cancel's session woke, and has finished."""
            waiting = 1 if not retrying.is_alive() else 2
            return lock_waiters(db_url) == waiting and blocked_by(db_url, holder_pid) == 1

        wait_for(settled, 20, "the cancel to wait for job m, the retry for p or done")
        retry_first = not retrying.is_alive()
        holder.rollback()
    finally:
        holder.close()
        enqueuer.close()
    cancelling.join(30)
    retrying.join(30)
    assert "error" not in retry, retry
    assert "error" not in cancel, cancel
    assert cancel == {"value": [p, m, q]}
    # The retry queued p and q again, and left d (its key is live again): after the
    # cancel, or before it (then the cancel ended them).
    assert retry == {"value": [p, q]}
    assert dict(Job.objects.filter(pk__in=[d, p, m, q]).values_list("id", "status")) == {
        d: "dead",
        p: "cancelled" if retry_first else "queued",
        m: "cancelled",
        q: "cancelled" if retry_first else "queued",
    }


# -- a running task's run_after: a time written by hand ------------------------------------


@pytest.mark.parametrize(
    ("run_at", "use_tz", "zone"),
    [
        ("-infinity", True, "UTC"),
        ("0044-03-15 12:00+00 BC", True, "UTC"),
        # In range in UTC, out of it once read in TIME_ZONE (year 0 in New York).
        ("0001-01-01 03:00+00", False, "America/New_York"),
    ],
)
def test_a_tasks_job_whose_run_at_no_python_time_holds_still_runs(
    run_at: str, use_tz: bool, zone: str
) -> None:
    """A run_at written by hand that Python cannot hold (-infinity, a year BC, a year
    0 in TIME_ZONE) read as the nearest time it can, and the task ran. Since the
    running result reads a run_at far from 1970 from the job's row, that read
    failed (psycopg's DataError) before the task started, on every attempt, until
    the job was buried. The row's time is read as tolerantly as the claim's."""
    pytest.importorskip(
        "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
    )
    from django.db import connection
    from django.test import override_settings

    from django_pgqueue import validation
    from django_pgqueue.backend.compat import TaskResult, task_started
    from django_pgqueue.records import Success
    from django_pgqueue.worker.executor import execute
    from tests.testapp import djtasks

    seen: list[Any] = []

    def on_started(sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        seen.append(task_result.task.run_after)

    task_started.connect(on_started)
    try:
        with override_settings(USE_TZ=use_tz, TIME_ZONE=zone):
            enqueued = djtasks.calculate_meaning_of_life.enqueue()
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE pgqueue_job SET run_at = %s WHERE id = %s", [run_at, enqueued.id]
                )
            (job,) = Job.objects.claim("w")
            outcome = execute(job)
            assert isinstance(outcome, Success), outcome
            assert Job.objects.complete("w", [outcome]) == {job.id}
            earliest = validation.EARLIEST if use_tz else timezone.make_naive(validation.EARLIEST)
    finally:
        task_started.disconnect(on_started)
    assert seen == [earliest]
    assert Job.objects.filter(pk=enqueued.id, status="done").exists()
