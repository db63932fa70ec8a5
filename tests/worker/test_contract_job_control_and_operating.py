"""A contract audit of issues 14 (job control) and 16 (operating it), as a user meets
them: each name the issues give (setting, command, flag, metric, function,
exception, status), used the way the issue says, against a real database and, where
the behaviour needs one, a real worker (in a thread, or a ``runworker`` process)."""

from __future__ import annotations

import datetime as dt
import inspect
import io
import json
import logging
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone

import django_pgqueue
from django_pgqueue.backend import options as backend_options
from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.records import JobSpec, JobStatus, RunOutcome
from django_pgqueue.signals import job_finished, job_started
from tests.conftest import run_counts
from tests.testapp.tasks import (
    add,
    always_fails,
    awaits_to_be_stopped,
    discards_lookups,
    gives_up,
    mark,
    retries_io_only,
    snoozes,
    tracked,
    waits_to_be_stopped,
)
from tests.worker.conftest import WorkerProcess, django_command, wait_for
from tests.worker.inprocess import worker_thread
from tests.worker.scrape import base_url, completed, parse, scrape, value

#: Tasks of this module are enqueued under this setting (outside an installed app).
HERE = {"PGQUEUE": {"TASK_MODULES": [__name__], "BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2}}


@django_pgqueue.task
async def contract_async_sees_its_job() -> dict[str, Any]:
    """What current_job() says in an async task, directly and in sync_to_async code."""
    from asgiref.sync import sync_to_async

    here = django_pgqueue.current_job()
    there = await sync_to_async(django_pgqueue.current_job)()
    return {
        "here": None if here is None else [here.id, here.attempt, here.cancel_requested],
        "there": None if there is None else there.id,
    }


@django_pgqueue.task
async def contract_async_in_sync_code(label: str) -> str:
    """Spends its time in sync code (sync_to_async), where no await can be cancelled."""
    from asgiref.sync import sync_to_async

    from tests.testapp.tasks import record

    await sync_to_async(record)(label)
    await sync_to_async(time.sleep)(1.0)
    await sync_to_async(time.sleep)(20.0)
    return "finished"


pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def status_of(job: Job) -> tuple[str, int]:
    row = Job.objects.get(pk=job.pk)
    return row.status, row.attempts


def ended(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).status in {"done", "dead", "cancelled"}


# -- issue 14: the public names ------------------------------------------------------------


def test_the_public_names_of_job_control_exist() -> None:
    for name in ("Snooze", "Cancel", "current_job", "task"):
        assert name in django_pgqueue.__all__
    assert django_pgqueue.current_job() is None  # outside a job
    assert JobStatus.CANCELLED.value == "cancelled"
    assert {o.value for o in RunOutcome} == {
        "succeeded",
        "retried",
        "dead",
        "cancelled",
        "released",
    }
    params = inspect.signature(django_pgqueue.task).parameters
    assert {"retry_on", "discard_on"} <= params.keys()
    options = inspect.signature(backend_options).parameters
    assert {"retry_on", "discard_on", "max_attempts"} <= options.keys()


# -- issue 14: cancel --------------------------------------------------------------------


def test_cancel_moves_a_queued_job_to_cancelled_at_once_with_the_reason() -> None:
    job = add.enqueue(1, 2)
    assert Job.objects.cancel([job.pk], reason="no longer wanted") == [job.pk]
    row = Job.objects.get(pk=job.pk)
    assert row.status == "cancelled"
    assert "no longer wanted" in (row.last_error or "")
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    stats = json.loads(out.getvalue())
    assert any(q["status"] == "cancelled" and q["jobs"] == 1 for q in stats["queues"]), stats


def test_prunejobs_accepts_status_cancelled() -> None:
    job = add.enqueue(1, 2)
    Job.objects.cancel([job.pk], reason="gone")
    Job.objects.filter(pk=job.pk).update(done_at=timezone.now() - dt.timedelta(days=2))
    out = io.StringIO()
    call_command("prunejobs", "--older-than", "1d", "--status", "cancelled", stdout=out)
    assert "deleted 1 job" in out.getvalue()
    assert not Job.objects.filter(pk=job.pk).exists()


def test_a_running_sync_task_polling_cancel_requested_ends_cancelled_within_a_heartbeat() -> None:
    job = waits_to_be_stopped.enqueue("contract-sync", seconds=20)
    with worker_thread(lease=3, concurrency=2, listen=True) as worker:
        wait_for(
            lambda: run_counts("contract-sync") == {"contract-sync": 1}, 10, "the job to start"
        )
        asked = time.monotonic()
        Job.objects.cancel([job.pk], reason="operator says stop")
        wait_for(lambda: ended(job), 5, "the job to end")
        took = time.monotonic() - asked
        heartbeat = worker.worker.config.heartbeat_interval
    row = Job.objects.get(pk=job.pk)
    assert row.status == "cancelled", row.errors
    assert "operator says stop" in (row.last_error or "")
    assert took < heartbeat, took


def test_a_running_async_task_is_cancelled_at_its_await() -> None:
    job = awaits_to_be_stopped.enqueue("contract-async", seconds=20)
    with worker_thread(lease=3, concurrency=2, listen=True):
        wait_for(
            lambda: run_counts("contract-async") == {"contract-async": 1}, 10, "the job to start"
        )
        Job.objects.cancel([job.pk], reason="stop awaiting")
        wait_for(lambda: ended(job), 5, "the job to end")
    row = Job.objects.get(pk=job.pk)
    assert row.status == "cancelled"
    assert "stop awaiting" in (row.last_error or "")


def test_a_job_that_finishes_anyway_ends_as_it_finished() -> None:
    job = mark.enqueue("contract-finishes", sleep=1.0)
    with worker_thread(lease=3, listen=True):
        wait_for(lambda: Job.objects.get(pk=job.pk).status == "running", 10, "the job to start")
        Job.objects.cancel([job.pk], reason="too late")
        wait_for(lambda: ended(job), 10, "the job to end")
    assert Job.objects.get(pk=job.pk).status == "done"


# -- issue 14: task code steers its own job ------------------------------------------------


def test_snooze_cancel_retry_on_discard_on_end_in_the_right_state() -> None:
    snoozed = snoozes.enqueue("contract-snooze", 2)  # max_attempts=3; snoozes twice then returns
    cancelled = gives_up.enqueue("contract-cancel")
    io_retried = retries_io_only.enqueue("contract-io", "io")  # retried: 3 attempts then dead
    other = retries_io_only.enqueue("contract-value", "value")  # not in retry_on: dead at once
    discarded = discards_lookups.enqueue("contract-lookup", "lookup")  # discard_on: dead at once
    kept = discards_lookups.enqueue("contract-runtime", "runtime")  # retried: 3 attempts
    jobs = [snoozed, cancelled, io_retried, other, discarded, kept]
    with worker_thread(concurrency=4, poll_interval=0.05):
        wait_for(lambda: all(ended(j) for j in jobs), 20, "every job to end")
    assert status_of(snoozed) == ("done", 1)  # the attempt not spent by the snoozes
    assert Job.objects.get(pk=snoozed.pk).errors == []  # no failure recorded
    assert status_of(cancelled) == ("cancelled", 1)
    assert status_of(io_retried) == ("dead", 3)
    assert status_of(other) == ("dead", 1)
    assert status_of(discarded) == ("dead", 1)
    assert status_of(kept) == ("dead", 3)


def test_snooze_moves_run_at_and_leaves_the_job_queued() -> None:
    job = snoozes.enqueue("contract-later", 1, seconds=60)
    with worker_thread(burst=True) as worker:
        assert worker.join(10) == 0
    row = Job.objects.get(pk=job.pk)
    assert row.status == "queued"
    assert row.attempts == 0
    assert row.run_at > timezone.now() + dt.timedelta(seconds=50)


def test_more_snoozes_than_max_snoozes_bury_the_job_with_a_clear_reason() -> None:
    job = snoozes.enqueue("contract-snoozy", 10)
    with override_settings(PGQUEUE={"MAX_SNOOZES": 2}), worker_thread(poll_interval=0.05):
        wait_for(lambda: ended(job), 10, "the job to be buried")
    row = Job.objects.get(pk=job.pk)
    assert row.status == "dead"
    assert "TooManySnoozes" in (row.last_error or ""), row.last_error
    assert "MAX_SNOOZES" in (row.last_error or "")


def test_the_reapers_requeue_counts_as_a_failure_under_the_backoff() -> None:
    job = tracked.enqueue("contract-reaped")
    # A run whose worker vanished: running, its lease over.
    Job.objects.filter(pk=job.pk).update(
        status="running",
        attempts=1,
        locked_by="ghost",
        locked_until=timezone.now() - dt.timedelta(seconds=5),
        backoff=60,
    )
    call_command("reapjobs", stdout=io.StringIO())
    row = Job.objects.get(pk=job.pk)
    assert row.status == "queued"
    assert row.run_at > timezone.now() + dt.timedelta(seconds=30)  # not retried instantly
    assert row.errors
    assert "LeaseExpired" in json.dumps(row.errors)


# -- issue 14: paused queues --------------------------------------------------------------


def test_pausequeue_and_resumequeue_commands_and_manager_methods() -> None:
    out = io.StringIO()
    call_command("pausequeue", "contract-q", stdout=out, stderr=io.StringIO())
    assert "paused queue 'contract-q'" in out.getvalue()
    assert Job.objects.paused_queues() == ["contract-q"]
    assert Job.objects.pause_queue("contract-q") is False  # already paused
    job = add.using(queue="contract-q").enqueue(1, 1)
    with worker_thread(burst=True) as worker:
        assert worker.join(10) == 0  # --burst does not wait on a paused queue
    assert Job.objects.get(pk=job.pk).status == "queued"
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    assert "contract-q (paused)" in out.getvalue()
    assert "paused queues: contract-q" in out.getvalue()
    out = io.StringIO()
    call_command("resumequeue", "contract-q", stdout=out)
    assert "resumed queue 'contract-q'" in out.getvalue()
    assert Job.objects.paused_queues() == []
    assert Job.objects.resume_queue("contract-q") is False
    with worker_thread(burst=True) as worker:
        assert worker.join(10) == 0
    assert Job.objects.get(pk=job.pk).status == "done"


def test_the_metrics_view_shows_the_pause_and_the_queue_gauges() -> None:
    add.using(queue="contract-view").enqueue(1, 1)
    Job.objects.pause_queue("contract-view")
    response = Client().get("/pgqueue/metrics")
    assert response.status_code == 200
    found = parse(response.content.decode())
    assert value(found, "pgqueue_queue_paused", queue="contract-view") == 1.0
    assert value(found, "pgqueue_queue_jobs", queue="contract-view", status="queued") == 1.0
    assert (
        "pgqueue_queue_oldest_ready_age_seconds",
        frozenset({("queue", "contract-view")}),
    ) in found


# -- issue 16: logs and signals ------------------------------------------------------------


def test_failed_attempts_log_warning_and_buried_jobs_error_with_exc_info_and_extra(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = always_fails.enqueue("contract-logs")  # max_attempts=2
    with (
        caplog.at_level(logging.INFO, logger="django_pgqueue"),
        worker_thread(poll_interval=0.05, worker_id="contract-logger"),
    ):
        wait_for(lambda: ended(job), 10, "the job to be buried")
    ours = [r for r in caplog.records if getattr(r, "job_id", None) == job.pk]
    levels = [r.levelno for r in ours]
    assert levels == [logging.WARNING, logging.ERROR], [r.getMessage() for r in ours]
    for record in ours:
        assert record.exc_info is not None
        assert record.exc_info[0] is ValueError
        fields = record.__dict__
        assert fields["task"] == always_fails.path
        assert fields["queue"] == "default"
        assert fields["worker"] == "contract-logger"
    assert [r.__dict__["attempt"] for r in ours] == [1, 2]


def test_the_direct_api_sends_job_started_and_job_finished_with_the_outcome() -> None:
    seen: list[tuple[str, Any]] = []

    def started(sender: Any, **kwargs: Any) -> None:
        seen.append(("started", kwargs["job"].id))

    def finished(sender: Any, **kwargs: Any) -> None:
        seen.append((str(kwargs["outcome"]), kwargs["job"].id))

    job_started.connect(started)
    job_finished.connect(finished)
    try:
        ok = add.enqueue(1, 2)
        cancelled = gives_up.enqueue("contract-signals")
        with worker_thread(burst=True, concurrency=1) as worker:
            assert worker.join(10) == 0
    finally:
        job_started.disconnect(started)
        job_finished.disconnect(finished)
    assert ("started", ok.pk) in seen
    assert ("succeeded", ok.pk) in seen
    assert ("started", cancelled.pk) in seen
    assert ("cancelled", cancelled.pk) in seen


# -- issue 16: health check ----------------------------------------------------------------


def test_queuestats_check_exits_0_when_healthy_and_1_per_failed_condition(db_url: str) -> None:
    healthy = django_command(db_url, "queuestats", "--check")
    assert (healthy.returncode, healthy.stdout.strip()) == (0, "ok"), healthy
    # Ready jobs and no live worker: 1, one line.
    add.using(queue="contract-orphan").enqueue(1, 1)
    Job.objects.filter(queue="contract-orphan").update(
        run_at=timezone.now() - dt.timedelta(minutes=10)
    )
    result = django_command(db_url, "queuestats", "--check", "--max-ready-age", "60s")
    assert result.returncode == 1, result
    lines = result.stdout.strip().splitlines()
    assert any("no live worker" in line for line in lines), lines
    assert any("contract-orphan" in line and "--max-ready-age 60s" in line for line in lines), lines
    assert len(lines) == 2, lines  # the two failed conditions, a line each
    # Dead jobs in the last hour above --max-dead.
    Job.objects.filter(queue="contract-orphan").delete()
    for _ in range(3):
        job = add.enqueue(1, 1)
        Job.objects.filter(pk=job.pk).update(
            status="dead", done_at=timezone.now(), last_error="X: y"
        )
    dead = django_command(db_url, "queuestats", "--check", "--max-dead", "2")
    assert dead.returncode == 1, dead
    assert len(dead.stdout.strip().splitlines()) == 1, dead.stdout
    fine = django_command(db_url, "queuestats", "--check", "--max-dead", "3")
    assert fine.returncode == 0, fine


# -- issue 16: a real worker's metrics, registry and healthz -----------------------------


def test_a_real_worker_serves_exact_outcomes_healthz_and_registers(start_worker: Start) -> None:
    ok = [add.enqueue(i, 1) for i in range(3)]
    cancelled = gives_up.enqueue("contract-metrics-cancel")
    snoozed = snoozes.enqueue("contract-metrics-snooze", 1)
    # The setting alone serves (no --metrics-port), on 127.0.0.1 by default.
    env = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"METRICS_PORT": 0})}
    worker = start_worker("--worker-id", "contract-metrics", "--poll-interval", "0.1", env=env)
    base = base_url(worker)
    assert base.startswith("http://127.0.0.1:")
    wait_for(lambda: all(ended(j) for j in [*ok, cancelled, snoozed]), 20, "the jobs to end")

    def counted() -> bool:
        return sum(completed(scrape(base)).values()) == 3 + 1 + 2

    wait_for(counted, 10, "every outcome to be counted")
    found = scrape(base)
    assert completed(found) == {
        (add.path, "succeeded"): 3,
        (gives_up.path, "cancelled"): 1,
        (snoozes.path, "retried"): 1,  # the snooze
        (snoozes.path, "succeeded"): 1,
    }, completed(found)
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
        assert response.status == 200
    assert RegisteredWorker.objects.alive().filter(pk="contract-metrics").exists()
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    assert "contract-metrics" in out.getvalue()
    assert "alive" in out.getvalue()
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert not RegisteredWorker.objects.filter(pk="contract-metrics").exists()  # clean exit


def test_throughput_line_has_claim_latency_and_queue_lag(start_worker: Start) -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1]) for i in range(5))
    worker = start_worker("--stats-interval", "1", "--poll-interval", "0.1")
    worker.wait_for_output("throughput:", timeout=20)
    line = next(x for x in worker.output.splitlines() if "throughput:" in x)
    assert "claims" in line, line
    assert "queue lag" in line, line
    worker.signal(signal.SIGTERM)
    worker.wait(20)


def test_resumequeue_wakes_a_listening_worker_at_once() -> None:
    Job.objects.pause_queue("contract-wake")
    job = add.using(queue="contract-wake").enqueue(2, 2)
    with worker_thread(poll_interval=30, listen=True) as worker:
        worker.wait("listening")
        worker.wait("idle")
        assert Job.objects.get(pk=job.pk).status == "queued"
        call_command("resumequeue", "contract-wake", stdout=io.StringIO())
        took = wait_for(lambda: ended(job), 5, "the resumed queue's job to run")
    assert took < 2, took
    assert Job.objects.get(pk=job.pk).status == "done"


def test_runworker_burst_on_a_paused_queue_exits_at_once(start_worker: Start) -> None:
    Job.objects.pause_queue("contract-burst")
    job = add.using(queue="contract-burst").enqueue(1, 1)
    worker = start_worker("--burst", "--queues", "contract-burst")
    assert worker.wait(20) == 0, worker.output
    assert Job.objects.get(pk=job.pk).status == "queued"


def test_current_job_in_a_tasks_framework_task_and_snooze_in_an_async_task() -> None:
    from tests.testapp import djtasks

    snoozed = djtasks.snoozes_once.enqueue("contract-djsnooze")
    with worker_thread(poll_interval=0.05, listen=True):
        wait_for(lambda: ended(Job.objects.get(pk=int(snoozed.id))), 10, "the snoozed job")
    row = Job.objects.get(pk=int(snoozed.id))
    assert (row.status, row.attempts, row.errors) == ("done", 1, [])


def test_the_view_counts_every_status_including_cancelled() -> None:
    queued = add.using(queue="contract-all").enqueue(1, 1)
    for _ in range(2):
        gone = add.using(queue="contract-all").enqueue(1, 1)
        Job.objects.cancel([gone.pk], reason="not needed")
    assert queued.pk
    found = parse(Client().get("/pgqueue/metrics").content.decode())
    jobs = {
        dict(labels)["status"]: v
        for (name, labels), v in found.items()
        if name == "pgqueue_queue_jobs" and dict(labels)["queue"] == "contract-all"
    }
    assert jobs == {"queued": 1, "running": 0, "done": 0, "dead": 0, "cancelled": 2}, jobs


def test_the_registry_row_describes_the_worker_and_counts_its_jobs() -> None:
    import os
    import socket

    jobs = [add.using(queue="contract-reg").enqueue(i, 1) for i in range(3)]
    with worker_thread(
        worker_id="contract-reg",
        queues=("contract-reg", "other"),
        concurrency=3,
        heartbeat_interval=0.2,
    ) as worker:
        wait_for(lambda: all(ended(j) for j in jobs), 10, "the jobs to end")
        worker.wait("heartbeat", 2)
        wait_for(
            lambda: RegisteredWorker.objects.get(pk="contract-reg").jobs_done == 3,
            5,
            "the heartbeat to write the jobs done",
        )
        row = RegisteredWorker.objects.get(pk="contract-reg")
        assert row.hostname == socket.gethostname()
        assert row.pid == os.getpid()
        assert row.queues == ["contract-reg", "other"]
        assert row.concurrency == 3
        assert row.version == django_pgqueue.__version__
        assert row.jobs_running == 0
        assert row.started_at <= row.last_seen
        assert RegisteredWorker.objects.alive().filter(pk="contract-reg").exists()
    assert not RegisteredWorker.objects.filter(pk="contract-reg").exists()


def test_current_job_is_seen_inside_an_async_task_and_its_sync_to_async_calls() -> None:
    with override_settings(**HERE):
        job = contract_async_sees_its_job.enqueue()
        with worker_thread(burst=True) as worker:
            assert worker.join(10) == 0
    row = Job.objects.get(pk=job.pk)
    assert row.status == "done", row.errors
    assert row.result == {"here": [job.pk, 1, False], "there": job.pk}


@pytest.mark.parametrize(
    ("limit", "times", "status"), [(2, 2, "done"), (2, 3, "dead"), (0, 1, "dead")]
)
def test_max_snoozes_is_the_number_of_snoozes_allowed(limit: int, times: int, status: str) -> None:
    job = snoozes.enqueue(f"contract-limit-{limit}-{times}", times)
    with override_settings(PGQUEUE={"MAX_SNOOZES": limit}), worker_thread(poll_interval=0.05):
        wait_for(lambda: ended(job), 10, "the job to end")
    row = Job.objects.get(pk=job.pk)
    assert row.status == status, row.last_error
    assert row.attempts == 1


def test_a_tasks_framework_failure_is_logged_with_exc_info_and_extra_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.testapp import djtasks

    enqueued = backend_options(djtasks.failing_task_value_error, max_attempts=2).enqueue()
    pk = int(enqueued.id)
    with (
        caplog.at_level(logging.INFO, logger="django_pgqueue"),
        worker_thread(poll_interval=0.05, worker_id="contract-djlog"),
    ):
        wait_for(lambda: ended(Job.objects.get(pk=pk)), 10, "the job to be buried")
    ours = [r for r in caplog.records if getattr(r, "job_id", None) == pk]
    assert [r.levelno for r in ours] == [logging.WARNING, logging.ERROR], [
        r.getMessage() for r in caplog.records
    ]
    for record in ours:
        assert record.exc_info is not None
        assert record.exc_info[0] is ValueError
        assert record.__dict__["worker"] == "contract-djlog"
        assert record.__dict__["queue"] == "default"


def test_an_async_task_aborted_inside_sync_to_async_ends_cancelled_when_that_call_returns() -> None:
    with override_settings(**HERE):
        job = contract_async_in_sync_code.enqueue("contract-in-sync")
        with worker_thread(listen=True, shutdown_timeout=1):
            wait_for(
                lambda: run_counts("contract-in-sync") == {"contract-in-sync": 1},
                10,
                "the job to start",
            )
            Job.objects.cancel([job.pk], reason="stop it")
            took = wait_for(lambda: ended(job), 10, "the job to end")
    row = Job.objects.get(pk=job.pk)
    assert row.status == "cancelled", row.errors
    assert took < 2.0, took  # at the end of the first sleep, not the second


def test_a_job_that_killed_its_worker_is_not_taken_up_at_once_by_the_next(
    start_worker: Start,
) -> None:
    job = tracked.using(backoff=30).enqueue("contract-killer", sleep=30)
    quick = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"REAP_INTERVAL": 0.1})}
    first = start_worker("--lease", "1", "--worker-id", "contract-first", env=quick)
    wait_for(
        lambda: run_counts("contract-killer") == {"contract-killer": 1}, 20, "the job to start"
    )
    first.kill()  # SIGKILL: the job "killed" its worker
    second = start_worker(
        "--lease", "1", "--worker-id", "contract-second", "--poll-interval", "0.1"
    )
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "queued", 20, "the reaper to requeue it")
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 1
    assert row.run_at > timezone.now() + dt.timedelta(seconds=20)  # under its backoff
    time.sleep(2)
    assert run_counts("contract-killer") == {"contract-killer": 1}  # not run again at once
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0
