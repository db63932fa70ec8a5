"""Issue 17's contract behind a real PgBouncer (transaction mode, Debian's 1.18), as a
user drives it: ``manage.py check --database``, ``--worker-id`` collisions through
``LISTEN_DATABASE`` (an alias or a DSN), a restart under a fixed id, leases renewed
and reaped through the pooler, and the Tasks API through it.

The pooler comes from tests/cluster's fixture: these tests skip without pgbouncer
(and fail when CI is set), as tests/cluster/test_pgbouncer.py does.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from devtools.pgbouncer import PgBouncer
from django_pgqueue.models import Job
from django_pgqueue.pooler import shown
from tests.cluster.conftest import pgbouncer, pooled_env, run_django
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, django_command, start_worker, wait_for

__all__ = ["pgbouncer", "start_worker"]  # the fixtures, for these tests too

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]
Bouncer = Callable[..., PgBouncer]


def direct_dsn(db_url: str) -> str:
    """The test database's URL, straight to PostgreSQL (a LISTEN_DATABASE DSN)."""
    parts = urlsplit(db_url)
    return urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}"))


def check_output(bouncer: PgBouncer, db_url: str, **pgqueue: object) -> tuple[int, str]:
    """``manage.py check --database default`` in a process whose default goes through
    ``bouncer``: (its exit status, stdout and stderr)."""
    env = pooled_env(bouncer, db_url, **pgqueue)
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    return done.returncode, done.stdout + done.stderr


def test_manage_py_check_database_names_w001_and_w002_behind_the_pooler(
    pgbouncer: Bouncer, db_url: str
) -> None:
    bouncer = pgbouncer(pool_size=2)
    status, said = check_output(bouncer, db_url, PREPARE=True, LISTEN_DATABASE=None)
    assert status == 0, said  # warnings, not errors
    assert "django_pgqueue.W001" in said, said
    assert "django_pgqueue.W002" in said, said
    assert "PGQUEUE['PREPARE'] is True" in said
    # The settings the docs give: nothing to say.
    status, said = check_output(bouncer, db_url)
    assert status == 0, said
    assert "django_pgqueue.W00" not in said, said
    assert "System check identified no issues" in said
    # psycopg's own preparing is named too.
    env = pooled_env(bouncer, db_url)
    databases = json.loads(env["PGQUEUE_TEST_DATABASES"])
    databases["default"]["OPTIONS"] = {"prepare_threshold": 5}
    env["PGQUEUE_TEST_DATABASES"] = json.dumps(databases)
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    assert done.returncode == 0, done.stderr
    assert "django_pgqueue.W001" in done.stderr, done.stderr
    assert "OPTIONS['prepare_threshold'] = 5" in done.stderr
    assert "django_pgqueue.W002" not in done.stderr
    # A LISTEN_DATABASE given as a DSN is a session too: no W002.
    status, said = check_output(bouncer, db_url, LISTEN_DATABASE=direct_dsn(db_url))
    assert status == 0, said
    assert "django_pgqueue.W00" not in said, said


@pytest.mark.parametrize("listen", ["alias", "dsn"])
def test_a_second_worker_with_the_same_id_through_the_pooler_refuses_to_start(
    pgbouncer: Bouncer, db_url: str, start_worker: Start, listen: str
) -> None:
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(
        bouncer, db_url, **({"LISTEN_DATABASE": direct_dsn(db_url)} if listen == "dsn" else {})
    )
    first = start_worker("--worker-id", "pooled-twin", "--concurrency", "2", env=env)
    first.wait_for_output("listening for new jobs")
    second = start_worker("--worker-id", "pooled-twin", "--concurrency", "2", env=env)
    assert second.wait(30) == 1, second.output
    assert "worker id 'pooled-twin' is in use" in second.output
    # A worker connected directly (no pooler, no LISTEN_DATABASE) is refused too:
    # the lock is the database's, whichever way a worker reaches it.
    direct = start_worker("--worker-id", "pooled-twin", "--burst")
    assert direct.wait(30) == 1, direct.output
    assert "worker id 'pooled-twin' is in use" in direct.output
    # Without LISTEN the session still holds the id's lock.
    deaf = start_worker("--worker-id", "pooled-twin", "--no-listen", env=env)
    assert deaf.wait(30) == 1, deaf.output
    assert "worker id 'pooled-twin' is in use" in deaf.output

    tracked.enqueue("twin-pooled")
    wait_for(lambda: status_counts() == {"done": 1}, 20, "the first worker to run it")
    assert Job.objects.get().locked_by == "pooled-twin"
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.output
    again = start_worker("--worker-id", "pooled-twin", "--burst", env=env)
    assert again.wait(30) == 0, again.output  # the lock ended with the first worker
    assert "in use" not in again.output
    assert run_counts("twin-pooled") == {"twin-pooled": 1}


def test_a_restart_under_a_fixed_id_through_the_pooler_returns_the_dead_runs_at_once(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """LEASE is 30 s in the test settings: a job back within 15 s was returned by the
    restarted worker's look for runs of its id, not by the lease."""
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(bouncer, db_url)
    job = tracked.enqueue("held-pooled", sleep=60)
    first = start_worker("--worker-id", "pod-0", "--concurrency", "2", env=env)
    wait_for(lambda: run_counts("held-pooled") == {"held-pooled": 1}, 20, "the job to start")
    first.kill()
    job.refresh_from_db()
    assert (job.status, job.locked_by) == ("running", "pod-0")

    tracked.enqueue("after-pooled")
    second = start_worker(
        "--worker-id", "pod-0", "--concurrency", "2", "--shutdown-timeout", "1", env=env
    )
    second.wait_for_output("1 job still held by an earlier process with worker id 'pod-0'")
    wait_for(lambda: run_counts("held-pooled") == {"held-pooled": 2}, 15, "the run again")
    wait_for(lambda: run_counts("after-pooled") == {"after-pooled": 1}, 15, "the other job")
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.output
    job.refresh_from_db()
    assert job.status == "queued"  # given back by the stop: it sleeps 60 s
    assert job.attempts == 1
    assert [e["exception"] for e in job.errors] == ["LeaseExpired", "WorkerShutdown"]


def test_leases_are_renewed_and_reaped_through_the_pooler(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """A 2 s lease: a 5 s job lives only if the heartbeat renews it through the pool,
    and a killed worker's run comes back through another worker's reaper."""
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(bouncer, db_url, LEASE=2, HEARTBEAT_INTERVAL=0.5, REAP_INTERVAL=0.5)
    long = tracked.enqueue("renewed", sleep=5)
    worker = start_worker("--concurrency", "2", "--worker-id", "renewing", env=env)
    wait_for(lambda: status_counts() == {"done": 1}, 30, "the long job to end")
    assert run_counts("renewed") == {"renewed": 1}
    long.refresh_from_db()
    assert (long.attempts, long.errors) == (1, [])

    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output

    doomed_job = tracked.enqueue("reaped", sleep=60)
    doomed = start_worker("--concurrency", "1", "--worker-id", "doomed", env=env)
    wait_for(lambda: run_counts("reaped") == {"reaped": 1}, 20, "the doomed run to start")
    doomed.kill()
    Job.objects.filter(pk=doomed_job.pk).update(kwargs={"sleep": 0})
    reaper = start_worker("--concurrency", "2", env=env)
    wait_for(lambda: run_counts("reaped") == {"reaped": 2}, 20, "the reaped run again")
    wait_for(lambda: status_counts() == {"done": 2}, 20, "the reaped job to be done")
    reaper.signal(signal.SIGTERM)
    assert reaper.wait(30) == 0, reaper.output
    doomed_job.refresh_from_db()
    assert [e["exception"] for e in doomed_job.errors] == ["LeaseExpired"]
    assert doomed_job.attempts == 2


TASKS_API = """
import json
from tests.testapp.djtasks import echo
results = [echo.enqueue(i, word="pooled") for i in range(3)]
print(json.dumps([r.id for r in results]))
"""

TASKS_RESULTS = """
import json
from tests.testapp.djtasks import echo
ids = IDS
results = [echo.get_result(i) for i in ids]
print(json.dumps([[r.status.name, r.return_value, r.attempts] for r in results]))
"""


def test_the_tasks_api_enqueues_and_reads_results_through_the_pooler(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    bouncer = pgbouncer(pool_size=2)
    env = pooled_env(bouncer, db_url)
    ids = json.loads(run_django(TASKS_API, env))
    assert status_counts() == {"queued": 3}
    worker = start_worker("--burst", env=env)
    assert worker.wait(30) == 0, worker.output
    assert status_counts() == {"done": 3}
    results = json.loads(run_django(TASKS_RESULTS.replace("IDS", repr(ids)), env))
    assert results == [
        ["SUCCESSFUL", {"args": [i], "kwargs": {"word": "pooled"}}, 1] for i in range(3)
    ]


@pytest.mark.parametrize("listen", ["alias", "dsn"])
def test_a_listen_database_the_server_turns_away_for_good_ends_the_worker_at_once(
    db_url: str, start_worker: Start, listen: str
) -> None:
    """As a DATABASE that does not exist does: a worker that went on without its
    session took no lock on its id (a second worker with the id ran beside it) and
    never heard a NOTIFY, retrying the connection for ever."""
    missing = f"{connection.settings_dict['NAME']}_missing"
    if listen == "dsn":
        setting = urlunsplit(urlsplit(db_url)._replace(path=f"/{missing}"))
        databases = {}
    else:
        setting, databases = "session", {"session": {"NAME": missing}}
    env = {
        "PGQUEUE_TEST_DATABASES": json.dumps(databases),
        "PGQUEUE_TEST_PGQUEUE": json.dumps({"LISTEN_DATABASE": setting}),
    }
    tracked.enqueue("never-claimed")
    for args in (("--burst",), ("--worker-id", "refused", "--concurrency", "2")):
        worker = start_worker(*args, env=env)
        assert worker.wait(20) == 1, worker.output
        (line,) = [line for line in worker.output.splitlines() if "cannot reach" in line]
        assert line.startswith(
            f"cannot reach PGQUEUE['LISTEN_DATABASE'] ({shown(setting)!r}): connection failed: "
        ), line
        assert line.endswith(f'FATAL:  database "{missing}" does not exist'), line
        assert "starting worker" not in worker.output
    assert status_counts() == {"queued": 1}


MIXED_ENQUEUES = """
from django_pgqueue.backend import enqueue_many
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.testapp.djtasks import echo
from tests.testapp.tasks import tracked
for i in range(100):
    tracked.enqueue(f"mixed-{i}")
Job.objects.enqueue_many(JobSpec.build(tracked, [f"mixed-{i}"]) for i in range(100, 700))
enqueue_many(echo, [((i,), {}) for i in range(600)])
print("enqueued")
"""


@pytest.mark.parametrize("prepare", [False, True])
def test_three_workers_drain_both_apis_through_the_pooler_each_job_once(
    pgbouncer: Bouncer, db_url: str, start_worker: Start, prepare: bool
) -> None:
    """With PREPARE as the docs give it (False), and left on (each process finds the
    pooler and prepares nothing there): 1,300 jobs, each run once, on 4 server
    connections shared by 3 workers and the enqueuing process."""
    bouncer = pgbouncer(pool_size=4)
    env = pooled_env(bouncer, db_url, PREPARE=prepare)
    name = connection.settings_dict["NAME"]
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"mixed-{n}", env=env) for n in range(3)
    ]
    for worker in workers:
        worker.wait_for_output("listening for new jobs")
    assert run_django(MIXED_ENQUEUES, env) == "enqueued"
    wait_for(lambda: status_counts() == {"done": 1300}, 90, "the 1,300 jobs to be done")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0, 0]
    assert run_counts("mixed-") == {f"mixed-{i}": 1 for i in range(700)}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    assert set(Job.objects.values_list("locked_by", flat=True)) <= {f"mixed-{n}" for n in range(3)}
    assert bouncer.server_connections(name) <= 4
    for worker in workers:
        assert "ERROR" not in worker.output, worker.output
        assert "Traceback" not in worker.output, worker.output


def listening_sessions() -> list[int]:
    """Server processes of this database that LISTEN (workers' session connections)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
        )
        return [pid for (pid,) in cursor.fetchall()]


def test_a_worker_on_djangos_pool_reconnects_its_session_without_draining_the_pool(
    db_url: str, start_worker: Start
) -> None:
    """The session connection came out of Django's pool (OPTIONS["pool"]) and was
    closed, never put back: each reconnect (a restart, a failover) took one of the
    pool's slots for good, until the job threads waited 30 s at a time for one."""
    # --concurrency 2 and the 6 connections of the worker's own: the least it takes.
    pool = {"default": {"OPTIONS": {"pool": {"min_size": 1, "max_size": 8}}}}
    env = {"PGQUEUE_TEST_DATABASES": json.dumps(pool)}
    worker = start_worker("--concurrency", "2", "--worker-id", "django-pool", env=env)

    def listening(times: int) -> None:
        said = "listening for new jobs"
        wait_for(lambda: worker.output.count(said) == times, 20, f"session number {times}")

    for reconnects in range(6):
        listening(reconnects + 1)
        (pid,) = listening_sessions()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    listening(7)
    for i in range(4):
        tracked.enqueue(f"after-reconnects-{i}", sleep=0.2)
    wait_for(lambda: status_counts() == {"done": 4}, 15, "the jobs, on the pool's connections")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output
    assert "Traceback" not in worker.output
