"""A third audit of issue 17's contract, driven as a user would: a transaction-pool and
a session-pool PgBouncer (Debian's 1.18, one of the test's own on a port of its own)
in front of ``DATABASE``, ``LISTEN_DATABASE`` direct; enqueues rolled back with
their transaction through the pool; four workers on shared and separate queues;
a pooler SIGKILLed and restarted mid-drain; ``reapjobs`` and ``queuestats``
through it; and the multi-host, ``target_session_attrs=read-write`` forms the
failover docs give.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from urllib.parse import quote, urlsplit

import psycopg
import pytest
from django.db import connection

from devtools.pgbouncer import PgBouncer, PgBouncerMissing
from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.pooler import shown
from django_pgqueue.records import JobSpec
from django_pgqueue.worker.listener import Listener
from django_pgqueue.worker.services import ConnectionEpoch, Supervision
from django_pgqueue.worker.session import WorkerSession
from tests.cluster.conftest import direct_alias, pgbouncer, pooled_env, run_django
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import ROOT, WorkerProcess, django_command, start_worker, wait_for

__all__ = ["pgbouncer", "start_worker"]  # the fixtures, for these tests too

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]
Bouncer = Callable[..., PgBouncer]


def closed_port() -> int:
    """A local port nothing listens on (a host that is down, for a multi-host address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


ATOMIC_ENQUEUES = """
from django.db import transaction
from django_pgqueue.models import Job
from tests.testapp.djtasks import echo
from tests.testapp.tasks import tracked
try:
    with transaction.atomic():
        tracked.enqueue("atomic-rolled-back")
        echo.enqueue("atomic-tasks-api-rolled-back")
        with transaction.atomic():
            tracked.enqueue("atomic-inner-rolled-back")
        raise RuntimeError("the request fails")
except RuntimeError:
    pass
with transaction.atomic():
    tracked.enqueue("atomic-kept")
    try:
        with transaction.atomic():  # a savepoint rolled back alone
            tracked.enqueue("atomic-savepoint-rolled-back")
            raise RuntimeError
    except RuntimeError:
        pass
print(json.dumps(sorted(Job.objects.values_list("args__0", flat=True))))
"""


@pytest.mark.parametrize("prepare", [False, True])
def test_an_enqueue_through_the_pool_rolls_back_with_its_transaction(
    pgbouncer: Bouncer, db_url: str, start_worker: Start, prepare: bool
) -> None:
    """With PREPARE as the docs give it, and left on (the pooler look then runs
    inside the request's transaction, as its first statement)."""
    bouncer = pgbouncer(pool_size=1)
    env = pooled_env(bouncer, db_url, PREPARE=prepare)
    said = run_django("import json\n" + ATOMIC_ENQUEUES, env)
    assert json.loads(said) == ["atomic-kept"]
    assert list(Job.objects.values_list("args__0", "status")) == [("atomic-kept", "queued")]
    worker = start_worker("--burst", env=env)
    assert worker.wait(30) == 0, worker.output
    assert run_counts("atomic-") == {"atomic-kept": 1}


def test_four_workers_on_shared_and_separate_queues_drain_through_the_pool_each_job_once(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """Two workers share "emails", one serves "reports" alone, one serves every queue:
    each job is run once, by a worker that serves its queue."""
    bouncer = pgbouncer(pool_size=6)
    env = pooled_env(bouncer, db_url)
    serves = {"w-emails-1": "emails", "w-emails-2": "emails", "w-reports": "reports", "w-all": ""}
    workers = [
        start_worker(
            "--concurrency", "3", "--worker-id", worker_id, *(("--queues", q) if q else ()), env=env
        )
        for worker_id, q in serves.items()
    ]
    for worker in workers:
        worker.wait_for_output("listening for new jobs")
    counts = {"emails": 400, "reports": 300, "default": 200}
    for queue, count in counts.items():
        Job.objects.enqueue_many(
            JobSpec.build(tracked, [f"q-{queue}-{i}"], queue=queue) for i in range(count)
        )
    wait_for(lambda: status_counts() == {"done": 900}, 90, "the 900 jobs to be done")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0, 0, 0]
    expected = {f"q-{q}-{i}": 1 for q, count in counts.items() for i in range(count)}
    assert run_counts("q-") == expected
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    allowed = {
        "emails": {"w-emails-1", "w-emails-2", "w-all"},
        "reports": {"w-reports", "w-all"},
        "default": {"w-all"},
    }
    for queue, locked_by in Job.objects.values_list("queue", "locked_by").distinct():
        assert locked_by in allowed[queue], (queue, locked_by)
    assert set(Job.objects.filter(queue="default").values_list("locked_by", flat=True)) == {"w-all"}
    for worker in workers:
        assert "Traceback" not in worker.output, worker.output


def test_a_pooler_sigkilled_and_restarted_mid_drain_loses_and_doubles_nothing(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """The PgBouncer process dies (SIGKILL: every client and server connection
    drops, and nothing listens on its port for a while), then starts again on the
    same port: the same workers carry on, every job ends done, and a job runs again
    only after an entry in its error history."""
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(bouncer, db_url)
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"sigkill-{i}"], {"sleep": 0.02}) for i in range(600)
    )
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"bounced-{n}", env=env) for n in range(3)
    ]
    wait_for(lambda: Job.objects.filter(status="done").count() >= 100, 30, "a drain under way")
    assert bouncer.process is not None
    bouncer.process.kill()
    bouncer.process.wait()
    done_while_down = Job.objects.filter(status="done").count()
    wait_for(lambda: all("failed, retrying" in w.output for w in workers), 20, "each to notice")
    assert Job.objects.filter(status="done").count() < 600, "drained before the kill"
    bouncer.start()
    wait_for(lambda: status_counts() == {"done": 600}, 90, "every job, after the restart")
    assert done_while_down < 600
    for worker in workers:
        assert worker.proc.poll() is None, worker.output  # never restarted
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0, 0]
    runs = run_counts("sigkill-")
    assert set(runs) == {f"sigkill-{i}" for i in range(600)}
    for label, errors in Job.objects.values_list("args__0", "errors"):
        assert 1 <= runs[label] <= 1 + len(errors), (label, runs[label], errors)
    for worker in workers:
        # Runs whose own connection was refused failed with their traceback; no
        # thread of the worker's own met anything unexpected.
        assert "unexpected error" not in worker.output, worker.output
        assert "failed outside its loop" not in worker.output, worker.output


def test_reapjobs_and_queuestats_through_the_pool_see_every_host(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """Workers of three ids (as three hosts would be) in the registry, read through
    the pool by ``queuestats``; one SIGKILLed with a job running, whose lease
    ``reapjobs`` (through the pool too) ends once it has expired."""
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(bouncer, db_url, LEASE=2, HEARTBEAT_INTERVAL=0.5, REAP_INTERVAL=3600)
    ids = ["host-a:1", "host-b:1", "host-c:1"]
    workers = {
        worker_id: start_worker("--concurrency", "1", "--worker-id", worker_id, env=env)
        for worker_id in ids
    }
    for worker in workers.values():
        worker.wait_for_output("listening for new jobs")
    stats = django_command(env["DATABASE_URL"], "queuestats", env=env)
    assert stats.returncode == 0, stats.stderr
    rows = [line.split() for line in stats.stdout.splitlines()]
    listed = {row[0]: row[1] for row in rows if row and row[0] in ids}
    assert listed == dict.fromkeys(ids, "alive"), stats.stdout

    job = tracked.enqueue("reaped-through-the-pool", sleep=60)
    wait_for(lambda: run_counts("reaped-") == {"reaped-through-the-pool": 1}, 20, "the run")
    job.refresh_from_db()
    holder = job.locked_by
    assert holder in ids
    for worker_id, worker in workers.items():
        if worker_id == holder:
            worker.kill()
        else:
            worker.signal(signal.SIGTERM)
            assert worker.wait(30) == 0, worker.output
    Job.objects.filter(pk=job.pk).update(kwargs={"sleep": 0})

    def reaped() -> bool:
        done = django_command(env["DATABASE_URL"], "reapjobs", env=env)
        assert done.returncode == 0, done.stderr
        return Job.objects.get(pk=job.pk).status == "queued"

    wait_for(reaped, 20, "reapjobs to return the dead worker's job")
    job.refresh_from_db()
    assert [e["exception"] for e in job.errors] == ["LeaseExpired"]
    stats = django_command(env["DATABASE_URL"], "queuestats", env=env)
    assert stats.returncode == 0, stats.stderr
    rows = [line.split() for line in stats.stdout.splitlines()]
    assert {row[0]: row[1] for row in rows if row and row[0] in ids} == {holder: "gone"}
    again = start_worker("--burst", env=env)
    assert again.wait(30) == 0, again.output
    assert run_counts("reaped-") == {"reaped-through-the-pool": 2}
    assert status_counts() == {"done": 1}


def multi_host_forms(db_url: str) -> dict[str, str]:
    """``LISTEN_DATABASE`` DSNs as the failover docs give them: two hosts, the first
    down, ``target_session_attrs=read-write``; a keyword DSN and a URL."""
    parts = urlsplit(db_url)
    name = connection.settings_dict["NAME"]
    down, up = closed_port(), parts.port or 5432
    user = parts.username or "postgres"
    # The embedded server asks for the password; the PostgreSQL 15 one trusts.
    password = parts.password or ""
    return {
        "keywords": (
            f"host=127.0.0.1,127.0.0.1 port={down},{up} dbname={name} user={user} "
            f"password={password!r} target_session_attrs=read-write connect_timeout=3"
        ),
        "url": (
            f"postgres://{user}:{quote(password, safe='')}@127.0.0.1:{down},127.0.0.1:{up}/"
            f"{name}?target_session_attrs=read-write&connect_timeout=3"
        ),
    }


@pytest.mark.parametrize("form", ["keywords", "url"])
def test_a_multi_host_read_write_listen_database_dsn_is_taken_as_documented(
    pgbouncer: Bouncer, db_url: str, start_worker: Start, form: str
) -> None:
    """The worker finds the writable host past one that is down, LISTENs there (a
    NOTIFY wakes it: polls are 30 s apart) and holds its id's lock there."""
    bouncer = pgbouncer(pool_size=4)
    dsn = multi_host_forms(db_url)[form]
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE=dsn)
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "django_pgqueue.E003" not in done.stderr + done.stdout
    assert "django_pgqueue.W00" not in done.stderr + done.stdout
    worker = start_worker("--worker-id", "multi-host", "--poll-interval", "30", env=env)
    worker.wait_for_output("listening for new jobs")
    tracked.enqueue("multi-host-listen")
    wait_for(lambda: run_counts("multi-host-") == {"multi-host-listen": 1}, 10, "a NOTIFY")
    twin = start_worker("--worker-id", "multi-host", "--burst", env=env)
    assert twin.wait(30) == 1, twin.output
    assert "worker id 'multi-host' is in use" in twin.output
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert "connection pooler" not in worker.output
    assert "Traceback" not in worker.output


def test_a_multi_host_read_write_database_runs_workers_and_enqueues_as_documented(
    db_url: str, start_worker: Start
) -> None:
    """``DATABASES`` as the failover docs give it ("HOST": "a,b", "PORT": "p,q",
    ``OPTIONS`` with ``target_session_attrs``), its first host down: ``check``,
    an enqueue, and a worker (its session on the same alias) all find the primary."""
    parts = urlsplit(db_url)
    both = {
        "HOST": "127.0.0.1,127.0.0.1",
        "PORT": f"{closed_port()},{parts.port or 5432}",
        "OPTIONS": {"target_session_attrs": "read-write", "connect_timeout": 3},
    }
    env = {"PGQUEUE_TEST_DATABASES": json.dumps({"default": both})}
    done = django_command(db_url, "check", "--database", "default", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
    said = run_django(
        "from tests.testapp.tasks import tracked\nprint(tracked.enqueue('multi-db').status)",
        {**env, "DATABASE_URL": db_url},
    )
    assert said == "queued"
    worker = start_worker("--worker-id", "multi-db", "--poll-interval", "30", env=env)
    worker.wait_for_output("listening for new jobs")
    wait_for(lambda: run_counts("multi-db") == {"multi-db": 1}, 10, "the queued job")
    tracked.enqueue("multi-db-woken")
    wait_for(lambda: run_counts("multi-db-woken") == {"multi-db-woken": 1}, 10, "a NOTIFY")
    twin = start_worker("--worker-id", "multi-db", "--burst", env=env)
    assert twin.wait(30) == 1, twin.output
    assert "worker id 'multi-db' is in use" in twin.output
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert "Traceback" not in worker.output


def test_a_session_mode_pool_with_prepare_on_and_w001_silenced_prepares_and_drains(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """The docs: in a session-mode pool ``PREPARE = True`` works; silence W001 then.
    The workers prepare their statements (nothing stops them), each job runs once."""
    bouncer = pgbouncer(pool_mode="session", pool_size=30)
    env = pooled_env(bouncer, db_url, PREPARE=True)
    silenced = "tests.integration.silenced_w001"
    env["DJANGO_SETTINGS_MODULE"] = silenced
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "System check identified no issues (1 silenced)" in said, said
    workers = [
        # The last --settings wins over start_worker's own.
        start_worker(
            "--concurrency", "2", "--worker-id", f"session-{n}", f"--settings={silenced}", env=env
        )
        for n in range(2)
    ]
    for worker in workers:
        worker.wait_for_output("listening for new jobs")
    Job.objects.enqueue_many(JobSpec.build(tracked, [f"session-{i}"]) for i in range(300))
    wait_for(lambda: status_counts() == {"done": 300}, 60, "the 300 jobs to be done")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0]
    assert run_counts("session-") == {f"session-{i}": 1 for i in range(300)}
    for worker in workers:
        assert "prepares no statement" not in worker.output, worker.output
        assert "Traceback" not in worker.output, worker.output


def test_a_listen_database_through_a_session_pool_hears_notify_but_locks_nothing(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """The docs: an alias in LISTEN_DATABASE that goes through a pooler is used as it
    is, with a warning; a session-mode pool delivers NOTIFY, and no lock is taken on
    the worker's id there (a second worker with the id is not detected, and the
    registry row has no lock_pid)."""
    pooled = pgbouncer(pool_size=4)
    sessions = pgbouncer(pool_mode="session", pool_size=4)
    env = pooled_env(pooled, db_url, LISTEN_DATABASE="listen")
    databases = json.loads(env["PGQUEUE_TEST_DATABASES"])
    databases["listen"] = direct_alias(sessions.url(connection.settings_dict["NAME"]))
    env["PGQUEUE_TEST_DATABASES"] = json.dumps(databases)
    worker = start_worker("--worker-id", "session-listen", "--poll-interval", "30", env=env)
    worker.wait_for_output("listening for new jobs")
    assert "PGQUEUE['LISTEN_DATABASE'] ('listen') reaches PostgreSQL through a connection" in (
        worker.output
    )
    tracked.enqueue("session-listen")
    wait_for(lambda: run_counts("session-listen") == {"session-listen": 1}, 10, "a NOTIFY")
    wait_for(lambda: RegisteredWorker.objects.filter(id="session-listen").exists(), 10, "its row")
    assert RegisteredWorker.objects.get(id="session-listen").lock_pid is None
    twin = start_worker("--worker-id", "session-listen", "--burst", env=env)
    assert twin.wait(30) == 0, twin.output  # as documented: not detected there
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output


@pytest.mark.parametrize("how", ["--no-listen", "LISTEN_NOTIFY"])
def test_a_pooled_worker_told_not_to_listen_says_only_what_it_loses(
    pgbouncer: Bouncer, db_url: str, start_worker: Start, how: str
) -> None:
    """Without LISTEN (``--no-listen``, or ``LISTEN_NOTIFY = False``, where W002 does
    not apply) the worker was told it "polls for new jobs ... instead of listening":
    it never meant to listen. What it does lose is the lock on its id."""
    bouncer = pgbouncer(pool_size=2)
    settings = {"LISTEN_NOTIFY": False} if how == "LISTEN_NOTIFY" else {}
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE=None, **settings)
    if how == "LISTEN_NOTIFY":
        done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
        assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
    tracked.enqueue("told-not-to-listen")
    worker = start_worker(
        "--burst",
        "--worker-id",
        "deaf",
        *(("--no-listen",) if how == "--no-listen" else ()),
        env=env,
    )
    assert worker.wait(30) == 0, worker.output
    assert run_counts("told-") == {"told-not-to-listen": 1}
    (line,) = [line for line in worker.output.splitlines() if "connection pooler" in line]
    assert line == (
        "database 'default' reaches PostgreSQL through a connection pooler, which keeps no "
        "session: this worker cannot detect another worker using its id; set "
        "PGQUEUE['LISTEN_DATABASE'] to a database alias, or a DSN, that connects to "
        "PostgreSQL directly"
    )


def test_a_worker_names_psycopgs_preparing_behind_the_pool_at_start_and_w001_silences_it(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """The docs: a worker logs W001's warning about ``OPTIONS["prepare_threshold"]``
    when it starts (here its session is direct, on LISTEN_DATABASE), and silencing
    W001 silences it; it drains either way (Django's client-side cursors prepare
    nothing, and with PREPARE off the queue's statements are not prepared)."""
    bouncer = pgbouncer(pool_size=2)
    env = pooled_env(bouncer, db_url)
    databases = json.loads(env["PGQUEUE_TEST_DATABASES"])
    databases["default"]["OPTIONS"] = {"prepare_threshold": 0}
    env["PGQUEUE_TEST_DATABASES"] = json.dumps(databases)
    warning = (
        "database 'default' reaches PostgreSQL through a connection pooler while "
        "OPTIONS['prepare_threshold'] = 0: unless the pooler keeps prepared statements"
    )
    for silenced in (False, True):
        tracked.enqueue(f"threshold-{silenced}")
        settings = ("--settings=tests.integration.silenced_w001",) if silenced else ()
        worker = start_worker("--burst", *settings, env=env)
        assert worker.wait(30) == 0, worker.output
        assert (warning in worker.output) is not silenced, worker.output
    assert run_counts("threshold-") == {"threshold-False": 1, "threshold-True": 1}


@pytest.mark.parametrize("listen", ["alias", "dsn"])
def test_a_listen_database_on_another_database_of_the_server_stops_the_worker(
    pgbouncer: Bouncer, db_url: str, start_worker: Start, listen: str
) -> None:
    """A direct LISTEN_DATABASE must be the jobs' database: NOTIFY and advisory locks
    are per database. One on another database of the server (a DSN whose dbname is
    missing or wrong) heard no new job while saying "listening for new jobs", and a
    second worker with its --worker-id, whose session was on the jobs' database,
    started beside it."""
    bouncer = pgbouncer(pool_size=2)
    elsewhere = urlsplit(db_url)._replace(path="/postgres").geturl()
    if listen == "dsn":
        env = pooled_env(bouncer, db_url, LISTEN_DATABASE=elsewhere)
    else:
        env = pooled_env(bouncer, db_url, LISTEN_DATABASE="elsewhere")
        databases = json.loads(env["PGQUEUE_TEST_DATABASES"])
        databases["elsewhere"] = direct_alias(elsewhere)
        env["PGQUEUE_TEST_DATABASES"] = json.dumps(databases)
    tracked.enqueue("never-heard")
    worker = start_worker("--worker-id", "elsewhere", env=env)
    assert worker.wait(30) == 1, worker.output
    shown_as = shown(elsewhere) if listen == "dsn" else "elsewhere"
    name = connection.settings_dict["NAME"]
    (line,) = [line for line in worker.output.splitlines() if "LISTEN_DATABASE" in line]
    assert line == (
        f"PGQUEUE['LISTEN_DATABASE'] ({shown_as!r}) connects to database 'postgres', but "
        f"the jobs of database 'default' are in {name!r}: no NOTIFY of a new job would "
        "reach this worker there, and its lock on its worker id would not keep out a "
        "worker with the same id; point it at the same database"
    )
    assert "listening for new jobs" not in worker.output
    assert status_counts() == {"queued": 1}


def test_a_listen_database_on_another_database_stops_the_worker_once_its_pooler_is_up(
    db_url: str, start_worker: Start
) -> None:
    """The jobs' pooler is not up yet when the worker starts (a sidecar starting after
    it): the session, on another database of the server, could not be compared with
    the jobs' database then, and was kept as it was, unchecked: the worker claimed
    once the pooler came up, deaf to NOTIFY and with its id's lock on the wrong
    database, for as long as the session lasted."""
    try:
        bouncer = PgBouncer(db_url, pool_size=2)  # started below, after the worker
    except PgBouncerMissing as exc:
        pytest.skip(str(exc))
    try:
        elsewhere = urlsplit(db_url)._replace(path="/postgres").geturl()
        env = pooled_env(bouncer, db_url, LISTEN_DATABASE=elsewhere)
        worker = start_worker("--worker-id", "late-pooler", "--poll-interval", "1", env=env)
        worker.wait_for_output("claim failed, retrying")  # started, its session opened or not
        bouncer.start()
        assert worker.wait(30) == 1, worker.output
    finally:
        bouncer.stop()
    assert "listening for new jobs" not in worker.output
    assert (
        "PGQUEUE['LISTEN_DATABASE'] ("
        f"{shown(elsewhere)!r}) connects to database 'postgres', but the jobs of database "
        f"'default' are in {connection.settings_dict['NAME']!r}"
    ) in worker.output, worker.output


def test_behind_a_session_pool_w002_is_answered_by_naming_the_pool_in_listen_database(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """A session-mode pool as DATABASE draws W002 (the check cannot see the mode).
    Silencing it keeps the worker polling (an INFO line says so); naming the pooled
    alias itself in LISTEN_DATABASE makes it LISTEN through the pool (a NOTIFY wakes
    it: polls are 30 s apart), with the warning that it takes no lock there."""
    bouncer = pgbouncer(pool_mode="session", pool_size=30)
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE=None)
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    assert "django_pgqueue.W002" in done.stderr, done.stdout + done.stderr
    silenced = start_worker(
        "--poll-interval", "30", "--settings=tests.integration.silenced_w002", env=env
    )
    silenced.wait_for_output("starting worker")
    assert "listening for new jobs" not in silenced.output
    assert "this worker polls for new jobs (every 30s at most) instead of listening" in (
        silenced.output
    )
    silenced.signal(signal.SIGTERM)
    assert silenced.wait(30) == 0, silenced.output

    env = pooled_env(bouncer, db_url, LISTEN_DATABASE="default")
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
    worker = start_worker("--worker-id", "session-pool", "--poll-interval", "30", env=env)
    worker.wait_for_output("listening for new jobs")
    assert "PGQUEUE['LISTEN_DATABASE'] ('default') reaches PostgreSQL through a connection" in (
        worker.output
    )
    tracked.enqueue("session-pool-woken")
    wait_for(lambda: run_counts("session-pool-") == {"session-pool-woken": 1}, 10, "a NOTIFY")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output


def test_a_listen_database_through_a_transaction_pool_is_warned_to_leave_its_listen_there(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """The worker cannot tell a transaction pool from a session pool, so it LISTENs
    on a pooled LISTEN_DATABASE all the same: in a transaction pool the LISTEN stays
    on a server connection that other clients are handed next. Its warning says so."""
    pooled = pgbouncer(pool_size=1)
    name = connection.settings_dict["NAME"]
    env = pooled_env(pooled, db_url, LISTEN_DATABASE=pooled.url(name))
    worker = start_worker("--worker-id", "leaky", "--concurrency", "1", env=env)
    worker.wait_for_output("listening for new jobs")
    with psycopg.connect(pooled.url(name), autocommit=True, prepare_threshold=None) as web:
        channels = web.execute("SELECT pg_listening_channels()").fetchall()
    assert channels == [("pgqueue_jobs",)]
    (line,) = [line for line in worker.output.splitlines() if "LISTEN_DATABASE" in line]
    assert (
        "unless it is a session-mode pool, no NOTIFY reaches this worker (it polls every 2s "
        "at most) and its LISTEN stays on a server connection of the pool, which other "
        "clients are handed next;"
    ) in line, line
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output


def test_a_read_write_listen_database_that_finds_only_a_read_only_server_is_waited_for(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """As during a failover, before the standby is promoted: libpq refuses the only
    host (read-only here through ``options``), the worker says it cannot open its
    session yet and runs its jobs meanwhile (polling), not a reason to stop."""
    bouncer = pgbouncer(pool_size=2)
    parts = urlsplit(db_url)
    dsn = (
        f"host=127.0.0.1 port={parts.port or 5432} dbname={connection.settings_dict['NAME']} "
        f"user={parts.username or 'postgres'} password={parts.password or ''!r} "
        "target_session_attrs=read-write "
        "options='-c default_transaction_read_only=on'"
    )
    env = pooled_env(bouncer, db_url, LISTEN_DATABASE=dsn)
    tracked.enqueue("read-only-session")
    worker = start_worker("--worker-id", "read-only", "--poll-interval", "0.5", env=env)
    worker.wait_for_output("cannot open the worker's session connection yet: ")
    assert "session is read-only" in worker.output, worker.output
    wait_for(lambda: status_counts() == {"done": 1}, 15, "the job, without a session")
    assert worker.proc.poll() is None, worker.output
    assert "listening for new jobs" not in worker.output
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert run_counts("read-only-") == {"read-only-session": 1}


@pytest.mark.parametrize("setup", ["direct", "session", "transaction"])
def test_w001_and_w002_for_each_way_to_the_server(
    pgbouncer: Bouncer, db_url: str, setup: str
) -> None:
    """``check --database default``: W001 when PREPARE is on behind any pooler, W002
    when LISTEN_DATABASE is unset behind any pooler (the check cannot see the mode),
    and neither for a direct connection, whatever the settings."""
    if setup == "direct":
        url = direct_alias(db_url)
        env = {
            "DATABASE_URL": db_url,
            "PGQUEUE_TEST_DATABASES": json.dumps({"default": url, "direct": url}),
        }
    else:
        bouncer = pgbouncer(pool_mode=setup, pool_size=2)
        env = pooled_env(bouncer, db_url)
    said: dict[tuple[bool, bool], set[str]] = {}
    for prepare in (False, True):
        for listen in (False, True):
            pgqueue = {"PREPARE": prepare, "LISTEN_DATABASE": "direct" if listen else None}
            run = {**env, "PGQUEUE_TEST_PGQUEUE": json.dumps(pgqueue)}
            done = django_command(run["DATABASE_URL"], "check", "--database", "default", env=run)
            assert done.returncode == 0, done.stdout + done.stderr
            out = done.stdout + done.stderr
            said[prepare, listen] = {w for w in ("W001", "W002") if f"django_pgqueue.{w}" in out}
    if setup == "direct":
        assert said == {key: set() for key in said}
    else:
        assert said == {
            (False, True): set(),
            (False, False): {"W002"},
            (True, True): {"W001"},
            (True, False): {"W001", "W002"},
        }


def test_a_listen_database_on_another_database_found_on_a_reconnect_stops_the_worker(
    db_url: str,
) -> None:
    """The listener thread opens the session after the start when it could not be
    reached then: there too a session on another database stops the worker."""
    elsewhere = urlsplit(db_url)._replace(path="/postgres").geturl()
    session = WorkerSession("reopened-elsewhere", "default", elsewhere, "pgqueue_jobs", 1.0)
    reasons: list[str] = []
    supervision = Supervision(fatal=reasons.append, epoch=ConnectionEpoch())
    listener = Listener(session, None, lambda: None, lambda: None, supervision)
    listener.start()
    listener.join(10)
    assert not listener.is_alive()
    name = connection.settings_dict["NAME"]
    assert reasons == [
        f"PGQUEUE['LISTEN_DATABASE'] ({shown(elsewhere)!r}) connects to database 'postgres', "
        f"but the jobs of database 'default' are in {name!r}: no NOTIFY of a new job would "
        "reach this worker there, and its lock on its worker id would not keep out a worker "
        "with the same id; point it at the same database"
    ]
    assert not session.is_open


WEB_PROCESS = """
import sys
from django.db import transaction
from tests.testapp.djtasks import echo
from tests.testapp.tasks import tracked
tracked.enqueue("web-before")
print("enqueued", flush=True)
sys.stdin.readline()  # the pooler is killed and started again meanwhile
tracked.enqueue("web-after")
with transaction.atomic():
    tracked.enqueue("web-after-atomic")
echo.enqueue("web-after-tasks-api")
print("enqueued again", flush=True)
"""


@pytest.mark.parametrize("prepare", [False, True])
def test_a_web_process_enqueues_again_after_the_pooler_is_killed_and_restarted(
    pgbouncer: Bouncer, db_url: str, prepare: bool
) -> None:
    """A long-lived process (a web server) whose pooled connection died with the
    pooler: its next enqueues (plain, in a transaction, through the Tasks API) each
    succeed on a new connection, none fails once first."""
    bouncer = pgbouncer(pool_size=2)
    env = {**os.environ, **pooled_env(bouncer, db_url, PREPARE=prepare)}
    web = subprocess.Popen(
        [sys.executable, "-m", "django", "shell", "--settings=tests.settings", "-c", WEB_PROCESS],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert web.stdout is not None
    said: list[str] = []
    while not said or said[-1] != "enqueued":
        line = web.stdout.readline()
        assert line, said
        said.append(line.strip())
    assert bouncer.process is not None
    bouncer.process.kill()
    bouncer.process.wait()
    bouncer.start()
    out, _ = web.communicate("go\n", timeout=60)
    assert web.returncode == 0, out
    assert out.strip().splitlines()[-1] == "enqueued again", out
    assert sorted(Job.objects.values_list("args__0", flat=True)) == [
        "web-after",
        "web-after-atomic",
        "web-after-tasks-api",
        "web-before",
    ]
