"""Issues 16 and 17 driven as an operator's tools drive them: a Prometheus scrape of
a real worker after a known sequence of jobs, the registry and the worker's last
line read beside it, ``queuestats --check`` as a probe runs it, and the JSON log
lines a shipper reads."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from devtools.pgbouncer import PgBouncer
from django_pgqueue.models import Job, QueueGauge, RegisteredWorker
from django_pgqueue.queue import gauges
from django_pgqueue.queue.gauges import EXACT_LIMIT
from django_pgqueue.records import JobSpec
from tests.cluster.conftest import pgbouncer, pooled_env
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import (
    add,
    always_fails,
    discards_lookups,
    flaky,
    gives_up,
    mark,
    snoozes,
    tracked,
    waits_to_be_stopped,
)
from tests.worker.conftest import ROOT, WorkerProcess, django_command, start_worker, wait_for
from tests.worker.scrape import base_url, completed, scrape, value

__all__ = ["pgbouncer", "start_worker"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]
Bouncer = Callable[..., PgBouncer]


def test_a_known_sequence_reads_back_exactly_from_metrics_registry_and_last_line(
    start_worker: Start,
) -> None:
    for i in range(3):
        add.enqueue(i, 1)
    flaky.enqueue("ops-flaky", 1)  # retried once, then succeeds
    always_fails.enqueue("ops-fails")  # retried once, then dead
    discards_lookups.enqueue("ops-discard", "lookup")  # dead at once
    snoozes.enqueue("ops-snooze", 2)  # two snoozes (retried), then succeeds
    gives_up.enqueue("ops-gives-up")  # raises Cancel: cancelled
    stopped = waits_to_be_stopped.enqueue("ops-stopped")
    worker = start_worker(
        "--metrics-port",
        "0",
        "--concurrency",
        "2",
        "--poll-interval",
        "0.2",
        "--stats-interval",
        "1",
    )
    base = base_url(worker)
    # Started (it records its run), not only claimed ahead: it runs when it is cancelled.
    wait_for(lambda: run_counts("ops-stopped") == {"ops-stopped": 1}, 30, "the long job")
    Job.objects.cancel([stopped.id], reason="operator")
    wait_for(
        lambda: status_counts() == {"done": 5, "dead": 2, "cancelled": 2}, 30, "every job to end"
    )
    want = {
        (add.path, "succeeded"): 3,
        (flaky.path, "retried"): 1,
        (flaky.path, "succeeded"): 1,
        (always_fails.path, "retried"): 1,
        (always_fails.path, "dead"): 1,
        (discards_lookups.path, "dead"): 1,
        (snoozes.path, "retried"): 2,
        (snoozes.path, "succeeded"): 1,
        (gives_up.path, "cancelled"): 1,
        (waits_to_be_stopped.path, "cancelled"): 1,
    }
    wait_for(lambda: completed(scrape(base)) == want, 10, "every outcome counted")
    found = scrape(base)
    runs = sum(want.values())
    assert value(found, "pgqueue_job_wait_seconds_count", queue="default") == runs
    durations = sum(
        v for (name, _), v in found.items() if name == "pgqueue_job_duration_seconds_count"
    )
    assert durations == runs
    assert value(found, "pgqueue_jobs_running") == 0
    wait_for(
        lambda: RegisteredWorker.objects.get().jobs_done == runs, 20, "the registry's done count"
    )
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    assert families["pgqueue_jobs_completed"].type == "counter"
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert f"claimed {runs}, succeeded 5, retried 4, buried 2, cancelled 2" in worker.output, (
        worker.output
    )
    assert not RegisteredWorker.objects.exists()


def test_metrics_healthz_registry_and_check_through_a_transaction_pool(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    bouncer = pgbouncer(pool_size=3)
    polling = pooled_env(bouncer, db_url, LISTEN_DATABASE=None, LEASE=2, HEARTBEAT_INTERVAL=0.5)
    listening = pooled_env(bouncer, db_url, LEASE=2, HEARTBEAT_INTERVAL=0.5)
    a = start_worker(
        "--metrics-port",
        "0",
        "--worker-id",
        "pool-a",
        "--queues",
        "a",
        "--poll-interval",
        "0.2",
        env=polling,
    )
    b = start_worker("--metrics-port", "0", "--worker-id", "pool-b", "--queues", "b", env=listening)
    base_a, base_b = base_url(a), base_url(b)
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1], queue="a") for i in range(4))
    Job.objects.enqueue_many(
        JobSpec.build(always_fails, [f"pool-{i}"], queue="b") for i in range(2)
    )
    wait_for(lambda: status_counts() == {"done": 4, "dead": 2}, 30, "every job to end")
    wait_for(lambda: completed(scrape(base_a)) == {(add.path, "succeeded"): 4}, 10, "a's outcomes")
    wait_for(
        lambda: (
            completed(scrape(base_b))
            == {(always_fails.path, "retried"): 2, (always_fails.path, "dead"): 2}
        ),
        10,
        "b's outcomes",
    )
    for base in (base_a, base_b):
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            assert response.status == 200
    rows = {w.id: w for w in RegisteredWorker.objects.all()}
    assert set(rows) == {"pool-a", "pool-b"}
    # No session behind the pool: no lock on its id, and the row says so.
    assert (rows["pool-a"].lock_key, rows["pool-a"].lock_pid) == (None, None)
    assert rows["pool-b"].lock_key is not None
    check = django_command(polling["DATABASE_URL"], "queuestats", "--check", env=polling)
    assert (check.returncode, check.stdout) == (0, "ok\n"), check.stdout + check.stderr
    a.kill()
    add.using(queue="a").enqueue(9, 9)
    wait_for(
        lambda: not RegisteredWorker.objects.alive().filter(id="pool-a").exists(),
        10,
        "a to read gone",
    )
    check = django_command(polling["DATABASE_URL"], "queuestats", "--check", env=polling)
    assert check.returncode == 1, check.stderr
    assert check.stdout.startswith("queue a: jobs are ready"), check.stdout
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0, b.output
    assert set(RegisteredWorker.objects.values_list("id", flat=True)) == {"pool-a"}


def test_jobs_claimed_ahead_and_given_back_by_a_pause_are_counted_released(
    start_worker: Start, db_url: str
) -> None:
    mark.using(queue="q").enqueue("ops-long", sleep=3)
    worker = start_worker(
        "--metrics-port",
        "0",
        "--queues",
        "q",
        "--concurrency",
        "1",
        "--prefetch",
        "2",
        "--poll-interval",
        "0.2",
    )
    base = base_url(worker)
    wait_for(lambda: Job.objects.running().count() == 1, 20, "the long job")
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1], queue="q") for i in range(2))
    wait_for(lambda: Job.objects.running().count() == 3, 20, "the claim ahead")
    paused = django_command(db_url, "pausequeue", "q")
    assert paused.returncode == 0, paused.stderr
    wait_for(
        lambda: (
            value(
                scrape(base),
                "pgqueue_jobs_completed_total",
                queue="q",
                task=add.path,
                outcome="released",
            )
            == 2
        ),
        20,
        "the give-back",
    )
    django_command(db_url, "resumequeue", "q")
    wait_for(lambda: status_counts() == {"done": 3}, 30, "every job")
    want = {(mark.path, "succeeded"): 1, (add.path, "released"): 2, (add.path, "succeeded"): 2}
    wait_for(lambda: completed(scrape(base)) == want, 10, "every outcome")
    # Each start waited once: a run given back never started.
    assert value(scrape(base), "pgqueue_job_wait_seconds_count", queue="q") == 3
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_run_whose_lease_another_worker_reaped_is_counted_lost_once(
    start_worker: Start,
) -> None:
    env = {
        "PGQUEUE_TEST_PGQUEUE": json.dumps(
            {"LEASE": 2, "HEARTBEAT_INTERVAL": 0.5, "REAP_INTERVAL": 0.5}
        )
    }
    job = tracked.enqueue("ops-lost", sleep=3)
    a = start_worker(
        "--metrics-port", "0", "--worker-id", "ops-a", "--poll-interval", "0.2", env=env
    )
    base_a = base_url(a)
    wait_for(lambda: run_counts("ops-lost") == {"ops-lost": 1}, 20, "the first run")
    a.signal(signal.SIGSTOP)
    Job.objects.filter(pk=job.pk).update(kwargs={"sleep": 0})
    b = start_worker(
        "--metrics-port", "0", "--worker-id", "ops-b", "--poll-interval", "0.2", env=env
    )
    base_b = base_url(b)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "done", 30, "b to run it again")
    a.signal(signal.SIGCONT)
    wait_for(lambda: value(scrape(base_a), "pgqueue_lease_lost_total") == 1, 20, "a's loss")
    # a's first run returns, its outcome refused by the fence: a warning says so.
    a.wait_for_output("finished after it was given back (shutdown) or its lease was lost")
    found_a, found_b = scrape(base_a), scrape(base_b)
    assert completed(found_a) == {}
    assert value(found_a, "pgqueue_lease_lost_total") == 1
    assert value(found_b, "pgqueue_reaped_total", result="returned") == 1
    assert completed(found_b) == {(tracked.path, "succeeded"): 1}
    for w in (a, b):
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output


def insert_finished(count: int, status: str, queue: str) -> None:
    """``count`` finished jobs in one statement: test data, not a queue operation."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids, queue, status, "
            "attempts, done_at) SELECT 'tests.testapp.tasks.noop', '[]', '{}', '[]', '[]', "
            "%s, %s, 1, now() FROM generate_series(1, %s)",
            [queue, status, count],
        )


def scraped(base: str) -> str:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        return str(response.read().decode())


def dead_series(text: str) -> dict[str, float]:
    return {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "pgqueue_queue_jobs"
        for sample in family.samples
        if sample.labels["status"] == "dead"
    }


def test_dead_jobs_counted_exactly_beside_estimated_done_ones_read_0_where_none(
    start_worker: Start,
) -> None:
    """On a table past the exact limit of finished rows, dead jobs are still counted
    exactly while their index holds few (as the page says), so a queue without any
    reads 0, as the page promises for a finished status counted exactly. It was left
    out as "unknown" instead: a dashboard of dead jobs by queue showed no data for the
    healthy queues, and a queue whose last dead job was retried lost its series
    rather than reading 0."""
    insert_finished(EXACT_LIMIT, "done", queue="bulk")
    insert_finished(2, "dead", queue="mail")
    add.using(queue="bulk").enqueue(1, 1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    try:
        assert dead_series(Client().get("/pgqueue/metrics").content.decode()) == {
            "bulk": 0,
            "mail": 2,
        }
        QueueGauge.objects.all().delete()
        worker = start_worker("--metrics-port", "0", "--queues", "none", "--no-listen")
        base = base_url(worker)
        wait_for(lambda: bool(dead_series(scraped(base))), 20, "the worker's first refresh")
        assert dead_series(scraped(base)) == {"bulk": 0, "mail": 2}
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        # Past a limit the dead jobs are beyond too: estimated, and absent where unknown.
        from django_pgqueue.monitoring.gauges import not_counted

        assert not_counted(gauges.compute("default")) == {"done", "cancelled"}
        assert not_counted(gauges.compute("default", exact_limit=2)) == {
            "done",
            "cancelled",
            "dead",
        }
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM pgqueue_job")
            cursor.execute("ANALYZE pgqueue_job")


JSON_SETTINGS = """
import json, logging
from tests.settings import *  # noqa: F403

FIELDS = ("job_id", "task", "queue", "attempt", "worker")


class Json(logging.Formatter):
    def format(self, record):
        line = {"level": record.levelname, "logger": record.name, "message": record.getMessage()}
        line.update({f: getattr(record, f) for f in FIELDS if hasattr(record, f)})
        if record.exc_info:
            line["exc_type"] = record.exc_info[0].__name__
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line)


LOGGING = {
    "version": 1,
    "formatters": {"json": {"()": Json}},
    "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "json",
                         "stream": "ext://sys.stdout"}},
    "root": {"handlers": ["out"], "level": "INFO"},
}
"""


def test_failed_runs_reach_a_json_log_shipper_with_their_fields(
    start_worker: Start, db_url: str, tmp_path: Path
) -> None:
    """The project's own JSON formatter, as a log shipper reads it, from a real
    worker and from reapjobs: each failed run is one line with the documented
    fields; those the worker raised carry their traceback, the reaper's none."""
    (tmp_path / "json_settings.py").write_text(JSON_SETTINGS)
    failing = always_fails.enqueue("ops-json")
    path = f"{tmp_path}{os.pathsep}{ROOT}"
    # The last --settings wins: the project's, with its LOGGING.
    worker = start_worker(
        "--burst", "--worker-id", "json-1", "--settings=json_settings", env={"PYTHONPATH": path}
    )
    assert worker.wait(30) == 0, worker.output
    lines = [json.loads(line) for line in worker.output.splitlines() if line.startswith("{")]
    failed = [line for line in lines if line.get("job_id") == failing.id]
    assert [(line["level"], line["attempt"]) for line in failed] == [("WARNING", 1), ("ERROR", 2)]
    for line in failed:
        assert line["task"] == always_fails.path
        assert line["queue"] == "default"
        assert line["worker"] == "json-1"
        assert line["exc_type"] == "ValueError"
        assert "this task always fails" in line["traceback"]
    # A run whose worker was SIGKILLed, returned by reapjobs once its lease expired.
    short = {"PYTHONPATH": path, "PGQUEUE_TEST_PGQUEUE": json.dumps({"LEASE": 1})}
    held = tracked.enqueue("ops-json-reaped", sleep=60)
    killed = start_worker("--worker-id", "json-2", "--settings=json_settings", env=short)
    wait_for(lambda: run_counts("ops-json-") == {"ops-json-reaped": 1}, 20, "the run")
    killed.kill()
    wait_for(lambda: Job.objects.expired().filter(pk=held.pk).exists(), 10, "the lease to expire")
    reaped = start_worker("--settings=json_settings", env=short, command="reapjobs")
    assert reaped.wait(30) == 0, reaped.output
    lines = [json.loads(line) for line in reaped.output.splitlines() if line.startswith("{")]
    (line,) = [line for line in lines if line.get("job_id") == held.id]
    assert line["level"] == "WARNING"
    assert (line["task"], line["queue"], line["attempt"], line["worker"]) == (
        tracked.path,
        "default",
        1,
        "json-2",
    )
    assert "traceback" not in line


def test_a_job_cancelled_while_claimed_ahead_is_counted_cancelled_never_timed(
    start_worker: Start,
) -> None:
    """A job claimed ahead (waiting for a thread) that an operator cancels ends
    cancelled without running: it counts as a cancelled outcome, but it never
    started, so neither the wait histogram (run_at to start) nor the duration one
    (how long jobs ran) may count it, as no signal is sent for it."""
    long = mark.using(queue="q").enqueue("ops-ahead-long", sleep=5)
    worker = start_worker(
        "--metrics-port",
        "0",
        "--queues",
        "q",
        "--concurrency",
        "1",
        "--prefetch",
        "1",
        "--poll-interval",
        "0.2",
    )
    base = base_url(worker)
    wait_for(lambda: Job.objects.get(pk=long.pk).status == "running", 20, "the long job")
    ahead = add.using(queue="q").enqueue(1, 1)
    wait_for(lambda: Job.objects.get(pk=ahead.pk).status == "running", 20, "the claim ahead")
    Job.objects.cancel([ahead.id], reason="operator")
    wait_for(lambda: status_counts() == {"done": 1, "cancelled": 1}, 30, "both to end")
    want = {(mark.path, "succeeded"): 1, (add.path, "cancelled"): 1}
    wait_for(lambda: completed(scrape(base)) == want, 10, "both outcomes")
    found = scrape(base)
    assert value(found, "pgqueue_job_wait_seconds_count", queue="q") == 1
    assert value(found, "pgqueue_job_duration_seconds_count", queue="q", task=add.path) == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_tasks_framework_runs_are_counted_with_their_path_and_outcome(
    start_worker: Start,
) -> None:
    from tests.testapp import djtasks

    djtasks.echo.enqueue(1)
    djtasks.fails_until.using(queue_name="queue_1").enqueue(1)  # retried once, then succeeds
    djtasks.snoozes_once.enqueue("ops-dj-snooze")  # snoozed (retried), then succeeds
    djtasks.cancels_itself.enqueue()
    worker = start_worker("--metrics-port", "0", "--poll-interval", "0.2")
    base = base_url(worker)
    wait_for(lambda: status_counts() == {"done": 3, "cancelled": 1}, 30, "the runs")
    path = "tests.testapp.djtasks."
    want = {
        (path + "echo", "succeeded"): 1,
        (path + "fails_until", "retried"): 1,
        (path + "fails_until", "succeeded"): 1,
        (path + "snoozes_once", "retried"): 1,
        (path + "snoozes_once", "succeeded"): 1,
        (path + "cancels_itself", "cancelled"): 1,
    }
    wait_for(lambda: completed(scrape(base)) == want, 10, "every outcome")
    found = scrape(base)
    assert (
        value(
            found,
            "pgqueue_jobs_completed_total",
            queue="queue_1",
            task=path + "fails_until",
            outcome="retried",
        )
        == 1
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
