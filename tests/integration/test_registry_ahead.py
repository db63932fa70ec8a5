"""A registry row whose ``alive_until`` lies further ahead than any heartbeat writes
(a row written by hand: ``infinity``, a year 3000) is a worker no one vouches for:
every reader calls it gone, as the reaper calls such a lease written by no worker.
It showed as a live worker for ever: ``queuestats --check`` said ok about queues
no worker served, and the schedulers counted ticks as due, not missed."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client

from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.queue import schedules
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = "/admin/django_pgqueue/registeredworker/"
#: Written by no heartbeat: it writes (HEARTBEAT_INTERVAL + LEASE) / 2 ahead, under
#: LEASE, which is at most ten years.
AHEAD = ["'infinity'", "'3000-01-01 00:00+00'", "now() + interval '11 years'"]


def planted(alive_until: str, worker_id: str = "planted") -> None:
    """A row serving every queue, its scheduler running every schedule, up an hour."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, queues, concurrency, version, "
            "started_at, last_seen, alive_until, schedules, schedule_names) VALUES "
            f"(%s, 'h', 1, NULL, 1, 'v', now() - interval '1 hour', now(), {alive_until}, "
            "true, '[\"ping\"]')",
            [worker_id],
        )


@pytest.mark.parametrize("alive_until", AHEAD)
def test_check_does_not_take_it_for_a_live_worker(alive_until: str) -> None:
    planted(alive_until)
    add.using(queue="mail").enqueue(1, 2)
    with pytest.raises(CommandError, match=r"queue mail: jobs are ready .* no live worker"):
        call_command("queuestats", "--check", stdout=io.StringIO())


def test_a_heartbeat_ten_years_ahead_still_counts_as_alive() -> None:
    # LEASE may be ten years: its heartbeat writes up to that far ahead.
    planted("now() + interval '9 years'")
    add.using(queue="mail").enqueue(1, 2)
    call_command("queuestats", "--check", stdout=io.StringIO())
    assert RegisteredWorker.objects.alive().count() == 1
    assert RegisteredWorker.objects.gone().count() == 0


@pytest.mark.parametrize("alive_until", AHEAD)
def test_queuestats_the_models_and_the_admin_show_it_gone(
    alive_until: str, admin_client: Client
) -> None:
    planted(alive_until)
    job = add.using(queue="mail").enqueue(1, 2)
    Job.objects.claim("planted", limit=1)
    assert RegisteredWorker.objects.alive().count() == 0
    assert list(RegisteredWorker.objects.gone().values_list("id", flat=True)) == ["planted"]
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    assert re.search(r"^planted +gone ", out.getvalue(), re.M), out.getvalue()
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert [w["alive"] for w in summary["workers"]] == [False]
    assert summary["running_on_gone_workers"] == [job.pk]
    page = admin_client.get(WORKERS).content.decode()
    assert 'class="pgqueue-worker-gone"' in page
    assert "pgqueue-worker-alive" not in page
    page = admin_client.get(f"/admin/django_pgqueue/job/{job.pk}/change/").content.decode()
    assert "but that worker is gone" in page


@pytest.mark.parametrize("alive_until", AHEAD)
def test_the_schedulers_do_not_count_it_as_up(alive_until: str) -> None:
    planted(alive_until)
    assert schedules.up_since("default") == {}
    planted("now() + interval '1 minute'", "live")
    assert set(schedules.up_since("default")) == {"ping"}


@pytest.mark.parametrize("alive_until", AHEAD)
def test_the_maintenance_forgets_it_as_it_forgets_workers_long_gone(alive_until: str) -> None:
    # Gone since no one can tell when: it stayed for ever, shown as gone.
    planted(alive_until)
    planted("now() + interval '9 years'", "far")
    planted("now() - interval '5 minutes'", "recently-gone")
    assert RegisteredWorker.objects.forget() == ["planted"]
    assert set(RegisteredWorker.objects.values_list("id", flat=True)) == {"far", "recently-gone"}


@pytest.mark.parametrize("last_seen", ["'infinity'", "now() + interval '1 hour'"])
def test_a_last_heartbeat_ahead_of_the_clock_was_seen_0s_ago_not_a_negative_time(
    last_seen: str,
) -> None:
    # queuestats printed "-3600s ago" (and "-251605554720s ago" for infinity).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, queues, concurrency, version, "
            f"last_seen, alive_until) VALUES ('ahead', 'h', 1, NULL, 1, 'v', {last_seen}, "
            "now() + interval '1 minute')"
        )
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    (line,) = [row for row in out.getvalue().splitlines() if row.startswith("ahead ")]
    assert line.split()[1:] == ["alive", "*", "1", "0", "0", "0s", "ago"]
