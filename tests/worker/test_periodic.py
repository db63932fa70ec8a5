"""Periodic jobs across real worker processes: every tick enqueued exactly once,
whichever worker gets there first, and none skipped while any worker is up."""

from __future__ import annotations

import datetime as dt
import json
import signal
from collections.abc import Callable, Mapping

import pytest
from django.db import connection

from django_pgqueue.models import Job, Schedule
from tests.conftest import run_counts, status_counts
from tests.worker.conftest import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]
PING = {"task": "tests.testapp.tasks.mark", "every": 1, "kwargs": {"label": "ping"}}


def periodic_env(periodic: Mapping[str, object]) -> dict[str, str]:
    return {"PGQUEUE_TEST_PGQUEUE": json.dumps({"PERIODIC": periodic})}


def ticks(name: str) -> list[dt.datetime]:
    return list(
        Job.objects.filter(schedule=name).order_by("run_at").values_list("run_at", flat=True)
    )


def kill_the_latest_enqueuer(
    workers: list[WorkerProcess], name: str
) -> tuple[list[WorkerProcess], int]:
    """SIGKILL the worker that enqueued schedule ``name``'s latest tick: (the
    survivors, the ticks enqueued by then)."""
    latest = Job.objects.filter(schedule=name).order_by("-run_at").first()
    assert latest is not None
    # Its log line follows the commit that made the row: wait for it, as long as for
    # a tick (the workers are subprocesses on a loaded machine, which may not run for
    # seconds).
    said = f"enqueued job {latest.id} "
    wait_for(lambda: any(said in w.output for w in workers), 30, f"the line {said!r}")
    (taker,) = [w for w in workers if said in w.output]
    taker.signal(signal.SIGKILL)
    taker.wait(10)
    return [w for w in workers if w is not taker], len(ticks(name))


def assert_each_second_once(found: list[dt.datetime]) -> None:
    """One job per tick, consecutive whole seconds from the first to the last: no
    tick twice, none skipped (a tick's job has the tick as its run_at)."""
    assert found == [found[0] + dt.timedelta(seconds=n) for n in range(len(found))]
    assert all(t.microsecond == 0 for t in found)


def test_three_workers_enqueue_each_tick_of_an_every_second_schedule_once(
    start_worker: Start,
) -> None:
    env = periodic_env({"ping": PING})
    workers = [
        start_worker("--worker-id", f"w{n}", "--concurrency", "2", env=env) for n in range(3)
    ]
    for worker in workers:
        worker.wait_for_output("listening")
    wait_for(lambda: len(ticks("ping")) >= 5, 30, "5 ticks")
    # The worker that enqueued the latest tick dies: the others go on, and no
    # tick is lost or doubled.
    survivors, seen = kill_the_latest_enqueuer(workers, "ping")
    wait_for(lambda: len(ticks("ping")) >= seen + 5, 30, "5 more ticks")
    for worker in survivors:
        worker.signal(signal.SIGTERM)
    for worker in survivors:
        assert worker.wait(30) == 0, worker.output
    enqueued = ticks("ping")
    assert len(enqueued) >= 10
    assert_each_second_once(enqueued)
    # A survivor took the ticks after the kill: no leader to elect, any worker can.
    assert any("schedule ping: enqueued job" in w.output for w in survivors)
    row = Schedule.objects.get(pk="ping")
    assert (row.ticks, row.last_tick) == (len(enqueued), enqueued[-1])
    # Jobs run as jobs: those a stopped worker had not finished are still queued
    # (or were given back); the killed worker's may wait for the reaper.
    counts = status_counts()
    assert set(counts) <= {"done", "queued", "running"}
    assert sum(counts.values()) == len(enqueued)
    assert run_counts("ping")["ping"] >= counts.get("done", 0)


def test_a_worker_started_right_after_the_only_one_was_killed_catches_up_as_told(
    start_worker: Start,
) -> None:
    """Every worker down, even for a few seconds, is an outage: catch_up decides.
    The killed worker's row looked alive for (HEARTBEAT_INTERVAL + LEASE) / 2 (20 s
    here), so a worker started within that took every tick since as due."""
    env = periodic_env({"ping": {**PING, "catch_up": "none"}})
    first = start_worker("--worker-id", "first", env=env)
    wait_for(lambda: len(ticks("ping")) >= 2, 30, "2 ticks")
    first.kill()
    killed_after = ticks("ping")[-1]
    # Three ticks fall while no worker is up (the clock is the event waited for).
    wait_for(
        lambda: (
            Job.objects.filter(schedule="ping").exists()
            and dt.datetime.now(dt.UTC) > killed_after + dt.timedelta(seconds=4)
        ),
        30,
        "three ticks with no worker up",
    )
    restart = dt.datetime.now(dt.UTC)
    second = start_worker("--worker-id", "second", env=env)
    wait_for(lambda: ticks("ping")[-1] > restart, 30, "a tick after the restart")
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.output
    gap = [t for t in ticks("ping") if killed_after < t <= restart]
    assert gap == [], (gap, second.output)  # catch_up "none": none of the missed ticks


def test_a_burst_worker_does_not_schedule(start_worker: Start) -> None:
    worker = start_worker("--burst", env=periodic_env({"ping": PING}))
    assert worker.wait(30) == 0, worker.output
    assert not Schedule.objects.exists()
    assert Job.objects.count() == 0


def test_schedules_command_shows_what_a_worker_enqueued(start_worker: Start) -> None:
    env = periodic_env({"ping": PING})
    worker = start_worker("--worker-id", "solo", env=env)
    wait_for(lambda: len(ticks("ping")) >= 2, 30, "2 ticks")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    listing = start_worker(command="schedules", env=env)
    assert listing.wait(30) == 0, listing.output
    lines = listing.output.splitlines()
    assert lines[0].split()[:3] == ["schedule", "expression", "timezone"]
    (ping,) = [line for line in lines if line.startswith("ping ")]
    last = ticks("ping")[-1]
    assert "every 1s" in ping
    assert "UTC" in ping
    assert "active" in ping
    assert last.strftime("%Y-%m-%d %H:%M:%S") in ping
    assert f"#{Job.objects.get(schedule='ping', run_at=last).id}" in ping


def test_a_worker_does_not_start_with_a_schedule_whose_job_it_would_refuse(
    start_worker: Start,
) -> None:
    bad = {"report": {"task": "tests.testapp.tasks.add", "every": 60, "args": [1]}}
    worker = start_worker(env=periodic_env(bad))
    assert worker.wait(30) != 0
    assert "django_pgqueue.E010" in worker.output
    assert "PGQUEUE['PERIODIC']['report']" in worker.output
    assert "missing a required argument: 'b'" in worker.output
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            {"task": "tests.testapp.tasks.add", "every": 60, "args": [1]},
            "missing a required argument: 'b'",
        ),
        ({"task": "tests.testapp.tasks.no_such_task", "every": 60}, "no_such_task"),
    ],
)
def test_with_the_checks_skipped_a_schedule_whose_job_it_would_refuse_is_a_one_line_error(
    start_worker: Start, entry: dict[str, object], said: str
) -> None:
    worker = start_worker("--skip-checks", env=periodic_env({"report": entry}))
    assert worker.wait(30) == 1
    last = worker.output.strip().splitlines()[-1]
    assert last.startswith("CommandError: PGQUEUE['PERIODIC']['report']: "), worker.output
    assert said in last
    assert "Traceback" not in worker.output
    assert not Schedule.objects.exists()


def test_a_registry_row_started_at_minus_infinity_stops_no_scheduler(
    start_worker: Start,
) -> None:
    # A row written by hand (or restored) that says a worker running "ping" has
    # been up since -infinity, a time Python cannot load: every scheduler read it
    # at each start and failed, and no tick of any schedule was enqueued while
    # the row stayed (for ever, with alive_until = 'infinity').
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, queues, concurrency, version, "
            "started_at, last_seen, alive_until, schedules, schedule_names) VALUES "
            "('planted', 'h', 1, NULL, 1, 'v', '-infinity', now(), 'infinity', true, "
            "'[\"ping\"]')"
        )
    worker = start_worker("--concurrency", "2", env=periodic_env({"ping": PING}))
    wait_for(lambda: run_counts("ping")["ping"] >= 2, 20, "two ticks run")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert "unexpected error" not in worker.output


def test_a_schedule_whose_tick_count_is_at_the_top_of_bigint_still_ticks(
    start_worker: Start,
) -> None:
    # The count is written by hand at bigint's top: "ticks + 1" overflowed, and
    # every tick of "ping" failed, taking "pong" (planned after it) down with it.
    Schedule.objects.create(
        name="ping",
        task="tests.testapp.tasks.mark",
        expression="every 1s",
        timezone="UTC",
        ticks=2**63 - 1,
    )
    pong = {**PING, "kwargs": {"label": "pong"}}
    worker = start_worker("--concurrency", "2", env=periodic_env({"ping": PING, "pong": pong}))
    wait_for(
        lambda: run_counts()["ping"] >= 2 and run_counts()["pong"] >= 2, 20, "two ticks of each"
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert "unexpected error" not in worker.output
    assert Schedule.objects.get(pk="ping").ticks == 2**63 - 1  # saturated, not wrapped
