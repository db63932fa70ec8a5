"""Issue 15's interfaces driven as a user would: the entry's optional keys on the
jobs a real worker enqueues, ``every`` as a timedelta, the ``scheduled`` event,
the default time zone, the start-up check through ``manage.py check`` and
``runworker``, the listing following its last job's status, the admin's history
of its switches and its read-only pages, every state a listing names, and the
cost of a look (test_contract_periodic_workers: running workers)."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from django_pgqueue.models import Job, Schedule
from django_pgqueue.periodic.scheduler import Scheduler
from tests.periodic.conftest import clear_of_a_minute_boundary
from tests.periodic.test_operators import JOBS, REPORT, SCHEDULES
from tests.testapp import djtasks
from tests.worker.conftest import django_command
from tests.worker.conftest import start_worker as start_worker  # the fixture
from tests.worker.inprocess import worker_thread
from tests.worker.test_periodic import periodic_env

pytestmark = pytest.mark.django_db(transaction=True)

#: A queue no schedule below enqueues on: a worker serving only it leaves their jobs.
ELSEWHERE = "queue_1"


def tick_of(name: str) -> Callable[[dict[str, Any]], bool]:
    """A ``scheduled`` event's filter: a tick of schedule ``name`` that enqueued a job."""
    return lambda d: d["schedule"] == name and d["job_id"] is not None


def listing(*args: str) -> str:
    out = io.StringIO()
    call_command("schedules", *args, stdout=out)
    return out.getvalue()


def test_an_entrys_options_are_the_jobs_of_each_tick_a_worker_enqueues() -> None:
    """queue, priority, max_attempts, args and kwargs, for a ``@task`` function and a
    ``django.tasks`` Task; ``every`` as a timedelta; the ``scheduled`` event says the
    tick and the job, whose run_at is that tick."""
    periodic = {
        "fn": {
            "task": "tests.testapp.tasks.mark",
            "every": dt.timedelta(seconds=1),
            "kwargs": {"label": "fn"},
            "queue": "reports",
            "priority": 7,
            "max_attempts": 9,
        },
        "fw": {
            "task": "tests.testapp.djtasks.echo",
            "every": 1,
            "args": [1, "two"],
            "kwargs": {"k": [3]},
            "queue": "emails",
            "priority": 5,
            "max_attempts": 4,
        },
    }
    with (
        override_settings(PGQUEUE={"PERIODIC": periodic}),
        worker_thread(queues=[ELSEWHERE]) as worker,
    ):
        for name in periodic:
            worker.wait("scheduled", 2, timeout=15, where=tick_of(name))
        assert worker.stop() == 0
    events = [d for seen, d in worker.recorder.seen if seen == "scheduled"]
    for name in periodic:
        jobs = {job.id: job for job in Job.objects.filter(schedule=name)}
        mine = [d for d in events if d["schedule"] == name]
        # One event per job, each with its job's tick: whole seconds, one apart.
        assert sorted(d["job_id"] for d in mine) == sorted(jobs)
        assert all(jobs[d["job_id"]].run_at == d["tick"] for d in mine)
        ticks = sorted(d["tick"] for d in mine)
        assert ticks == [ticks[0] + dt.timedelta(seconds=n) for n in range(len(ticks))]
        assert all(t.microsecond == 0 for t in ticks)
    fn = Job.objects.filter(schedule="fn").first()
    assert fn is not None
    assert (fn.task, fn.args, fn.kwargs, fn.queue, fn.priority, fn.max_attempts) == (
        "tests.testapp.tasks.mark",
        [],
        {"label": "fn"},
        "reports",
        7,
        9,
    )
    fw = Job.objects.filter(schedule="fw").first()
    assert fw is not None
    assert (fw.task, fw.args, fw.kwargs, fw.queue, fw.priority, fw.max_attempts) == (
        "tests.testapp.djtasks.echo",
        [1, "two"],
        {"k": [3]},
        "emails",
        5,
        4,
    )
    # The Tasks API says which tick a scheduled Task's result belongs to.
    result = djtasks.echo.get_result(str(fw.id))
    assert (result.task.run_after, result.task.queue_name, result.task.priority) == (
        fw.run_at,
        "emails",
        5,
    )
    assert (result.status.name, result.args, result.kwargs) == ("READY", [1, "two"], {"k": [3]})
    assert set(Job.objects.values_list("status", flat=True)) == {"queued"}
    rows = {row.name: row for row in Schedule.objects.all()}
    assert (rows["fn"].expression, rows["fn"].task) == ("every 1s", "tests.testapp.tasks.mark")
    for name in periodic:
        assert rows[name].ticks == Job.objects.filter(schedule=name).count()


def test_the_listing_shows_the_last_ticks_job_as_it_runs(admin_client: Client) -> None:
    """The last tick enqueued "and its job's status": queued while it waits, done
    once a worker ran it, in the table and in --json."""
    ping = {"task": "tests.testapp.tasks.mark", "every": 1, "kwargs": {"label": "ping"}}
    with override_settings(PGQUEUE={"PERIODIC": {"ping": ping}}):
        with worker_thread(queues=[ELSEWHERE]) as worker:
            worker.wait("scheduled", 1, timeout=15, where=lambda d: d["job_id"] is not None)
            assert worker.stop() == 0
        row = Schedule.objects.get(pk="ping")
        assert row.last_job_id is not None
        last = Job.objects.get(pk=row.last_job_id)
        assert last.run_at == row.last_tick
        (data,) = json.loads(listing("--json"))
        assert (data["name"], data["expression"], data["timezone"], data["state"]) == (
            "ping",
            "every 1s",
            "UTC",
            "active",
        )
        assert (data["last_job_id"], data["last_job_status"], data["ticks"]) == (
            last.id,
            "queued",
            Job.objects.filter(schedule="ping").count(),
        )
        assert dt.datetime.fromisoformat(data["last_tick"]) == last.run_at
        assert f"#{last.id} queued" in listing()
        with worker_thread(burst=True, worker_id="burst") as burst:
            assert burst.join(30) == 0
        (data,) = json.loads(listing("--json"))
        assert data["last_job_status"] == "done"
        assert f"#{last.id} done" in listing()
        # Pruned, the last job is still named, as pruned.
        Job.objects.filter(status="done").update(
            done_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
        )
        call_command("prunejobs", "--older-than", "1m", stdout=io.StringIO())
        assert not Job.objects.filter(pk=last.id).exists()
        (data,) = json.loads(listing("--json"))
        assert (data["last_job_id"], data["last_job_status"]) == (last.id, None)
        assert f"#{last.id} pruned" in listing()
        assert f"#{last.id} (pruned)" in admin_client.get(SCHEDULES).content.decode()


def test_a_cron_entry_without_a_time_zone_runs_in_time_zone(
    settings: Any, scheduler: Callable[..., Scheduler]
) -> None:
    # pytest-django's settings, set up before the scheduler's override and undone
    # after it: a with-block ended first would leave TIME_ZONE on at the fixture's end.
    settings.TIME_ZONE = "Asia/Tokyo"
    nightly = {key: value for key, value in REPORT.items() if key != "timezone"}
    scheduler({"nightly": nightly}).step()
    assert Schedule.objects.get(pk="nightly").timezone == "Asia/Tokyo"
    (line,) = [row for row in listing().splitlines() if row.startswith("nightly")]
    assert "Asia/Tokyo" in line
    assert "03:00:00 JST" in line, line
    (data,) = json.loads(listing("--json"))
    next_tick = dt.datetime.fromisoformat(data["next_tick"])
    assert next_tick.astimezone(dt.timezone(dt.timedelta(hours=9))).time() == dt.time(3)


def test_a_bad_entry_fails_manage_py_check_and_runworker_naming_it(db_url: str) -> None:
    env = periodic_env({"nightly": {"task": "tests.testapp.tasks.mark", "cron": "61 * * * *"}})
    said = "PGQUEUE['PERIODIC']['nightly']: 'cron' = '61 * * * *' is not a valid cron expression"
    check = django_command(db_url, "check", env=env)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "django_pgqueue.E001" in check.stderr
    assert said in check.stderr
    worker = django_command(db_url, "runworker", env=env)
    assert worker.returncode != 0, worker.stdout + worker.stderr
    assert said in worker.stderr
    assert not Schedule.objects.exists()
    assert Job.objects.count() == 0


def test_the_admins_switches_are_logged_and_its_schedule_pages_are_read_only(
    admin_client: Client, admin_user: User, scheduler: Callable[..., Scheduler]
) -> None:
    scheduler({"report": REPORT}).step()
    post = {"action": "disable_schedules", "_selected_action": ["report"]}
    admin_client.post(SCHEDULES, post)
    admin_client.post(SCHEDULES, {**post, "action": "enable_schedules"})
    entries = LogEntry.objects.filter(object_id="report").order_by("action_time", "id")
    assert [(e.action_flag, e.user_id, e.get_change_message()) for e in entries] == [
        (CHANGE, admin_user.pk, "Disabled the schedule."),
        (CHANGE, admin_user.pk, "Enabled the schedule."),
    ]
    assert Schedule.objects.get(pk="report").enabled
    page = admin_client.get(f"{SCHEDULES}report/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "0 3 * * *" in html
    assert 'name="_save"' not in html
    assert admin_client.get(f"{SCHEDULES}add/").status_code == 403
    assert admin_client.post(f"{SCHEDULES}report/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.post(f"{SCHEDULES}report/change/", {"task": "x.y"}).status_code == 403
    assert Schedule.objects.get(pk="report").task == REPORT["task"]


def test_a_look_with_nothing_due_sends_no_statement_and_a_due_tick_one(
    scheduler: Callable[..., Scheduler],
) -> None:
    # A look that a slow machine delays past the next minute, after the loop below
    # found nothing due, would enqueue "minutely": start 5 s clear of it.
    clear_of_a_minute_boundary(before=5.0)
    s = scheduler({"report": REPORT, "minutely": {**REPORT, "cron": "* * * * *"}})
    s.step()  # the sync and the registry read
    with CaptureQueriesContext(connections["default"]) as idle:
        for _ in range(3):
            if min(p.due for p in s.planned) > dt.datetime.now(dt.UTC):
                s.step()
    assert len(idle.captured_queries) == 0, idle.captured_queries
    plan = next(p for p in s.planned if p.spec.name == "minutely")
    tick = plan.spec.next_after(plan.cursor)
    with CaptureQueriesContext(connections["default"]) as due:
        s._enqueue_due(plan, tick + dt.timedelta(seconds=0.1))
    assert len(due.captured_queries) == 1, due.captured_queries
    assert list(Job.objects.values_list("schedule", "run_at")) == [("minutely", tick)]


def test_a_removed_schedules_jobs_stay_listed_in_the_admin(
    admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    s = scheduler({"report": REPORT})
    s.step()
    plan = s.planned[0]
    tick = plan.spec.next_after(plan.cursor)
    s._enqueue_due(plan, tick)
    (job,) = Job.objects.filter(schedule="report")
    scheduler({}).step()  # a worker restarted without it
    row = Schedule.objects.get(pk="report")
    assert (row.configured, row.last_job_id, row.ticks) == (False, job.id, 1)
    with override_settings(PGQUEUE={}):
        html = admin_client.get(SCHEDULES).content.decode()
        assert "removed" in html
        assert f'href="{JOBS}?schedule=report">1 tick</a>' in html
        jobs = admin_client.get(f"{JOBS}?schedule=report")
        assert jobs.status_code == 200
        assert f'href="{JOBS}{job.id}/change/' in jobs.content.decode()
        page = admin_client.get(f"{JOBS}{job.id}/change/").content.decode()
    shown = re.search(r'field-schedule".*?<div class="readonly">(.*?)</div>', page, re.S)
    assert shown is not None, page
    assert shown.group(1) == "report"


def test_the_command_refuses_an_unknown_name_in_one_line(db_url: str) -> None:
    done = django_command(db_url, "schedules", "--disable", "nope")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "CommandError: no schedule named 'nope': it is neither in PGQUEUE['PERIODIC'] nor "
        "in the schedule table"
    ]


def test_each_state_a_listing_names(scheduler: Callable[..., Scheduler]) -> None:
    periodic = {
        "on": REPORT,
        "off": {**REPORT, "enabled": False},
        "switched": REPORT,
        "gone": REPORT,
    }
    scheduler(periodic).step()
    listing("--disable", "switched")
    others = {"on": REPORT, "off": periodic["off"], "switched": REPORT, "elsewhere": REPORT}
    scheduler(others).step()  # a worker with other settings: "gone" is removed
    with override_settings(PGQUEUE={"PERIODIC": {"on": REPORT, "off": periodic["off"]}}):
        views = {v["name"]: v for v in json.loads(listing("--json"))}
        text = listing()
    assert {name: v["state"] for name, v in views.items()} == {
        "elsewhere": "not in these settings",
        "gone": "removed",
        "off": "off in settings",
        "on": "active",
        "switched": "not in these settings",
    }
    assert [n for n, v in sorted(views.items()) if v["next_tick"] is not None] == ["on"]
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert "off in settings" in lines["off"]
    assert "removed" in lines["gone"]
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        assert json.loads(listing("--json"))[4]["state"] == "disabled"


def test_the_admins_schedule_list_costs_the_same_for_ten_schedules_as_for_one(
    admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    def queries(count: int) -> int:
        periodic = {f"s{n}": REPORT for n in range(count)}
        scheduler(periodic).step()
        with (
            override_settings(PGQUEUE={"PERIODIC": periodic}),
            CaptureQueriesContext(connections["default"]) as seen,
        ):
            html = admin_client.get(SCHEDULES).content.decode()
        assert html.count('href="/admin/django_pgqueue/job/?schedule=s') == count
        return len(seen.captured_queries)

    assert queries(1) == queries(10)
