"""A worker's exporter in process: the queue gauges, runs given back or lost, and a
heartbeat stuck behind a lock turning /healthz to 503 until it moves again."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from django_pgqueue.models import Job
from django_pgqueue.monitoring.exporter import Exporter, claim_loop_limit, health
from tests.conftest import run_counts
from tests.testapp.tasks import add, mark
from tests.worker.conftest import wait_for
from tests.worker.inprocess import WorkerThread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@contextmanager
def exported(
    addr: str = "127.0.0.1", **overrides: object
) -> Iterator[tuple[WorkerThread, Exporter, str]]:
    running = WorkerThread(**overrides)
    exporter = Exporter(running.worker, CollectorRegistry(), refresh_interval=0.2)
    host, port = exporter.serve(addr, 0)
    running.start()
    try:
        yield (
            running,
            exporter,
            f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}",
        )
    finally:
        if running._thread.is_alive():
            running.stop()
        exporter.close()


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def sample(exporter: Exporter, name: str, **labels: str) -> float:
    return exporter.registry.get_sample_value(name, labels) or 0.0


def test_the_queue_gauges_follow_the_table() -> None:
    with exported(queues=("mail",), poll_interval=0.1) as (_running, exporter, base):
        mark.using(queue="other").enqueue("elsewhere")
        mark.using(queue="other").enqueue("elsewhere-2")
        wait_for(
            lambda: sample(exporter, "pgqueue_queue_jobs", queue="other", status="queued") == 2,
            10,
            "the gauge to count the queued jobs",
        )
        status, text = fetch(f"{base}/metrics")
        assert status == 200
        assert 'pgqueue_queue_jobs{queue="other",status="queued"} 2.0' in text
        assert 'pgqueue_queue_oldest_ready_age_seconds{queue="other"}' in text
        assert "pgqueue_queue_gauges_age_seconds" in text
        assert 'pgqueue_queue_paused{queue="other"} 0.0' in text
        Job.objects.pause_queue("other")
        wait_for(
            lambda: sample(exporter, "pgqueue_queue_paused", queue="other") == 1,
            10,
            "the gauge to show the pause",
        )
        assert fetch(f"{base}/other")[0] == 404


def test_a_scrape_reads_the_pause_table_not_the_last_refresh() -> None:
    """The docs say the paused gauge is read at each scrape, as the web view does; on
    a worker it was read at each refresh (every 15 s by default)."""
    running = WorkerThread(queues=("mail",))
    exporter = Exporter(running.worker, CollectorRegistry(), refresh_interval=3600)
    host, port = exporter.serve("127.0.0.1", 0)
    running.start()
    try:
        running.wait("heartbeat")
        exporter.refresh_gauges()  # as the maintenance thread does first, and not again
        assert 'pgqueue_queue_paused{queue="mail"}' not in fetch(f"http://{host}:{port}/metrics")[1]
        Job.objects.pause_queue("mail")
        status, text = fetch(f"http://{host}:{port}/metrics")
        assert (status, 'pgqueue_queue_paused{queue="mail"} 1.0' in text) == (200, True)
        Job.objects.resume_queue("mail")
        status, text = fetch(f"http://{host}:{port}/metrics")
        assert (status, 'pgqueue_queue_paused{queue="mail"}' in text) == (200, False)
    finally:
        running.stop()
        exporter.close()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this host")
def test_the_metrics_server_listens_on_an_ipv6_address_too() -> None:
    with exported("::1") as (_running, _exporter, base):
        assert base.startswith("http://[::1]:")
        status, text = fetch(f"{base}/metrics")
        assert status == 200
        assert "pgqueue_worker_slots" in text


def test_the_gauges_age_keeps_growing_while_no_refresh_succeeds() -> None:
    """The age a stale-gauges alert reads: it counts from the last refresh that
    returned, so a refresh that hangs or fails shows, and does not read fresh."""
    from django_pgqueue.monitoring.gauges import QueueGauges
    from django_pgqueue.queue.gauges import QueueGaugeRow

    def age(collector: QueueGauges) -> float:
        registry = CollectorRegistry()
        registry.register(collector)
        return registry.get_sample_value("pgqueue_queue_gauges_age_seconds") or 0.0

    collector = QueueGauges()
    rows = [QueueGaugeRow("mail", "queued", 2, 1.0, False, 3.0)]
    collector.update(rows)
    assert age(collector) == 3.0  # as computed, read just now
    rows_read, _, paused = collector._read
    collector._read = (rows_read, time.monotonic() - 42.5, paused)  # 42.5 s without a refresh
    assert age(collector) == 3.0 + 42


def test_given_back_and_lost_runs_are_counted_once() -> None:
    held = mark.enqueue("held", sleep=3)
    with exported(lease=2, shutdown_timeout=0.2) as (running, exporter, _base):
        running.wait("started")
        # Someone else's claim took the job over (as after a reap): the next
        # heartbeat finds the lease lost.
        Job.objects.filter(pk=held.pk).update(lease_token=1, locked_by="other")
        running.wait("heartbeat", where=lambda d: bool(d["lost"]))
        assert sample(exporter, "pgqueue_lease_lost_total") == 1
        Job.objects.filter(pk=held.pk).update(status="done", locked_until=None)
        given_back = mark.enqueue("given back", sleep=3)
        running.wait("started", 2)
        assert running.stop() == 0
        assert Job.objects.get(pk=given_back.pk).status == "queued"
        assert sample(exporter, "pgqueue_lease_lost_total") == 1  # not again at the fence
        released = sample(
            exporter,
            "pgqueue_jobs_completed_total",
            queue="default",
            task=mark.path,
            outcome="released",
        )
        assert released == 1
        # Neither thread has returned: each still sleeps in its job.
        assert sample(exporter, "pgqueue_jobs_running") == 2
    assert run_counts("given back") == {}
    # Both runs go on in their threads and record themselves when they wake: let
    # them do so in this test, not in whichever test runs next.
    wait_for(lambda: run_counts() == {"held": 1, "given back": 1}, 15, "the two runs to end")


def test_a_run_whose_lease_the_shutdowns_give_back_finds_lost_is_counted_lost() -> None:
    """The give-back's fence refused a run another worker had taken over before any
    heartbeat noticed: it was counted neither as lost nor as released."""
    held = mark.enqueue("taken over", sleep=3)
    with exported(shutdown_timeout=0.2) as (running, exporter, _base):
        running.wait("started")
        Job.objects.filter(pk=held.pk).update(lease_token=1, locked_by="other")
        assert running.stop() == 0
        assert running.recorder.count("heartbeat", lambda d: bool(d["lost"])) == 0
        assert sample(exporter, "pgqueue_lease_lost_total") == 1
        released = sample(
            exporter,
            "pgqueue_jobs_completed_total",
            queue="default",
            task=mark.path,
            outcome="released",
        )
        assert released == 0
    Job.objects.filter(pk=held.pk).update(status="done", locked_until=None)
    # The run goes on in its thread until it wakes: let it end in this test.
    wait_for(lambda: run_counts() == {"taken over": 1}, 15, "the run to end")


def test_a_job_asked_to_stop_that_a_stopping_worker_ends_is_counted_cancelled() -> None:
    stopped = mark.enqueue("asked to stop", sleep=3)
    with exported(shutdown_timeout=0.2) as (running, exporter, _base):
        running.wait("started")
        Job.objects.cancel([stopped.pk], reason="not needed")  # the task never looks
        assert running.stop() == 0
        assert Job.objects.get(pk=stopped.pk).status == "cancelled"
        counted = {
            outcome: sample(
                exporter,
                "pgqueue_jobs_completed_total",
                queue="default",
                task=mark.path,
                outcome=outcome,
            )
            for outcome in ("cancelled", "released")
        }
        assert counted == {"cancelled": 1, "released": 0}
    # The run goes on in its thread until it wakes: let it end in this test.
    wait_for(lambda: run_counts() == {"asked to stop": 1}, 15, "the run to end")


def test_a_run_a_stopping_worker_records_as_timed_out_is_counted() -> None:
    """The shutdown wrote a run still going past the job timeout as failed (here dead)
    without the ``recorded`` event: pgqueue_jobs_completed_total missed it."""
    late = mark.using(max_attempts=1).enqueue("late", sleep=3)
    with exported(job_timeout=0.3, shutdown_timeout=0.2) as (running, exporter, _base):
        running.wait("started")
        ledger = running.worker.ledger
        wait_for(lambda: any(h.overdue for h in ledger.running()), 5, "the run to be overdue")
        assert running.stop() == 0
        assert Job.objects.get(pk=late.pk).status == "dead"
        counted = sample(
            exporter,
            "pgqueue_jobs_completed_total",
            queue="default",
            task=mark.path,
            outcome="dead",
        )
        assert counted == 1
        assert running.recorder.count("recorded", lambda d: d["buried"] == 1) == 1
    # The run goes on in its thread until it wakes: let it end in this test.
    wait_for(lambda: run_counts() == {"late": 1}, 15, "the run to end")


def test_healthz_is_ok_before_the_worker_threads_start() -> None:
    """The metrics server answers from before the worker's threads are started."""
    waiting = WorkerThread()  # built, not started
    ok, detail = health(waiting.worker)
    assert ok, detail
    assert detail["heartbeat"] == {
        "ok": True,
        "alive": False,
        "age": detail["heartbeat"]["age"],
        "limit": detail["heartbeat"]["limit"],
    }


def test_a_heartbeat_stuck_behind_a_lock_makes_healthz_fail_until_it_moves(db_url: str) -> None:
    mark.enqueue("long", sleep=8)
    with exported(lease=1.5) as (running, _exporter, base):
        running.wait("started")
        status, body = fetch(f"{base}/healthz")
        assert status == 200, body
        assert json.loads(body)["heartbeat"]["ok"] is True
        with psycopg.connect(db_url, autocommit=False) as blocker:
            # The heartbeat skips a locked row, but its UPDATE waits for this table
            # lock (its reaper's and claim's statements too): the thread is stuck.
            blocker.execute("LOCK TABLE pgqueue_job IN EXCLUSIVE MODE")
            limit = json.loads(body)["heartbeat"]["limit"]
            took = wait_for(lambda: fetch(f"{base}/healthz")[0] == 503, 10, "healthz to fail")
            assert took <= limit + 1.0
            status, body = fetch(f"{base}/healthz")
            detail = json.loads(body)
            assert detail["status"] == "stuck"
            assert detail["heartbeat"]["ok"] is False
            assert detail["claim_loop"]["ok"] is True
        wait_for(lambda: fetch(f"{base}/healthz")[0] == 200, 10, "healthz to recover")


def test_a_claim_loop_blocked_past_its_limit_makes_healthz_fail(db_url: str) -> None:
    with exported(poll_interval=0.1) as (running, _exporter, base):
        running.wait("idle")
        assert fetch(f"{base}/healthz")[0] == 200
        with psycopg.connect(db_url, autocommit=False) as blocker:
            # A claim locks rows FOR UPDATE, which this table lock holds off.
            blocker.execute("LOCK TABLE pgqueue_job IN EXCLUSIVE MODE")
            idle = running.recorder.count("idle")
            time.sleep(0.5)  # the loop goes round every 0.1 s at most: now it waits
            assert running.recorder.count("idle") == idle
            # Its limit is 15 s (2 x max(poll, 5 s) + 5 s): as if that long had passed.
            running.worker.loop_at -= claim_loop_limit(running.worker.config)
            status, body = fetch(f"{base}/healthz")
            assert status == 503, body
            detail = json.loads(body)
            assert detail["claim_loop"]["ok"] is False
            assert detail["heartbeat"]["ok"] is True
        running.wait("idle", idle + 2)  # the blocked claim returned, and the loop went round
        assert fetch(f"{base}/healthz")[0] == 200


def test_a_worker_without_a_port_imports_no_metrics_code(db_url: str) -> None:
    add.enqueue(1, 1)
    import subprocess
    import sys

    from tests.worker.conftest import ROOT

    script = (
        "import sys, django; django.setup();"
        "from django.core.management import call_command;"
        "call_command('runworker', '--burst', verbosity=0);"
        "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')"
        " or m.startswith('django_pgqueue.monitoring.') and not m.endswith('.models')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": db_url,
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert Job.objects.get().status == "done"


def test_zero_series_are_given_only_for_counts_that_are_exact() -> None:
    """queued and running are always counted: 0 when a queue has none. Finished
    counts may be estimates, which leave out queues they know nothing of: those stay
    absent (unknown), not 0."""
    from django_pgqueue.monitoring.gauges import families
    from django_pgqueue.queue.gauges import QueueGaugeRow

    def series(rows: list[QueueGaugeRow]) -> dict[tuple[str, str], float]:
        (jobs, *_rest) = families(rows)
        return {(s.labels["queue"], s.labels["status"]): s.value for s in jobs.samples}

    exact = [QueueGaugeRow("mail", "done", 5, None, False, 0.0)]
    assert series(exact) == {
        ("mail", status): 5 if status == "done" else 0
        for status in ("queued", "running", "done", "dead", "cancelled")
    }
    estimated = [
        QueueGaugeRow("bulk", "done", 900_000, None, True, 0.0),
        QueueGaugeRow("rare", "queued", 2, 1.0, False, 0.0),
    ]
    assert series(estimated) == {
        ("bulk", "queued"): 0,
        ("bulk", "running"): 0,
        ("bulk", "done"): 900_000,
        ("rare", "queued"): 2,
        ("rare", "running"): 0,
    }
