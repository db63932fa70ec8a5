"""What operators see and do: the start-up check that names a bad entry, the
``schedules`` command, and the admin's schedules (list, switch, jobs link)."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.utils import timezone

from django_pgqueue.models import Job, Schedule
from django_pgqueue.periodic.checks import check_periodic
from django_pgqueue.periodic.scheduler import Scheduler
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

SCHEDULES = "/admin/django_pgqueue/schedule/"
JOBS = "/admin/django_pgqueue/job/"
REPORT = {"task": "tests.testapp.tasks.mark", "cron": "0 3 * * *", "kwargs": {"label": "r"}}
MINUTELY_PING = {"task": "tests.testapp.tasks.mark", "every": 60, "kwargs": {"label": "p"}}


def errors(periodic: dict[str, object]) -> list[tuple[str, str]]:
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        return [(e.id or "", e.msg) for e in check_periodic()]


def test_the_check_names_an_entry_whose_job_would_be_refused() -> None:
    assert errors({"report": REPORT}) == []
    found = errors(
        {
            "missing": {"task": "tests.testapp.tasks.nope", "every": 60},
            "outside": {"task": "os.system", "every": 60},
            "arguments": {"task": "tests.testapp.tasks.add", "every": 60, "args": [1]},
            "json": {"task": "tests.testapp.tasks.noop", "every": 60, "args": [{1, 2}]},
            "framework": {
                "task": "tests.testapp.djtasks.echo",
                "every": 60,
                "queue": "not-in-tasks-queues",
            },
        }
    )
    assert [i for i, _ in found] == ["django_pgqueue.E010"] * 5
    messages = dict(
        zip(["missing", "outside", "arguments", "json", "framework"], found, strict=True)
    )
    assert messages["missing"][1].startswith(
        "PGQUEUE['PERIODIC']['missing']: 'tests.testapp.tasks.nope' is not a registered task"
    )
    assert "not in an installed app" in messages["outside"][1]
    assert "missing a required argument: 'b'" in messages["arguments"][1]
    assert "args" in messages["json"][1]
    assert "set" in messages["json"][1]
    assert "not-in-tasks-queues" in messages["framework"][1]


def test_the_check_suggests_the_task_a_typo_meant() -> None:
    """A typo in a schedule's task path, where such a path is most often written, got
    no "did you mean", though the same path given to enqueue() gets one."""
    found = errors(
        {
            "typo": {"task": "tests.testapp.djtasks.ecko", "every": 60},
            "module": {"task": "tests.testapp.djtask.echo", "every": 60},
            "direct": {"task": "tests.testapp.tasks.alwys_fails", "every": 60},
        }
    )
    assert [message for _, message in found] == [
        "PGQUEUE['PERIODIC']['typo']: 'tests.testapp.djtasks.ecko' is not a registered task"
        " (did you mean 'tests.testapp.djtasks.echo'?)",
        "PGQUEUE['PERIODIC']['module']: 'tests.testapp.djtask.echo': module "
        "'tests.testapp.djtask' cannot be imported (No module named 'tests.testapp.djtask')"
        " (did you mean 'tests.testapp.djtasks.echo'?)",
        "PGQUEUE['PERIODIC']['direct']: 'tests.testapp.tasks.alwys_fails' is not a registered"
        " task (did you mean 'tests.testapp.tasks.always_fails'?)",
    ]


def test_a_tasks_framework_task_is_scheduled_like_an_enqueue_of_it(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"echo": {"task": "tests.testapp.djtasks.echo", "every": 60, "args": [1]}})
    s.step()
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    (job,) = Job.objects.filter(schedule="echo")
    assert (job.task, job.args, job.queue, job.run_at) == (
        "tests.testapp.djtasks.echo",
        [1],
        "default",
        tick,
    )


def run(*args: str, periodic: dict[str, object] | None = None) -> str:
    out = io.StringIO()
    with override_settings(PGQUEUE={"PERIODIC": periodic or {}}):
        call_command("schedules", *args, stdout=out)
    return out.getvalue()


def test_the_command_lists_switches_and_says_what_it_cannot_find(
    scheduler: Callable[..., Scheduler],
) -> None:
    ping = {key: value for key, value in REPORT.items() if key != "cron"} | {"every": 30}
    periodic = {"report": REPORT, "ping": ping}
    assert run(periodic={}) == "no schedules: PGQUEUE['PERIODIC'] is empty\n"
    before = run(periodic=periodic)
    assert "active (no worker has started with it yet)" in before
    scheduler(periodic).step()
    listing = run(periodic=periodic).splitlines()
    assert listing[0].split() == [
        "schedule",
        "expression",
        "timezone",
        "state",
        "last",
        "tick",
        "last",
        "job",
        "next",
        "tick",
    ]
    report = next(line for line in listing if line.startswith("report"))
    assert "0 3 * * *" in report
    assert "UTC" in report
    assert "active" in report
    nxt = (timezone.now() + dt.timedelta(days=1)).replace(hour=3, minute=0, second=0)
    if timezone.now().hour < 3:
        nxt -= dt.timedelta(days=1)
    assert nxt.strftime("%Y-%m-%d 03:00:00") in report
    # A name given twice is reported once.
    assert (
        run("--disable", "report", "report", periodic=periodic)
        == "schedule 'report' was disabled\n"
    )
    assert (
        run("--disable", "report", periodic=periodic) == "schedule 'report' was already disabled\n"
    )
    assert not Schedule.objects.get(pk="report").enabled
    data = json.loads(run("--json", periodic=periodic))
    assert [(d["name"], d["state"], d["next_tick"]) for d in data] == [
        ("ping", "active", data[0]["next_tick"]),
        ("report", "disabled", None),
    ]
    assert run("--enable", "report", "ping", periodic=periodic).splitlines() == [
        "schedule 'report' was enabled",
        "schedule 'ping' was already enabled",
    ]
    # Enabled again, it goes on from now: a start point, kept apart from its ticks.
    row = Schedule.objects.get(pk="report")
    assert (row.last_tick, row.restarted_at is not None) == (None, True)
    report = next(line for line in run(periodic=periodic).splitlines() if line.startswith("report"))
    assert report.split()[8:10] == ["-", "-"], report  # no last tick, no last job
    data = json.loads(run("--json", periodic=periodic))
    assert [(d["name"], d["last_tick"], d["ticks"]) for d in data] == [
        ("ping", None, 0),
        ("report", None, 0),
    ]
    with pytest.raises(CommandError, match="no schedule named 'nope'"):
        run("--enable", "nope", periodic=periodic)
    # Both switches at once: refused through call_command() too, which used to drop
    # --enable without a word and disable the schedule.
    with (
        override_settings(PGQUEUE={"PERIODIC": periodic}),
        pytest.raises(CommandError, match="argument --enable: not allowed with argument --disable"),
    ):
        call_command("schedules", disable=["report"], enable=["report"], stdout=io.StringIO())
    assert Schedule.objects.get(pk="report").enabled
    # One name as a string is that name, not its letters.
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        out = io.StringIO()
        call_command("schedules", disable="report", stdout=out)
    assert out.getvalue() == "schedule 'report' was disabled\n"


def test_switching_a_schedule_off_in_the_settings_says_the_settings_win() -> None:
    periodic = {"report": {**REPORT, "enabled": False}}
    out, err = io.StringIO(), io.StringIO()
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        call_command("schedules", "--enable", "report", stdout=out, stderr=err)
    assert out.getvalue() == "schedule 'report' was already enabled\n"
    assert err.getvalue() == (
        "warning: schedule 'report' is off in PGQUEUE['PERIODIC'] (\"enabled\": False): no "
        "worker enqueues it, whatever this switch says, until the settings turn it on\n"
    )


def test_the_listing_shows_each_schedules_ticks_in_its_own_time_zone(
    scheduler: Callable[..., Scheduler],
) -> None:
    """A cron expression reads in its schedule's zone, and so do its ticks in the
    listing, whatever TIME_ZONE says."""
    paris = {**REPORT, "timezone": "Europe/Paris"}
    scheduler({"paris": paris}).step()
    with override_settings(TIME_ZONE="UTC"):
        listing = run(periodic={"paris": paris})
    (line,) = [row for row in listing.splitlines() if row.startswith("paris")]
    assert "03:00:00 CET" in line or "03:00:00 CEST" in line, line


def test_a_removed_schedule_is_listed_as_removed_with_its_last_job(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"report": REPORT})
    s.step()
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    scheduler({}).step()  # a worker started without it
    job = Job.objects.get(schedule="report")
    (line,) = [line for line in run().splitlines() if line.startswith("report")]
    assert "removed" in line
    assert f"#{job.id} queued" in line
    assert line.rstrip().endswith("-")


def test_the_admin_lists_schedules_and_links_to_their_jobs(
    admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    s = scheduler({"report": REPORT})
    s.step()
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    job = Job.objects.get(schedule="report")
    other = add.enqueue(1, 2)
    html = admin_client.get(SCHEDULES).content.decode()
    assert "0 3 * * *" in html
    assert "active" in html
    assert f'href="{JOBS}{job.id}/change/">#{job.id}</a> queued' in html
    assert f'href="{JOBS}?schedule=report">1 tick</a>' in html
    assert "Add schedule" not in html
    jobs = admin_client.get(f"{JOBS}?schedule=report").content.decode()
    assert f'href="{JOBS}{job.id}/change/' in jobs
    assert f'href="{JOBS}{other.pk}/change/' not in jobs
    page = admin_client.get(f"{JOBS}{job.id}/change/").content.decode()
    assert "report" in page
    # Ticks in the schedule's own time zone with its name, as the command shows them.
    scheduler({"report": {**REPORT, "timezone": "Asia/Tokyo"}}).step()
    with override_settings(TIME_ZONE="UTC"):
        tokyo = admin_client.get(SCHEDULES).content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00 JST", tokyo), tokyo
    # A project's own admin site (tests/urls.py mounts "ops") links to its own pages.
    html = admin_client.get("/ops/django_pgqueue/schedule/").content.decode()
    assert f'href="/ops/django_pgqueue/job/{job.id}/change/">#{job.id}</a>' in html
    assert 'href="/ops/django_pgqueue/job/?schedule=report">1 tick</a>' in html


def test_the_admin_names_the_settings_schedules_no_worker_has_written_yet(
    admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    scheduler({"report": REPORT}).step()
    with override_settings(PGQUEUE={"PERIODIC": {"report": REPORT, "fresh": REPORT}}):
        html = admin_client.get(SCHEDULES).content.decode()
    assert (
        "In PGQUEUE[&#x27;PERIODIC&#x27;] but not listed yet, as no worker has started with "
        "it: fresh." in html
    )
    assert "manage.py schedules --disable NAME" in html
    assert "not listed yet" not in admin_client.get(SCHEDULES).content.decode()


def test_switching_schedules_in_the_admin_needs_its_permission(
    client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    scheduler({"report": REPORT}).step()
    staff = User.objects.create_user("op", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_schedule"))
    client.force_login(staff)
    post = {"action": "disable_schedules", "_selected_action": ["report"]}
    client.post(SCHEDULES, post)
    assert Schedule.objects.get(pk="report").enabled  # no action without the permission
    assert "disable_schedules" not in client.get(SCHEDULES).content.decode()
    staff.user_permissions.add(Permission.objects.get(codename="toggle_schedule"))
    staff = User.objects.get(pk=staff.pk)  # permissions are cached per user object
    client.force_login(staff)
    response = client.post(SCHEDULES, post, follow=True)
    assert "Disabled 1 schedule." in response.content.decode()
    assert not Schedule.objects.get(pk="report").enabled
    response = client.post(SCHEDULES, {**post, "action": "enable_schedules"}, follow=True)
    assert "Enabled 1 schedule." in response.content.decode()
    assert Schedule.objects.get(pk="report").enabled


def test_a_schedule_can_be_disabled_before_any_worker_started(
    scheduler: Callable[..., Scheduler],
) -> None:
    periodic: dict[str, object] = {"report": REPORT}
    # A name given twice is reported once.
    assert (
        run("--disable", "report", "report", periodic=periodic)
        == "schedule 'report' was disabled\n"
    )
    row = Schedule.objects.get(pk="report")
    assert (row.enabled, row.expression, row.last_tick) == (False, "0 3 * * *", None)
    s = scheduler(periodic)
    s.step()  # the worker's sync keeps the operators' switch
    plan = s.planned[0]
    s._enqueue_due(plan, plan.spec.next_after(plan.cursor))
    assert not Schedule.objects.get(pk="report").enabled
    assert Job.objects.count() == 0


def test_the_admins_schedule_page_shows_the_last_tick_in_the_schedules_zone(
    admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    paris = {**REPORT, "timezone": "Europe/Paris"}
    s = scheduler({"paris": paris})
    s.step()
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    with override_settings(TIME_ZONE="UTC"):
        page = admin_client.get(f"{SCHEDULES}paris/change/").content.decode()
    # The page showed the row's raw field, in Django's format and TIME_ZONE.
    shown = re.findall(r'<div class="readonly">(\d{4}-\d\d-\d\d [^<]*)</div>', page)
    assert shown
    assert all(re.fullmatch(r"\S+ 03:00:00 CES?T", moment) for moment in shown), shown
    # (Not the row's own updated_at, "12:02 a.m." at two minutes past midnight.)
    assert not re.search(r"[^\d:]2 a\.m\.", page)
    # A row of other settings whose zone this machine does not know (a directory of the
    # zone database, say) is shown in TIME_ZONE, not a server error.
    Schedule.objects.filter(name="paris").update(timezone="America")
    scheduler({}).step()  # the settings no longer name it: the row's zone is shown
    with override_settings(TIME_ZONE="UTC"):
        response = admin_client.get(SCHEDULES)
    assert response.status_code == 200
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:00:00 UTC", response.content.decode())


@pytest.mark.parametrize("tz", ["UTC", "off"])
def test_the_listing_and_the_admin_read_a_row_with_a_time_python_cannot_hold(
    request: pytest.FixtureRequest, tz: str
) -> None:
    """A row written by hand with ``infinity`` (or a year BC) made ``schedules`` fail
    with a DataError and the admin's list a server error: it reads as out of range,
    which the workers ignore, and a last tick ahead of the clock is said to hold."""
    if tz == "off":  # first: around the later fixtures (see use_tz_off)
        request.getfixturevalue("use_tz_off")
    admin_client: Client = request.getfixturevalue("admin_client")
    scheduler: Callable[..., Scheduler] = request.getfixturevalue("scheduler")
    periodic = {"report": REPORT, "ping": {**MINUTELY_PING}}
    scheduler(periodic).step()
    Schedule.objects.filter(pk="report").update(
        last_tick=timezone.now() + dt.timedelta(days=2), restarted_at=timezone.now()
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_schedule SET last_tick = 'infinity', restarted_at = '-infinity', "
            "created_at = '3000-01-01 00:00+00 BC', updated_at = 'infinity' WHERE name = 'ping'"
        )
    lines = {line.split()[0]: line for line in run(periodic=periodic).splitlines()}
    assert "active  " in lines["ping"]
    assert "out of range (ignored)" in lines["ping"]
    assert "active (held: its last tick is ahead of the clock)" in lines["report"]
    (ping, report) = json.loads(run("--json", periodic=periodic))
    assert (ping["last_tick"], ping["last_tick_out_of_range"], ping["held_until"]) == (
        None,
        True,
        None,
    )
    assert report["held_until"] is not None
    assert report["next_tick"] > report["held_until"]  # the tick after the held one
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        listing = admin_client.get(SCHEDULES)
        page = admin_client.get(f"{SCHEDULES}ping/change/")
        history = admin_client.get(f"{SCHEDULES}ping/history/")
    assert (listing.status_code, page.status_code, history.status_code) == (200, 200, 200)
    assert "out of range (ignored)" in listing.content.decode()
    assert "held: its last tick is ahead of the clock" in listing.content.decode()
    assert page.content.decode().count("out of range (ignored)") == 2  # last tick, restart


@pytest.fixture
def use_tz_off() -> Iterator[None]:
    """USE_TZ = False around everything the test's later fixtures set up and tear
    down (an override they enable inside it must be disabled inside it too)."""
    from django.db import connections

    connections["default"].close()  # reconnect with USE_TZ off's loaders
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        yield
        connections["default"].close()


def test_schedules_tick_and_list_with_use_tz_off(
    use_tz_off: None, admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    """With ``USE_TZ = False`` Django reads naive datetimes (in ``TIME_ZONE``): the
    scheduler still enqueues each tick once at its instant, and the command and the
    admin list it. Each used to fail comparing naive and aware datetimes."""
    minutely = {"task": "tests.testapp.tasks.mark", "every": 60, "kwargs": {"label": "t"}}
    s = scheduler({"minutely": minutely})
    s.step()
    (plan,) = s.planned
    tick = plan.spec.next_after(plan.cursor)
    s._enqueue_due(plan, tick + dt.timedelta(seconds=0.2))
    s._enqueue_due(plan, tick + dt.timedelta(seconds=0.5))  # the same tick: no more
    (job,) = Job.objects.filter(schedule="minutely")
    # Naive, in TIME_ZONE, as Django reads every datetime with USE_TZ off.
    assert job.run_at == timezone.make_naive(tick, timezone.get_default_timezone())
    listing = run(periodic={"minutely": minutely})
    shown = timezone.localtime(tick, timezone.get_default_timezone())
    assert shown.strftime("%Y-%m-%d %H:%M:%S E") in listing  # EST or EDT
    assert f"#{job.id} queued" in listing
    html = admin_client.get(SCHEDULES).content.decode()
    assert f'href="{JOBS}{job.id}/change/">#{job.id}</a> queued' in html
    page = admin_client.get(f"{JOBS}{job.id}/change/").content.decode()
    assert shown.strftime("%H:%M:%S") in page  # run_at in TIME_ZONE, not read as UTC


def test_the_listing_of_a_schedule_held_until_year_9999_shows_no_next_tick() -> None:
    """A last tick written by hand in year 9999 is a real tick to the workers (it
    holds the schedule); the tick after it is past what Python's dates hold, and
    computing it failed the listing and the admin's schedule pages."""
    from django_pgqueue.periodic.overview import describe
    from django_pgqueue.periodic.spec import parse_all

    (spec,) = parse_all({"yearly": {"task": "tests.testapp.tasks.noop", "cron": "@yearly"}})
    row = Schedule(name="yearly", task=spec.task, expression=spec.expression, timezone="UTC")
    row.last_tick = dt.datetime(9999, 6, 1, tzinfo=dt.UTC)
    view = describe("yearly", spec, row, None, dt.datetime(2026, 12, 6, tzinfo=dt.UTC))
    assert (view.state, view.next_tick, view.held_until) == (
        "active",
        None,
        dt.datetime(9999, 6, 1, tzinfo=dt.UTC),
    )


def test_the_notice_of_unwritten_schedules_is_only_for_users_who_may_see_them(
    db: None,
) -> None:
    # A staff user without view_schedule is refused the list: the notice (naming the
    # settings' schedules) must not be queued for the next page they open either.
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    with override_settings(PGQUEUE={"PERIODIC": {"fresh": REPORT}}):
        assert client.get(SCHEDULES).status_code == 403
        assert "not listed yet" not in client.get("/admin/").content.decode()
