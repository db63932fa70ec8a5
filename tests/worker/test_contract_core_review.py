"""Issues 2, 3 and 10 driven with real worker processes: kills with a batch claimed
ahead, a reaper beside a live worker, two workers on one concurrency key, a death
on the last attempt, and rows corrupted by hand. Each ends with exact counts."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from django.db import connection

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import always_fails, mark, tracked
from tests.worker.conftest import WorkerProcess, django_command, running_count, wait_for
from tests.worker.planted import insert, last_message, outcome, plant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def test_a_sigkilled_worker_with_a_batch_claimed_ahead_loses_none_of_it(
    start_worker: Start,
) -> None:
    """One thread, four jobs claimed ahead behind a slow one: after the SIGKILL all
    five come back (each charged an attempt, as docs/guarantees.md says), the slow
    one runs twice and the four that never started run once."""
    slow = tracked.enqueue("ahead-slow", sleep=30)
    quick = Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"ahead-{i}"], {"sleep": 0}) for i in range(4)
    )
    victim = start_worker("--concurrency", "1", "--prefetch", "4", "--lease", "1")
    wait_for(lambda: run_counts("ahead-slow") == {"ahead-slow": 1}, 20, "the slow job to start")
    assert running_count() == 5
    victim.kill()
    assert run_counts("ahead-") == {"ahead-slow": 1}

    Job.objects.filter(pk=slow.pk).update(kwargs={"sleep": 0})  # the rerun is quick
    rescuer = start_worker("--concurrency", "2", "--worker-id", "rescuer")
    wait_for(lambda: status_counts() == {"done": 5}, 30, "every job to finish")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(20) == 0
    assert run_counts("ahead-") == {"ahead-slow": 2, **{f"ahead-{i}": 1 for i in range(4)}}
    for pk in [slow.pk, *quick]:
        row = Job.objects.get(pk=pk)
        assert (row.attempts, row.worker_ids[-1]) == (2, "rescuer")
        assert [e["exception"] for e in row.errors] == ["LeaseExpired"]


def test_reapjobs_beside_a_live_worker_returns_none_of_its_jobs(
    start_worker: Start, db_url: str
) -> None:
    """Jobs of 2.5 s on a 1 s lease: the worker's heartbeat keeps every lease, so
    passes of ``reapjobs`` in other processes meanwhile return nothing."""
    ids = Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"held-{i}"], {"sleep": 2.5}) for i in range(3)
    )
    worker = start_worker("--concurrency", "3", "--lease", "1", "--burst")
    wait_for(lambda: sum(run_counts("held-").values()) == 3, 20, "the jobs to start")
    passes = [django_command(db_url, "reapjobs") for _ in range(2)]
    assert worker.proc.poll() is None, "the passes ran while the jobs did"
    assert [p.stdout for p in passes] == ["returned 0 jobs to the queue, buried 0\n"] * 2
    assert worker.wait(30) == 0
    assert status_counts() == {"done": 3}
    assert run_counts("held-") == {f"held-{i}": 1 for i in range(3)}
    assert {Job.objects.get(pk=pk).attempts for pk in ids} == {1}


def test_two_workers_never_run_two_jobs_of_one_concurrency_key_at_once(
    start_worker: Start,
) -> None:
    Job.objects.enqueue_many(
        JobSpec.build(mark, [f"key-{i}"], {"sleep": 0.2}, concurrency_key="one") for i in range(8)
    )
    Job.objects.enqueue_many(JobSpec.build(mark, [f"free-{i}"], {"sleep": 0.2}) for i in range(4))
    workers = [start_worker("--concurrency", "1", "--burst") for _ in range(2)]
    assert [w.wait(60) for w in workers] == [0, 0]
    assert status_counts() == {"done": 12}
    assert run_counts("key-") == {f"key-{i}": 1 for i in range(8)}
    assert run_counts("free-") == {f"free-{i}": 1 for i in range(4)}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM testapp_run a JOIN testapp_run b ON a.id < b.id "
            "WHERE a.label LIKE 'key-%%' AND b.label LIKE 'key-%%' "
            "AND a.started < b.finished AND b.started < a.finished"
        )
        assert cursor.fetchone()[0] == 0


def test_a_killed_workers_key_stays_held_until_its_lease_is_reaped(
    start_worker: Start, db_url: str
) -> None:
    """Two workers with ``--concurrency 1``; the one running the key's first job is
    SIGKILLed. The other runs none of that key's jobs until the reaper has taken
    the dead run back, then runs them one at a time."""
    first = tracked.using(concurrency_key="k").enqueue("key-first", sleep=30)
    victim = start_worker("--concurrency", "1", "--lease", "1", "--worker-id", "victim")
    wait_for(lambda: run_counts("key-first") == {"key-first": 1}, 20, "the first job to start")
    Job.objects.enqueue_many(
        JobSpec.build(mark, [f"key-then-{i}"], {"sleep": 0.2}, concurrency_key="k")
        for i in range(3)
    )
    survivor = start_worker("--concurrency", "1", "--lease", "1", "--prefetch", "0")
    survivor.wait_for_output("listening for new jobs")
    victim.kill()
    Job.objects.filter(pk=first.pk).update(kwargs={"sleep": 0})
    wait_for(lambda: Job.objects.expired().exists(), 10, "the dead run's lease to lapse")
    assert run_counts("key-then-") == {}, "a job of the key ran beside the dead run"
    assert django_command(db_url, "reapjobs").stdout == "returned 1 job to the queue, buried 0\n"
    wait_for(lambda: status_counts() == {"done": 4}, 30, "every job of the key to finish")
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(20) == 0
    assert run_counts("key-") == {"key-first": 2, **{f"key-then-{i}": 1 for i in range(3)}}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM testapp_run a JOIN testapp_run b ON a.id < b.id "
            "WHERE a.label LIKE 'key-then-%%' AND b.label LIKE 'key-then-%%' "
            "AND a.started < b.finished AND b.started < a.finished"
        )
        assert cursor.fetchone()[0] == 0


def test_a_worker_killed_on_the_last_attempt_leaves_its_job_dead_with_the_reason(
    start_worker: Start, db_url: str
) -> None:
    job = tracked.using(max_attempts=1).enqueue("last", sleep=30)
    victim = start_worker("--lease", "0.5", "--worker-id", "victim")
    wait_for(lambda: run_counts("last") == {"last": 1}, 20, "the job to start")
    victim.kill()
    wait_for(lambda: Job.objects.expired().exists(), 10, "the lease to lapse")
    reaped = django_command(db_url, "reapjobs")
    assert (reaped.returncode, reaped.stdout) == (0, "returned 0 jobs to the queue, buried 1\n")
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.locked_by) == ("dead", 1, "victim")
    assert row.errors[-1]["exception"] == "LeaseExpired"
    assert "worker victim stopped renewing it" in row.last_error
    assert status_counts() == {"dead": 1}
    assert run_counts("last") == {"last": 1}


def test_rows_with_null_arguments_or_priority_do_not_stop_the_worker(start_worker: Start) -> None:
    """args, kwargs or priority set to SQL NULL (their NOT NULL dropped by hand): a
    row without arguments is buried with the reason, one without a priority runs,
    and the jobs claimed with them run. (The claim raised TypeError on either after
    the statement committed: the worker exited 1 and its whole batch stayed
    ``running`` until the leases expired.)"""
    good = [tracked.enqueue(f"batch-{i}").pk for i in range(3)]
    path = tracked.path
    with connection.cursor() as cursor:
        for column in NULLED:
            cursor.execute(f"ALTER TABLE pgqueue_job ALTER COLUMN {column} DROP NOT NULL")
    try:
        no_args = insert({"task": path, "args": None})
        no_kwargs = insert({"task": path, "args": '["no-kwargs"]', "kwargs": None})
        no_priority = insert({"task": path, "args": '["no-priority"]', "priority": None})
        worker = start_worker("--burst", "--concurrency", "2", "--prefetch", "8")
        assert worker.wait(30) == 0, worker.output
        assert status_counts() == {"done": 4, "dead": 2}
        assert run_counts("") == {"no-priority": 1, **{f"batch-{i}": 1 for i in range(3)}}
        assert {pk: outcome(pk) for pk in [*good, no_priority, no_args, no_kwargs]} == {
            **{pk: ("done", 1, None) for pk in [*good, no_priority]},
            no_args: ("dead", 1, "django_pgqueue.worker.executor.UndecodableJob"),
            no_kwargs: ("dead", 1, "django_pgqueue.worker.executor.UndecodableJob"),
        }
        assert last_message(no_args) == "the stored arguments are missing: args is NULL"
        assert last_message(no_kwargs) == "the stored arguments are missing: kwargs is NULL"
    finally:
        Job.objects.all().delete()
        with connection.cursor() as cursor:
            for column in NULLED:
                cursor.execute(f"ALTER TABLE pgqueue_job ALTER COLUMN {column} SET NOT NULL")


NULLED = ("args", "kwargs", "priority")


def test_sigterm_past_the_shutdown_timeout_on_the_last_attempt_spends_nothing(
    start_worker: Start,
) -> None:
    """A slow job on its only attempt, still running at the shutdown deadline: the
    worker exits 0 with it back in ``queued``, its attempt not spent, so the next
    worker runs it to ``done`` rather than burying it."""
    job = tracked.using(max_attempts=1).enqueue("term", sleep=30)
    worker = start_worker("--shutdown-timeout", "0.5", "--worker-id", "stopped")
    wait_for(lambda: run_counts("term") == {"term": 1}, 20, "the job to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("queued", 0)
    assert [e["exception"] for e in row.errors] == ["WorkerShutdown"]
    Job.objects.filter(pk=job.pk).update(kwargs={"sleep": 0})
    assert start_worker("--burst", "--worker-id", "next").wait(30) == 0
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.worker_ids) == ("done", 1, ["stopped", "next"])
    assert status_counts() == {"done": 1}
    assert run_counts("term") == {"term": 2}


def test_rows_corrupted_by_hand_are_buried_or_left_alone_and_the_rest_run(
    start_worker: Start,
) -> None:
    """Arguments of the wrong JSON shape are buried with the reason, never run; a
    status outside the set (its check constraint dropped) is left as it is; a NULL
    max_attempts on a failing job buries it rather than retrying it for ever."""
    good = [tracked.enqueue(f"fine-{i}").pk for i in range(3)]
    path = tracked.path
    shapes = [
        plant(path, {"label": "object"}),
        plant(path, "xy"),
        plant(path, None),
        insert({"task": path, "args": '["list-kwargs"]', "kwargs": "[1]"}),
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'pgqueue_job_status_valid'"
        )
        (status_check,) = cursor.fetchone()
        cursor.execute("ALTER TABLE pgqueue_job DROP CONSTRAINT pgqueue_job_status_valid")
        cursor.execute("ALTER TABLE pgqueue_job ALTER COLUMN max_attempts DROP NOT NULL")
    try:
        odd = insert({"task": path, "args": '["odd-status"]', "status": "paused"})
        no_max = insert({"task": always_fails.path, "args": '["no-max"]', "max_attempts": None})
        worker = start_worker("--burst", "--concurrency", "2")
        assert worker.wait(30) == 0, worker.output
        assert status_counts() == {"done": 3, "dead": 5, "paused": 1}
        assert run_counts("") == {**{f"fine-{i}": 1 for i in range(3)}, "no-max": 1}
        assert [outcome(pk) for pk in good] == [("done", 1, None)] * 3
        for pk in shapes:
            assert outcome(pk) == ("dead", 1, "TypeError")
            assert str(last_message(pk)).startswith("malformed arguments: args must be a JSON")
        assert outcome(odd) == ("paused", 0, None)
        assert outcome(no_max)[:2] == ("dead", 1)
    finally:
        Job.objects.all().delete()
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pgqueue_job ALTER COLUMN max_attempts SET NOT NULL")
            cursor.execute(
                "ALTER TABLE pgqueue_job ADD CONSTRAINT pgqueue_job_status_valid " + status_check
            )
