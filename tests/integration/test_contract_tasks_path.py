"""Contract of the Tasks path at engine speed (issue 12), driven as a user would: the
claim of several served queues, the bulk enqueue for Tasks users, the RUNNING result
built from the claim, prefetch as the default, and runworker with no flags."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from django_pgqueue.backend import aenqueue_many, call, enqueue_many, options
from django_pgqueue.backend.compat import task_finished, task_started
from django_pgqueue.models import Job
from django_pgqueue.queue.enqueue import COPY_THRESHOLD
from django_pgqueue.records import JobSpec
from django_pgqueue.sql import variant
from tests.conftest import run_counts, status_counts
from tests.integration.test_hot_path import explained, nodes
from tests.testapp import djtasks
from tests.testapp.tasks import add, mark
from tests.worker.conftest import WorkerProcess
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def backlog(queue: str, rows: int) -> None:
    """``rows`` ready jobs in ``queue``, written in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids, queue, priority) "
            "SELECT 'tests.testapp.tasks.noop', '[]', '{}', '[]', '[]', %s, 10 "
            "FROM generate_series(1, %s)",
            [queue, rows],
        )


def test_a_claim_of_several_queues_takes_the_best_jobs_of_all_of_them_in_order() -> None:
    a = [Job.objects.enqueue(add, [1, n], queue="a") for n in range(3)]
    b10 = Job.objects.enqueue(add, [2, 0], queue="b", priority=10)
    b5 = Job.objects.enqueue(add, [2, 1], queue="b", priority=5)
    Job.objects.enqueue(add, [3, 0], queue="c", priority=50)  # not served
    claimed = Job.objects.claim("w", limit=3, queues=["a", "b"])
    assert [job.id for job in claimed] == [b10.pk, b5.pk, a[0].pk]
    assert [job.id for job in Job.objects.claim("w", limit=5, queues=["b", "a"])] == [
        a[1].pk,
        a[2].pk,
    ]
    assert status_counts() == {"running": 5, "queued": 1}


def test_a_concurrency_key_holds_across_the_served_queues() -> None:
    Job.objects.enqueue(add, [1, 1], queue="a", concurrency_key="k")
    Job.objects.enqueue(add, [1, 2], queue="b", concurrency_key="k")
    assert len(Job.objects.claim("w", limit=5, queues=["a", "b"])) == 1
    assert Job.objects.claim("w", limit=5, queues=["a", "b"]) == []


def claim_plan(sql: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE of one claim statement (a worker's variant), rolled back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql,
            {"worker": "w", "lease": 30, "token": 1, "commit": None},
        )
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    found: dict[str, Any] = explained(plan)["Plan"]
    return found


def test_with_a_queue_paused_no_claim_walks_its_backlog() -> None:
    backlog("bulk", 50_000)
    Job.objects.enqueue_many(JobSpec.build(add, [n, n], queue="emails") for n in range(10))
    Job.objects.enqueue_many(
        JobSpec.build(add, [n, 0], queue="other", priority=5) for n in range(3)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    assert Job.objects.pause_queue("bulk") is True
    every_queue = variant("claim", limit=4)
    chosen = variant("claim_queues", limit=4, queues=("emails", "other", "bulk"))
    for sql in (every_queue, chosen):
        plan = claim_plan(sql)
        assert plan["Actual Rows"] == 4, plan
        read = [n for n in nodes(plan) if n.get("Index Name") == "pgqueue_job_ready_by_queue"]
        ranges = [n for n in read if n["Node Type"] == "Index Scan"]
        assert sum(n["Actual Loops"] for n in ranges) == 2, plan  # emails and other, not bulk
        walked = sum(n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in ranges)
        assert walked <= 8, plan  # at most the limit from each range: not 50,000
        assert all(
            n["Actual Loops"] == 0
            for n in nodes(plan)
            if n.get("Index Name") == "pgqueue_job_ready"
        )
    claimed = Job.objects.claim("w", limit=20)
    assert sorted(job.queue for job in claimed) == ["emails"] * 10 + ["other"] * 3


def result_fields(result: Any) -> dict[str, Any]:
    """Every field of a TaskResult, its Task by what a result reports of it."""
    found = {f.name: copy.deepcopy(getattr(result, f.name)) for f in dataclasses.fields(result)}
    task = found.pop("task")
    found["task"] = (task.module_path, task.priority, task.queue_name, task.run_after)
    return found


@pytest.mark.parametrize("case", ["arguments", "retried", "run_after"])
def test_task_started_reports_what_get_result_reads_at_that_moment(case: str) -> None:
    """The RUNNING result is built from the claim, with no read of the row: it must say
    what a read of the row would."""
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def compare(sender: Any, task_result: Any, **kwargs: Any) -> None:
        read = task_result.task.get_backend().get_result(task_result.id)
        pairs.append((result_fields(task_result), result_fields(read)))

    task_started.connect(compare)
    try:
        if case == "arguments":
            djtasks.echo.using(priority=7).enqueue(1, [2, {"x": None}], k="v")
        elif case == "retried":
            # No backoff: each retry is ready at once, so the burst runs all three.
            options(djtasks.fails_until, backoff=0).enqueue(2)
        else:
            past = timezone.now() - dt.timedelta(seconds=1)
            djtasks.echo.using(run_after=past, queue_name="emails").enqueue(3)
        with worker_thread(burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        task_started.disconnect(compare)
    assert len(pairs) == (3 if case == "retried" else 1)
    for sent, read in pairs:
        assert sent["status"].name == "RUNNING"
        assert sent == read
    assert status_counts() == {"done": 1}


def test_enqueue_many_of_context_and_async_tasks_runs_under_a_worker() -> None:
    ids = enqueue_many(djtasks.get_task_id, [call(), call()])
    sums: list[Any] = async_to_sync(aenqueue_many)(djtasks.add_async, [call(1, 2), call(a=3, b=4)])
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    assert status_counts() == {"done": 4}
    assert [djtasks.get_task_id.get_result(r.id).return_value for r in ids] == [r.id for r in ids]
    returned: list[Any] = [djtasks.add_async.get_result(r.id).return_value for r in sums]
    assert returned == [3, 7]


def test_enqueue_many_of_no_call_writes_nothing_and_takes_any_iterable() -> None:
    assert enqueue_many(djtasks.echo, []) == []
    assert enqueue_many(djtasks.echo, iter([])) == []
    assert Job.objects.count() == 0
    results = enqueue_many(djtasks.echo, (call(n) for n in range(3)))
    assert [r.args for r in results] == [[0], [1], [2]]
    assert Job.objects.count() == 3


@pytest.mark.parametrize("count", [2, COPY_THRESHOLD])
def test_enqueue_many_wakes_the_workers_of_its_queue_only_on_commit(
    count: int, db_url: str
) -> None:
    task = djtasks.noop_task.using(queue_name="emails")
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_jobs")
        with transaction.atomic():
            enqueue_many(task, [call(n) for n in range(count)])
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        woken = list(listener.notifies(timeout=10, stop_after=1))
    assert [note.payload for note in woken] == ["emails"]


@pytest.mark.parametrize(("count", "copies"), [(COPY_THRESHOLD - 1, 0), (COPY_THRESHOLD, 1)])
def test_enqueue_many_writes_by_copy_from_the_threshold(
    count: int, copies: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = psycopg.Cursor.copy

    def spy(self: psycopg.Cursor[Any], statement: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(statement))
        return real(self, statement, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "copy", spy)
    enqueue_many(djtasks.noop_task, [call(n) for n in range(count)])
    assert Job.objects.count() == count
    assert len(seen) == copies, seen


COLUMNS = ("task", "queue", "priority", "run_at", "max_attempts", "concurrency_key", "backoff")


def test_copy_and_the_statement_write_the_same_rows_and_results() -> None:
    later = (timezone.now() + dt.timedelta(hours=1)).replace(microsecond=0)
    declared = djtasks.fails_with.using(priority=-3, queue_name="emails", run_after=later)
    task = options(
        declared, max_attempts=4, concurrency_key="ck", backoff=2.5, retry_on=(ValueError,)
    )
    rows = []
    for count in (2, COPY_THRESHOLD):
        results = enqueue_many(task, [call("x")] * count)
        jobs = Job.objects.filter(pk__in=[r.id for r in results])
        rows.append({repr(row) for row in jobs.values_list(*COLUMNS, "retry_policy", "status")})
        for result in (results[0], results[-1]):
            assert result_fields(result) == result_fields(djtasks.fails_with.get_result(result.id))
    assert rows[0] == rows[1]
    assert len(rows[0]) == 1


def test_prefetched_jobs_wait_past_their_lease_and_timeout_without_losing_either() -> None:
    Job.objects.enqueue_many(JobSpec.build(mark, [f"p-{n}"], {"sleep": 0.5}) for n in range(8))
    with worker_thread(
        burst=True,
        concurrency=1,
        prefetch=8,
        lease=2.0,
        heartbeat_interval=0.4,
        job_timeout=1.5,
        reap_interval=0.2,
    ) as worker:
        assert worker.join(60) == 0
    claims = [len(d["jobs"]) for name, d in worker.recorder.seen if name == "claimed"]
    assert claims[0] >= 6, claims  # the sixth waited 2.5 s: past both the lease and the timeout
    assert status_counts() == {"done": 8}
    assert run_counts("p-") == {f"p-{n}": 1 for n in range(8)}
    assert list(Job.objects.exclude(errors=[]).values_list("id", "errors")) == []


def test_a_run_given_back_before_it_started_sends_no_signal() -> None:
    started: list[str] = []
    finished: list[tuple[str, str]] = []

    def on_start(sender: Any, task_result: Any, **kwargs: Any) -> None:
        started.append(task_result.id)

    def on_finish(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append((task_result.id, task_result.status.name))

    task_started.connect(on_start)
    task_finished.connect(on_finish)
    try:
        first = djtasks.sleeps_async.enqueue(2.0)
        rest = [djtasks.echo.enqueue(n) for n in range(3)]
        with worker_thread(concurrency=1, prefetch=4, shutdown_timeout=20) as worker:
            worker.wait("started", 1, timeout=10)
            worker.worker.request_stop()
            assert worker.join(30) == 0
    finally:
        task_started.disconnect(on_start)
        task_finished.disconnect(on_finish)
    assert started == [first.id]
    assert finished == [(first.id, "SUCCESSFUL")]
    assert status_counts() == {"done": 1, "queued": 3}
    assert {djtasks.echo.get_result(r.id).status.name for r in rest} == {"READY"}


def test_a_tasks_validated_options_follow_a_changed_pgqueue_setting() -> None:
    before = djtasks.noop_task.enqueue()
    changed = {**getattr(settings, "PGQUEUE", {}), "MAX_ATTEMPTS": 7}
    with override_settings(PGQUEUE=changed):
        single = djtasks.noop_task.enqueue()
        (bulk,) = enqueue_many(djtasks.noop_task, [call()])
    after = djtasks.noop_task.enqueue()
    attempts = dict(Job.objects.values_list("id", "max_attempts"))
    assert attempts[int(single.id)] == attempts[int(bulk.id)] == 7
    assert attempts[int(before.id)] == attempts[int(after.id)] != 7


def test_runworker_with_no_flags_prefetches_auto_and_serves_its_queue_past_a_backlog(
    db_url: str,
) -> None:
    backlog("bulk", 5_000)
    results = enqueue_many(djtasks.echo.using(queue_name="emails"), [call(n) for n in range(10)])
    worker = WorkerProcess(db_url, "--burst", "--queues", "emails")
    assert worker.wait(60) == 0, worker.output
    assert "queues=emails concurrency=10 prefetch=auto " in worker.output
    assert status_counts() == {"queued": 5_000, "done": 10}
    assert [djtasks.echo.get_result(r.id).return_value["args"] for r in results] == [
        [n] for n in range(10)
    ]
