"""The scheduler looks at each schedule apart: one whose ticks the database refuses
(its job's arguments in a database that cannot store them) no longer stops every
schedule after it, in a real worker; a database outage still stops the whole look,
for the thread's guard to retry. An entry that is off in the settings
(``"enabled": False``) whose task is gone warns (W005) rather than stopping every
worker (E010). One look enqueues at most ``MAX_TICKS`` ticks of a schedule, missed
and due together."""

from __future__ import annotations

import datetime as dt
import logging
import signal
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import OperationalError, connection, connections

from django_pgqueue.models import Job
from django_pgqueue.periodic.scheduler import Scheduler
from django_pgqueue.periodic.spec import MAX_TICKS
from tests.periodic.test_scheduler import MINUTELY, forget_the_first_look, ran_at
from tests.worker.conftest import WorkerProcess, django_command, wait_for
from tests.worker.conftest import start_worker as start_worker  # the fixture
from tests.worker.test_periodic import PING, assert_each_second_once, periodic_env, ticks

pytestmark = pytest.mark.django_db(transaction=True)

#: A label LATIN1 has no character for: a database in that encoding refuses the job.
EURO = {"task": "tests.testapp.tasks.mark", "every": 1, "kwargs": {"label": "price in \u20ac"}}


@pytest.fixture
def latin1_db(db_url: str) -> Iterator[str]:
    """A migrated database in LATIN1 next to the test database (its name derived from
    the test database's, so that parallel runs do not share it)."""
    name = f"{connection.settings_dict['NAME']}_latin1"
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(
            f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    url = db_url.rsplit("/", 1)[0] + "/" + name
    migrate = WorkerProcess(url, "--no-input", "-v", "0", command="migrate")
    assert migrate.wait(120) == 0, migrate.output
    yield url
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def jobs_of(url: str, name: str) -> list[dt.datetime]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT run_at FROM pgqueue_job WHERE schedule = %s ORDER BY run_at", [name]
        ).fetchall()
    return [row[0] for row in rows]


@pytest.mark.slow
def test_a_schedule_whose_job_the_database_refuses_does_not_stop_the_others(
    latin1_db: str,
) -> None:
    """The job of ``euro`` holds a character its LATIN1 database cannot store: each
    of its ticks fails. Before, that error went up through the whole look, the
    scheduler thread restarted, and looked at ``euro`` first again: ``ping``,
    declared after it, never ticked, and the traceback came again at each retry."""
    env = periodic_env({"euro": EURO, "ping": PING})
    worker = WorkerProcess(latin1_db, "--worker-id", "latin1", env=env)
    try:
        wait_for(lambda: len(jobs_of(latin1_db, "ping")) >= 4, 40, "4 ticks of ping")
        worker.wait_for_output("tried again in 4 s", 30)  # euro's third failed look
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output
    finally:
        worker.kill()
    assert_each_second_once(jobs_of(latin1_db, "ping"))
    assert jobs_of(latin1_db, "euro") == []
    output = worker.output
    assert "pgqueue-scheduler: restarting" not in output
    assert "schedule ping: enqueued job" in output
    # Once with its traceback, then one line per retry, the pause doubling.
    assert output.count("its ticks could not be enqueued") == 1, output
    assert (
        "schedule euro: its ticks could not be enqueued (the other schedules go on); "
        "tried again in 1 s"
    ) in output
    assert 'has no equivalent in encoding "LATIN1"' in output
    assert (
        "schedule euro: its ticks still cannot be enqueued (2 looks in a row): DataError: "
        'character with byte sequence 0xe2 0x82 0xac in encoding "UTF8" has no equivalent '
        'in encoding "LATIN1"; tried again in 2 s'
    ) in output


def test_a_failing_schedule_is_tried_again_after_its_pause_and_said_to_recover(
    scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """A job row copied in with its id (a restore, an import) ahead of the job table's
    sequence: the next tick's insert takes that id and fails. Only that schedule's
    look fails; the one after it ticks in the same look, and the failed one takes its
    tick at its next look, once its pause is over."""
    every = {**MINUTELY, "every": 1}
    s = scheduler({"first": every, "second": every})
    s.step()
    forget_the_first_look("first")
    forget_the_first_look("second")
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('pgqueue_job', 'id'))")
        (taken,) = cursor.fetchone()
    # The next id the sequence gives, already held by a row.
    Job.objects.create(id=taken + 1, task="tests.testapp.tasks.noop")
    first, second = s.planned
    now = max(first.due, second.due) + dt.timedelta(seconds=0.1)
    with caplog.at_level(logging.INFO, logger="django_pgqueue"):
        s._look(first, now)
        s._look(second, now)
    assert ran_at("first") == []
    assert len(ran_at("second")) >= 1
    assert (first.failures, second.failures) == (1, 0)
    assert first.retry_at == now + dt.timedelta(seconds=1)
    assert s.failing()
    assert "schedule first: its ticks could not be enqueued" in caplog.text
    assert "pgqueue_job_pkey" in caplog.text
    # Its next look, a second later: the sequence has moved past the copied row.
    with caplog.at_level(logging.INFO, logger="django_pgqueue"):
        s._look(first, first.retry_at)
    assert len(ran_at("first")) >= 1
    assert (first.failures, s.failing()) == (0, False)
    assert "schedule first: its ticks are enqueued again, after 1 failed looks" in caplog.text


def test_an_error_of_the_connection_still_stops_the_look_for_the_threads_guard(
    scheduler: Callable[..., Scheduler], db_url: str
) -> None:
    """The database, not the schedule (an OperationalError: here a statement
    cancelled by statement_timeout, as one is when the server goes away): the error
    goes to ServiceThread's guard, which reconnects and retries every schedule; it is
    not counted against the schedule, nor swallowed."""
    s = scheduler({"minutely": MINUTELY})
    s.step()
    (plan,) = s.planned
    plan.due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    plan.cursor -= dt.timedelta(minutes=2)  # a tick to enqueue: a statement to send
    with connection.cursor() as cursor:  # shorter than the tick's lock wait (500 ms)
        cursor.execute("SET statement_timeout = '100ms'")
    with psycopg.connect(db_url) as other:  # holds the schedule's row
        other.execute("SELECT 1 FROM pgqueue_schedule WHERE name = 'minutely' FOR UPDATE")
        with pytest.raises(OperationalError, match="statement timeout"):
            s.step()
    assert (plan.failures, s.failing()) == (0, False)
    connections["default"].close()


def test_one_look_enqueues_at_most_max_ticks_of_a_schedule_missed_and_due_together(
    scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """catch_up "all" after an outage, while another worker has been up for an hour
    without taking the ticks (it counts as up: a worker behind a pooler, killed):
    100 missed and 100 due, 200 statements in one look, where MAX_TICKS says one
    look enqueues at most 100. Now the 100 most recent."""
    every_second = {**MINUTELY, "every": 1, "catch_up": "all"}
    scheduler({"ping": every_second}).step()  # the row
    forget_the_first_look("ping")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_schedule SET last_tick = date_trunc('second', now()) "
            "- interval '2 hours' WHERE name = 'ping'"
        )
        cursor.execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, concurrency, version, started_at, "
            "last_seen, alive_until, schedules, schedule_names, jobs_running, jobs_done) "
            "VALUES ('other', 'h', 1, 1, 'x', now() - interval '1 hour', now(), "
            "now() + interval '1 minute', true, '[\"ping\"]', 0, 0)"
        )
    with caplog.at_level(logging.INFO, logger="django_pgqueue"):
        scheduler({"ping": every_second}).step()
    found = ran_at("ping")
    assert len(found) == MAX_TICKS
    assert_each_second_once(found)
    assert dt.datetime.now(dt.UTC) - found[-1] < dt.timedelta(seconds=5)
    assert "more than 100 ticks due at once; the oldest are not enqueued" in caplog.text
    assert (
        "schedule ping: more than 100 ticks missed while no worker running it was up, "
        "catch_up='all' enqueues 0 (with 100 due: at most 100 at once)"
    ) in caplog.text


GONE = {"task": "tests.testapp.tasks.deleted_since", "every": 60, "enabled": False}
W005 = (
    "(django_pgqueue.W005) PGQUEUE['PERIODIC']['gone']: 'tests.testapp.tasks.deleted_since' "
    "is not a registered task"
)


@pytest.mark.slow
def test_an_entry_off_in_the_settings_whose_task_is_gone_warns_and_workers_start(
    db_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    """No worker with these settings ticks an entry that is off, and the operators'
    switch cannot turn it on: its task, deleted from the code, stopped every worker
    from starting (E010) all the same. Now a warning, which names it; switched on,
    it is E010 again."""
    env = periodic_env({"gone": GONE, "ping": PING})
    checked = django_command(db_url, "check", env=env)
    assert checked.returncode == 0, checked.stderr
    assert W005 in checked.stderr
    assert '(the entry is off: "enabled": False)' in checked.stderr
    assert "ERRORS:" not in checked.stderr
    worker = start_worker("--worker-id", "off", env=env)
    wait_for(lambda: len(ticks("ping")) >= 2, 30, "2 ticks of ping")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert W005 in worker.output
    assert not Job.objects.filter(schedule="gone").exists()
    switched_on = django_command(
        db_url, "check", env=periodic_env({"gone": {**GONE, "enabled": True}})
    )
    assert switched_on.returncode == 1
    assert (
        "(django_pgqueue.E010) PGQUEUE['PERIODIC']['gone']: "
        "'tests.testapp.tasks.deleted_since' is not a registered task"
    ) in switched_on.stderr
