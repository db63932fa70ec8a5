"""A primary failover under a running drain, on two embedded PostgreSQL 18.6 servers.

A primary with a synchronous streaming standby; two workers and an enqueuer on a
libpq multi-host URL (``host=a,b``, ``target_session_attrs=read-write``). Mid-drain
the primary crashes (``pg_ctl stop -m immediate``) and the standby is promoted:
every job whose enqueue returned is done on the new primary, none is lost, the
same worker processes carry on, and a job runs again only where the lease says so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from devtools.embedded_pg import EmbeddedPostgres
from devtools.replication import make_synchronous, promote, start_standby
from tests.worker.conftest import ROOT, WorkerProcess

pytestmark = pytest.mark.slow

DBNAME = "pgqueue_failover"
TOTAL = 400

ENQUEUER = f"""
import contextlib, time
from django.db import Error, connection
from tests.testapp.tasks import tracked
acked = tries = 0
while acked < {TOTAL}:
    label = f"fo-{{acked}}-{{tries}}"  # a new label per try: a lost reply may have committed
    tries += 1
    try:
        tracked.enqueue(label, sleep=0.05)
    except Error as exc:
        print("failed", label, type(exc).__name__, flush=True)
        with contextlib.suppress(Exception):
            connection.close()
        time.sleep(0.1)
        continue
    print("acked", label, flush=True)
    acked += 1
    time.sleep(0.01)
print("all acked", flush=True)
"""


class Cluster:
    def __init__(self) -> None:
        # synchronous_commit on: the embedded server's default (off) would not wait
        # for the standby. fsync stays off: the primary is never recovered.
        self.primary = EmbeddedPostgres(settings={"synchronous_commit": "on"})
        self.primary.start()
        self.standby: EmbeddedPostgres | None = None

    def conninfo(self, **extra: Any) -> dict[str, Any]:
        assert self.standby is not None
        return {
            "host": "127.0.0.1,127.0.0.1",
            "port": f"{self.primary.port},{self.standby.port}",
            "user": "postgres",
            "password": self.primary.password,
            "dbname": DBNAME,
            "target_session_attrs": "read-write",
            "connect_timeout": 2,
            **extra,
        }

    def env(self) -> dict[str, str]:
        """A Django process on the multi-host URL (DATABASE_URL names the first host)."""
        info = self.conninfo()
        return {
            "DATABASE_URL": self.primary.url.rsplit("/", 1)[0] + f"/{DBNAME}",
            "PGQUEUE_TEST_DATABASES": json.dumps(
                {
                    "default": {
                        "HOST": info["host"],
                        "PORT": info["port"],
                        "OPTIONS": {"target_session_attrs": "read-write", "connect_timeout": 2},
                    }
                }
            ),
            "PGQUEUE_TEST_PGQUEUE": json.dumps({"REAP_INTERVAL": 1.0}),
        }

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(**self.conninfo(), autocommit=True) as conn:
            return conn.execute(sql.encode()).fetchall()

    def destroy(self) -> None:
        for server in (self.primary, self.standby):
            if server is not None:
                server.destroy()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
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
        make_synchronous(made.primary)
        yield made
    finally:
        made.destroy()


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def acked(enqueuer: WorkerProcess) -> list[str]:
    return re.findall(r"^acked (\S+)$", enqueuer.output, re.MULTILINE)


def test_a_primary_crash_and_promotion_loses_no_acknowledged_job(cluster: Cluster) -> None:
    env = cluster.env()
    url = env["DATABASE_URL"]
    flags = ("--concurrency", "4", "--prefetch", "0", "--lease", "3", "--poll-interval", "0.5")
    workers = [WorkerProcess(url, *flags, "--worker-id", f"fo-{n}", env=env) for n in (1, 2)]
    enqueuer: WorkerProcess | None = None
    try:
        for worker in workers:
            worker.wait_for_output("listening for new jobs")
        enqueuer = WorkerProcess(url, "-c", ENQUEUER, env=env, command="shell")

        def done() -> int:
            return int(cluster.rows("SELECT count(*) FROM pgqueue_job WHERE status = 'done'")[0][0])

        wait_until(lambda: len(acked(enqueuer)) >= 150 and done() >= 40, 30, "a drain under way")
        assert cluster.rows("SELECT sync_state FROM pg_stat_replication") == [("sync",)]
        cluster.primary.crash()
        acked_before_crash = set(acked(enqueuer))
        assert cluster.standby is not None
        promote(cluster.standby)

        enqueuer.wait_for_output("all acked", timeout=60)
        assert enqueuer.wait(10) == 0
        every_ack = set(acked(enqueuer))
        assert len(every_ack) == TOTAL
        assert acked_before_crash <= every_ack

        def settled() -> bool:
            left = "SELECT count(*) FROM pgqueue_job WHERE status <> 'done'"
            return bool(cluster.rows(left)[0][0] == 0)

        wait_until(settled, 40, "every job to be done on the new primary")
        # The same processes carry on: a last batch keeps both of them busy.
        late = [f"late-{i}" for i in range(40)]
        batch = ", ".join(f"""('tests.testapp.tasks.tracked', '["{label}"]', '{{"sleep": 0.2}}')"""
                          for label in late)  # fmt: skip
        cluster.rows(
            "WITH j AS (INSERT INTO pgqueue_job (task, args, kwargs, queue, priority, status, "
            "attempts, max_attempts, run_at, last_error, errors, worker_ids) "
            f"SELECT t, a::jsonb, k::jsonb, 'default', 0, 'queued', 0, 3, now(), '', '[]', '[]' "
            f"FROM (VALUES {batch}) AS v (t, a, k) RETURNING 1), "
            "n AS (SELECT pg_notify('pgqueue_jobs', 'default')) SELECT count(*) FROM j, n"
        )
        wait_until(settled, 30, "the last batch")
        for worker in workers:
            assert worker.proc.poll() is None, worker.output  # never restarted
            worker.signal(signal.SIGTERM)
        assert [worker.wait(30) for worker in workers] == [0, 0]
    finally:
        for process in [*workers, *([enqueuer] if enqueuer else [])]:
            if process.proc.poll() is None:
                process.kill()

    jobs = {
        label: (status, attempts, errors, locked_by)
        for label, status, attempts, errors, locked_by in cluster.rows(
            "SELECT args->>0, status, attempts, errors::text, locked_by FROM pgqueue_job"
        )
    }
    runs = dict(cluster.rows("SELECT label, count(*) FROM testapp_run GROUP BY label"))
    assert every_ack <= set(jobs), "an acknowledged enqueue was lost"
    assert {status for status, *_ in jobs.values()} == {"done"}
    assert set(jobs) - every_ack - set(late) <= set(
        re.findall(r"^failed (\S+)", enqueuer.output, re.MULTILINE)
    ), "a job that nobody enqueued"
    for label, (_, attempts, errors, _) in jobs.items():
        retried = len(json.loads(errors))
        # A run is recorded durably (its own commit waits for the standby), and so
        # is the claim before it. A job runs again only after an error entry: a run
        # that failed (its connection died with the primary, perhaps after its write
        # committed) or a lease that expired (the reaper took the run back).
        assert 1 <= runs.get(label, 0) <= 1 + retried, (label, runs.get(label), errors)
        assert attempts <= 1 + retried, (label, attempts, errors)
    twice = sorted(label for label in jobs if runs[label] == 2)
    assert len(twice) <= 2 * 4, twice  # at most what was running at the crash
    assert {locked_by for label, (*_, locked_by) in jobs.items() if label in late} == {
        "fo-1",
        "fo-2",
    }
    for worker in workers:
        assert "claim failed, retrying" in worker.output  # it saw the crash, and came back
