"""The queue behind a real PgBouncer in transaction mode (Debian's 1.18).

Web processes enqueue through the pooler and workers claim, record, renew and
reap through it; only each worker's session connection (LISTEN, its id's lock)
goes to PostgreSQL directly, through ``PGQUEUE["LISTEN_DATABASE"]``.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection

from devtools.pgbouncer import PgBouncer
from django_pgqueue.checks import check_pooler
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.cluster.conftest import direct_alias, pooled_env, run_django
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]
Bouncer = Callable[..., PgBouncer]

ENQUEUE_5000 = """
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.testapp.tasks import tracked
for i in range(500):
    tracked.enqueue(f"pool-{i}")  # one transaction each, with its NOTIFY
for first in range(500, 5000, 500):
    batch = range(first, first + 500)
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"pool-{i}"]) for i in batch)
print("enqueued")
"""


def test_four_workers_drain_5000_jobs_through_pgbouncer_each_job_once(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    # 4 workers hold 4 x (4 threads + claim, completer, heartbeat, maintenance) = 32
    # pooled client connections on 8 server connections: they really are shared.
    bouncer = pgbouncer(pool_size=8)
    env = pooled_env(bouncer, db_url)
    name = connection.settings_dict["NAME"]
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"pooled-{n}", env=env) for n in range(4)
    ]
    for worker in workers:
        worker.wait_for_output("listening for new jobs")  # on the direct alias
    before = bouncer.transactions(name)

    assert run_django(ENQUEUE_5000, env) == "enqueued"
    wait_for(lambda: status_counts() == {"done": 5000}, 120, "the 5,000 jobs to be done")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0, 0, 0]

    runs = run_counts("pool-")
    assert runs == {f"pool-{i}": 1 for i in range(5000)}  # no job ran twice
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    by_worker = Counter(Job.objects.values_list("locked_by", flat=True))
    assert set(by_worker) == {f"pooled-{n}" for n in range(4)}, by_worker
    # The enqueues, the runs' own writes (a transaction each), the claims and the
    # outcomes went through the pooler...
    assert bouncer.transactions(name) - before >= 500 + 5000
    assert bouncer.server_connections(name) <= 8
    for worker in workers:  # ...and nothing complained on the way.
        assert "WARNING" not in worker.output, worker.output
        assert "ERROR" not in worker.output, worker.output


def test_with_prepare_left_on_the_workers_stop_preparing_and_drain_every_job_once(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """PgBouncer 1.18 keeps no prepared statements: with PREPARE on, a statement
    prepared on one server connection is missing (or already there) on the next.
    The worker must not crash on it: it prepares nothing (it finds the pooler on
    its first statement, or meets a lost statement), says so, and goes on."""
    bouncer = pgbouncer(pool_size=2)
    env = pooled_env(bouncer, db_url, PREPARE=True)
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"prepared-{n}", env=env)
        for n in range(2)
    ]
    for worker in workers:
        worker.wait_for_output("listening for new jobs")
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"prep-{i}"]) for i in range(400))
    wait_for(lambda: status_counts() == {"done": 400}, 120, "the 400 jobs to be done")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0]
    assert run_counts("prep-") == {f"prep-{i}": 1 for i in range(400)}
    for worker in workers:
        assert "Traceback" not in worker.output, worker.output
        assert "ERROR" not in worker.output, worker.output
    said = [
        w.output for w in workers if "this process prepares no statement from now on" in w.output
    ]
    assert said, "no worker stopped preparing: the test proves nothing"


WEB_ENQUEUE = """
import json
from django.db import connection, transaction
from tests.testapp.tasks import tracked
with transaction.atomic():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), current_setting('synchronous_commit')")
        pid, commit = cursor.fetchone()
    job = tracked.enqueue("web")
print(json.dumps({"pid": pid, "synchronous_commit": commit, "job": job.id}))
"""


def pooled_session(bouncer: PgBouncer, name: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(bouncer.url(name), autocommit=True, prepare_threshold=None)


def server_state(bouncer: PgBouncer, name: str) -> tuple[int, str]:
    """(the server process, its synchronous_commit) a new pooled client is given."""
    with pooled_session(bouncer, name) as conn:
        cursor = conn.execute("SELECT pg_backend_pid(), current_setting('synchronous_commit')")
        row = cursor.fetchone()
        assert row is not None
        return int(str(row[0])), str(row[1])


def test_an_enqueue_after_a_worker_on_the_same_server_connection_commits_durably(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    # One server connection for every client, which starts as a production server's
    # does (synchronous_commit on; the embedded test server runs with it off).
    bouncer = pgbouncer(
        pool_size=1, database_options={"connect_query": "SET synchronous_commit TO on"}
    )
    name = connection.settings_dict["NAME"]
    pid, commit = server_state(bouncer, name)
    assert commit == "on"

    # The control: a session-level SET, as the worker used to make, stays on the
    # server connection and reaches the next client. This test can see a leak.
    with pooled_session(bouncer, name) as old_worker:
        old_worker.execute("SET synchronous_commit TO off")
    assert server_state(bouncer, name) == (pid, "off")
    with pooled_session(bouncer, name) as repair:
        repair.execute("SET synchronous_commit TO on")
    assert server_state(bouncer, name) == (pid, "on")

    # A worker with ASYNC_COMMIT (the default) claims, records, renews and reaps 50
    # jobs on that one server connection...
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"durable-{i}"]) for i in range(50))
    env = pooled_env(bouncer, db_url, ASYNC_COMMIT=True)
    before = bouncer.transactions(name)
    worker = start_worker("--burst", "--concurrency", "2", env=env)
    assert worker.wait(60) == 0, worker.output
    assert status_counts() == {"done": 50}
    # The runs' own writes (one each), and at least a claim and an outcome batch.
    assert bouncer.transactions(name) - before >= 50 + 2
    assert bouncer.server_connections(name) == 1

    # ...and the web request that gets it next commits its enqueue durably.
    web = json.loads(run_django(WEB_ENQUEUE, pooled_env(bouncer, db_url)))
    assert (web["pid"], web["synchronous_commit"]) == (pid, "on")
    assert Job.objects.filter(pk=web["job"]).exists()
    assert server_state(bouncer, name) == (pid, "on")


def test_without_listen_database_a_pooled_worker_polls_and_says_why(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE=None)
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"poll-{i}"]) for i in range(30))
    worker = start_worker("--concurrency", "2", "--poll-interval", "0.2", env=env)
    worker.wait_for_output("which keeps no session: this worker polls for new jobs")
    worker.wait_for_output(" listen=off (no session: polling) ")  # the banner says so too
    wait_for(lambda: status_counts() == {"done": 30}, 30, "the jobs to be done by polling")
    tracked.enqueue("poll-late")  # found by a poll, no NOTIFY heard
    wait_for(lambda: status_counts() == {"done": 31}, 10, "a job enqueued later")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert "listening for new jobs" not in worker.output
    assert run_counts("poll-") == {**{f"poll-{i}": 1 for i in range(30)}, "poll-late": 1}


def test_a_listen_database_through_the_pooler_is_named_in_a_warning(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """LISTEN_DATABASE must be a session: one that goes through a transaction pool
    hears no NOTIFY and cannot hold the id's lock. The worker says so at start."""
    bouncer = pgbouncer(pool_size=2)
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE="listen")
    databases = json.loads(env["PGQUEUE_TEST_DATABASES"])
    databases["listen"] = direct_alias(bouncer.url(connection.settings_dict["NAME"]))
    env["PGQUEUE_TEST_DATABASES"] = json.dumps(databases)
    tracked.enqueue("pooled-listen")
    worker = start_worker("--burst", env=env)
    assert worker.wait(30) == 0, worker.output
    assert (
        "PGQUEUE['LISTEN_DATABASE'] ('listen') reaches PostgreSQL through a connection pooler"
        in worker.output
    )
    assert run_counts("pooled-listen") == {"pooled-listen": 1}


def test_listen_database_may_be_a_dsn_for_the_listener_alone(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    bouncer = pgbouncer(pool_size=2)
    parts = urlsplit(db_url)
    dsn = urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}"))
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE=dsn)
    # Polls 30 s apart: a job started within 10 s was woken by a NOTIFY.
    worker = start_worker("--concurrency", "2", "--poll-interval", "30", env=env)
    worker.wait_for_output("listening for new jobs")
    tracked.enqueue("dsn-listen")
    wait_for(lambda: run_counts("dsn-listen") == {"dsn-listen": 1}, 10, "a NOTIFY to wake it")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output
    assert "connection pooler" not in worker.output  # neither the pooled warning nor polling
    assert "Traceback" not in worker.output


def test_a_shutdown_stuck_on_a_paused_pooler_ends_within_its_bound_naming_the_jobs(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """The pooler stops answering (PAUSE) while a job runs, then SIGTERM: the worker
    cannot give the job back, and its watchdog ends it at --shutdown-timeout + 7 s
    with the job's id, for the reaper to return it."""
    bouncer = pgbouncer(pool_size=2)
    name = connection.settings_dict["NAME"]
    job = tracked.enqueue("stuck", sleep=30)
    worker = start_worker("--shutdown-timeout", "1", env=pooled_env(bouncer, db_url))
    wait_for(lambda: run_counts("stuck") == {"stuck": 1}, 20, "the job to start")
    bouncer.admin(f"PAUSE {name}")
    try:
        worker.signal(signal.SIGTERM)
        started = time.monotonic()
        status = worker.wait(20)
        took = time.monotonic() - started
    finally:
        bouncer.admin(f"RESUME {name}")
    assert status == 1, worker.output
    assert took <= 1 + 7 + 3, took  # the watchdog's bound, and a busy host's slack
    assert f"jobs [{job.pk}] were held and may not have been given back" in worker.output


CHECK = "python -m django check --database default --settings=tests.settings"


FIRST_ENQUEUES = """
import logging
from django.test import override_settings
from django_pgqueue.sql import runner
from tests.testapp.tasks import tracked
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("django_pgqueue").addHandler(Keep())
with override_settings(SILENCED_SYSTEM_CHECKS=SILENCE_LIST):
    for i in range(3):
        tracked.enqueue(f"web-{i}")
print("default" in runner._unprepared, any("through a connection pooler" in m for m in said))
"""


@pytest.mark.parametrize(("silenced", "prepares"), [([], False), (["django_pgqueue.W001"], True)])
def test_a_process_that_finds_a_pooler_prepares_nothing_from_its_first_statement(
    pgbouncer: Bouncer, db_url: str, silenced: list[str], prepares: bool
) -> None:
    """With PREPARE on through PgBouncer 1.18, a process prepared its statements
    until one failed: meanwhile a statement could meet another client's of the same
    name (``_pg3_0``) on the server connection, and one of the same shape would run
    in place of ours. Each process now looks for a pooler on its first connection
    and prepares nothing, unless W001 is silenced (a pooler that keeps them)."""
    bouncer = pgbouncer(pool_size=2)
    code = FIRST_ENQUEUES.replace("SILENCE_LIST", repr(silenced))
    said = run_django(code, pooled_env(bouncer, db_url, PREPARE=True))
    assert said == f"{not prepares} {not prepares}"
    assert status_counts() == {"queued": 3}


def test_system_checks_warn_when_settings_and_the_pooler_disagree(
    pgbouncer: Bouncer, db_url: str
) -> None:
    assert check_pooler(databases=["default"]) == []  # the test database is direct
    bouncer = pgbouncer(pool_size=2)
    code = (
        "from django.core.management import call_command\n"
        "from django.core.management.base import SystemCheckError\n"
        "from django_pgqueue.checks import check_pooler\n"
        "print(sorted(m.id for m in check_pooler(databases=['default'])))\n"
    )
    wrong = pooled_env(bouncer, db_url, PREPARE=True, LISTEN_DATABASE=None)
    assert run_django(code, wrong) == "['django_pgqueue.W001', 'django_pgqueue.W002']"
    right = pooled_env(bouncer, db_url)
    assert run_django(code, right) == "[]"
