"""Issues 5 and 4 as a user meets them: the job admin through Django's test client
(summary, filters, job page, actions, permissions) and the Tasks backend through
Django's API and ``manage.py runworker --burst``."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend.compat import (
    TaskResult,
    task_backends,
)
from django_pgqueue.models import Job
from tests.conftest import run_counts, status_counts
from tests.integration.test_admin import URL, post_action, row_ids, run_next, staff_client
from tests.testapp.tasks import add, always_fails, flaky, noop

pytestmark = pytest.mark.django_db(transaction=True)


def get_result(result_id: str) -> TaskResult[Any, Any]:
    return task_backends["default"].get_result(result_id)


def burst() -> None:
    call_command("runworker", "--burst", verbosity=0)


def page(client: Client, pk: int) -> str:
    response = client.get(f"{URL}{pk}/change/")
    assert response.status_code == 200
    return str(response.content.decode())


def cell(html: str, queue: str, stat: str) -> str:
    """The text of one summary cell (its data-status or data-stat), links stripped."""
    row = re.search(rf'<tr class="[^"]*" data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row, queue
    found = re.search(rf'data-(?:status|stat)="{stat}">(.*?)</td>', row[1], re.S)
    assert found, (queue, stat)
    return re.sub(r"<[^>]+>", "", found[1]).strip()


# -- issue 5: the operator's night ------------------------------------------------------------


def test_a_dead_job_is_found_read_retried_from_the_list_and_runs_done(
    admin_client: Client, admin_user: User
) -> None:
    flaky.using(max_attempts=1, queue="emails").enqueue("night", 1)
    noop.enqueue()
    burst()
    assert status_counts() == {"dead": 1, "done": 1}
    dead = Job.objects.get(status="dead")

    listed = admin_client.get(URL + "?status__exact=dead")
    assert row_ids(listed.content) == [dead.pk]
    assert row_ids(admin_client.get(URL + "?status=dead").content) == [dead.pk]
    html = page(admin_client, dead.pk)
    assert "Traceback (most recent call last)" in html
    assert "RuntimeError: night: planned failure 1 of 1" in html

    shown = post_action(admin_client, "retry_jobs", [dead.pk])
    assert shown == ["Retried 1 job: queued now, attempts reset."]
    row = Job.objects.get(pk=dead.pk)
    assert (row.status, row.attempts, len(row.errors)) == ("queued", 0, 1)
    assert row.run_at <= timezone.now()
    assert 'pgqueue-queued">queued<' in admin_client.get(URL).content.decode()

    burst()
    assert status_counts() == {"done": 2}
    assert run_counts("night") == {"night": 2}
    assert f"<title>#{dead.pk} tests.testapp.tasks.flaky (done)" in page(admin_client, dead.pk)
    assert list(LogEntry.objects.values_list("user_id", "object_id", "action_flag")) == [
        (admin_user.pk, str(dead.pk), CHANGE)
    ]


def test_the_summary_shows_each_number_the_issue_names(admin_client: Client) -> None:
    always_fails.using(max_attempts=1, queue="emails").enqueue("s")
    run_next()
    ready = noop.enqueue()
    Job.objects.filter(pk=ready.pk).update(run_at=timezone.now() - dt.timedelta(minutes=5))
    noop.enqueue()
    Job.objects.claim("gone-worker")  # the oldest ready job is taken: the newer one waits
    Job.objects.filter(status="running").update(
        locked_until=timezone.now() - dt.timedelta(seconds=3)
    )
    html = admin_client.get(URL).content.decode()
    assert [cell(html, "emails", s) for s in ("queued", "dead", "dead_last_24h")] == ["0", "1", "1"]
    assert [cell(html, "default", s) for s in ("queued", "running", "lease_expired")] == [
        "1",
        "1",
        "1",
    ]
    assert cell(html, "all queues", "dead_last_24h") == "1"
    assert cell(html, "emails", "oldest_ready") == "-"
    assert re.fullmatch(r"\d+ s", cell(html, "default", "oldest_ready"))


def test_the_job_page_shows_the_result_and_the_workers_that_ran_it(admin_client: Client) -> None:
    done = add.enqueue(2, 3)
    burst()
    html = page(admin_client, done.pk)
    row = Job.objects.get(pk=done.pk)
    assert row.status == "done"
    assert '<pre class="pgqueue-pre">5</pre>' in html  # the result
    assert '<pre class="pgqueue-pre">[\n  2,\n  3\n]</pre>' in html  # the args
    assert len(row.worker_ids) == 1
    assert row.worker_ids[0] in html


def test_retry_takes_a_pending_retry_and_skips_a_ready_job(admin_client: Client) -> None:
    pending = flaky.enqueue("pending", 5)
    run_next()
    row = Job.objects.get(pk=pending.pk)
    Job.objects.filter(pk=pending.pk).update(run_at=timezone.now() + dt.timedelta(hours=1))
    assert (row.status, row.attempts) == ("queued", 1)
    ready = noop.enqueue()
    shown = post_action(admin_client, "retry_jobs", [pending.pk, ready.pk])
    assert shown[0] == "Retried 1 job: queued now, attempts reset."
    assert shown[1].startswith("Skipped 1 job that cannot be retried")
    assert shown[1].endswith(f": #{ready.pk} queued.")
    row = Job.objects.get(pk=pending.pk)
    assert (row.status, row.attempts, len(row.errors)) == ("queued", 0, 1)
    assert row.run_at <= timezone.now()


def test_cancel_takes_queued_jobs_out_and_skips_finished_ones(admin_client: Client) -> None:
    always_fails.using(max_attempts=1).enqueue("c")
    dead = run_next()
    waiting = noop.using(delay=600).enqueue()
    ready = noop.enqueue()
    shown = post_action(
        admin_client, "cancel_jobs", [dead.pk, waiting.pk, ready.pk], reason="not needed"
    )
    assert shown == [
        "Cancelled 2 jobs: not needed (by admin in the admin).",
        f"Skipped 1 job that was not queued or running: #{dead.pk} dead.",
    ]
    assert status_counts() == {"dead": 1, "cancelled": 2}
    assert Job.objects.claim("w") == []  # out of the queue
    for row in Job.objects.filter(status="cancelled"):
        assert row.last_error == "Cancelled: not needed (by admin in the admin)"
        assert "not needed (by admin in the admin)" in row.errors[-1]["message"]


def test_delete_takes_cancelled_jobs_too_and_each_is_logged(admin_client: Client) -> None:
    cancelled = noop.enqueue()
    Job.objects.cancel([cancelled.pk], reason="x")
    done = add.enqueue(1, 1)
    run_next()
    running = noop.enqueue()
    Job.objects.claim("w")
    shown = post_action(admin_client, "delete_finished_jobs", [cancelled.pk, done.pk, running.pk])
    assert shown == [
        "Deleted 2 jobs.",
        "Skipped 1 job that was not finished (only done, dead and cancelled jobs can be): "
        f"#{running.pk} running.",
    ]
    assert status_counts() == {"running": 1}
    assert sorted(LogEntry.objects.values_list("object_id", "action_flag")) == sorted(
        [(str(cancelled.pk), DELETION), (str(done.pk), DELETION)]
    )


def test_an_action_on_every_job_across_pages_changes_the_eligible_ones(
    admin_client: Client,
) -> None:
    dead = []
    for n in range(3):
        always_fails.using(max_attempts=1).enqueue(f"a{n}")
        dead.append(run_next().pk)
    noop.enqueue()
    # The browser posts the page's checked boxes (one page: list_per_page) and "all".
    response = admin_client.post(
        URL + "?status__exact=dead",
        {"action": "retry_jobs", "_selected_action": dead[-1:], "index": "0", "select_across": "1"},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == [
        "Retried 3 jobs: queued now, attempts reset."
    ]
    assert status_counts() == {"queued": 4}
    assert LogEntry.objects.count() == 3


def test_a_user_with_one_actions_permission_cannot_run_the_other() -> None:
    always_fails.using(max_attempts=1).enqueue("p")
    dead = run_next()
    ready = noop.enqueue()
    none = ["No action selected."]  # Django's words for an action the user is not offered
    retrier = staff_client("retrier", "view_job", "retry_job")
    assert post_action(retrier, "cancel_jobs", [ready.pk]) == none
    assert post_action(retrier, "delete_finished_jobs", [dead.pk]) == none
    canceller = staff_client("canceller", "view_job", "cancel_job")
    assert post_action(canceller, "retry_jobs", [dead.pk]) == none
    assert status_counts() == {"queued": 1, "dead": 1}
    assert not LogEntry.objects.exists()
    assert post_action(canceller, "cancel_jobs", [ready.pk]) == [
        "Cancelled 1 job: no reason given (by canceller in the admin)."
    ]


def test_a_view_only_user_sees_the_summary_and_pages_but_no_button() -> None:
    always_fails.using(max_attempts=1).enqueue("v")
    dead = run_next()
    viewer = staff_client("viewer", "view_job")
    html = viewer.get(URL).content.decode()
    assert cell(html, "default", "dead") == "1"
    assert "Pause" not in html
    job_page = page(viewer, dead.pk)
    assert "Traceback (most recent call last)" in job_page
    assert 'name="pgqueue_retry"' not in job_page
    assert viewer.post(f"{URL}{dead.pk}/retry/").status_code == 403
    assert Job.objects.get(pk=dead.pk).status == "dead"


def test_a_retried_dead_job_gets_every_attempt_again_and_keeps_its_history(
    admin_client: Client,
) -> None:
    job = always_fails.enqueue("again")  # max_attempts=2

    def until_dead() -> None:
        deadline = time.monotonic() + 30
        while Job.objects.get(pk=job.pk).status != "dead":  # bursts exit between retries
            assert time.monotonic() < deadline, status_counts()
            burst()

    until_dead()
    assert post_action(admin_client, "retry_jobs", [job.pk]) == [
        "Retried 1 job: queued now, attempts reset."
    ]
    until_dead()
    row = Job.objects.get(pk=job.pk)
    assert (row.attempts, len(row.errors)) == (2, 4)
    assert run_counts("again") == {"again": 4}
