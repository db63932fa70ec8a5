"""Job control across processes: jobs running in ``runworker`` subprocesses aborted
from this process, and a paused queue skipped by three workers at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import awaits_to_be_stopped, mark, waits_to_be_stopped
from tests.worker.conftest import ROOT, WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def status(job_id: int) -> str:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).get()


def stop_delay(job_id: int, label: str) -> float:
    """Ask the running job ``job_id`` to stop; seconds from the request's commit to its
    outcome's (the job's row cancelled)."""
    wait_for(lambda: run_counts(label) == {label: 1}, 20, f"{label} to start")
    asked = time.monotonic()
    assert Job.objects.cancel([job_id], reason="from another process") == [job_id]
    while status(job_id) == "running":
        assert time.monotonic() - asked < 20, f"{label} was not stopped"
        time.sleep(0.002)
    return time.monotonic() - asked


def test_sync_and_async_tasks_aborted_from_another_process_end_cancelled_within_100ms(
    start_worker: Start,
) -> None:
    """The worker hears the NOTIFY, renews at once, and tells the task; the heartbeat
    alone (every 10 s here) would be far too slow for this bound."""
    worker = start_worker("--concurrency", "2", "--poll-interval", "5", "--worker-id", "far")
    worker.wait_for_output("listening for new jobs")
    delays: dict[str, list[float]] = {"sync": [], "async": []}
    for n in range(3):
        sync = waits_to_be_stopped.enqueue(f"sync-{n}")
        coroutine = awaits_to_be_stopped.enqueue(f"async-{n}")
        delays["sync"].append(stop_delay(sync.pk, f"sync-{n}"))
        delays["async"].append(stop_delay(coroutine.pk, f"async-{n}"))
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert status_counts() == {"cancelled": 6}
    for job in Job.objects.all():
        assert (job.attempts, job.last_error) == (1, "Cancelled: from another process")
        assert job.worker_ids == ["far"]
    # Each delay includes writing the outcome (docs/guarantees.md quotes the medians).
    assert max(delays["sync"] + delays["async"]) < 0.1, delays
    assert "asked to stop (from another process)" in worker.output


def test_a_paused_queue_is_skipped_by_three_workers_and_drains_on_resume(
    start_worker: Start,
) -> None:
    long = mark.using(queue="emails").enqueue("emails-long", sleep=1.0)
    workers = [
        start_worker("--concurrency", "4", "--poll-interval", "0.2", "--worker-id", f"w{n}")
        for n in range(3)
    ]
    wait_for(lambda: Job.objects.running().filter(pk=long.pk).exists(), 20, "the long job")
    pause = start_worker("emails", command="pausequeue")
    assert pause.wait(30) == 0
    assert "paused queue 'emails'" in pause.output
    # Enqueued after the pause and older than the defaults: an unpaused claim takes the
    # emails first (same priority, earlier run_at), so any claim of them would show.
    Job.objects.enqueue_many(JobSpec.build(mark, [f"email-{n}"], queue="emails") for n in range(20))
    Job.objects.enqueue_many(JobSpec.build(mark, [f"other-{n}"]) for n in range(20))
    wait_for(lambda: len(run_counts("other-")) == 20, 30, "the default queue to drain")
    # Running jobs finish: the job's line is written before it returns, and its
    # outcome a few milliseconds after that, so wait for the outcome itself.
    wait_for(lambda: Job.objects.get(pk=long.pk).status == "done", 20, "the running job")
    assert run_counts("emails-long") == {"emails-long": 1}
    emails = Job.objects.filter(queue="emails").exclude(pk=long.pk)
    assert set(emails.values_list("status", "attempts")) == {("queued", 0)}
    assert all(ids == [] for ids in emails.values_list("worker_ids", flat=True))

    resume = start_worker("emails", command="resumequeue")
    assert resume.wait(30) == 0
    assert "resumed queue 'emails'" in resume.output
    wait_for(lambda: status_counts() == {"done": 41}, 30, "the emails to drain")
    assert run_counts("email-") == {f"email-{n}": 1 for n in range(20)}
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait(20) for worker in workers] == [0, 0, 0]


def test_a_row_held_by_another_transaction_holds_up_only_its_own_outcome(
    start_worker: Start, db_url: str
) -> None:
    """An operator's cancel() inside a long atomic block holds one running job's row.
    The worker waited for it to write any outcome: jobs done in milliseconds stayed
    running until that transaction ended, and a SIGTERM meanwhile overran its bound
    (exit 1, "a statement hangs"), so their leases lapsed and succeeded jobs were
    buried. The held row's outcome waits now, alone."""
    import psycopg

    worker = start_worker("--concurrency", "2", "--shutdown-timeout", "1", "--worker-id", "held")
    worker.wait_for_output("listening for new jobs")
    slow = mark.enqueue("held-slow", sleep=0.5)
    wait_for(lambda: status(slow.pk) == "running", 20, "the slow job to start")
    with psycopg.connect(db_url) as holder:  # a transaction, left open
        holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR NO KEY UPDATE", [slow.pk])
        wait_for(lambda: run_counts("held-slow") == {"held-slow": 1}, 20, "the slow job to end")
        quick = Job.objects.enqueue_many(JobSpec.build(mark, [f"held-quick-{n}"]) for n in range(3))
        wait_for(
            lambda: all(status(job_id) == "done" for job_id in quick),
            20,
            "the quick jobs' outcomes",
        )
        assert status(slow.pk) == "running"  # its outcome waits for the row
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0
        holder.rollback()
    assert f"could not record the outcomes of jobs [{slow.pk}]: other transactions held" in (
        worker.output
    )
    assert "a statement hangs" not in worker.output
    assert status_counts() == {"done": 3, "running": 1}  # the reaper returns it later


@pytest.mark.parametrize("signals", [1, 2], ids=["timeout", "second-signal"])
def test_an_async_job_still_running_at_exit_is_given_back_and_does_not_hold_the_exit(
    start_worker: Start, signals: int
) -> None:
    """asgiref runs a coroutine's event loop in a ThreadPoolExecutor thread, which
    the interpreter joins at exit: once the job was given back, the process stayed
    up until the watchdog ended it 7 s (2 s after a second signal) later, with
    exit status 1 and an ERROR saying a statement hung and the job might not have
    been given back."""
    worker = start_worker("--shutdown-timeout", "0.5", "--worker-id", "async-exit")
    worker.wait_for_output("listening for new jobs")
    job = awaits_to_be_stopped.enqueue("async-exit", seconds=60.0)
    wait_for(lambda: run_counts("async-exit") == {"async-exit": 1}, 20, "the job to start")
    signalled = time.monotonic()
    for _ in range(signals):
        worker.signal(signal.SIGTERM)
        worker.wait_for_output("SIGTERM: finishing running jobs")
    worker.wait_for_output("shutdown: put 1 job back in the queue")
    assert worker.wait(20) == (0 if signals == 1 else 128 + signal.SIGTERM)
    took = time.monotonic() - signalled
    assert "a statement hangs" not in worker.output
    assert took < 2.0, f"exited {took:.2f}s after SIGTERM:\n{worker.output}"
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("queued", 0)


@pytest.mark.parametrize("task", [waits_to_be_stopped, awaits_to_be_stopped], ids=["sync", "async"])
def test_a_worker_that_ends_its_process_early_still_runs_the_atexit_handlers(
    start_worker: Start, tmp_path: Path, task: Any
) -> None:
    """With a job still running past the shutdown timeout (given back), runworker ends
    its process with os._exit: it skipped the atexit handlers (an error reporter's
    flush, a tracer's export), which a normal exit runs, as this one did for a sync
    job before the early exit covered it."""
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit\natexit.register(lambda: print('atexit handler ran', flush=True))\n"
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    worker = start_worker(
        "--shutdown-timeout", "0.5", "--worker-id", "atexit", env={"PYTHONPATH": path}
    )
    worker.wait_for_output("listening for new jobs")
    job = task.enqueue("atexit", seconds=60.0)
    wait_for(lambda: run_counts("atexit") == {"atexit": 1}, 20, "the job to start")
    worker.signal(signal.SIGTERM)
    worker.wait_for_output("shutdown: put 1 job back in the queue")
    assert worker.wait(20) == 0
    assert "atexit handler ran" in worker.output
    assert Job.objects.get(pk=job.pk).status == "queued"


def test_the_atexit_handlers_run_while_a_job_still_running_at_exit_holds_its_lease(
    start_worker: Start, tmp_path: Path
) -> None:
    """The early exit ran the atexit handlers after the give-back: while a slow one (an
    error reporter's flush, a tracer's export) ran, the job was queued again and
    another worker started it (and took its concurrency key) beside the run still
    going here. The handlers now run first, the lease renewed, and the job goes back
    as the very last statement."""
    worker = start_worker(
        "--shutdown-timeout", "0.5", "--lease", "1", "--worker-id", "slow-exit",
        env=slow_exit_handler(tmp_path, 1.5),
    )  # fmt: skip
    worker.wait_for_output("listening for new jobs")
    job = waits_to_be_stopped.using(concurrency_key="one").enqueue("slow-exit", seconds=60.0)
    wait_for(lambda: run_counts("slow-exit") == {"slow-exit": 1}, 20, "the job to start")
    worker.signal(signal.SIGTERM)
    worker.wait_for_output("atexit handler started")
    time.sleep(1.2)  # past the lease: only the heartbeat keeps the job running
    assert status(job.pk) == "running", worker.output
    assert worker.wait(20) == 0
    assert worker.output.index("atexit handler started") < worker.output.index(
        "shutdown: put 1 job back in the queue"
    )
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("queued", 0)


def test_the_atexit_handlers_run_early_leave_logging_open_for_the_last_lines(
    tmp_path: Path,
) -> None:
    """Run before the give-back, logging's own atexit handler closed the handlers: a
    FileHandler opened with mode "w" then dropped the worker's last lines (what it
    gave back, its "stopped" line)."""
    log = tmp_path / "worker.log"
    script = (
        "import logging, django\n"
        "django.setup()\n"
        "from django_pgqueue.management.commands.runworker import run_exit_handlers\n"
        f"logging.getLogger().addHandler(logging.FileHandler({str(log)!r}, mode='w'))\n"
        "run_exit_handlers(running=[1])\n"
        "logging.getLogger().warning('a line after the atexit handlers')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "a line after the atexit handlers" in log.read_text()


def slow_exit_handler(tmp_path: Path, seconds: float) -> dict[str, str]:
    """The environment of a process with an atexit handler that takes ``seconds``."""
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, time\n"
        "def flush():\n"
        "    print('atexit handler started', flush=True)\n"
        f"    time.sleep({seconds})\n"
        "atexit.register(flush)\n"
    )
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    }


@pytest.mark.parametrize("second_signal", [False, True], ids=["hangs", "second-signal"])
def test_a_hanging_atexit_handler_still_lets_the_jobs_go_back(
    start_worker: Start, tmp_path: Path, second_signal: bool
) -> None:
    """Run before the give-back, an atexit handler that hung (or outran the shutdown's
    bound) held it back: the watchdog ended the process with the job left running
    (the reaper's, an attempt spent, once the lease lapsed), and a second signal did
    not give it back either. The handlers get the shutdown's bound less the
    give-back's share, or until a second signal; the jobs then go back."""
    worker = start_worker(
        "--shutdown-timeout", "0.5", "--lease", "30", "--worker-id", "hangs",
        env=slow_exit_handler(tmp_path, 60.0),
    )  # fmt: skip
    worker.wait_for_output("listening for new jobs")
    job = waits_to_be_stopped.enqueue("hangs", seconds=60.0)
    wait_for(lambda: run_counts("hangs") == {"hangs": 1}, 20, "the job to start")
    worker.signal(signal.SIGTERM)
    worker.wait_for_output("atexit handler started")
    if second_signal:
        worker.signal(signal.SIGTERM)
    asked = time.monotonic()
    assert worker.wait(20) == (128 + signal.SIGTERM if second_signal else 0), worker.output
    assert time.monotonic() - asked < (1.5 if second_signal else 4.0)
    assert "shutdown: put 1 job back in the queue" in worker.output
    assert "overran its bound" not in worker.output
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("queued", 0)
