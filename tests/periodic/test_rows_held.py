"""Another transaction holding the schedule table (an UPDATE by hand not committed):
a scheduler that starts, and an operator's switch, wait a bounded time and say so."""

from __future__ import annotations

import datetime as dt
import io
import logging
import threading
from collections.abc import Callable

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction
from django.test import Client, override_settings

from django_pgqueue.models import Job, Schedule
from django_pgqueue.periodic.scheduler import Scheduler

pytestmark = pytest.mark.django_db(transaction=True)

PERIODIC = {
    name: {"task": "tests.testapp.tasks.mark", "every": 1, "kwargs": {"label": name}}
    for name in ("held", "other")
}


def step_within(s: Scheduler, seconds: float) -> bool:
    """Whether ``s.step()`` returned within ``seconds`` (it goes on in its thread)."""
    done = threading.Event()

    def run() -> None:
        try:
            s.step()
        finally:
            connections.close_all()
            done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


def test_a_row_held_by_an_open_transaction_does_not_stop_a_starting_scheduler_silently(
    scheduler: Callable[..., Scheduler], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator's UPDATE by hand not committed (the docs give one to clear a last
    tick) holds a schedule's row. A worker starting then waited in its sync for as
    long as that transaction stayed open, without a word, and enqueued no tick of
    any schedule (during a deploy, no worker did)."""
    scheduler(PERIODIC).step()  # a worker of these settings wrote the rows
    caplog.set_level(logging.INFO, logger="django_pgqueue")
    starting = scheduler(PERIODIC)
    with psycopg.connect(db_url) as operator:
        operator.execute("UPDATE pgqueue_schedule SET last_tick = NULL WHERE name = 'held'")
        try:
            # Bounded (2 s), said once, and tried again at the next step.
            assert step_within(starting, 10)
            assert step_within(starting, 10)
        finally:
            operator.rollback()  # before the finally of a hung step, which waits on it
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1, said
    assert "another transaction holds pgqueue_schedule" in said[0]
    assert step_within(starting, 10)
    last_look = dt.datetime.now(dt.UTC)
    # The ticks since the scheduler started are enqueued once the rows are written:
    # one job for each whole second, of each schedule.
    first = starting.started.replace(microsecond=0) + dt.timedelta(seconds=1)
    expected = int((last_look - first).total_seconds()) + 1
    assert expected >= 4
    for name in PERIODIC:
        ticks = set(
            Job.objects.filter(schedule=name, run_at__gte=first).values_list("run_at", flat=True)
        )
        assert ticks >= {first + dt.timedelta(seconds=n) for n in range(expected - 1)}, name
        assert Job.objects.filter(schedule=name, run_at__gte=first).count() == len(ticks)


def test_a_switch_waits_for_a_held_row_two_seconds_and_says_so(db_url: str) -> None:
    """The command, and the admin's actions, waited as long as the row was held
    (the admin's request with them), without a word."""
    with override_settings(PGQUEUE={"PERIODIC": PERIODIC}):
        call_command("schedules", "--disable", "held", stdout=io.StringIO())  # rows written
        admin = Client()
        admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
        with psycopg.connect(db_url) as operator:
            operator.execute("UPDATE pgqueue_schedule SET last_tick = NULL WHERE name = 'held'")
            try:
                with pytest.raises(CommandError) as refused:
                    call_command("schedules", "--enable", "held", "other")
                page = admin.post(
                    "/admin/django_pgqueue/schedule/",
                    {"action": "enable_schedules", "_selected_action": ["held"]},
                    follow=True,
                )
            finally:
                operator.rollback()
        assert str(refused.value).startswith(
            "nothing was enabled: another transaction holds pgqueue_schedule, its lock or a row"
        )
        assert "Nothing was enabled: another transaction holds" in page.content.decode()
        # Nothing switched, nor written ('other' had no row yet).
        assert dict(Schedule.objects.values_list("name", "enabled")) == {"held": False}
        # In a transaction of the caller's, the switch leaves its lock_timeout as it was.
        with transaction.atomic(), connection.cursor() as cursor:
            assert Schedule.objects.set_enabled(["held"], True) == ["held"]
            cursor.execute("SHOW lock_timeout")
            assert cursor.fetchone() == ("0",)
