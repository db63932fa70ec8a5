"""A failover to a standby that is behind, as docs/operations.md describes it.

With asynchronous replication the promoted standby may lack the last commits: the
last enqueues, and the claims and outcomes the workers wrote since. The docs say
such enqueues are lost and such jobs run again; here the standby is stopped before
the workers start, so the new primary knows none of their work. What must hold:
the same worker processes carry on, none of the jobs they had claimed (running or
ahead) on the old primary is started from memory on the new one, each job the new
primary has runs there exactly once, and a worker's id is still locked there.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from devtools.replication import promote, start_standby
from tests.cluster.test_failover import DBNAME, Cluster, wait_until
from tests.worker.conftest import ROOT, WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def async_cluster() -> Iterator[Cluster]:
    """A primary with an asynchronous streaming standby (no synchronous_standby_names)."""
    made = Cluster()
    try:
        with psycopg.connect(made.primary.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DBNAME}".encode())
        migrate = subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v0", "--settings=tests.settings"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": made.primary.url.rsplit("/", 1)[0] + f"/{DBNAME}"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrate.returncode == 0, migrate.stderr
        made.standby = start_standby(made.primary)
        yield made
    finally:
        made.destroy()


def insert(cluster: Cluster, labels: list[str], sleep: float) -> None:
    """Enqueue ``tracked`` jobs for ``labels`` with one statement, and wake the workers."""
    batch = ", ".join(f"""('tests.testapp.tasks.tracked', '["{label}"]', '{{"sleep": {sleep}}}')"""
                      for label in labels)  # fmt: skip
    cluster.rows(
        "WITH j AS (INSERT INTO pgqueue_job (task, args, kwargs, queue, priority, status, "
        "attempts, max_attempts, run_at, last_error, errors, worker_ids) "
        f"SELECT t, a::jsonb, k::jsonb, 'default', 0, 'queued', 0, 3, now(), '', '[]', '[]' "
        f"FROM (VALUES {batch}) AS v (t, a, k) RETURNING 1), "
        "n AS (SELECT pg_notify('pgqueue_jobs', 'default')) SELECT count(*) FROM j, n"
    )


def on_standby(cluster: Cluster, sql: str) -> object:
    assert cluster.standby is not None
    url = cluster.standby.url.rsplit("/", 1)[0] + f"/{DBNAME}"
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql.encode()).fetchone()
        return row[0] if row else None


def test_a_failover_to_a_standby_behind_runs_each_job_it_has_once_and_none_from_memory(
    async_cluster: Cluster,
) -> None:
    cluster = async_cluster
    assert cluster.standby is not None
    kept = [f"kept-{n}" for n in range(80)]
    insert(cluster, kept, 0.1)
    wait_until(
        lambda: on_standby(cluster, "SELECT count(*) FROM pgqueue_job") == len(kept),
        30,
        "the standby to have the first jobs",
    )
    cluster.standby.stop()  # from here on the standby falls behind
    env = cluster.env()
    url = env["DATABASE_URL"]
    flags = ("--concurrency", "2", "--prefetch", "4", "--lease", "3", "--poll-interval", "0.5")
    workers = [WorkerProcess(url, *flags, "--worker-id", f"fb-{n}", env=env) for n in (1, 2)]
    try:
        for worker in workers:
            worker.wait_for_output("listening for new jobs")
        lost = [f"lost-{n}" for n in range(40)]
        insert(cluster, lost, 0.1)

        def claimed() -> int:
            sql = "SELECT count(*) FROM pgqueue_job WHERE status = 'running' AND args->>0 ~ '^lost'"
            return int(cluster.rows(sql)[0][0])

        # Mid-drain, the workers holding lost jobs running and claimed ahead.
        wait_until(lambda: claimed() >= 6, 30, "the lost jobs to be claimed")
        lost_ids = {
            row[0] for row in cluster.rows("SELECT id FROM pgqueue_job WHERE args->>0 ~ '^lost'")
        }
        cluster.primary.crash()
        cluster.standby.start()
        promote(cluster.standby)
        # The new primary hands out the lost jobs' ids again: a worker that took
        # its memory of a lost claim for one of these would run the wrong job.
        post = [f"post-{n}" for n in range(40)]
        insert(cluster, post, 0.05)

        def settled() -> bool:
            sql = "SELECT count(*) FROM pgqueue_job WHERE status <> 'done'"
            return bool(cluster.rows(sql)[0][0] == 0)

        wait_until(settled, 60, "every job the new primary has to be done")
        # A worker's id is locked on the new primary too: a second fb-1 refuses.
        twin = WorkerProcess(url, *flags, "--worker-id", "fb-1", env=env)
        assert twin.wait(30) == 1, twin.output
        assert "worker id 'fb-1' is in use" in twin.output
        for worker in workers:
            assert worker.proc.poll() is None, worker.output  # never restarted
            worker.signal(signal.SIGTERM)
        assert [worker.wait(30) for worker in workers] == [0, 0]
    finally:
        for process in workers:
            if process.proc.poll() is None:
                process.kill()

    jobs = {
        label: (status, attempts, json.loads(errors))
        for label, status, attempts, errors in cluster.rows(
            "SELECT args->>0, status, attempts, errors::text FROM pgqueue_job"
        )
    }
    ids = {row[0] for row in cluster.rows("SELECT id FROM pgqueue_job WHERE args->>0 ~ '^post'")}
    runs = dict(cluster.rows("SELECT label, count(*) FROM testapp_run GROUP BY label"))
    # The lost enqueues are gone (asynchronous replication, as documented); the
    # rest ran on the new primary once each, on a claim of its own.
    assert sorted(jobs) == sorted(kept + post)
    assert {label: job for label, job in jobs.items() if job != ("done", 1, [])} == {}
    assert runs == {label: 1 for label in kept + post}
    # The new primary handed some lost jobs' ids to new jobs (its sequence is behind).
    assert ids & lost_ids, (ids, lost_ids)
    # A run that went on across the failover has its outcome refused on the new
    # primary; the line must not send the operator to the lease settings alone.
    for worker in workers:
        refused = re.findall(r"the outcomes of jobs .* were refused: .*", worker.output)
        assert all("or their claims were lost" in line for line in refused), refused


WEB_PROCESS = """
import sys
from django.db import transaction
from tests.testapp.djtasks import echo
from tests.testapp.tasks import tracked
tracked.enqueue("web-before")
print("enqueued", flush=True)
sys.stdin.readline()  # the primary has crashed; no server accepts writes
for attempt in ("web-outage", "web-outage-atomic"):
    try:
        with transaction.atomic():
            tracked.enqueue(attempt)
    except Exception as exc:
        print("refused", attempt, type(exc).__module__, type(exc).__name__, exc, flush=True)
    else:
        print("accepted", attempt, flush=True)
print("outage over", flush=True)
sys.stdin.readline()  # the standby is promoted meanwhile
tracked.enqueue("web-after")
with transaction.atomic():
    tracked.enqueue("web-after-atomic")
echo.enqueue("web-after-tasks-api")
print("enqueued again", flush=True)
"""


def test_a_web_process_is_refused_during_a_failover_and_enqueues_on_the_new_primary(
    async_cluster: Cluster,
) -> None:
    """A long-lived process on the multi-host URL: an enqueue while no server
    accepts writes raises Django's OperationalError saying why, and the
    next enqueues after the promotion (plain, in a transaction, through the Tasks
    API) each succeed on the new primary at the first try."""
    cluster = async_cluster
    assert cluster.standby is not None
    web = subprocess.Popen(
        [sys.executable, "-m", "django", "shell", "--settings=tests.settings", "-c", WEB_PROCESS],
        cwd=ROOT,
        env={**os.environ, **cluster.env()},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert web.stdin is not None
    assert web.stdout is not None

    def read_until(last: str) -> list[str]:
        said: list[str] = []
        while not said or said[-1] != last:
            line = web.stdout.readline() if web.stdout else ""
            assert line, said
            said.append(line.strip())
        return said

    try:
        read_until("enqueued")
        wait_until(
            lambda: on_standby(cluster, "SELECT count(*) FROM pgqueue_job") == 1,
            30,
            "the standby to have the first job",
        )
        cluster.primary.crash()
        web.stdin.write("\n")
        web.stdin.flush()
        said = read_until("outage over")
        promote(cluster.standby)
        out, _ = web.communicate("\n", timeout=60)
    finally:
        if web.poll() is None:
            web.kill()
    assert web.returncode == 0, out
    refusals = [line for line in said if line.startswith(("refused", "accepted"))]
    assert [line.split()[:4] for line in refusals] == [
        ["refused", name, "django.db.utils", "OperationalError"]
        for name in ("web-outage", "web-outage-atomic")
    ], said
    # libpq tried both hosts: the crashed one refused, the standby was read-only.
    assert all(line.endswith("failed: session is read-only") for line in refusals), refusals
    assert out.strip().splitlines()[-1] == "enqueued again", out
    labels = [row[0] for row in cluster.rows("SELECT args->>0 FROM pgqueue_job ORDER BY id")]
    assert labels == ["web-before", "web-after", "web-after-atomic", "web-after-tasks-api"]
