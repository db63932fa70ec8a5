"""The hot path does only what it must: no per-job read on the Tasks path, a queue's
claim that ignores other queues' backlogs, claims that run ahead for short jobs."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.backends.signals import connection_created

from django_pgqueue.backend import call, enqueue_many, options
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from django_pgqueue.sql import query
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.testapp.tasks import add, mark
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def statements() -> Iterator[Callable[[], list[str]]]:
    """Every statement run so far by the connections other threads (a worker's) made.
    Call it once the work is done: the list was once filled only at teardown, after
    the test's assertions, so they checked an empty list."""
    seen: list[Any] = []
    test_thread = threading.get_ident()

    def log_everything(sender: Any, connection: Any, **kwargs: Any) -> None:
        if threading.get_ident() != test_thread:  # not the test's own enqueues and reads
            connection.force_debug_cursor = True
            seen.append(connection)

    def logged() -> list[str]:
        return [q["sql"] for conn in seen for q in conn.queries_log]

    connection_created.connect(log_everything)
    try:
        yield logged
    finally:
        connection_created.disconnect(log_everything)


def test_the_tasks_path_reads_nothing_per_job_beyond_the_claim_and_the_batched_outcome(
    statements: Callable[[], list[str]],
) -> None:
    count = 200
    for n in range(count):
        djtasks.echo.enqueue(n)
    with worker_thread(burst=True, concurrency=8) as worker:
        assert worker.join(60) == 0
    ran = statements()
    assert status_counts() == {"done": count}
    ours = [s for s in ran if s.startswith("/* pgqueue: ")]
    other = [s for s in ran if not s.startswith("/* pgqueue: ")]
    # What is not ours: Django's own set-up of a new connection and the
    # start-up migration check, never a read of a job.
    assert not [s for s in other if "pgqueue_job" in s], other
    names = [s.split()[2] for s in ours]
    assert "claim" in names, ran  # the statements were seen: the test is not vacuous
    assert "complete" in names, names
    assert names.count("claim") + names.count("complete") < count / 2  # batched
    # The rest is the worker's own start, stop and timers (register, leave, the
    # reaper's look): a few statements whatever the number of jobs.
    others = Counter(name for name in names if name not in ("claim", "complete"))
    assert all(times <= 5 for times in others.values()), others


def test_failed_and_buried_runs_read_nothing_per_job_either(
    statements: Callable[[], list[str]],
) -> None:
    count = 60
    # Two attempts each, the retry ready at once: a failure, then a burial.
    enqueue_many(
        options(djtasks.failing_task_value_error, backoff=0, max_attempts=2), [call()] * count
    )
    with worker_thread(burst=True, concurrency=8) as worker:
        assert worker.join(60) == 0
    ran = statements()
    assert status_counts() == {"dead": count}
    assert not [s for s in ran if "pgqueue_job" in s and not s.startswith("/* pgqueue: ")]
    names = Counter(s.split()[2] for s in ran if s.startswith("/* pgqueue: "))
    assert names["fail"] >= 1, names
    assert names["fail"] < count, names  # batched: two outcomes a job, far fewer statements


def test_a_running_result_is_built_from_the_claim_with_the_same_content() -> None:
    seen: list[Any] = []
    from django_pgqueue.backend.compat import task_started

    def keep(sender: Any, task_result: Any, **kwargs: Any) -> None:
        # As it was when the signal was sent: the run goes on to change it.
        seen.append(dataclasses.replace(copy.copy(task_result), errors=list(task_result.errors)))

    task_started.connect(keep)
    try:
        enqueued = djtasks.fails_until.using(priority=5).enqueue(1)
        with worker_thread(burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        task_started.disconnect(keep)
    first, second = seen
    assert (first.id, first.status.name, first.task.priority) == (enqueued.id, "RUNNING", 5)
    assert first.enqueued_at == enqueued.enqueued_at
    assert first.errors == []
    assert [e.exception_class_path for e in second.errors] == ["builtins.RuntimeError"]
    assert second.worker_ids == ["inproc", "inproc"]
    assert second.started_at == first.started_at  # the first attempt's start
    assert second.last_attempted_at > first.last_attempted_at


def claim_plan(queue: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE of one claim for ``queue``, rolled back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query("claim_queues"),
            {"worker": "w", "limit": 1, "queues": [queue], "lease": 30, "token": 1, "commit": None},
        )
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    return explained(plan)


def explained(plan: Any) -> dict[str, Any]:
    """The one plan of an ``EXPLAIN (FORMAT JSON)`` result (text or decoded)."""
    found: dict[str, Any] = (json.loads(plan) if isinstance(plan, str) else plan)[0]
    return found


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def test_a_queues_claim_reads_its_own_index_range_whatever_another_queue_holds() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids, queue, priority) "
            "SELECT 'tests.testapp.tasks.noop', '[]', '{}', '[]', '[]', 'bulk', 10 "
            "FROM generate_series(1, 50000)"
        )
    Job.objects.enqueue_many(JobSpec.build(add, [n, n], queue="emails") for n in range(10))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    for queue, ready in (("emails", 10), ("empty", 0)):
        plan = claim_plan(queue)["Plan"]
        scans = [n for n in nodes(plan) if n.get("Index Name") == "pgqueue_job_ready_by_queue"]
        assert scans, plan
        read = sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) for n in scans)
        assert read <= min(ready, 1) + 1, plan  # not the 50,000 of 'bulk'
    assert len(Job.objects.claim("w", limit=20, queues=["emails"])) == 10


@pytest.mark.slow
def test_the_worker_claims_ahead_for_short_jobs_and_not_for_long_ones() -> None:
    Job.objects.enqueue_many(JobSpec.build(mark, [f"s-{n}"]) for n in range(300))
    with worker_thread(burst=True, concurrency=4) as worker:
        assert worker.join(60) == 0
    batches = [len(d["jobs"]) for name, d in worker.recorder.seen if name == "claimed"]
    assert batches[0] <= 4  # nothing known yet: no more than the threads
    assert max(batches) > 4  # then it runs ahead of them
    Job.objects.enqueue_many(JobSpec.build(mark, [f"l-{n}"], {"sleep": 0.3}) for n in range(8))
    with worker_thread(burst=True, concurrency=4) as worker:
        assert worker.join(60) == 0
    batches = [len(d["jobs"]) for name, d in worker.recorder.seen if name == "claimed"]
    assert max(batches) <= 4  # 0.3 s jobs: nobody waits behind another


HELD = 3000
#: Each statement's parameters besides worker, commit, ids and runs: a list is one
#: value per run of the batch.
OUTCOME_PARAMS: dict[str, dict[str, Any]] = {
    "complete": {"results": ["null"]},
    "fail": {
        "delays": [1.0],
        "exceptions": ["ValueError"],
        "messages": ["boom"],
        "tracebacks": [""],
        "finals": [False],
        "cancels": [False],
        "snoozes": [False],
    },
    "heartbeat": {"lease": 30.0},
    "release": {"reason": "stopping"},
}


def per_run(params: dict[str, Any], runs: int) -> dict[str, Any]:
    return {k: v * runs if isinstance(v, list) else v for k, v in params.items()}


def generic_plan(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of statement ``name`` as a prepared statement's generic plan
    (the plan a worker's connection settles on after a few runs), rolled back."""
    text = query(name)
    order: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, text).replace("%%", "%")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE pgqueue_generic AS {prepared}")
        try:
            args = ", ".join(["%s"] * len(order))
            cursor.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE pgqueue_generic({args})",
                [params[key] for key in order],
            )
            (plan,) = cursor.fetchone()
        finally:
            cursor.execute("DEALLOCATE pgqueue_generic")
        transaction.set_rollback(True)
    return explained(plan)


@pytest.mark.parametrize("name", sorted(OUTCOME_PARAMS))
def test_writing_a_batch_reads_its_rows_by_key_however_many_runs_are_held(name: str) -> None:
    # The statistics say nothing runs (ANALYZE before the claims), then one worker
    # holds thousands of runs: a drain whose outcomes came faster than they were
    # written. A nested loop over pgqueue_job_leases once cost a second a batch here.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
            "SELECT 'tests.testapp.tasks.noop', '[]', '{}', '[]', '[]' "
            "FROM generate_series(1, %s)",
            [HELD],
        )
        cursor.execute("ANALYZE pgqueue_job")
    held: list[Any] = []
    while len(held) < HELD:
        claimed = Job.objects.claim("w", limit=1000)
        assert claimed
        held += claimed
    batch = held[:1000]  # MAX_BATCH: a drain's completer writes batches this large
    plan = generic_plan(
        name,
        {
            "worker": "w",
            "commit": None,
            "ids": [job.id for job in batch],
            "runs": [job.run for job in batch],
            **per_run(OUTCOME_PARAMS[name], len(batch)),
        },
    )
    scans = [
        n
        for n in nodes(plan["Plan"])
        if n.get("Relation Name") == "pgqueue_job" and n["Node Type"] != "ModifyTable"
    ]
    # Each reads them three times: to lock them (skipping any locked elsewhere), to
    # write them, and to tell which of the skipped ones it holds. The heartbeat also
    # looks up the runs it neither renewed nor skipped (lost: told to stop if a reaper
    # cancelled their job), of which there are none here: that scan never runs.
    assert len(scans) == 3 + (name == "heartbeat"), plan
    assert {n.get("Index Name") for n in scans} == {"pgqueue_job_pkey"}, plan
    for scan in scans:
        assert scan["Actual Loops"] * max(scan["Actual Rows"], 1) <= len(batch), plan
    # The batch's rows locked (_free_runs) are read once, not once a run: joined in,
    # the generic plan looped over them for every run (a million rows for 1,000).
    ctes = [n for n in nodes(plan["Plan"]) if n.get("CTE Name") == "free"]
    assert ctes, plan
    assert all(n["Actual Loops"] <= 1 for n in ctes), plan  # (0: a part that never ran)
    assert plan["Plan"]["Actual Rows"] == len(batch)
