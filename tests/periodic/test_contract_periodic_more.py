"""A second audit of issue 15, what the first left unpinned: each cron form the
docs name, read as cron reads it; two schedulers on one database through the
nights clocks change (each tick of a skipped or repeated hour once); the listing
on such a night; a schedule on a paused queue; the switch from code; the
``--json`` listing's keys; two ``runworker`` processes on a six-field cron, the
one that enqueues killed."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import signal
import time
import zoneinfo
from collections.abc import Callable

import psycopg
import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client, override_settings

from django_pgqueue.exceptions import InvalidSchedule
from django_pgqueue.models import Job, Schedule
from django_pgqueue.periodic.overview import local_moment, overview
from django_pgqueue.periodic.scheduler import LOCK_WAIT, Scheduler
from django_pgqueue.periodic.spec import parse
from django_pgqueue.queue import schedules
from tests.periodic.conftest import clear_of_a_minute_boundary
from tests.periodic.test_contract_periodic import ELSEWHERE
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.conftest import start_worker as start_worker  # the fixture
from tests.worker.inprocess import worker_thread
from tests.worker.test_periodic import (
    assert_each_second_once,
    kill_the_latest_enqueuer,
    periodic_env,
    ticks,
)

UTC = dt.UTC
PARIS = zoneinfo.ZoneInfo("Europe/Paris")
MARK = "tests.testapp.tasks.mark"
#: The task's argument, for the entries that give no other.
LABEL = {"label": "x"}


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, tzinfo=UTC)


def first_ticks(cron: str, after: dt.datetime, count: int) -> list[str]:
    spec = parse("s", {"task": MARK, "cron": cron, "timezone": "UTC"})
    found = []
    for tick in spec.after(after):
        found.append(tick.strftime("%a %Y-%m-%d %H:%M"))
        if len(found) == count:
            return found
    return found


#: From Thursday 2026-01-01 00:00 UTC (excluded), the first ticks of each form.
CRON_FORMS = [
    # ranges, steps, lists, a step over a range, a start with a step
    ("0 9-11 * * *", ["Thu 2026-01-01 09:00", "Thu 2026-01-01 10:00", "Thu 2026-01-01 11:00"]),
    ("0 */6 * * *", ["Thu 2026-01-01 06:00", "Thu 2026-01-01 12:00", "Thu 2026-01-01 18:00"]),
    ("0 8,12,18 * * *", ["Thu 2026-01-01 08:00", "Thu 2026-01-01 12:00", "Thu 2026-01-01 18:00"]),
    ("0 10-20/5 * * *", ["Thu 2026-01-01 10:00", "Thu 2026-01-01 15:00", "Thu 2026-01-01 20:00"]),
    ("5/20 * * * *", ["Thu 2026-01-01 00:05", "Thu 2026-01-01 00:25", "Thu 2026-01-01 00:45"]),
    # names of days and months, in either case; 7 is Sunday as 0 is
    ("0 9 * * MON-FRI", ["Thu 2026-01-01 09:00", "Fri 2026-01-02 09:00", "Mon 2026-01-05 09:00"]),
    ("0 9 * * mon,wed", ["Mon 2026-01-05 09:00", "Wed 2026-01-07 09:00", "Mon 2026-01-12 09:00"]),
    ("0 0 1 JAN,jul *", ["Wed 2026-07-01 00:00", "Fri 2027-01-01 00:00", "Thu 2027-07-01 00:00"]),
    ("0 0 * * 7", ["Sun 2026-01-04 00:00", "Sun 2026-01-11 00:00", "Sun 2026-01-18 00:00"]),
    # L: the last day of the month, February's in a leap year too
    ("0 0 L * *", ["Sat 2026-01-31 00:00", "Sat 2026-02-28 00:00", "Tue 2026-03-31 00:00"]),
    ("0 0 L 2 *", ["Sat 2026-02-28 00:00", "Sun 2027-02-28 00:00", "Tue 2028-02-29 00:00"]),
    # Day of month and day of week both given: either matches (cron's rule) ...
    ("0 0 13 * FRI", ["Fri 2026-01-02 00:00", "Fri 2026-01-09 00:00", "Tue 2026-01-13 00:00"]),
    # ... unless one of them starts with '*': then both must
    ("0 0 */13 * FRI", ["Fri 2026-02-27 00:00", "Fri 2026-03-27 00:00", "Fri 2026-05-01 00:00"]),
    # cron's nicknames, in any case
    ("@hourly", ["Thu 2026-01-01 01:00", "Thu 2026-01-01 02:00", "Thu 2026-01-01 03:00"]),
    ("@DAILY", ["Fri 2026-01-02 00:00", "Sat 2026-01-03 00:00", "Sun 2026-01-04 00:00"]),
    ("@Weekly", ["Sun 2026-01-04 00:00", "Sun 2026-01-11 00:00", "Sun 2026-01-18 00:00"]),
    ("@monthly", ["Sun 2026-02-01 00:00", "Sun 2026-03-01 00:00", "Wed 2026-04-01 00:00"]),
    ("@annually", ["Fri 2027-01-01 00:00", "Sat 2028-01-01 00:00", "Mon 2029-01-01 00:00"]),
]


@pytest.mark.parametrize(("cron", "expected"), CRON_FORMS)
def test_each_cron_form_the_docs_name_ticks_where_cron_does(cron: str, expected: list[str]) -> None:
    assert first_ticks(cron, utc(2026, 1, 1), len(expected)) == expected


@pytest.mark.parametrize(
    ("cron", "said"),
    [
        ("@reboot", "Wrong number of fields"),  # a nickname with no instants
        ("0 0 30 2 *", "Bad day-of-month"),  # a day February never has
        ("0 0 * * MON-", "Bad day-of-week"),
        ("0 0 * JANUARY *", "Bad month"),
        ("L * * * *", "Bad minute"),
    ],
)
def test_a_cron_form_cron_does_not_read_fails_naming_the_entry(cron: str, said: str) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        parse("nightly", {"task": MARK, "cron": cron})
    assert str(refused.value) == (
        f"PGQUEUE['PERIODIC']['nightly']: 'cron' = {cron!r} is not a valid cron expression: {said}"
    )


#: Europe/Paris: 2026-10-25 03:00 CEST falls back to 02:00 CET (the 00:00-00:59 and
#: 01:00-01:59 UTC hours both show 02:xx); 2027-03-28 02:00 CET jumps to 03:00 CEST.
NIGHTS = {
    "fall-back": (utc(2026, 10, 24, 20), utc(2026, 10, 25, 6)),
    "spring-forward": (utc(2027, 3, 27, 20), utc(2027, 3, 28, 6)),
}
#: Each expression's ticks on each night, in UTC, as cron (Debian's rules) has them.
NIGHT_TICKS = {
    # A fixed time: once, at the first 02:30; on the night it is skipped, at 03:00.
    "30 2 * * *": {
        "fall-back": [utc(2026, 10, 25, 0, 30)],
        "spring-forward": [utc(2027, 3, 28, 1)],
    },
    # Any other: at each instant the clock shows a matching time, so one a real hour.
    "30 * * * *": {
        "fall-back": [utc(2026, 10, 24, 20, 30) + dt.timedelta(hours=h) for h in range(10)],
        "spring-forward": [utc(2027, 3, 27, 20, 30) + dt.timedelta(hours=h) for h in range(10)],
    },
    # Both showings of the repeated hour; none of the skipped one.
    "*/20 2 * * *": {
        "fall-back": [utc(2026, 10, 25, 0) + dt.timedelta(minutes=20 * n) for n in range(6)],
        "spring-forward": [],
    },
}


@pytest.mark.django_db(transaction=True)
def test_two_schedulers_take_each_tick_of_a_clock_change_night_once(
    scheduler: Callable[..., Scheduler],
) -> None:
    """Two workers' schedulers on one database look at every due tick of the nights
    the clocks change (by turns, one first then the other), through the statement
    that takes a tick: each tick of a skipped or repeated hour is one job."""
    periodic = {
        f"s{n}": {"task": MARK, "cron": cron, "timezone": "Europe/Paris", "kwargs": {"label": "n"}}
        for n, cron in enumerate(NIGHT_TICKS)
    }
    schedulers = [scheduler(periodic), scheduler(periodic)]
    for s in schedulers:
        s.step()  # the sync
    # Nothing of the real clock's: the test's nights are before and after it.
    Job.objects.all().delete()
    Schedule.objects.update(last_tick=None, last_job_id=None, ticks=0)
    taken: dict[str, list[int]] = {name: [0, 0] for name in periodic}
    for night, (start, end) in NIGHTS.items():
        for s in schedulers:
            for plan in s.planned:
                # Up all night, every tick before the evening dealt with.
                plan.cursor = plan.up_since = start
                plan.due = plan.spec.next_after(start)
        turn = 0
        while (now := min(p.due for s in schedulers for p in s.planned)) <= end:
            turn += 1
            for n in (turn % 2, 1 - turn % 2):  # by turns, each looks first
                for plan in schedulers[n].planned:
                    if plan.due <= now:
                        before = Job.objects.filter(schedule=plan.spec.name).count()
                        schedulers[n]._enqueue_due(plan, now + dt.timedelta(seconds=0.1))
                        after = Job.objects.filter(schedule=plan.spec.name).count()
                        taken[plan.spec.name][n] += after - before
        for name, cron in zip(periodic, NIGHT_TICKS, strict=True):
            assert [t for t in ticks(name) if start < t <= end] == NIGHT_TICKS[cron][night], (
                cron,
                night,
            )
    for name, cron in zip(periodic, NIGHT_TICKS, strict=True):
        jobs = ticks(name)
        assert len(jobs) == len(set(jobs)) == sum(taken[name])
        assert Schedule.objects.get(pk=name).ticks == len(jobs)
        if len(jobs) > 2:  # taken by turns: neither scheduler took them all
            assert all(taken[name]), (cron, taken[name])


@pytest.mark.django_db(transaction=True)
def test_the_listing_on_a_clock_change_night_gives_the_next_tick_once_with_its_offset(
    scheduler: Callable[..., Scheduler],
) -> None:
    periodic = {
        "hourly": {"task": MARK, "cron": "30 * * * *", "timezone": "Europe/Paris", "kwargs": LABEL},
        "nightly": {
            "task": MARK,
            "cron": "30 2 * * *",
            "timezone": "Europe/Paris",
            "kwargs": LABEL,
        },
    }
    scheduler(periodic).step()
    Schedule.objects.update(last_tick=None, restarted_at=None)
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        # 02:45 CEST, the first showing of the hour the clocks repeat.
        first = {v.name: v for v in overview(now=utc(2026, 10, 25, 0, 45))}
        # 02:45 CET, its second showing.
        second = {v.name: v for v in overview(now=utc(2026, 10, 25, 1, 45))}
    shown = {
        name: (
            local_moment(first[name].next_tick, "Europe/Paris"),
            local_moment(second[name].next_tick, "Europe/Paris"),
        )
        for name in periodic
    }
    assert shown == {
        # The hourly one at the second 02:30, then at 03:30 an hour later.
        "hourly": ("2026-10-25 02:30:00 CET", "2026-10-25 03:30:00 CET"),
        # The nightly one had its 02:30: the next is the next day's.
        "nightly": ("2026-10-26 02:30:00 CET", "2026-10-26 02:30:00 CET"),
    }


@pytest.mark.django_db(transaction=True)
def test_the_ticks_of_a_schedule_on_a_paused_queue_wait_and_run_once_it_is_resumed() -> None:
    """A tick of a schedule whose queue is paused is still enqueued (once); its job
    waits with the queue's other jobs, and runs once the queue is resumed."""
    ping = {"task": MARK, "every": 1, "kwargs": {"label": "paused"}, "queue": "reports"}
    assert Job.objects.pause_queue("reports")
    with (
        override_settings(PGQUEUE={"PERIODIC": {"ping": ping}}),
        worker_thread(queues=["reports"]) as worker,
    ):
        worker.wait("scheduled", 3, timeout=15, where=lambda d: d["job_id"] is not None)
        waiting = list(Job.objects.filter(schedule="ping").values_list("id", "status", "attempts"))
        assert len(waiting) >= 3
        assert {(status, attempts) for _, status, attempts in waiting} == {("queued", 0)}
        assert Job.objects.resume_queue("reports")
        ids = [job_id for job_id, _, _ in waiting]
        wait_for(
            lambda: Job.objects.filter(pk__in=ids, status="done").count() == len(ids),
            15,
            "the paused ticks' jobs done",
        )
        assert worker.stop() == 0
    found = ticks("ping")
    assert found == [found[0] + dt.timedelta(seconds=n) for n in range(len(found))]
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}


@pytest.mark.django_db(transaction=True)
def test_the_switch_from_code_stops_and_restarts_a_running_scheduler(
    scheduler: Callable[..., Scheduler],
) -> None:
    """``Schedule.objects.set_enabled(names, enabled)``, the switch the admin and the
    command use: the names it changed, a refusal naming an unknown one, and a
    scheduler already running obeying it at its next tick."""
    minutely = {"task": MARK, "every": 60, "kwargs": {"label": "m"}}
    s = scheduler({"minutely": minutely})
    s.step()
    (plan,) = s.planned
    assert Schedule.objects.set_enabled(["minutely"], False) == ["minutely"]
    assert Schedule.objects.set_enabled(["minutely", "minutely"], False) == []
    # One name as a string is that name, not its letters (as in the command).
    assert Schedule.objects.set_enabled("minutely", False) == []
    with pytest.raises(InvalidSchedule, match="no schedule named 'nope'"):
        Schedule.objects.set_enabled(["minutely", "nope"], True)
    assert not Schedule.objects.get(pk="minutely").enabled  # refused as a whole
    off = plan.spec.next_after(plan.cursor)
    s._enqueue_due(plan, off + dt.timedelta(seconds=0.1))
    assert ticks("minutely") == []
    row = Schedule.objects.get(pk="minutely")
    assert (row.last_tick, row.ticks) == (off, 0)  # taken while off: never enqueued
    assert Schedule.objects.set_enabled(["minutely"], True) == ["minutely"]
    on = plan.spec.next_after(off)
    s._enqueue_due(plan, on + dt.timedelta(seconds=0.1))
    assert ticks("minutely") == [on]


#: The keys of each object ``schedules --json`` prints.
JSON_KEYS = {
    "name",
    "task",
    "expression",
    "timezone",
    "state",
    "last_tick",
    "last_job_id",
    "last_job_status",
    "next_tick",
    "ticks",
    "seen",
    "last_tick_out_of_range",
    "held_until",
}


@pytest.mark.django_db(transaction=True)
def test_the_json_listing_has_the_same_keys_for_every_schedule_and_state(
    scheduler: Callable[..., Scheduler],
) -> None:
    periodic = {
        "nightly": {"task": MARK, "cron": "0 3 * * *", "timezone": "Europe/Paris", "kwargs": LABEL},
        "ping": {"task": MARK, "every": 30, "kwargs": LABEL},
    }
    scheduler({**periodic, "gone": {"task": MARK, "every": 30, "kwargs": LABEL}}).step()
    scheduler(periodic).step()
    out = io.StringIO()
    with override_settings(PGQUEUE={"PERIODIC": {**periodic, "new": periodic["ping"]}}):
        call_command("schedules", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert [set(view) for view in data] == [JSON_KEYS] * 4
    states = {view["name"]: (view["state"], view["seen"]) for view in data}
    assert states == {
        "gone": ("removed", True),
        "new": ("active", False),
        "nightly": ("active", True),
        "ping": ("active", True),
    }
    nightly = next(view for view in data if view["name"] == "nightly")
    next_tick = dt.datetime.fromisoformat(nightly["next_tick"])
    assert next_tick.utcoffset() is not None
    assert next_tick.astimezone(PARIS).time() == dt.time(3)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_runworkers_on_a_six_field_cron_take_each_tick_once_the_enqueuer_killed(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """The cron path, as the every-second one is in test_periodic: two workers, the
    one that took the latest tick SIGKILLed, the other goes on, no tick doubled or
    skipped."""
    each = {"task": MARK, "cron": "* * * * * *", "kwargs": {"label": "c"}, "queue": ELSEWHERE}
    env = periodic_env({"each": each})
    workers = [start_worker("--worker-id", f"c{n}", "--queues", "default", env=env) for n in (0, 1)]
    for worker in workers:
        worker.wait_for_output("listening")
    wait_for(lambda: len(ticks("each")) >= 4, 30, "4 ticks")
    (survivor,), seen = kill_the_latest_enqueuer(workers, "each")
    wait_for(lambda: len(ticks("each")) >= seen + 4, 30, "4 more ticks")
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output
    found = ticks("each")
    assert_each_second_once(found)
    row = Schedule.objects.get(pk="each")
    assert (row.ticks, row.last_tick, row.expression) == (len(found), found[-1], "* * * * * *")


#: A job an open transaction enqueued, holding ``one_at_a_time``'s unique_key.
HELD_JOB = (
    "INSERT INTO pgqueue_job (task, args, kwargs, status, errors, worker_ids, last_error, "
    "unique_key) VALUES ('tests.testapp.tasks.one_at_a_time', '[]', '{\"label\": \"by hand\"}', "
    "'queued', '[]', '[]', '', 'one-at-a-time')"
)


@pytest.mark.django_db(transaction=True)
def test_a_tick_waiting_on_an_uncommitted_unique_job_holds_up_no_other_schedule(
    db_url: str,
) -> None:
    """A web request's transaction enqueued the unique task a schedule runs, and has
    not committed: the tick's insert waits for it. Every other schedule waited
    behind it, on every worker (the others wait on the schedule's row), and once
    the wait passed a minute their ticks meanwhile were dropped as missed."""
    periodic = {
        "held": {"task": "tests.testapp.tasks.one_at_a_time", "every": 1, "kwargs": LABEL},
        "ping": {"task": MARK, "every": 1, "kwargs": LABEL},
    }
    with (
        override_settings(PGQUEUE={"PERIODIC": periodic}),
        worker_thread(queues=[ELSEWHERE]) as worker,
    ):
        worker.wait("scheduled", 1, timeout=15, where=lambda d: d["schedule"] == "ping")
        with psycopg.connect(db_url) as web:
            # The schedule's own queued job, deleted by the same transaction (whose
            # end the ticks wait for too), would hold the key itself.
            web.execute("DELETE FROM pgqueue_job WHERE schedule = 'held'")
            web.execute(HELD_JOB)
            held = dt.datetime.now(dt.UTC)
            wait_for(lambda: dt.datetime.now(dt.UTC) > held + dt.timedelta(seconds=4), 10, "4 s")
            during = list(
                Job.objects.filter(schedule="ping", created_at__gt=held).values_list(
                    "run_at", flat=True
                )
            )
            web.rollback()
        released = dt.datetime.now(dt.UTC)
        # The held schedule goes on once the transaction is over (its queued job
        # back, each tick enqueues nothing).
        worker.wait(
            "scheduled",
            1,
            timeout=15,
            where=lambda d: d["schedule"] == "held" and d["tick"] > released,
        )
        assert worker.stop() == 0
    # One a second while the other schedule waited.
    assert len(during) >= 2, during
    last_tick = Schedule.objects.get(pk="held").last_tick
    assert last_tick is not None
    assert last_tick > released
    found = ticks("ping")
    assert found == [found[0] + dt.timedelta(seconds=n) for n in range(len(found))]


@pytest.mark.django_db(transaction=True)
def test_a_tick_waits_for_the_schedules_row_no_longer_than_its_bound(
    scheduler: Callable[..., Scheduler], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Another worker's tick statement holds the schedule's row (it waits on a key
    itself): this one gives up after the scheduler's bound, takes nothing, and
    takes the tick once the row is free."""
    s = scheduler({"minutely": {"task": MARK, "every": 60, "kwargs": LABEL}})
    s.step()
    (plan,) = s.planned
    tick = plan.spec.next_after(plan.cursor)
    with psycopg.connect(db_url) as other:
        other.execute("SELECT 1 FROM pgqueue_schedule WHERE name = 'minutely' FOR UPDATE")
        began = time.monotonic()
        with pytest.raises(
            schedules.TickBlocked,
            match="schedule minutely: canceling statement due to lock timeout",
        ):
            schedules.tick(plan.declared, plan.job, tick, "default", lock_wait=LOCK_WAIT)
        waited = time.monotonic() - began
        # Given up at its bound, well before a minute: the look goes on.
        assert 0.4 < waited < 5, waited
        with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
            s._enqueue_due(plan, tick + dt.timedelta(seconds=0.1))  # the scheduler's look
        assert (plan.blocked, plan.cursor < tick) == (True, True)
        # The schedule has no unique key: the warning names only the row.
        (warning,) = [r.getMessage() for r in caplog.records if "waited more" in r.getMessage()]
        assert "another transaction holds the schedule's row)" in warning, warning
        assert "unique key" not in warning, warning
        assert ticks("minutely") == []
    s._enqueue_due(plan, tick + dt.timedelta(seconds=1.1))  # its next look
    assert ticks("minutely") == [tick]
    assert not plan.blocked


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("catch_up", "enqueued"), [("none", 0), ("latest", 1), ("all", 5)])
def test_a_cron_schedule_catches_up_after_every_worker_was_down_as_told(
    scheduler: Callable[..., Scheduler], catch_up: str, enqueued: int
) -> None:
    """The catch-up of the test_scheduler tests (an ``every`` schedule), for a cron
    expression: its last tick five minutes back, no worker up meanwhile."""
    # The latest tick is read from the clock between the two schedulers' looks: a
    # minute falling among them (the second's wait for a clear minute included)
    # would add a tick the test does not expect. Start well clear of one.
    clear_of_a_minute_boundary(before=5.0)
    minutely = {"task": MARK, "cron": "* * * * *", "kwargs": LABEL, "catch_up": catch_up}
    scheduler({"minutely": minutely}).step()  # the row
    spec = parse("minutely", minutely)
    latest = next(spec.at_or_before(dt.datetime.now(UTC)))
    Schedule.objects.filter(pk="minutely").update(last_tick=latest - dt.timedelta(minutes=5))
    scheduler({"minutely": minutely}).step()  # a worker starting
    assert ticks("minutely") == [
        latest - dt.timedelta(minutes=m) for m in range(enqueued - 1, -1, -1)
    ]


@pytest.mark.django_db(transaction=True)
def test_a_removed_schedule_can_be_switched_and_its_queued_jobs_still_run(
    admin_client: Client, scheduler: Callable[..., Scheduler]
) -> None:
    """Removed from the settings while its row and a queued job remain: the job runs
    as any other, and the switch (command and admin) still works on its row."""
    minutely = {"task": MARK, "every": 60, "kwargs": {"label": "removed"}}
    s = scheduler({"minutely": minutely})
    s.step()
    (plan,) = s.planned
    # A tick gone by (a new row takes any): its job is ready now.
    past = next(plan.spec.at_or_before(dt.datetime.now(UTC)))
    assert schedules.tick(plan.declared, plan.job, past, "default")[0]
    (job,) = Job.objects.filter(schedule="minutely")
    scheduler({}).step()  # a worker restarted without it
    with override_settings(PGQUEUE={}):
        out = io.StringIO()
        call_command("schedules", "--disable", "minutely", stdout=out)
        assert out.getvalue() == "schedule 'minutely' was disabled\n"
        admin_client.post(
            "/admin/django_pgqueue/schedule/",
            {"action": "enable_schedules", "_selected_action": ["minutely"]},
        )
        row = Schedule.objects.get(pk="minutely")
        assert (row.enabled, row.configured, row.last_job_id) == (True, False, job.id)
        with worker_thread(burst=True) as worker:
            assert worker.join(30) == 0
    job.refresh_from_db()
    assert (job.status, job.attempts, job.schedule) == ("done", 1, "minutely")


@pytest.mark.django_db(transaction=True)
def test_a_schedules_row_deleted_while_a_worker_runs_is_written_again_and_no_tick_lost(
    scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """Its row deleted by hand (the ORM, ``flush``): every tick found no row to take,
    enqueued nothing and said nothing, until the workers restarted."""
    s = scheduler({"minutely": {"task": MARK, "every": 60, "kwargs": LABEL}})
    s.step()
    (plan,) = s.planned
    Schedule.objects.all().delete()
    tick = plan.spec.next_after(plan.cursor)
    with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
        s._enqueue_due(plan, tick + dt.timedelta(seconds=0.1))
    assert ticks("minutely") == []
    assert "schedule minutely: its row in pgqueue_schedule is gone" in caplog.text
    # Its next look (step() at the tick's time): the row written again, the tick taken.
    assert not s._synced
    s._sync()
    s._enqueue_due(plan, tick + dt.timedelta(seconds=1.1))
    assert ticks("minutely") == [tick]
    s._enqueue_due(plan, tick + dt.timedelta(seconds=60.1))
    assert ticks("minutely") == [tick, tick + dt.timedelta(seconds=60)]
    row = Schedule.objects.get(pk="minutely")
    assert (row.ticks, row.last_tick, row.configured) == (2, tick + dt.timedelta(seconds=60), True)


@pytest.mark.django_db(transaction=True)
def test_a_blocked_tick_retried_with_prepare_on_leaves_no_prepared_statement_behind(
    scheduler: Callable[..., Scheduler], db_url: str
) -> None:
    """With PREPARE, a tick's statement that fails at its lock bound on a connection
    where it never ran before was prepared there, and psycopg, which keeps only the
    statements that succeeded, prepared it anew at each retry: a scheduler held back
    by an open transaction left one more prepared statement on its connection each
    second, for as long as the transaction stayed open."""
    periodic = {"minutely": {"task": MARK, "every": 60, "kwargs": LABEL}}
    s = scheduler(periodic)
    s.step()
    (plan,) = s.planned
    tick = plan.spec.next_after(plan.cursor)
    connections["default"].close()  # a connection the tick never ran on
    with (
        override_settings(PGQUEUE={"PERIODIC": periodic, "PREPARE": True}),
        psycopg.connect(db_url) as other,
    ):
        other.execute("SELECT 1 FROM pgqueue_schedule WHERE name = 'minutely' FOR UPDATE")
        for _ in range(4):
            with pytest.raises(schedules.TickBlocked):
                schedules.tick(plan.declared, plan.job, tick, "default", lock_wait=LOCK_WAIT)
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%pgqueue_schedule%"],
            )
            (count,) = cursor.fetchone()
        assert count <= 1, count
        other.rollback()
        assert schedules.tick(plan.declared, plan.job, tick, "default", lock_wait=LOCK_WAIT)[0]
    assert ticks("minutely") == [tick]
