"""Migration 0015 on rows the code before it wrote, when a schedule's restart point
(enabled again, or changed) went into ``last_tick``: listings no longer show it as a
tick, and ``last_tick`` stays where a worker still on that code reads it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings

from django_pgqueue.periodic.overview import overview
from tests.integration.migrating import migrate, migrated_to

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("django_pgqueue", "0014_schedule_settings_enabled")
AFTER = ("django_pgqueue", "0015_schedule_restarted_at")
EVERY_MINUTE = {"task": "tests.testapp.tasks.mark", "every": 60}


@pytest.fixture
def at_0014() -> Iterator[None]:
    with migrated_to(BEFORE):
        yield


def schedule(name: str, last_tick: str, ticks: int) -> dt.datetime:
    """A row as the earlier code left it; its last_tick as stored."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_schedule (name, task, expression, timezone, enabled, "
            "configured, settings_enabled, last_tick, ticks, created_at, updated_at) VALUES "
            f"(%s, 'tests.testapp.tasks.mark', 'every 60s', 'UTC', true, true, true, {last_tick},"
            " %s, now() - interval '1 day', now()) RETURNING last_tick",
            [name, ticks],
        )
        (stored,) = cursor.fetchone()
    assert isinstance(stored, dt.datetime)
    return stored


def rows() -> dict[str, tuple[dt.datetime | None, dt.datetime | None]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, last_tick, restarted_at FROM pgqueue_schedule")
        return {name: (last, restarted) for name, last, restarted in cursor.fetchall()}


def test_restart_points_left_in_last_tick_are_not_shown_as_ticks(at_0014: None) -> None:
    # Ticked, then enabled again: the old set_enabled wrote GREATEST(last_tick, now()).
    restarted = schedule("restarted", "now() - interval '5 minutes'", 3)
    # Ticked last at a whole minute, and nothing since.
    ticked = schedule("ticked", "date_trunc('minute', now()) - interval '1 hour'", 7)
    # Enabled again before its first tick.
    fresh = schedule("fresh", "now() - interval '1 minute'", 0)
    migrate(AFTER)
    assert rows() == {
        "restarted": (restarted, restarted),  # kept where the old code reads it
        "ticked": (ticked, None),
        "fresh": (fresh, fresh),
    }
    periodic = {name: EVERY_MINUTE for name in ("restarted", "ticked", "fresh")}
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        shown = {view.name: view.last_tick for view in overview()}
    assert shown == {"restarted": None, "ticked": ticked, "fresh": None}
    migrate(BEFORE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, last_tick FROM pgqueue_schedule")
        back = dict(cursor.fetchall())
    assert back == {
        "restarted": restarted,
        "ticked": ticked,
        "fresh": fresh,
    }
