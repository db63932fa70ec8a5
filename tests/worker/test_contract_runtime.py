"""Issues 3 and 10 as a user drives them: `runworker` subprocesses and its flags,
signals, verbosity, the other commands' outputs, poison rows. Each pins an outcome
the rest of the suite left unpinned or pinned loosely."""

from __future__ import annotations

import datetime as dt
import io
import signal
import sys
import threading
import time
from collections.abc import Callable

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import add, mark, tracked
from tests.worker.conftest import WorkerProcess, django_command, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def test_a_second_sigint_gives_the_job_back_and_exits_130(start_worker: Start) -> None:
    tracked.enqueue("int-twice", sleep=30)
    worker = start_worker("--shutdown-timeout", "60")
    wait_for(lambda: run_counts("int-twice") != {}, 20, "a running job")
    worker.signal(signal.SIGINT)
    worker.wait_for_output("send SIGINT again to exit now")
    worker.signal(signal.SIGINT)
    assert worker.wait(5) == 128 + signal.SIGINT
    assert status_counts() == {"queued": 1}
    assert Job.objects.get().attempts == 0


def test_worker_id_is_stored_in_locked_by_and_worker_ids(start_worker: Start) -> None:
    # Running for 3 s: the row is read while it runs, even by a test process that a
    # loaded machine leaves unscheduled for a second after the job's start.
    job = tracked.enqueue("named", sleep=3.0)
    worker = start_worker("--worker-id", "contract-w1", "--burst")
    wait_for(lambda: run_counts("named") != {}, 20, "the job to start")
    assert Job.objects.values_list("status", "locked_by").get() == ("running", "contract-w1")
    assert worker.wait(20) == 0
    done = Job.objects.get(pk=job.pk)
    # locked_by is "the worker that holds (or last held) the lease" (docs/table.md)
    assert (done.status, done.worker_ids, done.locked_by) == (
        "done",
        ["contract-w1"],
        "contract-w1",
    )


def test_queues_serves_only_the_queues_named(start_worker: Start) -> None:
    for queue in ("qa", "qb", "qc"):
        mark.using(queue=queue).enqueue(f"queue-{queue}")
    worker = start_worker("--queues", "qa,qb", "--burst", "-v", "0")
    assert worker.wait(30) == 0
    assert dict(Job.objects.values_list("queue", "status")) == {
        "qa": "done",
        "qb": "done",
        "qc": "queued",
    }


def test_max_jobs_claims_exactly_that_many_and_exits_zero(start_worker: Start) -> None:
    Job.objects.enqueue_many(JobSpec.build(mark, [f"max-{i}"]) for i in range(10))
    worker = start_worker("--max-jobs", "3", "--concurrency", "10")
    assert worker.wait(30) == 0
    assert status_counts() == {"done": 3, "queued": 7}
    assert sum(run_counts("max-").values()) == 3


def test_verbosity_two_adds_a_line_per_job_one_the_banner_zero_nothing(
    start_worker: Start,
) -> None:
    """-v 2: a line per job (DEBUG); -v 1: the banner, not those; -v 0: silence."""
    job = add.enqueue(2, 3)
    loud = start_worker("--burst", "-v", "2")
    assert loud.wait(30) == 0
    assert "starting worker" in loud.output
    assert f"job {job.pk} {add.path} attempt 1 claimed" in loud.output
    assert f"job {job.pk} {add.path} succeeded" in loud.output
    second = add.enqueue(1, 1)
    usual = start_worker("--burst")
    assert usual.wait(30) == 0
    assert "starting worker" in usual.output
    assert f"job {second.pk} " not in usual.output
    add.enqueue(1, 2)
    quiet = start_worker("--burst", "-v", "0")
    assert quiet.wait(30) == 0
    assert quiet.output == ""
    assert status_counts() == {"done": 3}


def test_a_throughput_line_comes_every_stats_interval_at_info(start_worker: Start) -> None:
    worker = start_worker("--stats-interval", "0.5")
    worker.wait_for_output("starting worker")
    add.enqueue(1, 2)
    worker.wait_for_output("1 succeeded")
    (line,) = [text for text in worker.output.splitlines() if "1 succeeded" in text]
    assert line.startswith("throughput: 1 job in "), line
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    quiet = start_worker("--stats-interval", "0.2", "-v", "0", "--worker-id", "quiet")
    # Nothing is printed at -v 0 to say it started: its registry row is written once
    # its signal handlers are in (a SIGTERM before them kills it: -15, not 0).
    wait_for(lambda: RegisteredWorker.objects.filter(pk="quiet").exists(), 30, "the worker up")
    time.sleep(1.0)  # five intervals: at -v 0 (WARNING) none of them is printed
    quiet.signal(signal.SIGTERM)
    assert quiet.wait(15) == 0
    assert "throughput" not in quiet.output


def test_a_job_past_the_job_timeout_fails_retries_and_is_buried(start_worker: Start) -> None:
    job = mark.using(max_attempts=2).enqueue("slow", sleep=3.0)
    worker = start_worker("--job-timeout", "0.5", "--concurrency", "2")
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "dead", 30, "the job to be buried")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    dead = Job.objects.get(pk=job.pk)
    assert dead.attempts == 2
    assert [error["attempt"] for error in dead.errors] == [1, 2]
    assert "timeout" in dead.last_error.lower(), dead.last_error


def test_reapjobs_interval_without_loop_is_a_one_line_error(db_url: str) -> None:
    result = django_command(db_url, "reapjobs", "--interval", "5")
    assert result.returncode == 2, result  # a command line it cannot take, as argparse's
    (line,) = result.stderr.strip().splitlines()
    assert line == "CommandError: reapjobs: --interval goes with --loop (one pass has no interval)"
    with pytest.raises(CommandError):
        call_command("reapjobs", interval=5)


def test_reapjobs_loop_returns_leases_that_lapse_while_it_runs(start_worker: Start) -> None:
    reaper = start_worker(command="reapjobs", args=("--loop", "--interval", "0.2"))
    reaper.wait_for_output("returned 0 jobs to the queue, buried 0")
    add.enqueue(1, 1)
    Job.objects.claim("gone", limit=1, lease=0.3)
    reaper.wait_for_output("returned 1 job to the queue, buried 0")
    assert status_counts() == {"queued": 1}
    reaper.signal(signal.SIGTERM)
    assert reaper.wait(10) == 0


def test_prunejobs_deletes_every_batch_and_takes_comma_separated_statuses() -> None:
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(9))
    old = timezone.now() - dt.timedelta(days=8)
    Job.objects.filter(pk__in=ids[:4]).update(status="done", done_at=old)
    Job.objects.filter(pk__in=ids[4:7]).update(status="dead", done_at=old)
    Job.objects.filter(pk=ids[7]).update(status="done", done_at=timezone.now())
    out = io.StringIO()
    call_command(
        "prunejobs", "--older-than", "7d", "--status", "done,dead", "--batch-size", "2", stdout=out
    )
    assert out.getvalue() == "deleted 7 jobs (done,dead)\n"
    assert status_counts() == {"done": 1, "queued": 1}


def test_queuestats_counts_dead_jobs_of_the_last_24h_only() -> None:
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(4))
    now = timezone.now()
    Job.objects.filter(pk__in=ids[:2]).update(status="dead", done_at=now - dt.timedelta(hours=1))
    Job.objects.filter(pk=ids[2]).update(status="dead", done_at=now - dt.timedelta(hours=25))
    Job.objects.filter(pk=ids[3]).update(run_at=now - dt.timedelta(seconds=100))
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    import json

    data = json.loads(out.getvalue())
    assert data["dead_last_24h"] == 2
    assert 100 <= data["oldest_ready_age_seconds"] < 130
    text = io.StringIO()
    call_command("queuestats", stdout=text)
    assert "dead in the last 24h: 2" in text.getvalue()


def test_poison_paths_and_kwargs_are_buried_and_the_worker_keeps_going(start_worker: Start) -> None:
    with connection.cursor() as cursor:
        for task, args, kwargs in [
            ("tests.testapp.tasks.missing", "[]", "{}"),
            ("tests.testapp.nomodule.thing", "[]", "{}"),
            ("nodots", "[]", "{}"),
            ("django_pgqueue.task", "[]", "{}"),
            ("tests.testapp.tasks.add", "[1, 2]", "[1]"),
            ("tests.testapp.tasks.add", "[]", '{"a": 1, "c": 2}'),
        ]:
            cursor.execute(
                "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
                "VALUES (%s, %s::jsonb, %s::jsonb, '[]', '[]')",
                [task, args, kwargs],
            )
    good = add.enqueue(20, 22)
    worker = start_worker("--burst", "-v", "0")
    assert worker.wait(30) == 0
    assert status_counts() == {"dead": 6, "done": 1}
    assert Job.objects.get(pk=good.pk).result == 42
    for attempts, error in Job.objects.dead().values_list("attempts", "last_error"):
        assert attempts == 1
        assert error, "a clear last_error"


def test_the_pgqueue_settings_are_the_workers_defaults(start_worker: Start) -> None:
    """CONCURRENCY, QUEUES, LEASE, PRUNE_AFTER and REAP_INTERVAL from settings, no flags:
    the banner says them, a lapsed lease is reaped at start, old finished jobs pruned."""
    old, recent = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(2))
    Job.objects.filter(pk=old).update(status="done", done_at=timezone.now() - dt.timedelta(hours=1))
    Job.objects.filter(pk=recent).update(status="done", done_at=timezone.now())
    lapsed = mark.using(queue="sq").enqueue("lapsed")
    Job.objects.claim("gone", queues=["sq"], lease=0.01)
    other = mark.using(queue="other").enqueue("other")
    settings = (
        '{"CONCURRENCY": 3, "QUEUES": ["sq"], "LEASE": 7, "PRUNE_AFTER": 60, "REAP_INTERVAL": 0.2}'
    )
    worker = start_worker(env={"PGQUEUE_TEST_PGQUEUE": settings})
    worker.wait_for_output("pruner: deleted 1")
    wait_for(lambda: run_counts("lapsed") != {}, 20, "the reaped job to run again")
    wait_for(lambda: Job.objects.get(pk=lapsed.pk).status == "done", 20, "the reaped job done")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    banner = next(line for line in worker.output.splitlines() if "starting worker" in line)
    for said in ("queues=sq", "concurrency=3", "lease=7s"):
        assert said in banner, banner
    assert dict(Job.objects.values_list("pk", "status")) == {
        recent: "done",
        lapsed.pk: "done",
        other.pk: "queued",
    }
    assert run_counts() == {"lapsed": 1}


def test_a_long_job_outlives_a_short_lease_while_another_process_reaps(start_worker: Start) -> None:
    """--lease 2 (heartbeat a third of it) and a 5 s job, with `reapjobs --loop` every
    0.1 s in another process: the renewals keep the lease, the job runs once. (With
    --lease 1, 0.67 s of slack, a worker stopped for 1.2 s mid-job, as a loaded
    machine may leave it unscheduled, had its job taken back.)"""
    job = tracked.enqueue("hb-long", sleep=5.0)
    reaper = start_worker(command="reapjobs", args=("--loop", "--interval", "0.1"))
    reaper.wait_for_output("returned 0 jobs to the queue")
    worker = start_worker("--lease", "2", "--burst")
    assert worker.wait(30) == 0
    reaper.signal(signal.SIGTERM)
    assert reaper.wait(10) == 0
    assert "returned 1 job" not in reaper.output
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.errors) == ("done", 1, [])
    assert run_counts("hb-") == {"hb-long": 1}


def test_concurrency_is_how_many_jobs_run_at_once(start_worker: Start) -> None:
    Job.objects.enqueue_many(JobSpec.build(mark, [f"cc-{i}"], {"sleep": 0.5}) for i in range(6))
    worker = start_worker("--concurrency", "2", "--burst")
    assert worker.wait(30) == 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM started), extract(epoch FROM finished) FROM testapp_run"
        )
        spans = [(float(a), float(b)) for a, b in cursor.fetchall()]
    assert len(spans) == 6
    assert max(sum(1 for a, b in spans if a <= start < b) for start, _ in spans) == 2
    assert status_counts() == {"done": 6}


def locks_taken(call: Callable[[], object]) -> list[str]:
    """The locks ``call`` acquires (C calls to a lock's acquire or __enter__)."""
    lock_types = (type(threading.Lock()), type(threading.RLock()))
    taken: list[str] = []

    def profile(frame: object, event: str, arg: object) -> None:
        owner = getattr(arg, "__self__", None)
        if event == "c_call" and isinstance(owner, lock_types):
            taken.append(f"{type(owner).__name__}.{getattr(arg, '__name__', '?')}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return taken


def test_reapjobs_loops_signal_handler_takes_no_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal handler runs between two bytecodes of the main thread, which may hold
    the very lock it takes (Event.set() inside Event.wait()): it would wait for ever.
    Issue 10 asked for a flag or a pipe; reapjobs --loop's handler called Event.set()."""
    real_reap = Job.objects.reap
    taken: list[list[str]] = []

    def reap_then_signalled(*args: object, **kwargs: object) -> object:
        result = real_reap(*args, **kwargs)  # type: ignore[arg-type]
        if not taken:  # the first pass: SIGTERM arrives while it runs
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            taken.append(locks_taken(lambda: handler(signal.SIGTERM, None)))
        return result

    monkeypatch.setattr(Job.objects, "reap", reap_then_signalled)
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    out = io.StringIO()
    try:
        call_command("reapjobs", "--loop", "--interval", "30", stdout=out)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert taken == [[]]
    assert out.getvalue() == "returned 0 jobs to the queue, buried 0\nstopped\n"
