"""The job admin through Django's test client: list, summary, page, actions, permissions."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgqueue.admin.changelist import COUNT_CAP
from django_pgqueue.admin.display import duration, excerpt, run_at_note
from django_pgqueue.models import Job
from django_pgqueue.records import Success
from django_pgqueue.worker.executor import execute
from tests.conftest import status_counts
from tests.testapp.tasks import add, always_fails, noop

URL = "/admin/django_pgqueue/job/"

# -- helpers ---------------------------------------------------------------------------


def run_next(worker: str = "w") -> Job:
    """Claim one ready job, run it for real and record the outcome."""
    (claimed,) = Job.objects.claim(worker)
    outcome = execute(claimed)
    if isinstance(outcome, Success):
        Job.objects.complete(worker, [outcome])
    else:
        Job.objects.fail(worker, [outcome])
    return Job.objects.get(pk=claimed.id)


def grant(user: User, *codenames: str) -> None:
    """Give ``user`` job permissions, creating retry/cancel until the model declares them."""
    content_type = ContentType.objects.get_for_model(Job)
    for codename in codenames:
        permission, _ = Permission.objects.get_or_create(
            codename=codename, content_type=content_type, defaults={"name": codename}
        )
        user.user_permissions.add(permission)


def staff_client(name: str, *codenames: str) -> Client:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    grant(user, *codenames)
    client = Client()
    client.force_login(user)
    return client


def post_action(client: Client, action: str, ids: list[int], **extra: str) -> list[str]:
    """Run an admin action on ``ids``; returns the messages shown after the redirect."""
    response = client.post(
        URL,
        {
            "action": action,
            "_selected_action": [str(i) for i in ids],
            "index": "0",
            "select_across": "0",
            **extra,
        },
        follow=True,
    )
    assert response.status_code == 200
    return [str(message) for message in response.context["messages"]]


@pytest.fixture
def jobs() -> dict[str, Job]:
    """One job in each interesting state, the dead one with a real traceback."""
    dead = always_fails.using(max_attempts=1, queue="emails").enqueue("boom")
    assert run_next().status == "dead"
    done = add.enqueue(2, 3)
    assert run_next().status == "done"
    running = noop.enqueue()
    Job.objects.claim("worker-7")
    waiting = noop.using(delay=3600, unique_key="later").enqueue()
    ready = noop.using(priority=-5).enqueue("x", n=1)
    return {
        "dead": Job.objects.get(pk=dead.pk),
        "done": Job.objects.get(pk=done.pk),
        "running": Job.objects.get(pk=running.pk),
        "waiting": waiting,
        "ready": ready,
    }


def row_ids(content: bytes) -> list[int]:
    """The job ids of the changelist's rows, in order."""
    return [int(i) for i in re.findall(rb'name="_selected_action" value="(\d+)"', content)]


# -- display helpers (no database) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (45.9, "45 s"),
        (60, "1 min"),
        (200, "3 min 20 s"),
        (3600, "1 h"),
        (7205, "2 h"),
        (7260, "2 h 1 min"),
        (90000, "1 d 1 h"),
        (-5, "0 s"),
    ],
)
def test_duration_reads_in_at_most_two_units(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_run_at_note_only_for_queued_jobs() -> None:
    now = timezone.now()
    assert run_at_note("queued", now + dt.timedelta(minutes=5), now) == "in 5 min"
    assert run_at_note("queued", now - dt.timedelta(seconds=90), now) == "overdue 1 min 30 s"
    assert run_at_note("done", now - dt.timedelta(days=3), now) == ""


def test_excerpt_keeps_the_first_line_within_the_limit() -> None:
    assert excerpt("ValueError: bad\nmore") == "ValueError: bad"
    assert excerpt("x" * 100, limit=10) == "x" * 9 + "\u2026"
    assert excerpt("") == ""


# -- the changelist ------------------------------------------------------------------------

#: Actions and the stats run their own statements, so data must be committed.
committed = pytest.mark.django_db(transaction=True)


@committed
def test_changelist_lists_newest_first_with_every_column(
    admin_client: Client, jobs: dict[str, Job]
) -> None:
    response = admin_client.get(URL)
    assert response.status_code == 200
    assert row_ids(response.content) == sorted((j.pk for j in jobs.values()), reverse=True)
    html = response.content.decode()
    assert "tests.testapp.tasks.always_fails" in html
    assert "1 of 1" in html  # attempts of max
    assert "0 of 3" in html
    assert "(in 59 min" in html  # the waiting job's run_at, an hour away
    assert "(overdue " in html  # the ready job has waited past its run_at
    assert "ValueError: boom: this task always fails" in html  # last_error excerpt
    assert "5 jobs" in html
    assert "+ jobs" not in html


@committed
def test_summary_counts_each_queue_by_status(admin_client: Client, jobs: dict[str, Job]) -> None:
    Job.objects.filter(pk=jobs["running"].pk).update(
        locked_until=timezone.now() - dt.timedelta(seconds=5)
    )
    Job.objects.filter(pk=jobs["ready"].pk).update(run_at=timezone.now() - dt.timedelta(minutes=10))
    summary = admin_client.get(URL).context["queue_summary"]
    assert [
        (line.queue, line.counts, line.dead_last_24h, line.lease_expired) for line in summary
    ] == [
        ("default", {"queued": 2, "running": 1, "done": 1, "dead": 0, "cancelled": 0}, 0, 1),
        ("emails", {"queued": 0, "running": 0, "done": 0, "dead": 1, "cancelled": 0}, 1, 0),
        ("all queues", {"queued": 2, "running": 1, "done": 1, "dead": 1, "cancelled": 0}, 1, 1),
    ]
    assert summary[0].oldest_ready.startswith("10 min")
    assert summary[1].oldest_ready == ""


@committed
def test_filters_by_status_queue_and_task_and_search(
    admin_client: Client, jobs: dict[str, Job]
) -> None:
    def ids(query: str) -> list[int]:
        response = admin_client.get(URL + query)
        assert response.status_code == 200
        return row_ids(response.content)

    assert ids("?status__exact=dead") == [jobs["dead"].pk]
    assert ids("?queue=emails") == [jobs["dead"].pk]
    assert ids("?task=tests.testapp.tasks.add") == [jobs["done"].pk]
    assert ids(f"?q={jobs['running'].pk}") == [jobs["running"].pk]
    assert ids(f"?q=%23{jobs['done'].pk}") == [jobs["done"].pk]
    assert ids("?q=always_fails") == [jobs["dead"].pk]
    assert ids("?q=later") == [jobs["waiting"].pk]
    # A key with spaces: Django looked for each word, so it was never found.
    spaced = Job.objects.enqueue("tests.testapp.tasks.noop", unique_key="order 42 a")
    assert ids("?q=order+42+a") == [spaced.pk]
    assert ids("?q=+order+42+a+") == [spaced.pk]
    Job.objects.filter(pk=spaced.pk).delete()
    # A NUL in a filter's value or the search: PostgreSQL refuses it in text (a 500).
    # The status filter is Django's own (status__exact), and "status" a lookup it allows.
    for query in ("?queue=%00", "?task=a%00b", "?worker=%00", "?status__exact=%00", "?status=%00"):
        assert ids(query) == [], query
    ids("?q=a%00+b")  # a 200 (Django may drop the NUL itself)
    filters = admin_client.get(URL).context["cl"].filter_specs
    assert [c for c, _ in filters[1].lookup_choices] == ["default", "emails"]
    assert [c for c, _ in filters[2].lookup_choices] == [
        "tests.testapp.tasks.add",
        "tests.testapp.tasks.always_fails",
        "tests.testapp.tasks.noop",
    ]


def insert_finished(count: int) -> None:
    """``count`` done jobs in one statement: test data, not a queue operation."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids, queue, status, "
            "attempts, done_at) SELECT 'tests.testapp.tasks.noop', '[]', '{}', '[]', '[]', "
            "'q' || (n %% 3), 'done', 1, now() "
            "FROM generate_series(1, %s) AS n",
            [count],
        )
        cursor.execute("ANALYZE pgqueue_job")


def changelist_queries(client: Client, query: str = "") -> tuple[list[str], str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(URL + query)
    assert response.status_code == 200
    return [q["sql"] for q in captured.captured_queries], response.content.decode()


def rows_read(sql: str) -> int:
    """The most rows any scan of pgqueue_job in ``sql``'s executed plan looked at."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql.replace("%", "%%"))
        (document,) = cursor.fetchone()
    found, nodes = 0, [(document[0] if isinstance(document, list) else document)["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") == "pgqueue_job":
            looked_at = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            found = max(found, int(looked_at * node["Actual Loops"]))
    return found


@committed
def test_changelist_on_100k_rows_never_counts_or_scans_the_whole_table(
    admin_client: Client,
) -> None:
    insert_finished(20)
    small, _ = changelist_queries(admin_client)
    insert_finished(100_000 - 20)
    # An id in the middle (ids depend on the tests that ran before: sequences are not reset).
    target = Job.objects.order_by("id").values_list("id", flat=True)[54_320]
    search = f"?q=%23{target}"
    for query in (
        "",
        "?status__exact=done",
        "?queue=q1&task=tests.testapp.tasks.noop",
        "?_facets=1",
        search,
    ):
        sql, html = changelist_queries(admin_client, query)
        # Same number of queries on 20 rows as on 100k: nothing grows with the table.
        assert len(sql) == len(small) <= 8, sql
        stats = [q for q in sql if "GROUP BY queue, status" in q]
        assert len(stats) == 1, sql  # the summary's stats(), shared with the queue filter
        for q in sql:
            if q in stats:
                continue
            if "COUNT(" in q.upper():
                assert f"LIMIT {COUNT_CAP + 1}" in q, q  # the capped count, never a full one
            if "DISTINCT" in q.upper():
                assert "LIMIT 1 OFFSET 9999" in q, q  # the task filter's window of newest jobs
            if "pgqueue_job" in q and query in ("", "?_facets=1", search):
                assert rows_read(q) <= COUNT_CAP + 1, q  # no scan of the whole table
        assert ("1 job" if "q=" in query else f"{COUNT_CAP}+ jobs") in html
    assert row_ids(changelist_queries(admin_client, search)[1].encode()) == [target]


@committed
def test_job_page_is_read_only_with_json_traceback_and_lease(
    admin_client: Client, jobs: dict[str, Job]
) -> None:
    dead = admin_client.get(f"{URL}{jobs['dead'].pk}/change/")
    assert dead.status_code == 200
    html = dead.content.decode()
    assert 'name="_save"' not in html
    assert '<input type="text"' not in html
    assert "Traceback (most recent call last)" in html
    assert "raise ValueError(f&quot;{label}: this task always fails&quot;)" in html
    assert "<strong>Attempt 1</strong>" in html
    assert '<pre class="pgqueue-pre">[\n  &quot;boom&quot;\n]</pre>' in html  # args
    assert "none (last held by w)" in html
    running = admin_client.get(f"{URL}{jobs['running'].pk}/change/").content.decode()
    assert re.search(r"held by worker-7 for (2[0-9]|30) s more", running)
    ready = admin_client.get(f"{URL}{jobs['ready'].pk}/change/").content.decode()
    assert "{\n  &quot;n&quot;: 1\n}" in ready  # kwargs
    assert (
        admin_client.post(f"{URL}{jobs['dead'].pk}/change/", {"status": "done"}).status_code == 403
    )
    assert Job.objects.get(pk=jobs["dead"].pk).status == "dead"
    assert admin_client.get(f"{URL}add/").status_code == 403


# -- actions -------------------------------------------------------------------------------


@committed
def test_retry_requeues_dead_and_waiting_jobs_and_skips_the_rest(
    admin_client: Client, admin_user: User, jobs: dict[str, Job]
) -> None:
    dead, waiting, running, done = (jobs[k].pk for k in ("dead", "waiting", "running", "done"))
    shown = post_action(admin_client, "retry_jobs", [dead, waiting, running, done])
    assert shown == [
        "Retried 2 jobs: queued now, attempts reset.",
        "Skipped 2 jobs that cannot be retried (only dead and cancelled jobs, and queued jobs "
        "waiting for a later run_at, can be; one whose unique_key is live again cannot): "
        f"#{done} done, #{running} running.",
    ]
    row = Job.objects.get(pk=dead)
    assert (row.status, row.attempts, len(row.errors)) == ("queued", 0, 1)  # history kept
    assert Job.objects.get(pk=waiting).run_at <= timezone.now()
    assert list(
        LogEntry.objects.order_by("object_id").values_list(
            "user_id", "object_id", "action_flag", "change_message"
        )
    ) == sorted(
        [
            (admin_user.pk, str(dead), CHANGE, "Retried: queued now, attempts reset."),
            (admin_user.pk, str(waiting), CHANGE, "Retried: queued now, attempts reset."),
        ]
    )


@committed
def test_cancel_records_the_reason_and_who(admin_client: Client, jobs: dict[str, Job]) -> None:
    ready, running = jobs["ready"].pk, jobs["running"].pk
    reason = "customer refunded (by admin in the admin)"
    done = jobs["done"].pk
    shown = post_action(
        admin_client, "cancel_jobs", [ready, running, done], reason="customer refunded"
    )
    assert shown == [
        f"Cancelled 1 job: {reason}.",
        f"Skipped 1 job that was not queued or running: #{done} done.",
        f"Asked 1 running job to stop: {reason}. Each ends cancelled once its task stops; "
        "one that finishes first ends as it finished.",
    ]
    row = Job.objects.get(pk=ready)
    assert (row.status, row.last_error) == ("cancelled", f"Cancelled: {reason}")
    held = Job.objects.get(pk=running)
    assert (held.status, held.cancel_reason) == ("running", reason)
    assert sorted(
        LogEntry.objects.values_list("object_id", "action_flag", "change_message")
    ) == sorted(
        [
            (str(ready), CHANGE, f"Cancelled: {reason}"),
            (str(running), CHANGE, f"Asked to stop: {reason}"),
        ]
    )


@committed
def test_cancelling_a_job_already_asked_to_stop_says_it_keeps_the_first_request(
    admin_client: Client, jobs: dict[str, Job]
) -> None:
    """The second ask said "Asked 1 running job to stop: second ..." and logged the
    second reason, which cancel() never stored: the job keeps the first request."""
    ready, running = jobs["ready"].pk, jobs["running"].pk
    first = "customer refunded (by admin in the admin)"
    post_action(admin_client, "cancel_jobs", [running], reason="customer refunded")
    shown = post_action(admin_client, "cancel_jobs", [running, ready], reason="second thoughts")
    assert shown == [
        "Cancelled 1 job: second thoughts (by admin in the admin).",
        f"1 job had already been asked to stop, and keeps its first request: #{running}: {first}.",
    ]
    assert Job.objects.get(pk=running).cancel_reason == first
    assert sorted(
        LogEntry.objects.values_list("object_id", "action_flag", "change_message")
    ) == sorted(
        [
            (str(running), CHANGE, f"Asked to stop: {first}"),  # once, with the reason kept
            (str(ready), CHANGE, "Cancelled: second thoughts (by admin in the admin)"),
        ]
    )


@committed
def test_delete_removes_finished_jobs_only(admin_client: Client, jobs: dict[str, Job]) -> None:
    dead, done, ready = jobs["dead"].pk, jobs["done"].pk, jobs["ready"].pk
    shown = post_action(admin_client, "delete_finished_jobs", [dead, done, ready])
    assert shown == [
        "Deleted 2 jobs.",
        "Skipped 1 job that was not finished (only done, dead and cancelled jobs can be): "
        f"#{ready} queued.",
    ]
    assert status_counts() == {"queued": 2, "running": 1}
    assert sorted(LogEntry.objects.values_list("object_id", "action_flag")) == sorted(
        [(str(dead), DELETION), (str(done), DELETION)]
    )
    assert "delete_selected" not in admin_client.get(URL).context["cl"].model_admin.get_actions(
        admin_client.get(URL).wsgi_request
    )


# -- permissions -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_migrations_create_the_retry_and_cancel_permissions() -> None:
    # Not transactional: the database as migrate left it, before any flush.
    assert sorted(
        Permission.objects.filter(
            content_type__app_label="django_pgqueue", content_type__model="job"
        ).values_list("codename", "name")
    ) == [
        ("add_job", "Can add job"),
        ("cancel_job", "Can cancel jobs"),
        ("change_job", "Can change job"),
        ("delete_job", "Can delete job"),
        ("retry_job", "Can retry jobs"),
        ("view_job", "Can view job"),
    ]
    assert list(
        Permission.objects.filter(
            content_type__app_label="django_pgqueue", content_type__model="queue"
        ).values_list("codename", "name")
    ) == [("pause_queue", "Can pause and resume queues")]


def action_names(client: Client) -> list[str]:
    response = client.get(URL)
    assert response.status_code == 200
    form = response.context["action_form"]
    return [] if form is None else [name for name, _ in form.fields["action"].choices if name]


@committed
def test_view_only_staff_sees_everything_and_runs_nothing(jobs: dict[str, Job]) -> None:
    viewer = staff_client("viewer", "view_job")
    response = viewer.get(URL)
    assert row_ids(response.content) == []  # no checkboxes: no actions
    assert action_names(viewer) == []
    assert len(response.context["cl"].result_list) == 5
    assert response.context["queue_summary"][-1].counts["dead"] == 1
    page = viewer.get(f"{URL}{jobs['dead'].pk}/change/")
    assert page.status_code == 200
    assert "Traceback (most recent call last)" in page.content.decode()
    assert "deletelink" not in page.content.decode()
    # A forged POST finds no action to run: the list is shown again, nothing changes.
    assert post_action(viewer, "retry_jobs", [jobs["dead"].pk]) == []
    assert Job.objects.get(pk=jobs["dead"].pk).status == "dead"
    assert not LogEntry.objects.exists()


@committed
def test_each_action_needs_its_own_permission(jobs: dict[str, Job]) -> None:
    assert action_names(staff_client("retrier", "view_job", "retry_job")) == ["retry_jobs"]
    assert action_names(staff_client("canceller", "view_job", "cancel_job")) == ["cancel_jobs"]
    deleter = staff_client("deleter", "view_job", "delete_job")
    assert action_names(deleter) == ["delete_finished_jobs"]
    # Delete on the job page only for finished jobs.
    assert "deletelink" in deleter.get(f"{URL}{jobs['dead'].pk}/change/").content.decode()
    assert "deletelink" not in deleter.get(f"{URL}{jobs['ready'].pk}/change/").content.decode()
    assert deleter.get(f"{URL}{jobs['ready'].pk}/delete/").status_code == 403
    # The change permission alone gives no action and no form.
    changer = staff_client("changer", "view_job", "change_job")
    assert action_names(changer) == []
    assert 'name="_save"' not in changer.get(f"{URL}{jobs['dead'].pk}/change/").content.decode()


@committed
def test_cancel_action_cleans_a_reason_the_database_cannot_store(
    admin_client: Client, jobs: dict[str, Job]
) -> None:
    # A refused reason refused the whole action bar: Django said "No action selected."
    ready, waiting = jobs["ready"].pk, jobs["waiting"].pk
    assert post_action(admin_client, "cancel_jobs", [ready], reason="a\x00b") == [
        "Cancelled 1 job: ab (by admin in the admin)."
    ]
    post_action(admin_client, "cancel_jobs", [waiting], reason="y" * 300)
    row = Job.objects.get(pk=waiting)
    assert (row.status, row.last_error) == (
        "cancelled",
        f"Cancelled: {'y' * 200} (by admin in the admin)",
    )
