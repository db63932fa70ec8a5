"""A real worker's /metrics and /healthz, read over HTTP: exact counters for what it did."""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import status_counts
from tests.testapp.tasks import add, always_fails
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.scrape import base_url, completed, scrape, value

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_counters_are_exact_for_n_jobs_of_which_m_fail_for_good(start_worker: Start) -> None:
    n, m = 12, 3
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1], queue="mail") for i in range(n - m))
    # max_attempts=2: each fails once (retried), then for good (dead).
    Job.objects.enqueue_many(
        JobSpec.build(always_fails, [f"m-{i}"], queue="mail") for i in range(m)
    )
    worker = start_worker(
        "--concurrency", "4", "--metrics-port", "0", "--no-listen", "--poll-interval", "0.2"
    )
    base = base_url(worker)
    wait_for(lambda: status_counts() == {"done": n - m, "dead": m}, 30, "every job to end")
    add_path, fails_path = add.path, always_fails.path

    def settled() -> bool:
        found = scrape(base)
        return (
            value(
                found, "pgqueue_jobs_completed_total", queue="mail", task=fails_path, outcome="dead"
            )
            == m
        )

    wait_for(settled, 10, "the last outcome to be counted")
    found = scrape(base)
    assert completed(found) == {
        (add_path, "succeeded"): n - m,
        (fails_path, "retried"): m,
        (fails_path, "dead"): m,
    }
    assert value(found, "pgqueue_job_duration_seconds_count", queue="mail", task=add_path) == n - m
    assert (
        value(found, "pgqueue_job_duration_seconds_count", queue="mail", task=fails_path) == 2 * m
    )
    assert value(found, "pgqueue_job_wait_seconds_count", queue="mail") == n + m
    assert value(found, "pgqueue_jobs_running") == 0
    assert value(found, "pgqueue_worker_slots") == 4
    assert value(found, "pgqueue_lease_lost_total") == 0
    assert value(found, "pgqueue_reaped_total", result="returned") == 0
    assert value(found, "pgqueue_reaped_total", result="buried") == 0
    assert value(found, "pgqueue_reaped_total", result="cancelled") == 0
    claims = value(found, "pgqueue_claims_total")
    assert claims >= 2
    assert value(found, "pgqueue_claim_duration_seconds_count") == claims
    assert value(found, "process_resident_memory_bytes") > 0  # the default registry's own

    status, health = get(f"{base}/healthz")
    assert status == 200
    assert health["status"] == "ok"
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def test_without_the_extra_a_metrics_port_is_a_one_line_error_and_no_port_is_fine(
    start_worker: Start, tmp_path: Path
) -> None:
    # A process where prometheus-client cannot be imported, as without the extra.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['prometheus_client'] = None\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # --skip-checks: the checks would load tests.urls, which mounts the metrics view
    # (a project without the extra would not: that import fails, as it should).
    refused = start_worker("--metrics-port", "0", "--skip-checks", env=env)
    assert refused.wait(30) == 1
    assert refused.output.strip().splitlines()[-1] == (
        "CommandError: serving metrics needs prometheus-client: "
        "pip install 'django-pgqueue[metrics]'"
    )
    add.enqueue(1, 1)
    plain = start_worker("--burst", "--skip-checks", env=env)
    assert plain.wait(30) == 0
    assert status_counts() == {"done": 1}
    # A project that mounts the view without the extra hears it when its URLs load.
    check = start_worker(command="check", env=env)
    assert check.wait(30) == 1
    assert (
        "ImproperlyConfigured: django_pgqueue.views serves Prometheus metrics and needs "
        "prometheus-client: pip install 'django-pgqueue[metrics]'"
    ) in check.output


def test_a_port_in_use_is_a_one_line_error(start_worker: Start) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = start_worker("--metrics-port", str(port))
        assert worker.wait(30) == 1
    assert f"CommandError: cannot serve metrics on 127.0.0.1:{port}:" in worker.output


def test_reaped_runs_are_counted_by_what_the_reaper_made_of_them() -> None:
    from prometheus_client import CollectorRegistry

    from django_pgqueue.monitoring.metrics import WorkerMetrics
    from django_pgqueue.records import ReapResult
    from django_pgqueue.worker.events import Events

    registry, events = CollectorRegistry(), Events()
    metrics = WorkerMetrics(registry, 4)
    metrics.subscribe(events)
    events.emit("reaped", result=ReapResult(returned=1, buried=2, cancelled=3))
    counted = {
        result: registry.get_sample_value("pgqueue_reaped_total", {"result": result})
        for result in ("returned", "buried", "cancelled")
    }
    assert counted == {"returned": 1, "buried": 2, "cancelled": 3}
    metrics.close()


def test_a_run_at_of_minus_infinity_leaves_the_wait_histogram_finite(start_worker: Start) -> None:
    """A row written by hand with ``run_at = '-infinity'`` made the wait histogram's
    sum (and the throughput line's queue lag) infinite for the life of the worker."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, queue, run_at) "
            "VALUES (%s, '[1, 2]', 'odd', '-infinity')",
            [add.path],
        )
    worker = start_worker("--metrics-port", "0", "--no-listen", "--poll-interval", "0.2")
    base = base_url(worker)
    wait_for(lambda: status_counts() == {"done": 1}, 30, "the job to run")
    wait_for(
        lambda: value(scrape(base), "pgqueue_job_wait_seconds_count", queue="odd") == 1,
        10,
        "its wait to be observed",
    )
    assert value(scrape(base), "pgqueue_job_wait_seconds_sum", queue="odd") == 1e11
