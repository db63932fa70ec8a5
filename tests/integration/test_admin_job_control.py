"""The admin's side of job control: cancelled jobs, stop requests, paused queues."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from django_pgqueue.models import Job, Queue
from tests.integration.test_admin import URL, post_action
from tests.testapp.tasks import add, noop

pytestmark = pytest.mark.django_db(transaction=True)

PAUSE = URL + "queues/{}/pause/"
RESUME = URL + "queues/{}/resume/"


def staff(name: str, *codenames: str) -> Client:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def messages(response: object) -> list[str]:
    return [str(m) for m in response.context["messages"]]  # type: ignore[attr-defined]


def test_a_user_with_pause_queue_pauses_and_resumes_from_the_summary() -> None:
    add.using(queue="emails").enqueue(1, 1)
    add.using(queue="default").enqueue(1, 2)
    operator = staff("operator", "view_job", "pause_queue")
    page = operator.get(URL).content.decode()
    assert 'action="/admin/django_pgqueue/job/queues/emails/pause/"' in page
    response = operator.post(PAUSE.format("emails"), follow=True)
    assert messages(response) == [
        "Paused queue 'emails': its jobs stay queued until it is resumed; running jobs finish."
    ]
    assert Job.objects.paused_queues() == ["emails"]
    lines = {line.queue: line for line in response.context["queue_summary"]}
    assert lines["emails"].paused
    assert not lines["default"].paused
    assert 'action="/admin/django_pgqueue/job/queues/emails/resume/"' in response.content.decode()
    assert messages(operator.post(PAUSE.format("emails"), follow=True)) == [
        "Queue 'emails' was paused already."
    ]
    assert messages(operator.post(RESUME.format("emails"), follow=True)) == [
        "Resumed queue 'emails'."
    ]
    assert Job.objects.paused_queues() == []
    assert list(
        LogEntry.objects.order_by("id").values_list("object_id", "action_flag", "change_message")
    ) == [("emails", CHANGE, "Paused the queue."), ("emails", CHANGE, "Resumed the queue.")]


def test_pausing_needs_its_permission_and_a_post() -> None:
    viewer = staff("viewer", "view_job", "cancel_job", "retry_job")
    assert "queues/default/pause/" not in viewer.get(URL).content.decode()
    assert viewer.post(PAUSE.format("default")).status_code == 403
    operator = staff("operator", "view_job", "pause_queue")
    assert operator.get(PAUSE.format("default")).status_code == 405
    assert operator.post(URL + "queues/a b/pause/").status_code == 404
    assert operator.post(URL + "queues/default/stop/").status_code == 404
    assert Job.objects.paused_queues() == []
    # On top of view_job, as the docs' table says and the job actions are.
    assert staff("blind", "pause_queue").post(PAUSE.format("default")).status_code == 403
    assert Job.objects.paused_queues() == []


def test_the_summary_lists_a_paused_queue_without_jobs_and_its_wait_is_not_an_alert() -> None:
    old = noop.using(queue="emails").enqueue()
    Job.objects.filter(pk=old.pk).update(run_at=timezone.now() - dt.timedelta(hours=2))
    noop.enqueue()
    Job.objects.pause_queue("emails")
    Job.objects.pause_queue("empty")
    admin = staff("boss", "view_job")
    summary = {line.queue: line for line in admin.get(URL).context["queue_summary"]}
    assert sorted(summary) == ["all queues", "default", "emails", "empty"]
    assert summary["empty"].paused
    assert sum(summary["empty"].counts.values()) == 0
    assert summary["emails"].oldest_ready.startswith("2 h")  # shown on its own line...
    assert not summary["all queues"].oldest_ready.startswith("2 h")  # ...not as the alert
    assert summary["emails"].paused_since == Queue.objects.get(pk="emails").paused_at


def test_cancelled_jobs_and_stop_requests_show_on_the_list_and_the_job_page(
    admin_client: Client,
) -> None:
    cancelled = noop.enqueue()
    Job.objects.cancel([cancelled.pk], reason="not needed")
    running = noop.enqueue()
    Job.objects.claim("w")
    Job.objects.cancel([running.pk], reason="stop it")
    listed = admin_client.get(URL + "?status__exact=cancelled")
    assert [job.pk for job in listed.context["cl"].result_list] == [cancelled.pk]
    assert 'class="pgqueue-status pgqueue-cancelled"' in listed.content.decode()
    page = admin_client.get(f"{URL}{running.pk}/change/").content.decode()
    assert "asked to stop at " in page
    assert ": stop it" in page
    assert post_action(admin_client, "retry_jobs", [cancelled.pk]) == [
        "Retried 1 job: queued now, attempts reset."
    ]
    assert Job.objects.get(pk=cancelled.pk).status == "queued"


def test_a_queue_name_no_enqueue_takes_leaves_the_summary_open_without_its_button() -> None:
    """A row written by hand with a queue name enqueue() refuses ("emails/eu"): its
    Pause button's URL could not be built, so the whole list was a 500 for a user
    who may pause. pause_queue() refuses the name too: the line has no button."""
    from django.db import connection

    add.using(queue="emails").enqueue(1, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, status, queue) "
            "VALUES ('tests.testapp.tasks.noop', 'queued', 'emails/eu')"
        )
    response = staff("operator", "view_job", "pause_queue").get(URL)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'href="?queue=emails/eu&amp;status__exact=queued"' in page
    assert 'action="/admin/django_pgqueue/job/queues/emails/pause/"' in page
    assert page.count('value="Pause"') == 1
