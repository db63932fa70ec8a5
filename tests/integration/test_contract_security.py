"""Trust boundaries: what a job row (anyone who can write the table can write one)
can make the admin show, and who may change jobs through it."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.utils import timezone

from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job, Queue, RegisteredWorker, Schedule
from django_pgqueue.records import Failure
from django_pgqueue.worker.executor import execute
from tests.conftest import run_counts
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/admin/django_pgqueue/job/"
WORKERS = "/admin/django_pgqueue/registeredworker/"
SCHEDULES = "/admin/django_pgqueue/schedule/"

#: Markup that would run if a page wrote it unescaped, in a text and in an attribute.
SCRIPT = '<script>alert("pgq")</script>'
IMG = '"><img src=x onerror=alert(1)>'
HOSTILE = SCRIPT + IMG
#: What either leaves behind when written as markup.
RAW = ("<script>alert(", "<img src=x")


def assert_escaped(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    html = response.content.decode()
    for raw in RAW:
        assert raw not in html, f"{url} writes {raw!r} unescaped"
    return html


def plant(**hostile: object) -> Job:
    """A job row whose texts and JSON carry markup, written as a hand would."""
    job = add.enqueue(1, 2)
    pk = int(job.id)
    Job.objects.filter(pk=pk).update(**hostile)
    return Job.objects.get(pk=pk)


def staff(name: str, *codenames: str) -> Client:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        model = Schedule if codename.endswith("_schedule") else Job
        user.user_permissions.add(
            Permission.objects.get(
                codename=codename, content_type=ContentType.objects.get_for_model(model)
            )
        )
    client = Client()
    client.force_login(user)
    return client


# -- escaping ---------------------------------------------------------------------------


@pytest.fixture
def hostile_rows() -> tuple[Job, Job]:
    """A dead job and a running one whose every user-controlled value carries markup."""
    now = timezone.now()
    entry = {
        "attempt": HOSTILE,
        "time": HOSTILE,
        "exception": HOSTILE,
        "message": HOSTILE,
        "traceback": HOSTILE,
    }
    dead = plant(
        task=f"tests.testapp.tasks.{HOSTILE}",
        queue="default",
        status="dead",
        attempts=1,
        done_at=now,
        args=[HOSTILE, {HOSTILE: HOSTILE}],
        kwargs={HOSTILE: [HOSTILE]},
        result={HOSTILE: HOSTILE},
        last_error=HOSTILE,
        errors=[entry],
        error_count=1,
        worker_ids=[HOSTILE],
        locked_by=HOSTILE,
        unique_key=HOSTILE,
        concurrency_key=HOSTILE,
        schedule=HOSTILE,
        cancel_reason=HOSTILE,
        cancel_requested_at=now,
    )
    RegisteredWorker.objects.create(
        id=HOSTILE,
        hostname=HOSTILE,
        pid=1,
        queues=[HOSTILE],
        concurrency=1,
        version=HOSTILE[:64],
        last_seen=now,
        alive_until=now + dt.timedelta(seconds=30),
        schedule_names=[HOSTILE],
    )
    running = plant(
        task=HOSTILE,
        status="running",
        attempts=1,
        started_at=now,
        attempted_at=now,
        locked_by=HOSTILE,
        locked_until=now + dt.timedelta(seconds=60),
    )
    return dead, running


def test_the_job_list_and_pages_escape_every_value_a_row_carries(
    hostile_rows: tuple[Job, Job], admin_client: Client
) -> None:
    dead, running = hostile_rows
    html = assert_escaped(admin_client, JOBS)
    assert "&lt;script&gt;alert(&quot;pgq&quot;)&lt;/script&gt;" in html  # shown, as text
    assert_escaped(admin_client, f"{JOBS}?q=%3Cscript%3E&worker=%3Cscript%3E")
    assert_escaped(admin_client, f"{JOBS}?schedule=%3Cscript%3E")
    page = assert_escaped(admin_client, f"{JOBS}{dead.pk}/change/")
    # Every place of the page showed it: task, keys, args, kwargs, result, errors, ...
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 10
    assert_escaped(admin_client, f"{JOBS}{running.pk}/change/")


def test_the_worker_and_schedule_pages_escape_what_a_row_carries(
    hostile_rows: tuple[Job, Job], admin_client: Client
) -> None:
    Schedule.objects.create(name=HOSTILE[:64], task=HOSTILE, expression=HOSTILE, timezone="UTC")
    assert_escaped(admin_client, WORKERS)
    worker = RegisteredWorker.objects.get()
    assert_escaped(admin_client, f"{WORKERS}{quote(worker.pk)}/change/")
    assert_escaped(admin_client, SCHEDULES)
    assert_escaped(admin_client, f"{SCHEDULES}{quote(HOSTILE[:64])}/change/")


def test_a_hand_written_error_entry_that_is_not_an_object_hides_no_other_entry(
    admin_client: Client,
) -> None:
    # Django's read-only field shows "-" for a field that raises AttributeError: one
    # such entry hid the whole history, the well-formed entries with it.
    real = {"attempt": 1, "exception": "ValueError", "message": "the real one", "traceback": ""}
    odd_time = {"attempt": 2, "time": 5, "exception": "KeyError", "message": "odd time"}
    errors = [real, HOSTILE, 7, None, odd_time]
    job = plant(status="dead", errors=errors, error_count=5, last_error="x")
    html = assert_escaped(admin_client, f"{JOBS}{job.pk}/change/")
    assert "<code>ValueError: the real one</code>" in html
    assert "&lt;script&gt;alert(\\&quot;pgq\\&quot;)&lt;/script&gt;" in html  # as JSON
    assert html.count("not an error entry") == 3
    assert "<strong>Attempt 2</strong> at 5: <code>KeyError: odd time</code>" in html


# -- permissions and CSRF ---------------------------------------------------------------


def test_a_view_only_user_cannot_retry_cancel_delete_or_pause() -> None:
    dead = plant(status="dead", attempts=3, done_at=timezone.now())
    queued = add.enqueue(3, 4)
    viewer = staff("viewer", "view_job", "view_schedule")
    for url in (f"{JOBS}{dead.pk}/retry/", f"{JOBS}{queued.id}/cancel/"):
        assert viewer.post(url).status_code == 403, url
    for action in ("retry_jobs", "cancel_jobs", "delete_finished_jobs", "delete_selected"):
        response = viewer.post(
            JOBS,
            {"action": action, "_selected_action": [str(dead.pk), str(queued.id)], "index": "0"},
        )
        # The changelist refuses an action the user does not have as "no action".
        assert response.status_code in (200, 302), action
    assert viewer.post(f"{JOBS}{dead.pk}/delete/").status_code == 403
    Schedule.objects.create(name="nightly", task="tests.testapp.tasks.noop", expression="@daily")
    viewer.post(SCHEDULES, {"action": "disable_schedules", "_selected_action": ["nightly"]})
    assert Schedule.objects.get(pk="nightly").enabled
    toggler = staff("toggler", "view_schedule", "toggle_schedule")  # the same post, allowed
    toggler.post(SCHEDULES, {"action": "disable_schedules", "_selected_action": ["nightly"]})
    assert not Schedule.objects.get(pk="nightly").enabled
    assert viewer.post(f"{JOBS}queues/default/pause/").status_code == 403
    assert not Queue.objects.filter(paused_at__isnull=False).exists()
    assert Job.objects.get(pk=dead.pk).status == "dead"
    assert Job.objects.get(pk=int(queued.id)).status == "queued"


def test_state_changes_need_a_post_with_the_csrf_token() -> None:
    dead = plant(status="dead", attempts=3, done_at=timezone.now())
    User.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="root"))
    for url in (
        f"{JOBS}{dead.pk}/retry/",
        f"{JOBS}{dead.pk}/cancel/",
        f"{JOBS}queues/default/pause/",
    ):
        assert client.get(url).status_code == 405, url
        assert client.post(url).status_code == 403, url  # no token
    refused = client.post(
        JOBS, {"action": "retry_jobs", "_selected_action": [str(dead.pk)], "index": "0"}
    )
    assert refused.status_code == 403
    assert Job.objects.get(pk=dead.pk).status == "dead"
    assert not Queue.objects.filter(paused_at__isnull=False).exists()


def test_the_custom_urls_send_an_anonymous_user_to_the_login_page() -> None:
    dead = plant(status="dead", attempts=3, done_at=timezone.now())
    anonymous = Client()
    for url in (f"{JOBS}{dead.pk}/retry/", f"{JOBS}queues/default/pause/"):
        response = anonymous.post(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/"), url
    assert Job.objects.get(pk=dead.pk).status == "dead"


# -- the registry ------------------------------------------------------------------------

#: Paths a row could name to reach code no one declared a task: a plain function of an
#: installed app's tasks module (it records a run, so a call would show), the shell,
#: builtins, a module reached through another's attribute, and the decorator itself.
NOT_TASKS = (
    "tests.testapp.tasks.record",
    "os.system",
    "builtins.eval",
    "tests.testapp.tasks.os.system",
    "tests.testapp.tasks.record.__globals__",
    "tests.testapp.nothere.tasks.send",
    "django_pgqueue.task",
    "subprocess.run",
)


@pytest.mark.parametrize("path", NOT_TASKS)
def test_enqueue_refuses_a_path_that_names_no_task(path: str) -> None:
    # A module under one that is not a package, or under a package that does not
    # exist, was taken for a module failing to import here, and left to the workers.
    with pytest.raises(InvalidJob, match=r"is not a|there is no module|not in an installed"):
        Job.objects.enqueue(path, ["pgq-pwned"])
    assert not Job.objects.exists()


def test_a_planted_row_naming_no_task_is_buried_without_calling_anything() -> None:
    ids = [plant(task=path, args=["pgq-pwned"]).pk for path in NOT_TASKS]
    claimed = Job.objects.claim("w", limit=len(ids))
    assert sorted(job.id for job in claimed) == sorted(ids)
    outcomes = [execute(job) for job in claimed]
    failures = [outcome for outcome in outcomes if isinstance(outcome, Failure)]
    assert len(failures) == len(outcomes)
    Job.objects.fail("w", failures)
    assert run_counts("pgq-pwned") == Counter()
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == "dead", job.task
        assert job.last_error.startswith("django_pgqueue.exceptions.UnknownTask: "), job.last_error
