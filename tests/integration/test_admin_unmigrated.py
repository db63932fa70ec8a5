"""Every page of the admin before ``migrate`` has created the queue's tables."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Iterator
from typing import cast

import pytest
from django.contrib.auth.models import Permission, User
from django.db import DatabaseError, ProgrammingError, connection
from django.db.models.expressions import RawSQL
from django.http import HttpResponse
from django.test import Client

from django_pgqueue.admin import ScheduleAdmin
from django_pgqueue.models import Job

TABLES = ("pgqueue_job", "pgqueue_queue", "pgqueue_worker", "pgqueue_schedule")


@contextlib.contextmanager
def unrecorded(since: str = "0001") -> Iterator[None]:
    """The app's migrations from ``since`` on not recorded as applied, as before
    ``migrate`` (or after an upgrade without it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'django_pgqueue' AND name >= %s"
            " RETURNING app, name, applied",
            [since],
        )
        rows = cursor.fetchall()
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, %s)", rows
            )


@pytest.fixture
def unmigrated(transactional_db: None) -> Iterator[Client]:
    """A superuser's client on a database without the queue's tables (renamed away)."""
    user = User.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        with unrecorded():
            yield client
    finally:
        with connection.cursor() as cursor:
            for table in TABLES:
                cursor.execute(f"ALTER TABLE {table}_away RENAME TO {table}")


GETS = [
    "/admin/django_pgqueue/job/",
    "/admin/django_pgqueue/job/?q=x&status__exact=dead",
    "/admin/django_pgqueue/job/1/change/",
    "/admin/django_pgqueue/job/1/delete/",
    "/admin/django_pgqueue/job/1/history/",
    "/admin/django_pgqueue/registeredworker/",
    "/admin/django_pgqueue/registeredworker/w1/change/",
    "/admin/django_pgqueue/registeredworker/w1/history/",
    "/admin/django_pgqueue/schedule/",
    "/admin/django_pgqueue/schedule/nightly/change/",
    "/admin/django_pgqueue/schedule/nightly/history/",
    "/ops/django_pgqueue/job/",
    "/ops/django_pgqueue/job/1/change/",
]
POSTS = [
    ("/admin/django_pgqueue/job/1/retry/", {}),
    ("/admin/django_pgqueue/job/1/cancel/", {"reason": "x"}),
    ("/admin/django_pgqueue/job/queues/default/pause/", {}),
    ("/admin/django_pgqueue/job/queues/default/resume/", {}),
    (
        "/admin/django_pgqueue/job/",
        {"action": "retry_jobs", "_selected_action": ["1"], "index": "0"},
    ),
    (
        "/admin/django_pgqueue/schedule/",
        {"action": "disable_schedules", "_selected_action": ["nightly"], "index": "0"},
    ),
    ("/admin/django_pgqueue/job/1/delete/", {"post": "yes"}),
]


def says_to_migrate(response: HttpResponse, url: str) -> None:
    assert response.status_code == 503, url
    text = html.unescape(response.content.decode())
    assert "The job queue's tables are missing or out of date" in text, url
    assert re.search(r'relation "pgqueue_\w+" does not exist\): run `manage.py migrate`', text), url
    assert "no-cache" in response["Cache-Control"], url


def test_every_page_of_the_app_says_to_migrate(unmigrated: Client) -> None:
    for url in GETS:
        says_to_migrate(cast(HttpResponse, unmigrated.get(url)), url)
    for url, data in POSTS:
        says_to_migrate(cast(HttpResponse, unmigrated.post(url, data)), url)
    # The site's pages that read no table of the queue's are served as ever.
    assert unmigrated.get("/admin/").status_code == 200
    assert unmigrated.get("/admin/django_pgqueue/").status_code == 200
    # The add page is refused (jobs are enqueued by code), as ever.
    assert unmigrated.get("/admin/django_pgqueue/job/add/").status_code == 403


def test_the_page_links_stay_on_a_projects_own_admin_site(unmigrated: Client) -> None:
    response = unmigrated.get("/ops/django_pgqueue/schedule/")
    assert response.status_code == 503
    assert 'href="/ops/django_pgqueue/"' in response.content.decode()


@pytest.mark.django_db
def test_other_database_errors_are_not_taken_for_a_missing_table(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise DatabaseError("disk full")

    monkeypatch.setattr(ScheduleAdmin, "get_queryset", refuse)
    with pytest.raises(DatabaseError, match="disk full"):
        admin_client.get("/admin/django_pgqueue/schedule/")


def test_under_atomic_requests_a_staff_users_page_says_to_migrate_too(
    unmigrated: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page reads the user's permissions after the failed query, in the same
    # request's transaction.
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="django_pgqueue"))
    client = Client()
    client.force_login(user)
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    for url in GETS:
        says_to_migrate(cast(HttpResponse, client.get(url)), url)
    for url, data in POSTS:
        says_to_migrate(cast(HttpResponse, client.post(url, data)), url)


def test_a_column_a_migration_adds_says_to_migrate_too(
    transactional_db: None, admin_client: Client
) -> None:
    # An upgrade whose migrate has not run yet: the table is there, a column is not.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgqueue_job RENAME COLUMN snoozes TO snoozes_away")
    try:
        with unrecorded(since="0008"):  # the migration that adds it
            response = admin_client.get("/admin/django_pgqueue/job/")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pgqueue_job RENAME COLUMN snoozes_away TO snoozes")
    assert response.status_code == 503
    assert re.search(
        r"column pgqueue_job\.snoozes does not exist\): run `manage.py migrate`",
        html.unescape(response.content.decode()),
    )


@pytest.mark.django_db
def test_a_query_bug_on_a_migrated_database_is_not_taken_for_a_missing_table(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An admin's query that is wrong (a function called with the wrong type: the
    # SQLSTATE of a missing function) with every migration applied: `migrate`
    # would not help, so the error is raised (a 500 with its traceback), not hidden.
    original = ScheduleAdmin.get_queryset

    def wrong(self: ScheduleAdmin, request: object) -> object:
        return original(self, request).annotate(bad=RawSQL("lower(%s)", (1,)))  # type: ignore[arg-type]

    monkeypatch.setattr(ScheduleAdmin, "get_queryset", wrong)
    with pytest.raises(ProgrammingError, match=r"function lower\(integer\) does not exist"):
        admin_client.get("/admin/django_pgqueue/schedule/")


def test_another_apps_missing_table_is_not_taken_for_the_queues(
    transactional_db: None, admin_client: Client
) -> None:
    # The queue's migrations are applied; the admin's log table is not there: the
    # page must not say that the job table is missing.
    job = Job.objects.create(task="tests.testapp.tasks.add")
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE django_admin_log RENAME TO django_admin_log_away")
    try:
        with pytest.raises(ProgrammingError, match='relation "django_admin_log" does not exist'):
            admin_client.get(f"/admin/django_pgqueue/job/{job.pk}/history/")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE django_admin_log_away RENAME TO django_admin_log")
