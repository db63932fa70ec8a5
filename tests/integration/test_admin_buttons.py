"""Retry and Cancel on the job page: offered where they apply, the list action's
permission, messages and log entries; and every moment on the page with seconds."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.test import Client

from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from tests.integration.test_admin import URL, jobs, staff_client  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

MOMENT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[ \xa0]UTC")  # no break in the list


def page(client: Client, job: Job) -> str:
    response = client.get(f"{URL}{job.pk}/change/")
    assert response.status_code == 200
    return str(response.content.decode())


def press(client: Client, job: Job, button: str, **data: str) -> list[str]:
    response = client.post(f"{URL}{job.pk}/{button}/", data, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == f"{URL}{job.pk}/change/"
    return [str(message) for message in response.context["messages"]]


NOOP, DJ_NOOP = "tests.testapp.tasks.noop", "tests.testapp.djtasks.noop_task"


def plant(columns: str, values: str, *params: str, task: str = NOOP) -> int:
    """A row written by hand, past what the app would write: its id."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO pgqueue_job (task, {columns}) VALUES (%s, {values}) RETURNING id",
            [task, *params],
        )
        return int(cursor.fetchone()[0])


def test_each_page_offers_the_buttons_that_apply(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    offered = {
        name: (
            'name="pgqueue_retry"' in page(admin_client, job),
            'name="pgqueue_cancel"' in page(admin_client, job),
        )
        for name, job in jobs.items()
    }
    assert offered == {
        "dead": (True, False),
        "waiting": (True, True),  # queued for a later run_at: retry runs it now
        "ready": (False, True),
        "running": (False, True),  # cancel asks it to stop
        "done": (False, False),
    }


def test_retry_button_is_the_list_action_for_one_job(
    admin_client: Client,
    admin_user: User,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    dead = jobs["dead"]
    assert press(admin_client, dead, "retry") == ["Retried 1 job: queued now, attempts reset."]
    row = Job.objects.get(pk=dead.pk)
    assert (row.status, row.attempts) == ("queued", 0)
    assert list(
        LogEntry.objects.values_list("user_id", "object_id", "action_flag", "change_message")
    ) == [(admin_user.pk, str(dead.pk), CHANGE, "Retried: queued now, attempts reset.")]
    # Pressed again (a second tab), it changes nothing and says why.
    assert press(admin_client, dead, "retry") == [
        "Skipped 1 job that cannot be retried (only dead and cancelled jobs, and queued jobs "
        "waiting for a later run_at, can be; one whose unique_key is live again cannot): "
        f"#{dead.pk} queued."
    ]


def test_cancel_button_records_the_reason_and_who(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    ready = jobs["ready"]
    assert press(admin_client, ready, "cancel", reason="duplicate order") == [
        "Cancelled 1 job: duplicate order (by admin in the admin)."
    ]
    row = Job.objects.get(pk=ready.pk)
    assert (row.status, row.last_error) == (
        "cancelled",
        "Cancelled: duplicate order (by admin in the admin)",
    )
    assert list(LogEntry.objects.values_list("object_id", "change_message")) == [
        (str(ready.pk), "Cancelled: duplicate order (by admin in the admin)")
    ]


def test_the_buttons_need_the_actions_permissions_and_a_post(
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    viewer = staff_client("viewer", "view_job")
    dead, ready = jobs["dead"], jobs["ready"]
    html = page(viewer, dead)
    assert 'name="pgqueue_retry"' not in html
    assert viewer.post(f"{URL}{dead.pk}/retry/").status_code == 403
    assert viewer.post(f"{URL}{ready.pk}/cancel/").status_code == 403
    retrier = staff_client("retrier", "view_job", "retry_job")
    assert 'name="pgqueue_retry"' in page(retrier, dead)
    assert 'name="pgqueue_cancel"' not in page(retrier, ready)
    assert retrier.get(f"{URL}{dead.pk}/retry/").status_code == 405  # a link cannot retry
    assert retrier.post(f"{URL}{ready.pk}/cancel/").status_code == 403
    assert Job.objects.get(pk=dead.pk).status == "dead"
    assert Job.objects.get(pk=ready.pk).status == "queued"
    # The actions' permissions come on top of seeing jobs, as the list's do.
    blind = staff_client("blind", "retry_job", "cancel_job")
    assert blind.post(f"{URL}{dead.pk}/retry/").status_code == 403
    assert blind.post(f"{URL}{ready.pk}/cancel/", {"reason": "x"}).status_code == 403
    assert Job.objects.get(pk=dead.pk).status == "dead"
    assert Job.objects.get(pk=ready.pk).status == "queued"
    assert not LogEntry.objects.exists()


def test_a_button_on_a_projects_own_admin_site_returns_to_that_site(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    dead = jobs["dead"]
    response = admin_client.post(f"/ops/django_pgqueue/job/{dead.pk}/retry/")
    assert response.status_code == 302
    assert response["Location"] == f"/ops/django_pgqueue/job/{dead.pk}/change/"
    assert Job.objects.get(pk=dead.pk).status == "queued"


def test_every_moment_on_the_page_has_seconds_in_one_format(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    html = page(admin_client, jobs["dead"])
    timing = html[html.index("Timing") : html.index("Call")]
    assert len(MOMENT.findall(timing)) == 5  # created, run at, started, attempted, done
    assert re.search(r"<strong>Attempt 1</strong> at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", html)
    running = page(admin_client, jobs["running"])
    lease = running[running.index("Lease") : running.index("Call")]
    assert len(MOMENT.findall(lease)) == 1  # locked until
    assert not re.search(r"\b(a\.m\.|p\.m\.)", html)  # Django's own format is gone


def test_cancel_button_cleans_a_reason_the_database_cannot_store(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    # The button posts without the action bar's form, so its checks are not made for it:
    # a NUL character was a 500, and a reason past the field's 200 characters was kept.
    ready, waiting = jobs["ready"], jobs["waiting"]
    assert press(admin_client, ready, "cancel", reason="bad\x00 order") == [
        "Cancelled 1 job: bad order (by admin in the admin)."
    ]
    assert Job.objects.get(pk=ready.pk).last_error == "Cancelled: bad order (by admin in the admin)"
    press(admin_client, waiting, "cancel", reason="x" * 500)
    row = Job.objects.get(pk=waiting.pk)
    assert (row.status, row.last_error) == (
        "cancelled",
        f"Cancelled: {'x' * 200} (by admin in the admin)",
    )


def test_the_page_of_a_job_whose_json_python_cannot_read_opens(admin_client: Client) -> None:
    """A row the worker buried because Python cannot read its arguments (a number
    past int's 4,300 digits, nesting past the recursion limit): Django took the
    decoding error for "doesn't exist. Perhaps it was deleted?", or failed."""
    deep = "[" * 11_000 + "]" * 11_000
    ids = [
        plant(
            "args, kwargs, status, errors, worker_ids", "%s::jsonb, '{}', 'dead', '[]', '[]'", args
        )
        for args in ("[1e5000]", deep)
    ]
    for job_id in ids:
        html = page(admin_client, Job(pk=job_id))
        assert "Python cannot read this JSON (shown as stored):" in html
        assert 'name="pgqueue_retry"' in html  # and the operator can act on it
    assert "[10000000000" in page(admin_client, Job(pk=ids[0]))
    assert admin_client.get(f"{URL}999999/change/", follow=True).status_code == 200


@pytest.mark.parametrize("column", ["errors", "worker_ids", "retry_policy"])
@pytest.mark.parametrize("stored", ["[" + "9" * 5000 + "]", "[" * 11_000 + "]" * 11_000])
def test_a_history_or_policy_python_cannot_read_leaves_the_pages_open(
    admin_client: Client, column: str, stored: str
) -> None:
    """The worker runs such a row (written by hand) and keeps it: a retry_policy
    Python cannot read made the whole job list fail, and any of the three made the
    job's page fail or redirect as if the job did not exist."""
    job_id = plant(f"args, status, {column}", "'[7]', 'dead', %s::jsonb", stored)
    listing = admin_client.get(URL)
    assert listing.status_code == 200
    assert f"{URL}{job_id}/change/" in listing.content.decode()
    html = page(admin_client, Job(pk=job_id))
    assert 'name="pgqueue_retry"' in html
    assert ("Python cannot read this JSON (shown as stored):" in html) == (column != "retry_policy")
    assert '<pre class="pgqueue-pre">[\n  7\n]</pre>' in html  # what Python reads: as usual


def test_times_python_cannot_hold_leave_the_pages_open(admin_client: Client) -> None:
    """``timestamptz`` takes infinity and years BC (a row written by hand): one such
    row on the page made the whole job list fail, and its own page too."""
    from django_pgqueue.backend.compat import task_backends

    planted = {
        name: plant(f"status, {columns}", f"%s, {values}", name, task=DJ_NOOP)
        for name, columns, values in (
            ("queued", "run_at", "'-infinity'"),
            ("dead", "created_at, done_at", "'0001-12-31 10:00:00+00 BC', 'infinity'"),
            ("running", "locked_until, started_at", "'infinity', '-infinity'"),
        )
    }
    listing = admin_client.get(URL)
    assert listing.status_code == 200
    for job_id in planted.values():
        assert f"{URL}{job_id}/change/" in listing.content.decode()
        html = page(admin_client, Job(pk=job_id))
        assert f"#{job_id} tests.testapp.djtasks.noop_task" in html
    assert "1-01-02 00:00:00 UTC" in page(admin_client, Job(pk=planted["dead"]))  # nearest
    assert "9999-12-30 00:00:00 UTC" in page(admin_client, Job(pk=planted["dead"]))
    with pytest.raises(InvalidJob, match=f"job {planted['dead']} holds a time that Python cannot"):
        task_backends["default"].get_result(str(planted["dead"]))
    # What the page links to opens and works too.
    for job_id in planted.values():
        assert admin_client.get(f"{URL}{job_id}/history/").status_code == 200
    assert admin_client.get(f"{URL}{planted['dead']}/delete/").status_code == 200  # (finished)
    press(admin_client, Job(pk=planted["dead"]), "retry")
    press(admin_client, Job(pk=planted["queued"]), "cancel", reason="planted")
    assert dict(Job.objects.filter(pk__in=planted.values()).values_list("id", "status")) == {
        planted["queued"]: "cancelled",
        planted["dead"]: "queued",
        planted["running"]: "running",
    }


@pytest.mark.parametrize("column", ["args", "kwargs", "result"])
@pytest.mark.parametrize("depth", [900, 1100])
def test_the_page_of_a_job_whose_json_python_reads_but_cannot_indent_opens(
    admin_client: Client, column: str, depth: int
) -> None:
    """Nesting Python reads, a little short of its recursion limit, but past what
    indenting it follows (a row written by hand): the page was a 500."""
    nested = "[" * depth + "]" * depth
    stored = '{"a": ' + nested + "}" if column == "kwargs" else nested
    job_id = plant(f"status, {column}", "'dead', %s::jsonb", stored)
    html = unescape(page(admin_client, Job(pk=job_id)))
    assert 'name="pgqueue_retry"' in html
    assert "Nested too deeply to indent (shown on one line):" in html
    shown = stored if len(stored) <= 2000 else stored[:2000] + "..."
    assert f'<pre class="pgqueue-pre">{shown}</pre>' in html
