"""Issue 16 (operating it) driven further without a worker process: the web tier's
metrics view against the observability page's table, and ``queuestats --json``
with every key its reference names."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.records import JobStatus
from tests.testapp.tasks import add
from tests.worker.conftest import django_command
from tests.worker.scrape import documented

pytestmark = pytest.mark.django_db(transaction=True)

#: What the view serves: the queue gauges, not a worker's own metrics.
QUEUE_GAUGES = {
    "pgqueue_queue_jobs",
    "pgqueue_queue_oldest_ready_age_seconds",
    "pgqueue_queue_paused",
    "pgqueue_queue_gauges_age_seconds",
}


def test_the_view_serves_the_queue_gauges_as_the_page_types_and_labels_them() -> None:
    table = documented()
    assert table.keys() >= QUEUE_GAUGES
    add.using(queue="view-a").enqueue(1, 1)
    Job.objects.pause_queue("view-b")
    response = Client().get("/pgqueue/metrics")
    assert response.status_code == 200
    served = {
        family.name: family for family in text_string_to_metric_families(response.content.decode())
    }
    assert served.keys() == QUEUE_GAUGES
    for name in QUEUE_GAUGES:
        kind, labels = table[name]
        family = served[name]
        assert family.type == kind, name
        assert family.samples, name
        for sample in family.samples:
            assert set(sample.labels) == labels, (name, sample)
    statuses = {s.labels["status"] for s in served["pgqueue_queue_jobs"].samples}
    assert statuses == set(JobStatus.values)  # counted exactly: every status, 0 or not
    paused = {s.labels["queue"]: s.value for s in served["pgqueue_queue_paused"].samples}
    assert paused == {"view-a": 0.0, "view-b": 1.0}


def test_queuestats_json_has_every_key_its_reference_names() -> None:
    add.enqueue(1, 1)
    RegisteredWorker.objects.create(
        id="json-w",
        hostname="h",
        pid=7,
        queues=["default"],
        concurrency=3,
        version="9",
        alive_until=timezone.now() + dt.timedelta(minutes=1),
    )
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert set(summary) == {
        "oldest_ready_age_seconds",
        "dead_last_24h",
        "running_past_lease",
        "paused_queues",
        "running_on_gone_workers",
        "queues",
        "workers",
    }
    (queue,) = summary["queues"]
    assert set(queue) == {
        "queue",
        "status",
        "jobs",
        "oldest_ready_age",
        "dead_last_24h",
        "lease_expired",
        "paused",
    }
    (worker,) = summary["workers"]
    assert {k: v for k, v in worker.items() if k not in ("started_at", "last_seen")} == {
        "id": "json-w",
        "hostname": "h",
        "pid": 7,
        "queues": ["default"],
        "concurrency": 3,
        "version": "9",
        "alive": True,
        "jobs_running": 0,
        "jobs_done": 0,
    }
    for moment in ("started_at", "last_seen"):
        assert dt.datetime.fromisoformat(worker[moment]).tzinfo is not None


@pytest.mark.slow
def test_a_job_database_alias_not_in_databases_is_one_line_with_the_checks_skipped(
    db_url: str,
) -> None:
    """A probe that skips the checks to be quick (``queuestats --check --skip-checks``)
    with PGQUEUE["DATABASE"] misspelt got Django's traceback, not the one line that
    a database out of reach gets; so did every other command."""
    env = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"DATABASE": "defualt"})}
    for args in (
        ("queuestats", "--check"),
        ("queuestats",),
        ("runworker", "--burst"),
        ("reapjobs",),
        ("pausequeue", "emails"),
    ):
        done = django_command(db_url, *args, "--skip-checks", env=env)
        assert done.returncode == 1, done
        assert "Traceback" not in done.stderr, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("CommandError: The connection 'defualt' doesn't exist: "), line
        assert "(django_pgqueue.E002)" in line, line


def test_a_gone_workers_row_is_kept_while_a_job_still_runs_under_its_id(
    admin_client: Client,
) -> None:
    """A row gone for an hour is forgotten; with a lease longer than about three hours
    (LEASE 14400: its jobs' leases end 80 minutes after it is shown gone) its job was
    then held by no worker the registry knew: no longer listed as running on a gone
    worker, and its page no longer said the worker was gone, before the lease ended."""
    for worker_id in ("w-long", "w-idle"):
        RegisteredWorker.objects.create(
            id=worker_id,
            hostname="h",
            pid=1,
            concurrency=1,
            version="0",
            alive_until=timezone.now() - dt.timedelta(hours=1, seconds=10),
        )
    job = add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w-long", limit=1, lease=1100)  # 20 minutes of lease left
    assert RegisteredWorker.objects.forget() == ["w-idle"]  # a worker's maintenance pass
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    assert json.loads(out.getvalue())["running_on_gone_workers"] == [job.pk]
    page = admin_client.get(f"/admin/django_pgqueue/job/{job.pk}/change/").content.decode()
    assert "but that worker is gone" in page
    Job.objects.release("w-long", [claimed.key])
    assert RegisteredWorker.objects.forget() == ["w-long"]  # its job back, it goes
