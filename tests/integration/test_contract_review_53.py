"""A review of the fixes merged in this stop: the defects they left, each reproduced
on real second connections holding real locks."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.utils import timezone

from django_pgqueue.models import Job
from tests.integration.test_contract_jc_53 import in_thread, lock_waiters
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
    holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [m])
    enqueuer = psycopg.connect(db_url)  # an enqueue of key k, not yet committed
    enqueuer.execute(
        "INSERT INTO pgqueue_job (task, unique_key) VALUES (%s, 'k') RETURNING id", [ADD]
    )
    retrying, retry = in_thread(lambda: Job.objects.retry([d, p, q]))
    wait_for(lambda: lock_waiters(db_url) == 1, 10, "the retry to wait for the enqueue")
    cancelling, cancel = in_thread(lambda: Job.objects.cancel([p, m, q], reason="race"))
    wait_for(lambda: lock_waiters(db_url) == 2, 10, "the cancel to wait for job p")
    enqueuer.commit()  # the retry's batch fails; it goes on one job at a time
    enqueuer.close()
    wait_for(
        lambda: lock_waiters(db_url) == 2 and blocked_by(db_url, holder.info.backend_pid) == 1,
        10,
        "the cancel to wait for job m, and the retry for job p again",
    )
    holder.rollback()
    holder.close()
    cancelling.join(30)
    retrying.join(30)
    assert "error" not in retry, retry
    assert "error" not in cancel, cancel
    assert cancel == {"value": [p, m, q]}
    # The cancel went first; the retry then queued p and q again, and left d (its key
    # is live again).
    assert retry == {"value": [p, q]}
    assert dict(Job.objects.filter(pk__in=[d, p, m, q]).values_list("id", "status")) == {
        d: "dead",
        p: "queued",
        m: "cancelled",
        q: "queued",
    }
