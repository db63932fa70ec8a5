"""A race audit of job control (issues 5 and 14): operators' calls meeting each
other, the worker and the reaper on real second connections holding locks."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.queue.maintenance import RETRY_BATCH
from tests.integration.test_contract_job_control_more import in_thread
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def lock_waiters(db_url: str) -> int:
    """How many sessions of the test database wait for a lock."""
    with psycopg.connect(db_url, autocommit=True) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return 0 if row is None else int(row[0])


def wait_later(*ids: int) -> None:
    """These queued jobs wait an hour (retry() takes them then), updated one by one in
    this order: each update writes the row's new version at the table's end, so a
    scan of the table meets them in this order, as it meets rows updated over time."""
    later = timezone.now() + dt.timedelta(hours=1)
    for job_id in ids:
        Job.objects.filter(pk=job_id).update(run_at=later)


# -- retry meeting cancel -----------------------------------------------------------------


def test_retry_and_cancel_of_the_same_jobs_do_not_deadlock(db_url: str) -> None:
    """retry() locked its rows in the order the table holds them, cancel() in id
    order: each took a row the other wanted next, and PostgreSQL broke the deadlock
    by failing the retry (an OperationalError; a 500 in the admin). retry() takes
    them in id order too now, so it waits for the cancel, then acts."""
    a, x, b = (Job.objects.enqueue("tests.testapp.tasks.add", args=[1, 2]).id for _ in "axb")
    wait_later(b, a)  # a and b wait an hour; b's row is now stored before a's
    # A third session holds job x for a moment (a worker's write of its row, an
    # admin edit), so that the cancel holds a while it waits, as a cancel of many
    # rows does while it works through them. Closed whatever fails (as each holder
    # here): a lock left held would hang the flush after this test.
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [x])
        cancelling, cancel = in_thread(lambda: Job.objects.cancel([a, x, b], reason="race"))
        wait_for(lambda: lock_waiters(db_url) == 1, 10, "the cancel to wait for job x")
        retrying, retry = in_thread(lambda: Job.objects.retry([a, b]))
        wait_for(lambda: lock_waiters(db_url) == 2, 10, "the retry to wait for job a")
        holder.rollback()
    cancelling.join(30)
    retrying.join(30)
    assert "error" not in retry, retry
    assert cancel == {"value": [a, x, b]}
    # The cancel went first: all three cancelled; then the retry queued a and b again.
    assert retry == {"value": [a, b]}
    assert dict(Job.objects.values_list("id", "status")) == {
        a: "queued",
        x: "cancelled",
        b: "queued",
    }


# -- the admin's delete meeting retry -----------------------------------------------------


def test_the_admins_delete_and_a_retry_of_the_same_jobs_do_not_deadlock(
    db_url: str, admin_client: Client
) -> None:
    """The admin's Delete locked the finished rows in the order the table holds them,
    retry() in id order: each took a row the other wanted next, and PostgreSQL failed
    the retry. Delete takes them in id order too now: the retry waits, then finds
    them gone."""
    a, x, b = (Job.objects.enqueue("tests.testapp.tasks.add", args=[1, 2]).id for _ in "axb")
    for job_id in (b, x, a):  # stored in this order: b's row first
        Job.objects.filter(pk=job_id).update(status="dead", done_at=timezone.now())
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [x])
        deleting, delete = in_thread(
            lambda: (
                admin_client.post(
                    "/admin/django_pgqueue/job/",
                    {"action": "delete_finished_jobs", "_selected_action": [a, x, b], "index": "0"},
                ).status_code
            )
        )
        wait_for(lambda: lock_waiters(db_url) == 1, 10, "the delete to wait for job x")
        retrying, retry = in_thread(lambda: Job.objects.retry([a, b]))
        wait_for(lambda: lock_waiters(db_url) == 2, 10, "the retry to wait")
        holder.rollback()
    deleting.join(30)
    retrying.join(30)
    assert "error" not in retry, retry
    assert delete == {"value": 302}
    assert retry == {"value": []}  # deleted first
    assert not Job.objects.exists()


# -- the admin's cancel meeting another cancel --------------------------------------------


def test_the_admins_cancel_names_a_job_another_cancel_asked_first_while_it_waited(
    db_url: str, admin_client: Client
) -> None:
    """A running job that another cancel() asked to stop while the admin's Cancel
    waited for a row lock keeps that first request and its reason; the action took
    it for one it asked (the other request's time was after its own transaction
    began), said so and logged "Asked to stop" with a reason the job does not keep."""
    a = Job.objects.enqueue("tests.testapp.tasks.add", args=[1, 2]).id
    b = Job.objects.enqueue("tests.testapp.tasks.add", args=[3, 4]).id
    assert {job.id for job in Job.objects.claim("w", limit=2)} == {a, b}
    with psycopg.connect(db_url) as holder:  # a worker's write of a's row, say
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [a])
        acting, act = in_thread(
            lambda: [
                str(message)
                for message in admin_client.post(
                    "/admin/django_pgqueue/job/",
                    {
                        "action": "cancel_jobs",
                        "_selected_action": [a, b],
                        "index": "0",
                        "reason": "mine",
                    },
                    follow=True,
                ).context["messages"]
            ]
        )
        wait_for(lambda: lock_waiters(db_url) == 1, 10, "the admin's cancel to wait for job a")
        assert Job.objects.cancel([b], reason="theirs") == [b]  # while the admin's waits
        holder.rollback()
    acting.join(30)
    assert "error" not in act, act
    assert act["value"] == [
        "Asked 1 running job to stop: mine (by admin in the admin). Each ends cancelled "
        "once its task stops; one that finishes first ends as it finished.",
        f"1 job had already been asked to stop, and keeps its first request: #{b}: theirs.",
    ]
    assert dict(Job.objects.values_list("id", "cancel_reason")) == {
        a: "mine (by admin in the admin)",
        b: "theirs",
    }
    logged = LogEntry.objects.order_by("id").values_list("object_id", "change_message")
    assert list(logged) == [(str(a), "Asked to stop: mine (by admin in the admin)")]


def test_a_retry_of_more_than_a_batch_and_a_cancel_do_not_deadlock(db_url: str) -> None:
    """retry() writes the newest batch first (of jobs sharing a unique_key, the newest
    is retried), so past RETRY_BATCH ids it locked the newest rows, then the oldest:
    against a cancel of the same jobs (which locks from the oldest) each held rows
    the other wanted. Its rows are now all locked from the oldest first."""
    later = timezone.now() + dt.timedelta(hours=1)  # each one retry() and cancel() take
    jobs = (Job(task="tests.testapp.tasks.add", args=[1, 2], run_at=later) for _ in range(1002))
    ids = [job.id for job in Job.objects.bulk_create(jobs)]
    oldest, x, newest = ids[0], ids[1], ids[2:]  # the retry's last batch is [oldest]
    assert len(newest) == RETRY_BATCH
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [x])
        cancelling, cancel = in_thread(lambda: Job.objects.cancel(ids, reason="race"))
        wait_for(lambda: lock_waiters(db_url) == 1, 10, "the cancel to wait for job x")
        retrying, retry = in_thread(lambda: Job.objects.retry([oldest, *newest]))
        wait_for(lambda: lock_waiters(db_url) == 2, 10, "the retry to wait")
        holder.rollback()
    cancelling.join(30)
    retrying.join(30)
    assert "error" not in retry, retry
    assert cancel == {"value": ids}
    # The cancel went first: all cancelled; then the retry queued its jobs again.
    assert retry == {"value": [oldest, *newest]}
    assert Job.objects.filter(status="queued").count() == RETRY_BATCH + 1
    assert Job.objects.get(pk=x).status == "cancelled"


# -- the pruner meeting retry -------------------------------------------------------------


def test_prune_and_a_retry_of_the_same_old_jobs_do_not_deadlock(db_url: str) -> None:
    """prune deleted its batch in the order it read it (oldest done_at first), retry()
    locked in id order: each took a row the other wanted next, and PostgreSQL failed
    one of them. prune now skips a row another transaction holds (it is pruned at a
    later pass, if still finished), so it never waits, and a retry waits at most for
    it to commit."""
    a, x, b = (Job.objects.enqueue("tests.testapp.tasks.add", args=[1, 2]).id for _ in "axb")
    old = timezone.now() - dt.timedelta(days=30)
    for age, job_id in enumerate((b, x, a)):  # b stored first and oldest: read first
        Job.objects.filter(pk=job_id).update(status="dead", done_at=old + dt.timedelta(age))
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [x])
        pruning, prune = in_thread(lambda: Job.objects.prune(dt.timedelta(days=7)))
        wait_for(
            lambda: not pruning.is_alive() or lock_waiters(db_url) == 1,
            10,
            "the prune to finish, or to wait for job x",
        )
        retrying, retry = in_thread(lambda: Job.objects.retry([a, b]))
        wait_for(
            lambda: not retrying.is_alive() or lock_waiters(db_url) == 2,
            10,
            "the retry to finish, or to wait",
        )
        holder.rollback()
    pruning.join(30)
    retrying.join(30)
    assert "error" not in prune, prune
    assert "error" not in retry, retry
    assert prune == {"value": 2}  # a and b; x, held, is left for the next pass
    assert retry == {"value": []}  # pruned first
    assert dict(Job.objects.values_list("id", "status")) == {x: "dead"}
