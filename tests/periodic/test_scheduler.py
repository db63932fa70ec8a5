"""The scheduler against a real PostgreSQL: one job per tick whoever asks, catch-up
after an outage as ``catch_up`` says, and settings changes applied at start."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from django_pgqueue.models import Job, Schedule
from django_pgqueue.periodic.calls import job_spec
from django_pgqueue.periodic.overview import overview
from django_pgqueue.periodic.scheduler import Scheduler, declared
from django_pgqueue.periodic.spec import MAX_TICKS, parse
from django_pgqueue.queue import schedules
from django_pgqueue.queue.presence import lock_key
from django_pgqueue.queue.schedules import Declared
from django_pgqueue.sql import query
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MINUTELY = {"task": "tests.testapp.tasks.mark", "every": 60, "kwargs": {"label": "tick"}}


def ran_at(name: str) -> list[dt.datetime]:
    return list(
        Job.objects.filter(schedule=name).order_by("run_at").values_list("run_at", flat=True)
    )


def forget_the_first_look(name: str) -> None:
    """Drop what a first look at an every-second schedule enqueued: a second that
    ended between the row's creation and the look is a tick, and the test is about
    what a later look does."""
    Job.objects.filter(schedule=name).delete()


def test_the_first_look_writes_the_rows_and_enqueues_nothing_yet(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"minutely": MINUTELY, "off": {**MINUTELY, "enabled": False}})
    s.step()
    rows = {row.name: row for row in Schedule.objects.all()}
    assert sorted(rows) == ["minutely", "off"]
    assert rows["minutely"].configured
    assert rows["minutely"].enabled
    assert (rows["minutely"].expression, rows["minutely"].task) == (
        "every 60s",
        "tests.testapp.tasks.mark",
    )
    assert rows["minutely"].last_tick is None
    assert Job.objects.count() == 0  # a new schedule starts with the next tick


def test_a_due_tick_becomes_one_job_whose_run_at_is_the_tick(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"minutely": MINUTELY})
    s.step()
    (plan,) = s.planned
    tick = plan.spec.next_after(plan.cursor)
    s._enqueue_due(plan, tick + dt.timedelta(seconds=0.2))
    (job,) = Job.objects.filter(schedule="minutely")
    assert (job.task, job.kwargs, job.status, job.run_at) == (
        "tests.testapp.tasks.mark",
        {"label": "tick"},
        "queued",
        tick,
    )
    row = Schedule.objects.get(pk="minutely")
    assert (row.last_tick, row.last_job_id, row.ticks) == (tick, job.id, 1)
    # Looking again at the same moment enqueues nothing more.
    s._enqueue_due(plan, tick + dt.timedelta(seconds=0.5))
    assert ran_at("minutely") == [tick]


def test_a_second_scheduler_cannot_enqueue_a_tick_the_first_took(
    scheduler: Callable[..., Scheduler],
) -> None:
    first, second = scheduler({"minutely": MINUTELY}), scheduler({"minutely": MINUTELY})
    first.step()
    second.step()
    tick = first.planned[0].spec.next_after(first.planned[0].cursor)
    first._enqueue_due(first.planned[0], tick)
    second._enqueue_due(second.planned[0], tick)
    assert ran_at("minutely") == [tick]


def test_the_tick_statement_is_decided_by_the_row_lock_across_connections(
    scheduler: Callable[..., Scheduler], db_url: str
) -> None:
    """Two connections race for one tick: the second waits on the first one's
    transaction, then finds the tick taken; if the first rolls back, it takes it."""
    scheduler({"minutely": MINUTELY}).step()
    spec = parse("minutely", MINUTELY)
    job, row = job_spec(spec), declared(spec)
    tick = spec.next_after(timezone.now())
    for outcome in ("commit", "rollback"):
        moment = tick + dt.timedelta(minutes=1 if outcome == "rollback" else 0)
        with psycopg.connect(db_url) as other:
            with other.cursor() as cursor:
                cursor.execute(query("schedule_tick"), schedules.tick_params(row, job, moment))
                taken = cursor.fetchone()
                assert taken is not None
                assert taken[0] == 1  # the other connection took it, not committed
            result: list[object] = []

            def race(moment: dt.datetime = moment, result: list[object] = result) -> None:
                try:
                    result.append(schedules.tick(row, job, moment, "default"))
                finally:
                    connections.close_all()

            racer = threading.Thread(target=race)
            racer.start()
            racer.join(0.5)
            assert racer.is_alive(), "the second statement must wait for the row lock"
            other.commit() if outcome == "commit" else other.rollback()
            racer.join(10)
        (outcome_of_race,) = result
        assert isinstance(outcome_of_race, tuple)
        ticked, job_id = outcome_of_race
        if outcome == "commit":
            assert (ticked, job_id) == (False, None)
        else:
            assert ticked
            assert job_id is not None
    assert ran_at("minutely") == [tick, tick + dt.timedelta(minutes=1)]


def test_syncs_of_workers_with_other_schedules_wait_for_each_other_not_deadlock(
    db_url: str,
) -> None:
    """Each sync locks its first row, then the rows it marks removed, then its other
    rows: two at once (settings A and B) took the same rows' locks in opposite
    orders ('deadlock detected'). A third connection holding old, which both mark
    removed first, lines them up: A holds a1 and B b1, both wait for old; let go,
    A takes old and wants b1, while B wants old."""

    def declare(*names: str) -> list[Declared]:
        return [Declared(name, "tests.testapp.tasks.noop", "every 1s", "UTC") for name in names]

    schedules.sync(declare("a0_old", "a1", "b1"), "default")  # in this order in the heap too
    errors: list[Exception] = []

    def sync(these: list[Declared]) -> None:
        try:
            schedules.sync(these, "default")
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def waiting() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            (count,) = cursor.fetchone() or (0,)
            return int(count)

    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM pgqueue_schedule WHERE name = 'a0_old' FOR UPDATE")
        threads = [threading.Thread(target=sync, args=(declare(n),)) for n in ("a1", "b1")]
        for started, thread in enumerate(threads, 1):
            thread.start()
            wait_for(functools.partial(lambda n: waiting() == n, started), 10, "the lock waits")
        holder.rollback()
        for thread in threads:
            thread.join(30)
    assert errors == []
    assert not any(thread.is_alive() for thread in threads)
    # One after the other: the later sync (B's) has the last word.
    assert list(Schedule.objects.configured().values_list("name", flat=True)) == ["b1"]


@pytest.mark.parametrize(
    "planted",
    [
        "last_tick = 'infinity'",
        "restarted_at = 'infinity'",
        "last_tick = '-infinity', restarted_at = '20000-01-01 00:00+00'",
        "last_tick = '4713-01-01 00:00+00 BC', created_at = '-infinity'",
    ],
)
def test_a_row_with_a_time_no_worker_writes_stops_no_schedule(
    scheduler: Callable[..., Scheduler], planted: str
) -> None:
    """A row written by hand with a time Python cannot hold failed every worker's
    sync (its scheduler restarted for good: no schedule ticked). Such a time counts
    as none: the others tick, and so does that one, its next tick replacing it."""
    periodic = {"minutely": MINUTELY, "planted": MINUTELY}
    scheduler(periodic).step()
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE pgqueue_schedule SET {planted} WHERE name = 'planted'")
    s = scheduler(periodic)
    s.step()
    tick = s.planned[0].spec.next_after(timezone.now())
    for plan in s.planned:
        s._enqueue_due(plan, tick + dt.timedelta(seconds=0.2))
    assert (ran_at("minutely"), ran_at("planted")) == ([tick], [tick])
    last_tick = Schedule.objects.filter(pk="planted").values_list("last_tick", flat=True)
    assert list(last_tick) == [tick]


def test_a_last_tick_ahead_of_the_clock_holds_the_schedule_until_then_and_says_so(
    scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose clock runs an hour fast took a tick an hour ahead: each
    instant is still enqueued once, so none is until then; the worker says so, and
    so does the listing. Cleared by hand, the ticks go on at once."""
    scheduler({"minutely": MINUTELY}).step()
    ahead = next(parse("minutely", MINUTELY).at_or_before(timezone.now() + dt.timedelta(hours=1)))
    Schedule.objects.filter(pk="minutely").update(last_tick=ahead)
    s = scheduler({"minutely": MINUTELY})
    with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
        s.step()
    assert f"schedule minutely: its last tick or restart ({ahead.isoformat()})" in caplog.text
    assert "ahead of the database's clock" in caplog.text
    (plan,) = s.planned
    tick = plan.spec.next_after(timezone.now())
    s._enqueue_due(plan, tick + dt.timedelta(seconds=0.2))
    assert ran_at("minutely") == []
    (view,) = overview()
    assert view.held_until == ahead
    assert view.next_tick == ahead + dt.timedelta(minutes=1)
    assert view.state_text() == "active (held: its last tick is ahead of the clock)"
    Schedule.objects.filter(pk="minutely").update(last_tick=None)
    s._enqueue_due(plan, tick + dt.timedelta(minutes=1, seconds=0.2))
    assert ran_at("minutely") == [tick + dt.timedelta(minutes=1)]


def test_a_created_at_ahead_of_the_clock_holds_nothing_and_is_not_said_to(
    scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """Only a last tick or a restart holds ticks back: a row never ticked whose
    created_at is ahead (written by hand) ticks at once, so the start-up warning
    that it would not was false."""
    scheduler({"minutely": MINUTELY}).step()
    Schedule.objects.filter(pk="minutely").update(
        last_tick=None, restarted_at=None, created_at=timezone.now() + dt.timedelta(days=1)
    )
    with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
        scheduler({"minutely": MINUTELY}).step()
    assert "ahead of the database's clock" not in caplog.text


def outage(name: str, minutes: int) -> dt.datetime:
    """Make the schedule look as if its last tick was ``minutes`` ticks ago (every
    worker down since): its last_tick moved back. The latest tick due now, and
    still the latest when the test's scheduler looks (a tick about to fall is
    waited for first)."""
    spec = parse(name, MINUTELY)
    upcoming = spec.next_after(timezone.now())
    if (upcoming - timezone.now()).total_seconds() < 5:
        time.sleep(max(0.0, (upcoming - timezone.now()).total_seconds()) + 0.01)
    now_tick = next(spec.at_or_before(timezone.now()))
    Schedule.objects.filter(pk=name).update(last_tick=now_tick - dt.timedelta(minutes=minutes))
    return now_tick


def worker_up_for_an_hour(
    worker_id: str = "other",
    *,
    schedules: bool = True,
    running: list[str] | None = None,
    lock: int | None = None,
    lock_pid: int | None = None,
) -> None:
    """Another worker's row in the registry: alive, started an hour ago, its scheduler
    running the schedules ``running`` (by default every one the table holds); ``lock``:
    the key of its id's lock and the server process holding it, as a worker with a
    session writes them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, concurrency, version, started_at, "
            "last_seen, alive_until, schedules, schedule_names, jobs_running, jobs_done, "
            "lock_key, lock_pid) VALUES (%s, 'h', 1, 1, 'x', now() - interval '1 hour', now(), "
            "now() + interval '1 minute', %s, COALESCE(%s::jsonb, "
            "(SELECT coalesce(jsonb_agg(name), '[]') FROM pgqueue_schedule)), 0, 0, %s, %s)",
            [
                worker_id,
                schedules,
                None if running is None else json.dumps(running),
                lock,
                lock_pid,
            ],
        )


@pytest.mark.parametrize(("catch_up", "expected"), [("latest", 1), ("none", 0), ("all", 10)])
def test_after_every_worker_was_down_catch_up_decides_how_many_missed_ticks_run(
    scheduler: Callable[..., Scheduler], catch_up: str, expected: int
) -> None:
    scheduler({"minutely": {**MINUTELY, "catch_up": catch_up}}).step()  # the row
    latest = outage("minutely", 10)  # 10 ticks missed: the 10 minutes up to now
    restarted = scheduler({"minutely": {**MINUTELY, "catch_up": catch_up}})
    restarted.step()
    missed = [latest - dt.timedelta(minutes=m) for m in range(expected - 1, -1, -1)]
    assert ran_at("minutely") == missed  # the most recent ones, in order
    # The next tick, due while this scheduler is up, runs whatever catch_up says.
    plan = restarted.planned[0]
    restarted._enqueue_due(plan, latest + dt.timedelta(minutes=1, seconds=0.1))
    assert ran_at("minutely") == [*missed, latest + dt.timedelta(minutes=1)]


def test_catch_up_all_is_bounded(scheduler: Callable[..., Scheduler]) -> None:
    every = {**MINUTELY, "catch_up": "all"}
    scheduler({"minutely": every}).step()
    latest = outage("minutely", 3 * MAX_TICKS)
    scheduler({"minutely": every}).step()
    ticks = ran_at("minutely")
    assert len(ticks) == MAX_TICKS
    assert ticks[-1] == latest


@pytest.mark.parametrize(("catch_up", "expected"), [("none", 0), ("latest", 1), ("all", 100)])
def test_a_scheduler_that_looks_late_counts_the_ticks_meanwhile_as_missed(
    scheduler: Callable[..., Scheduler],
    caplog: pytest.LogCaptureFixture,
    catch_up: str,
    expected: int,
) -> None:
    """A worker up all along whose statements failed for ten minutes (the database
    unreachable): an every-second schedule enqueued the newest 100 of the 600 ticks,
    whatever catch_up said, and dropped the rest without a word."""
    every_second = {**MINUTELY, "every": 1, "catch_up": catch_up}
    s = scheduler({"ping": every_second})
    s.step()
    forget_the_first_look("ping")
    (plan,) = s.planned
    back = plan.due + dt.timedelta(minutes=10)  # its next look, ten minutes late
    with caplog.at_level(logging.INFO, logger="django_pgqueue"):
        s._enqueue_due(plan, back)
    ticks = ran_at("ping")
    assert len(ticks) == expected
    assert all(back - dt.timedelta(seconds=expected) < t <= back for t in ticks), ticks
    assert "missed while this scheduler could not look (600 s)" in caplog.text
    assert plan.cursor == back


def test_more_than_100_ticks_due_at_once_are_capped_with_a_warning(
    scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    every_second = {**MINUTELY, "every": 1, "catch_up": "none"}
    scheduler({"ping": every_second}).step()  # the row
    forget_the_first_look("ping")
    with connection.cursor() as cursor:  # its last tick five minutes ago
        cursor.execute(
            "UPDATE pgqueue_schedule SET last_tick = date_trunc('second', now()) "
            "- interval '5 minutes' WHERE name = 'ping'"
        )
    worker_up_for_an_hour()  # so those ticks were due, not missed
    with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
        scheduler({"ping": every_second}).step()
    ticks = ran_at("ping")
    assert len(ticks) == MAX_TICKS
    assert ticks == [ticks[-1] - dt.timedelta(seconds=n) for n in range(MAX_TICKS - 1, -1, -1)]
    assert "more than 100 ticks due at once; the oldest are not enqueued" in caplog.text


def test_ticks_due_while_another_worker_was_up_are_not_missed(
    scheduler: Callable[..., Scheduler],
) -> None:
    """A worker that starts while another one is up (the registry shows it alive)
    enqueues every tick since the schedule's last one, not only the latest."""
    scheduler({"minutely": MINUTELY}).step()
    latest = outage("minutely", 3)
    worker_up_for_an_hour()
    scheduler({"minutely": MINUTELY}).step()
    assert ran_at("minutely") == [latest - dt.timedelta(minutes=m) for m in (2, 1, 0)]


@pytest.mark.parametrize("held", [True, False])
def test_a_worker_whose_id_lock_ended_counts_as_down_before_its_row_says_so(
    scheduler: Callable[..., Scheduler], db_url: str, held: bool
) -> None:
    """A killed worker's row stays alive until alive_until, (HEARTBEAT_INTERVAL +
    LEASE) / 2 after its last heartbeat (40 s by default); its id's lock ended with
    its session. A worker started meanwhile took the ticks since the killed one's
    last as due, and enqueued all of them whatever catch_up said."""
    every = {**MINUTELY, "catch_up": "none"}
    scheduler({"minutely": every}).step()
    latest = outage("minutely", 3)
    key = lock_key("killed")
    with psycopg.connect(db_url, autocommit=True) as session:
        worker_up_for_an_hour("killed", lock=key, lock_pid=session.info.backend_pid)
        if held:  # the worker is up: its session holds the lock
            session.execute("SELECT pg_advisory_lock(%s)", [key])
        scheduler({"minutely": every}).step()
    expected = [latest - dt.timedelta(minutes=m) for m in (2, 1, 0)] if held else []
    assert ran_at("minutely") == expected


def test_a_killed_worker_counts_as_down_though_another_process_holds_its_key(
    scheduler: Callable[..., Scheduler], db_url: str
) -> None:
    """pg_locks shows the whole server: a worker of another database (another
    deployment, a test run) with the same id holds the same key, and kept a killed
    worker up until its row said otherwise."""
    every = {**MINUTELY, "catch_up": "none"}
    scheduler({"minutely": every}).step()
    outage("minutely", 3)
    key = lock_key("killed")
    with (
        psycopg.connect(db_url, autocommit=True) as killed,
        psycopg.connect(db_url, autocommit=True) as namesake,
    ):
        worker_up_for_an_hour("killed", lock=key, lock_pid=killed.info.backend_pid)
        namesake.execute("SELECT pg_advisory_lock(%s)", [key])
        scheduler({"minutely": every}).step()
    assert ran_at("minutely") == []


def test_a_bounded_worker_up_meanwhile_does_not_count_as_a_scheduler(
    scheduler: Callable[..., Scheduler],
) -> None:
    """A --burst or --max-jobs worker registers but runs no scheduler: ticks that
    fell while only such a worker was up were missed, and catch_up decides."""
    every = {**MINUTELY, "catch_up": "none"}
    scheduler({"minutely": every}).step()
    outage("minutely", 3)
    worker_up_for_an_hour("burst", schedules=False)  # a --burst worker
    scheduler({"minutely": every}).step()
    assert ran_at("minutely") == []  # missed while no scheduler ran: catch_up "none"


def test_a_worker_up_meanwhile_with_other_settings_does_not_count_for_a_schedule(
    scheduler: Callable[..., Scheduler],
) -> None:
    """Ticks count as due, not missed, only while a worker whose scheduler runs the
    schedule was up. A worker up all along without it (other settings, the schedule
    disabled there) let the ticks of a 20-minute outage through catch_up "none"."""
    every = {**MINUTELY, "catch_up": "none"}
    scheduler({"minutely": every}).step()
    outage("minutely", 3)
    worker_up_for_an_hour("other-settings", running=["nightly"])
    scheduler({"minutely": every}).step()
    assert ran_at("minutely") == []  # missed while no worker running it was up


def test_a_disabled_schedule_enqueues_nothing_until_enabled_again(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"minutely": MINUTELY})
    s.step()
    plan = s.planned[0]
    tick = plan.spec.next_after(plan.cursor)
    assert Schedule.objects.set_enabled(["minutely"], False) == ["minutely"]
    s._enqueue_due(plan, tick)
    assert ran_at("minutely") == []
    assert Schedule.objects.set_enabled(["minutely"], True) == ["minutely"]
    s._enqueue_due(plan, tick + dt.timedelta(minutes=1))
    assert ran_at("minutely") == [tick + dt.timedelta(minutes=1)]  # from the next tick on


def test_ticks_that_fell_while_disabled_are_not_enqueued_after_it_is_enabled(
    scheduler: Callable[..., Scheduler],
) -> None:
    """Disabled while a worker ran, enabled again, and a worker started (a rolling
    restart): it goes on from its next tick, not with the ticks it skipped."""
    s = scheduler({"minutely": MINUTELY})
    s.step()
    Schedule.objects.set_enabled(["minutely"], False)
    latest = outage("minutely", 5)  # the last tick taken five minutes ago
    worker_up_for_an_hour()
    # The running worker, up all along, passes the five ticks while it is disabled.
    s.planned[0].up_since = s.planned[0].cursor = latest - dt.timedelta(minutes=5)
    s._enqueue_due(s.planned[0], timezone.now())
    assert ran_at("minutely") == []
    assert Schedule.objects.get(pk="minutely").last_tick == latest  # taken, not enqueued
    assert Schedule.objects.get(pk="minutely").ticks == 0
    Schedule.objects.set_enabled(["minutely"], True)
    restarted = scheduler({"minutely": MINUTELY})
    restarted.step()
    assert ran_at("minutely") == []
    restarted._enqueue_due(restarted.planned[0], latest + dt.timedelta(minutes=1, seconds=0.1))
    assert ran_at("minutely") == [latest + dt.timedelta(minutes=1)]


def test_enabled_again_after_no_worker_ran_it_starts_from_its_next_tick(
    scheduler: Callable[..., Scheduler],
) -> None:
    """Disabled, every worker down, enabled again: the ticks that fell while it was
    disabled are not "missed while no worker was up" (catch_up does not apply)."""
    every = {**MINUTELY, "catch_up": "all"}
    scheduler({"minutely": every}).step()
    Schedule.objects.set_enabled(["minutely"], False)
    latest = outage("minutely", 5)
    Schedule.objects.set_enabled(["minutely"], True)
    row = Schedule.objects.get(pk="minutely")
    assert row.restarted_at is not None
    assert row.restarted_at >= latest  # it restarts from now
    assert row.last_tick == latest - dt.timedelta(minutes=5)  # its last tick stays
    restarted = scheduler({"minutely": every})
    restarted.step()
    assert ran_at("minutely") == []


def test_a_restart_is_never_shown_as_a_tick(scheduler: Callable[..., Scheduler]) -> None:
    """A schedule that enqueued a tick, then was enabled again and given another
    expression: operators still read that tick as its last one, not the moment it
    restarted from, and ticking goes on from the restart."""
    s = scheduler({"minutely": MINUTELY})
    s.step()
    (plan,) = s.planned
    tick = next(plan.spec.at_or_before(timezone.now()))  # a tick already past
    ticked, job_id = schedules.tick(plan.declared, plan.job, tick, "default")
    assert ticked
    assert job_id is not None
    Schedule.objects.set_enabled(["minutely"], False)
    Schedule.objects.set_enabled(["minutely"], True)
    changed = scheduler({"minutely": {**MINUTELY, "every": 120}})
    changed.step()
    row = Schedule.objects.get(pk="minutely")
    assert row.restarted_at is not None
    assert row.restarted_at > tick
    assert (row.last_tick, row.last_job_id, row.ticks) == (tick, job_id, 1)
    (view,) = overview()
    assert (view.last_tick, view.last_job_id, view.ticks) == (tick, job_id, 1)
    # A moment after the last tick but before the restart is not taken, even by a
    # worker still on the old definition; the next tick after the restart is.
    between = tick + (row.restarted_at - tick) / 2
    assert schedules.tick(plan.declared, plan.job, between, "default") == (False, None)
    nxt = changed.planned[0].spec.next_after(row.restarted_at)
    changed._enqueue_due(changed.planned[0], nxt)
    assert ran_at("minutely") == [tick, nxt]
    assert Schedule.objects.get(pk="minutely").last_tick == nxt


def test_a_schedule_switched_on_in_the_settings_starts_from_its_next_tick(
    scheduler: Callable[..., Scheduler],
) -> None:
    """ "enabled": False in the settings of the workers that ran, then True in a
    deploy: the ticks that fell while it was off are not enqueued (up to 100 of them
    were, workers having been up all along)."""
    scheduler({"minutely": {**MINUTELY, "enabled": False}}).step()
    assert not Schedule.objects.get(pk="minutely").settings_enabled
    latest = outage("minutely", 5)
    worker_up_for_an_hour()
    enabled = scheduler({"minutely": MINUTELY})
    enabled.step()
    assert ran_at("minutely") == []
    assert Schedule.objects.get(pk="minutely").settings_enabled
    enabled._enqueue_due(enabled.planned[0], latest + dt.timedelta(minutes=1, seconds=0.1))
    assert ran_at("minutely") == [latest + dt.timedelta(minutes=1)]


def test_a_worker_with_the_schedule_off_does_not_take_the_ticks_of_one_with_it_on(
    scheduler: Callable[..., Scheduler],
) -> None:
    """Two settings side by side (or a rolling deploy): the one with "enabled": False
    ticks nothing, so it cannot take a tick from the one that has it on."""
    on = scheduler({"minutely": MINUTELY})
    on.step()
    off = scheduler({"minutely": {**MINUTELY, "enabled": False}})
    off.step()
    assert off.planned == []
    tick = on.planned[0].spec.next_after(on.planned[0].cursor)
    on._enqueue_due(on.planned[0], tick)
    assert ran_at("minutely") == [tick]


def test_a_schedule_declared_again_after_it_was_removed_starts_from_its_next_tick(
    scheduler: Callable[..., Scheduler],
) -> None:
    """Removed from the settings, added back later while workers ran meanwhile: the
    ticks that fell while nothing declared it are not enqueued, except those of the
    last two seconds, which a worker still on older settings may be about to take."""
    every = {"task": "tests.testapp.tasks.mark", "every": 1, "kwargs": {"label": "tick"}}
    scheduler({"ping": every}).step()
    scheduler({}).step()  # deployed without it
    assert not Schedule.objects.get(pk="ping").configured
    with connection.cursor() as cursor:  # its last tick, a minute ago
        cursor.execute(
            "UPDATE pgqueue_schedule SET last_tick = date_trunc('second', now()) "
            "- interval '1 minute' WHERE name = 'ping'"
        )
    worker_up_for_an_hour()
    again = scheduler({"ping": every})
    before = timezone.now()
    again.step()
    after = timezone.now()
    ticks = ran_at("ping")
    assert Schedule.objects.get(pk="ping").configured
    assert 1 <= len(ticks) <= 3, ticks  # not the sixty that fell while it was removed
    assert all(before - dt.timedelta(seconds=2.05) < t <= after for t in ticks), ticks


def test_a_changed_definition_takes_effect_and_each_instant_stays_once(
    scheduler: Callable[..., Scheduler],
) -> None:
    old = scheduler({"minutely": MINUTELY})
    old.step()
    new = scheduler({"minutely": {**MINUTELY, "every": 120}})
    new.step()
    assert Schedule.objects.get(pk="minutely").expression == "every 120s"
    tick = new.planned[0].spec.next_after(new.planned[0].cursor)
    # During a rolling deploy a worker still on the old settings ticks the old
    # definition (every minute up to this tick), the new one its own: an instant
    # both have is still enqueued once.
    olds = old.planned[0].spec.between(old.planned[0].cursor, tick, 10)
    assert olds[-1] == tick
    old._enqueue_due(old.planned[0], tick)
    new._enqueue_due(new.planned[0], tick)
    assert ran_at("minutely") == olds
    # Restarted, every worker ticks the new one only.
    restarted = scheduler({"minutely": {**MINUTELY, "every": 120}})
    restarted.step()
    restarted._enqueue_due(restarted.planned[0], tick + dt.timedelta(minutes=1))
    assert ran_at("minutely") == olds  # not a tick of every 120 s
    restarted._enqueue_due(restarted.planned[0], tick + dt.timedelta(minutes=2))
    assert ran_at("minutely") == [*olds, tick + dt.timedelta(minutes=2)]


def test_a_changed_expression_starts_from_its_next_tick_not_from_the_old_last_tick(
    scheduler: Callable[..., Scheduler],
) -> None:
    """A daily cron, last ticked three hours ago, made every minute by a deploy while
    another worker is up: the new expression's minutes since that tick are not due
    (one worker's first look enqueued 61 backdated jobs)."""
    three_hours_ago = (timezone.now() - dt.timedelta(hours=3)).replace(second=0, microsecond=0)
    daily = {
        **MINUTELY,
        "cron": f"{three_hours_ago.minute} {three_hours_ago.hour} * * *",
        "timezone": "UTC",
    }
    del daily["every"]
    scheduler({"report": daily}).step()
    Schedule.objects.filter(pk="report").update(last_tick=three_hours_ago)
    worker_up_for_an_hour()
    before = timezone.now()
    scheduler({"report": MINUTELY}).step()
    ticks = ran_at("report")
    assert len(ticks) <= 1, ticks  # a tick of the last two seconds, at most
    assert all(t > before - dt.timedelta(seconds=2.05) for t in ticks), ticks
    row = Schedule.objects.get(pk="report")
    assert row.restarted_at is not None
    assert row.restarted_at > before - dt.timedelta(seconds=2.05)
    assert row.last_tick == (ticks[-1] if ticks else three_hours_ago)  # a real tick


@pytest.mark.parametrize("catch_up", ["latest", "all"])
def test_a_schedule_enabled_before_any_worker_wrote_it_starts_from_its_next_tick(
    scheduler: Callable[..., Scheduler], catch_up: str
) -> None:
    """``schedules --enable`` on a schedule just added to the settings writes its row;
    the first worker, ten minutes later, took the row's creation as its last tick and
    caught up from then, which it does not do for a schedule it adds itself."""
    every = {**MINUTELY, "catch_up": catch_up}
    with override_settings(PGQUEUE={"PERIODIC": {"new": every}}):
        assert Schedule.objects.set_enabled(["new"], True) == []  # already on: no change
    Schedule.objects.filter(pk="new").update(created_at=timezone.now() - dt.timedelta(minutes=10))
    scheduler({"new": every}).step()
    assert ran_at("new") == []
    row = Schedule.objects.get(pk="new")
    assert (row.enabled, row.configured, row.settings_enabled) == (True, True, True)


def test_a_removed_schedule_stops_and_keeps_its_row_and_jobs(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"minutely": MINUTELY, "other": {**MINUTELY, "every": 3600}})
    s.step()
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    restarted = scheduler({"other": {**MINUTELY, "every": 3600}})  # deployed without it
    restarted.step()
    row = Schedule.objects.get(pk="minutely")
    assert not row.configured
    assert row.last_tick == tick
    assert Schedule.objects.removed().count() == 1
    assert [plan.spec.name for plan in restarted.planned] == ["other"]
    for plan in restarted.planned:
        restarted._enqueue_due(plan, tick + dt.timedelta(minutes=1))
    assert ran_at("minutely") == [tick]  # its history stays, and nothing more


def test_a_worker_with_other_settings_does_not_stop_the_others_schedules(
    scheduler: Callable[..., Scheduler],
) -> None:
    """A stray worker started without PERIODIC (another settings module, a one-off
    shell) marks the schedules removed in the listing, but the workers that declare
    them go on enqueueing their ticks."""
    s = scheduler({"minutely": MINUTELY})
    s.step()
    scheduler({}).step()
    assert not Schedule.objects.get(pk="minutely").configured
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    assert ran_at("minutely") == [tick]


def test_a_unique_key_skips_a_tick_while_the_previous_job_is_live(
    scheduler: Callable[..., Scheduler],
) -> None:
    s = scheduler({"minutely": {**MINUTELY, "task": "tests.testapp.tasks.one_at_a_time"}})
    s.step()
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    s._enqueue_due(s.planned[0], tick + dt.timedelta(minutes=1))
    assert ran_at("minutely") == [tick]
    (live,) = Job.objects.filter(schedule="minutely")
    row = Schedule.objects.get(pk="minutely")
    # The skipped tick is taken; the last job is still the live one, and "ticks
    # enqueued" counts only the one that was.
    assert (row.last_tick, row.ticks, row.last_job_id) == (
        tick + dt.timedelta(minutes=1),
        1,
        live.pk,
    )


def test_a_job_holding_the_key_committed_while_the_tick_waited_is_not_counted_as_its(
    scheduler: Callable[..., Scheduler], db_url: str
) -> None:
    """Someone enqueues the same unique task, and commits while the tick's insert
    waits on it: the tick enqueues nothing. The row counted a tick all the same and
    named a job id that never existed (listed as "pruned")."""
    s = scheduler({"minutely": {**MINUTELY, "task": "tests.testapp.tasks.one_at_a_time"}})
    s.step()
    (plan,) = s.planned
    tick = plan.spec.next_after(plan.cursor)
    outcome: list[tuple[bool, int | None]] = []

    def tick_it() -> None:
        try:
            outcome.append(schedules.tick(plan.declared, plan.job, tick, "default"))
        finally:
            connections.close_all()

    with psycopg.connect(db_url) as other:
        manual = other.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, errors, worker_ids, "
            "last_error, unique_key) VALUES ('tests.testapp.tasks.one_at_a_time', '[]', "
            "'{\"label\": \"by hand\"}', 'queued', '[]', '[]', '', 'one-at-a-time') "
            "RETURNING id"
        ).fetchone()
        ticking = threading.Thread(target=tick_it)
        ticking.start()
        with psycopg.connect(db_url, autocommit=True) as watcher:
            wait_for(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%pgqueue_schedule%'"
                    ).fetchone()
                    == (1,)
                ),
                10,
                "the tick to wait on the uncommitted job",
            )
        other.commit()
        ticking.join(10)
    assert outcome == [(True, None)]  # taken, and nothing enqueued
    assert ran_at("minutely") == []
    row = Schedule.objects.get(pk="minutely")
    assert (row.last_tick, row.ticks, row.last_job_id) == (tick, 0, None)
    assert manual is not None
    assert Job.objects.filter(pk=manual[0]).exists()


@pytest.mark.parametrize(
    ("overrides", "schedules"),
    [({}, True), ({"burst": True}, False), ({"max_jobs": 5}, False)],
)
def test_only_workers_that_keep_running_schedule(
    overrides: dict[str, object], schedules: bool
) -> None:
    from django_pgqueue.worker.config import WorkerConfig
    from django_pgqueue.worker.runner import Worker

    with override_settings(PGQUEUE={"PERIODIC": {"minutely": MINUTELY}}):
        worker = Worker(WorkerConfig.from_settings(worker_id="w", **overrides))
    assert (worker.scheduler is not None) is schedules


def test_a_saturated_tick_count_stays_at_the_top_when_a_tick_enqueues_nothing(
    scheduler: Callable[..., Scheduler],
) -> None:
    """A count at bigint's top (written by hand) saturates: a tick that enqueues
    nothing (disabled, or a live job holding the unique_key) leaves it as it was,
    not one below the top."""
    s = scheduler({"minutely": {**MINUTELY, "task": "tests.testapp.tasks.one_at_a_time"}})
    s.step()
    Schedule.objects.filter(pk="minutely").update(ticks=2**63 - 1)
    tick = s.planned[0].spec.next_after(s.planned[0].cursor)
    s._enqueue_due(s.planned[0], tick)
    assert Schedule.objects.get(pk="minutely").ticks == 2**63 - 1
    s._enqueue_due(s.planned[0], tick + dt.timedelta(minutes=1))  # the key is held
    assert len(ran_at("minutely")) == 1
    assert Schedule.objects.get(pk="minutely").ticks == 2**63 - 1
    Schedule.objects.set_enabled(["minutely"], False)
    s._enqueue_due(s.planned[0], tick + dt.timedelta(minutes=2))  # disabled
    assert Schedule.objects.get(pk="minutely").ticks == 2**63 - 1
