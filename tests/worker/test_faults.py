"""Fault paths with real worker processes: stopped, starved, cut off, broken on purpose.

Each test reproduces a way the first version broke a promise (a concurrency key
shared while a job overran, a stale run overwriting a newer one, a worker that
kept claiming with a dead heartbeat, a missing migration retried for ever,
outcomes dropped without a word when the database went away during shutdown)
and asserts exact final states and how many times each job ran.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import connection, connections, transaction

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import mark, tracked, whoami
from tests.worker.conftest import WorkerProcess, running_count, wait_for
from tests.worker.dbserver import server_or_skip

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def runs(prefix: str = "") -> list[tuple[str, float, float]]:
    """(label, started, finished) of every recorded run, as epoch seconds, by start."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT label, extract(epoch FROM started), extract(epoch FROM finished) "
            "FROM testapp_run WHERE label LIKE %s ORDER BY started",
            [prefix + "%"],
        )
        return [(label, float(a), float(b)) for label, a, b in cursor.fetchall()]


def test_a_job_that_never_returns_keeps_its_key_until_its_worker_exits(start_worker: Start) -> None:
    stuck = tracked.using(concurrency_key="k", max_attempts=1).enqueue("stuck", sleep=60)
    mark.using(concurrency_key="k").enqueue("sibling")
    worker = start_worker(
        "--job-timeout",
        "0.5",
        "--shutdown-timeout",
        "0",
        "--stats-interval",
        "0.5",
        "--concurrency",
        "2",
    )
    worker.wait_for_output("exceeded the job timeout of 0.5s")
    worker.wait_for_output("(1 past the job timeout)")  # the throughput line shows it
    assert run_counts() == {"stuck": 1}  # the sibling waits: the key is still taken
    assert Job.objects.get(pk=stuck.pk).status == "running"
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    exited = time.time()
    row = Job.objects.get(pk=stuck.pk)
    assert row.status == "dead"
    assert "had not returned when its worker exited" in row.last_error
    assert re.search(r"stopped \S+: claimed 1, succeeded 0, retried 0, buried 1,", worker.output)
    rescuer = start_worker("--burst")
    assert rescuer.wait(30) == 0
    assert status_counts() == {"dead": 1, "done": 1}
    ((_, sibling_started, _),) = runs("sibling")
    assert sibling_started >= exited - 0.5  # only once the stuck thread's process was gone


def test_a_worker_stopped_past_its_lease_is_fenced_out_of_the_newer_run(
    start_worker: Start,
) -> None:
    job = whoami.enqueue("paused", sleep=2.5)
    sleeper = start_worker("--lease", "1", "--worker-id", "sleeper")
    wait_for(lambda: running_count() == 1, 20, "the sleeper to claim the job")
    time.sleep(0.3)  # inside the job
    sleeper.signal(signal.SIGSTOP)
    time.sleep(1.5)  # past its lease: nobody renews it
    assert Job.objects.reap().returned == 1
    rescuer = start_worker("--lease", "30", "--worker-id", "rescuer")
    wait_for(
        lambda: Job.objects.get(pk=job.pk).locked_by == "rescuer",
        20,
        "the rescuer to claim the job",
    )
    sleeper.signal(signal.SIGCONT)  # its run finishes while the newer one is running
    # Its completer finds the fence closed, or its heartbeat finds the lease gone first.
    wait_for(
        lambda: (
            "leases had expired" in sleeper.output or "its outcome is dropped" in sleeper.output
        ),
        20,
        "the stale outcome refused",
    )
    assert Job.objects.get(pk=job.pk).status == "running"  # the stale outcome did not land
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "done", 20, "the newer run to finish")
    assert Job.objects.get(pk=job.pk).result == rescuer.proc.pid
    assert run_counts("paused") == {"paused": 2}
    for worker in (sleeper, rescuer):
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0


def test_a_worker_stopped_past_its_lease_starts_none_of_the_jobs_it_prefetched(
    start_worker: Start,
) -> None:
    """Resumed, the job thread took its next prefetched job before the heartbeat's
    round trip learned that the lease was lost: a second run of a job the reaper had
    given back, which another worker may be running under a lease that holds."""
    specs = [JobSpec.build(tracked, ["ahead-0"], {"sleep": 0.3}, backoff=600)]
    specs += [JobSpec.build(tracked, [f"ahead-{n}"], backoff=600) for n in (1, 2)]
    Job.objects.enqueue_many(specs)
    paused = start_worker(
        "--lease", "2", "--concurrency", "1", "--prefetch", "2", "--worker-id", "paused"
    )
    wait_for(lambda: run_counts("ahead-") == {"ahead-0": 1}, 20, "the first job to start")
    assert running_count() == 3  # the other two wait in its prefetch
    paused.signal(signal.SIGSTOP)  # the first job's sleep ends while it is stopped
    with connection.cursor() as cursor:

        def lapsed() -> bool:
            cursor.execute("SELECT bool_and(locked_until < now()) FROM pgqueue_job")
            row = cursor.fetchone()
            return bool(row and row[0])

        wait_for(lapsed, 20, "every lease to lapse")
    assert Job.objects.reap().returned == 3  # queued again, 600 s ahead
    paused.signal(signal.SIGCONT)  # the first job returns at once, with no query
    wait_for(
        lambda: "leases had expired" in paused.output or "its outcome is dropped" in paused.output,
        20,
        "the first job's stale outcome refused",
    )
    paused.signal(signal.SIGTERM)
    assert paused.wait(20) == 0
    assert run_counts("ahead-") == {"ahead-0": 1}  # the other two never started
    assert status_counts() == {"queued": 3}


def test_a_dead_heartbeat_gives_the_jobs_back_before_the_lease_lapses_and_exits_1(
    start_worker: Start,
) -> None:
    job = tracked.enqueue("hb", sleep=5)
    broken = start_worker(
        "--lease", "3", "--worker-id", "broken", env={"PGQUEUE_TEST_BREAK": "heartbeat"}
    )
    wait_for(lambda: run_counts("hb") == {"hb": 1}, 20, "the job to start")
    # A healthy worker stands by: it would take the job the moment it was free.
    healthy = start_worker("--lease", "30", "--worker-id", "healthy", "--poll-interval", "0.1")
    assert broken.wait(15) == 1
    gone = time.time()
    assert "InjectedFailure: heartbeat broken on purpose" in broken.output  # with its traceback
    assert "stopping: the pgqueue-heartbeat thread failed" in broken.output
    assert "put 1 job back in the queue" in broken.output
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "done", 30, "the job to be rerun")
    _, second = runs("hb")
    assert second[1] >= gone - 0.5  # no second run while the first still ran
    row = Job.objects.get(pk=job.pk)
    assert (row.worker_ids, row.attempts) == (["broken", "healthy"], 1)  # given back: not spent
    healthy.signal(signal.SIGTERM)
    assert healthy.wait(20) == 0


def test_a_failing_listener_is_restarted_and_the_worker_keeps_serving(start_worker: Start) -> None:
    Job.objects.enqueue_many(JobSpec.build(mark, [f"l-{n}"]) for n in range(3))
    worker = start_worker(
        "--burst", "--poll-interval", "0.2", env={"PGQUEUE_TEST_BREAK": "listener"}
    )
    assert worker.wait(30) == 0
    assert "InjectedFailure: listener broken on purpose" in worker.output
    assert "pgqueue-listener: restarting" in worker.output
    assert status_counts() == {"done": 3}


@pytest.fixture
def scratch_db(db_url: str) -> Iterator[str]:
    """An empty database next to the test database: no tables at all."""
    name = "pgqueue_scratch"
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield db_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_worker_on_an_unmigrated_database_exits_at_once_saying_to_migrate(
    scratch_db: str, start_worker: Start
) -> None:
    worker = WorkerProcess(scratch_db)
    try:
        assert worker.wait(20) == 1
    finally:
        worker.kill()
    assert "run `manage.py migrate`" in worker.output
    assert worker.output.count("\n") < 10  # a clear line, not a retry loop


def test_a_table_dropped_under_a_running_worker_stops_it_with_one_clear_line(
    scratch_db: str,
) -> None:
    migrate = WorkerProcess(scratch_db, "--no-input", "-v", "0", command="migrate")
    assert migrate.wait(60) == 0, migrate.output
    worker = WorkerProcess(scratch_db, "--poll-interval", "0.1", "--no-listen")
    try:
        worker.wait_for_output("starting worker")
        with psycopg.connect(scratch_db, autocommit=True) as conn:
            conn.execute("DROP TABLE pgqueue_job")
        assert worker.wait(20) == 1
    finally:
        worker.kill()
    assert "the job table is missing or older than this version" in worker.output
    assert "run `manage.py migrate`" in worker.output


def test_shutdown_while_the_database_is_away_is_bounded_and_says_what_was_not_recorded(
    start_worker: Start,
) -> None:
    server = server_or_skip()
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"out-{n}"], {"sleep": 1.0}, max_attempts=1) for n in range(8)
    )
    worker = start_worker("--concurrency", "4", "--lease", "3", "--shutdown-timeout", "2")
    wait_for(lambda: len(run_counts("out-")) == 4, 20, "four jobs to start")
    connections.close_all()
    server.stop()
    try:
        time.sleep(1.5)  # the running jobs finish; their outcomes cannot be written
        signalled = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0
        took = time.monotonic() - signalled
    finally:
        server.start()
    assert took < 2 + 5 + 2  # the shutdown timeout, the documented margin, and slack
    found = re.search(r"could not record the outcomes of jobs \[([\d, ]+)\]", worker.output)
    assert found, worker.output
    unrecorded = {int(n) for n in found[1].split(",")}
    assert len(unrecorded) == 4
    # The database is back: those jobs come back through the reaper once their
    # leases expire, and the reaper says what it knows: the run may have finished.
    wait_for(
        lambda: (Job.objects.reap(), not Job.objects.running().exists())[1],
        15,
        "the leases to expire",
    )
    assert set(Job.objects.dead().values_list("id", flat=True)) == unrecorded
    for job in Job.objects.dead():
        assert job.last_error.startswith("LeaseExpired: the lease expired: worker ")
        assert "the run may have finished" in job.errors[-1]["message"]
    rescuer = start_worker("--burst")
    assert rescuer.wait(30) == 0
    assert status_counts() == {"done": 4, "dead": 4}
    assert run_counts("out-") == {f"out-{n}": 1 for n in range(8)}  # nothing ran twice


def test_reapjobs_loop_waits_for_the_database_instead_of_exiting(start_worker: Start) -> None:
    server = server_or_skip()
    reaper = start_worker(command="reapjobs", args=("--loop", "--interval", "0.2"))
    reaper.wait_for_output("returned 0 jobs")
    connections.close_all()
    server.stop()
    try:
        reaper.wait_for_output("reap failed, retrying")
    finally:
        server.start()
    lines = reaper.output.count("returned 0 jobs")
    wait_for(lambda: reaper.output.count("returned 0 jobs") > lines, 20, "reaping to resume")
    assert reaper.proc.poll() is None
    reaper.kill()


def durable_enqueue(specs: list[JobSpec]) -> None:
    """Enqueue with the commit flushed, whatever the test server's own setting: the
    crash tests prove that no *committed* job is lost."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = on")
        Job.objects.enqueue_many(specs)


def test_after_the_database_restarts_no_job_is_charged_with_a_dead_connection(
    start_worker: Start,
) -> None:
    server = server_or_skip()
    durable_enqueue([JobSpec.build(tracked, [f"warm-{n}"]) for n in range(8)])
    worker = start_worker("--concurrency", "4", "--poll-interval", "0.2")
    wait_for(lambda: Job.objects.done().count() == 8, 20, "the threads to hold connections")
    connections.close_all()
    server.crash()
    server.start()
    # Enqueued after the restart, each allowed one attempt: a job charged with
    # the broken connection of its thread would end dead.
    durable_enqueue([JobSpec.build(tracked, [f"after-{n}"], max_attempts=1) for n in range(8)])
    wait_for(lambda: status_counts() == {"done": 16}, 60, "every job after the restart")
    assert run_counts("after-") == {f"after-{n}": 1 for n in range(8)}
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


@pytest.fixture
def durable_job_writes() -> Iterator[None]:
    """New sessions (the worker's job threads) commit with the WAL flushed, as on a
    production server: on the embedded test server (synchronous_commit off) a run's
    record could be lost in the crash while the outcome sent after it is kept."""
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" SET synchronous_commit TO on')
    yield
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" RESET synchronous_commit')


@pytest.mark.usefixtures("durable_job_writes")
def test_a_crashed_database_under_a_busy_worker_loses_no_committed_job(start_worker: Start) -> None:
    server = server_or_skip()
    durable_enqueue([JobSpec.build(tracked, [f"crash-{i}"], {"sleep": 0.05}) for i in range(200)])
    worker = start_worker("--concurrency", "4", "--lease", "5", "--poll-interval", "0.5")
    wait_for(lambda: Job.objects.done().count() >= 20, 30, "the worker to get going")
    connections.close_all()
    server.crash()  # pg_ctl stop -m immediate: no checkpoint, recovery on start
    time.sleep(1.0)
    server.start()
    wait_for(lambda: status_counts() == {"done": 200}, 90, "every job done after the crash")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    counts = run_counts("crash-")
    assert len(counts) == 200
    # At least once: runs cut off by the crash (or whose outcome was lost with
    # the unflushed commits) repeat, but only those few.
    assert sum(counts.values()) - 200 <= 12
