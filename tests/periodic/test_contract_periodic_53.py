"""Periodic jobs across deploys, configuration changes and clock edges, with real
worker processes where it matters: a cron expression that never fires in its time
zone is refused when settings are read (it used to pass ``manage.py check``, then
stop the worker's other schedules)."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from collections.abc import Callable

import pytest

from django_pgqueue.exceptions import InvalidSchedule
from django_pgqueue.models import Schedule
from django_pgqueue.periodic.overview import describe
from django_pgqueue.periodic.spec import ScheduleSpec, parse
from tests.worker.conftest import WorkerProcess, django_command, wait_for
from tests.worker.conftest import start_worker as start_worker  # the fixture
from tests.worker.test_periodic import PING, periodic_env, ticks

UTC = dt.UTC

#: Each minute of 02:00 on the last Sunday of March, in Paris: the hour the clocks
#: jump over that very night, every year. cron reads it; it never fires.
NEVER = {
    "task": "tests.testapp.tasks.mark",
    "cron": "* 2 * 3 0L",
    "timezone": "Europe/Paris",
    "kwargs": {"label": "never"},
}
REFUSED = (
    "(django_pgqueue.E001) PGQUEUE['PERIODIC']['never']: 'cron' = '* 2 * 3 0L' never "
    "ticks in 'Europe/Paris': each time it names is one the clocks skip (none in the "
    "next 50 years)"
)


@pytest.mark.django_db(transaction=True)
def test_a_cron_that_never_fires_fails_the_check_and_runworker_naming_it(db_url: str) -> None:
    """Before, it passed the check; a worker then looked for its next tick up to year
    9999 (two seconds of CPU), failed there, and at each retry again, before any
    schedule declared after it: those never ticked."""
    env = periodic_env({"never": NEVER, "ping": PING})
    checked = django_command(db_url, "check", env=env)
    assert checked.returncode == 1
    assert REFUSED in checked.stderr
    worker = django_command(db_url, "runworker", env=env)
    assert worker.returncode == 1
    assert REFUSED in worker.stderr
    assert "Traceback" not in worker.stderr


@pytest.mark.parametrize(
    ("cron", "zone"),
    [
        ("* 2 * 3 0L", "Europe/Paris"),
        ("*/15 2 * 3 0#2", "America/New_York"),  # the second Sunday of March
        ("*/10 * 2 * 3 0L", "Europe/Paris"),  # six fields: seconds first
    ],
)
def test_a_cron_whose_every_time_the_clocks_skip_is_refused_at_once(cron: str, zone: str) -> None:
    entry = {"task": "tests.testapp.tasks.mark", "cron": cron, "timezone": zone}
    began = time.monotonic()
    with pytest.raises(InvalidSchedule, match="never ticks in"):
        parse("x", entry)
    assert time.monotonic() - began < 1.0


@pytest.mark.parametrize(
    ("cron", "zone", "tick"),
    [
        # Rare, not never: Feb 29, Feb 29 on a Monday, a fixed time the clocks skip
        # (it ticks at the first minute after the jump, as cron does).
        ("0 0 29 2 *", "Europe/Paris", dt.datetime(2028, 2, 28, 23, tzinfo=UTC)),
        ("0 0 * 2 1#5", "UTC", dt.datetime(2044, 2, 29, tzinfo=UTC)),
        ("30 2 * 3 0L", "Europe/Paris", dt.datetime(2027, 3, 28, 1, tzinfo=UTC)),
    ],
)
def test_a_rare_cron_is_accepted_and_ticks_when_it_comes(
    cron: str, zone: str, tick: dt.datetime
) -> None:
    spec = parse("x", {"task": "tests.testapp.tasks.mark", "cron": cron, "timezone": zone})
    assert spec.next_after(dt.datetime(2026, 12, 7, tzinfo=UTC)) == tick


def test_a_schedule_with_no_tick_left_has_no_next_tick_and_costs_no_long_walk() -> None:
    """Settings refuse such an expression; one held from before (the zone's rules
    changed under a running worker) gives no next tick, at once, rather than walking
    to year 9999 and failing there (the scheduler's look, the listing, the admin)."""
    spec = ScheduleSpec("never", "tests.testapp.tasks.mark", "* 2 * 3 0L", None, "Europe/Paris")
    now = dt.datetime(2026, 12, 7, 8, tzinfo=UTC)
    began = time.monotonic()
    assert spec.next_or_none(now) is None
    assert spec.between(dt.datetime(2026, 1, 1, tzinfo=UTC), now, 5) == []
    view = describe("never", spec, None, None, now)
    assert (view.state, view.next_tick) == ("active", None)
    assert time.monotonic() - began < 1.0


#: Seconds every worker stays down: that many ticks of an every-second schedule missed.
OUTAGE = 4


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_deploy_that_changes_time_zone_does_not_restart_an_every_schedule(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """An ``every`` schedule ticks at multiples of its seconds since the epoch, in no
    time zone: a deploy that changes TIME_ZONE (the zone its row records) gives it
    no other tick, so after an outage its catch_up brings the missed ticks back, as
    for any restart with the same schedule. It used to be restarted as one given
    another expression, and the ticks of the outage were lost."""
    entry = {**PING, "catch_up": "all"}
    first = start_worker("--worker-id", "utc", env=periodic_env({"ping": entry}))
    wait_for(lambda: len(ticks("ping")) >= 2, 30, "2 ticks")
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.output
    last = ticks("ping")[-1]
    wait_for(
        lambda: dt.datetime.now(UTC) > last + dt.timedelta(seconds=OUTAGE + 0.5),
        30,
        f"{OUTAGE} ticks with no worker up",
    )
    paris = {**periodic_env({"ping": entry}), "PGQUEUE_TEST_TIME_ZONE": "Europe/Paris"}
    second = start_worker("--worker-id", "paris", env=paris)
    wait_for(lambda: len([t for t in ticks("ping") if t > last]) >= OUTAGE + 3, 30, "more ticks")
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.output
    assert Schedule.objects.get(pk="ping").timezone == "Europe/Paris"
    after = [t for t in ticks("ping") if t > last]
    # The missed ticks too (catch_up "all"): one job a second, none lost or doubled.
    assert after == [last + dt.timedelta(seconds=n + 1) for n in range(len(after))]


LOCAL = {
    "task": "tests.testapp.tasks.mark",
    "cron": "*/20 * * * * *",
    "timezone": "localtime",
    "kwargs": {"label": "local"},
}
HOST_ZONE = (
    "(django_pgqueue.E001) PGQUEUE['PERIODIC']['local']: the time zone 'localtime' is "
    "each host's own: workers on hosts set differently would each enqueue its ticks at "
    "their own instants; give 'timezone' a zone name such as 'Europe/Paris'"
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["entry", "TIME_ZONE"])
def test_a_cron_in_each_hosts_own_time_zone_is_refused(db_url: str, where: str) -> None:
    """'localtime' names each host's /etc/localtime: it passed the check, and two
    workers on hosts set to other zones each enqueued every tick at their own
    instant (seen with PYTHONTZPATH giving one worker another 'localtime': a
    schedule of every 20 s got a job every 10 s). An ``every`` schedule ticks in no
    zone: it is not refused."""
    env = periodic_env({"local": LOCAL, "ping": PING})
    if where == "TIME_ZONE":  # the entries' default
        entry = {key: value for key, value in LOCAL.items() if key != "timezone"}
        env = {
            **periodic_env({"local": entry, "ping": PING}),
            "PGQUEUE_TEST_TIME_ZONE": "localtime",
        }
    for command in ("check", "runworker"):
        ran = django_command(db_url, command, env=env)
        assert ran.returncode == 1, ran.stderr
        assert HOST_ZONE in ran.stderr
        assert "['ping']" not in ran.stderr


@pytest.mark.django_db(transaction=True)
def test_entries_without_a_time_zone_take_a_fixed_offset_time_zone(db_url: str) -> None:
    """TIME_ZONE = "Etc/GMT+5" (five hours behind UTC, all year), which Django takes:
    every entry without a 'timezone' failed E001 with "'timezone' = '-05' is not a
    known time zone" (the abbreviation Django names such a zone by), though no entry
    said '-05'; no worker could start."""
    daily = {"task": "tests.testapp.tasks.mark", "cron": "0 3 * * *", "kwargs": {"label": "d"}}
    env = {
        **periodic_env({"daily": daily, "ping": {**PING, "every": 30}}),
        "PGQUEUE_TEST_TIME_ZONE": "Etc/GMT+5",
    }
    checked = django_command(db_url, "check", env=env)
    assert (checked.returncode, checked.stderr) == (0, "")
    listed = django_command(db_url, "schedules", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    views = {view["name"]: view for view in json.loads(listed.stdout)}
    assert views["daily"]["timezone"] == "Etc/GMT+5"
    # 03:00 five hours behind UTC is 08:00 UTC.
    assert views["daily"]["next_tick"].endswith("T08:00:00+00:00")
