"""The queue gauges: exact for queued and running jobs and for few finished ones,
estimated for many, recomputed by one caller at a time, and cheap on a big table."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job, QueueGauge
from django_pgqueue.queue import gauges
from django_pgqueue.records import JobSpec
from django_pgqueue.sql import query
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_statistics(transactional_db: None) -> Iterator[None]:
    """These tests ANALYZE big tables: leave statistics of an empty one behind, or
    later tests' plans (and the order a claim returns its rows in) would change."""
    yield
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM pgqueue_job")
        cursor.execute("ANALYZE pgqueue_job")


def by_key(rows: list[gauges.QueueGaugeRow]) -> dict[tuple[str, str], int]:
    keys = [(r.queue, r.status) for r in rows]
    assert len(keys) == len(set(keys)), rows  # one row a series: they are not added up
    return {(r.queue, r.status): r.jobs for r in rows}


def insert_finished(count: int, status: str, queue: str = "bulk") -> None:
    """``count`` finished jobs in one statement: test data, not a queue operation."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids, queue, status, "
            "attempts, done_at) SELECT 'tests.testapp.tasks.noop', '[]', '{}', '[]', '[]', "
            "%s, %s, 1, now() FROM generate_series(1, %s)",
            [queue, status, count],
        )


def make_jobs() -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1], queue="mail") for i in range(5))
    add.using(queue="mail", delay=3600).enqueue(0, 0)  # queued, not ready
    add.using(queue="pdf").enqueue(1, 1)
    Job.objects.claim("w", limit=2, queues=["mail"])
    Job.objects.filter(pk=add.using(queue="pdf").enqueue(2, 2).pk).update(status="dead")
    insert_finished(3, "done", queue="pdf")
    Job.objects.filter(queue="mail", status="queued").update(
        run_at=timezone.now() - dt.timedelta(seconds=30)
    )


def test_queued_running_and_few_finished_jobs_are_counted_exactly() -> None:
    make_jobs()
    rows = QueueGauge.objects.compute()
    assert by_key(rows) == {
        ("mail", "queued"): 4,
        ("mail", "running"): 2,
        ("pdf", "dead"): 1,
        ("pdf", "done"): 3,
        ("pdf", "queued"): 1,
    }
    assert not any(r.estimated for r in rows)
    ages = {r.queue: r.oldest_ready_age for r in rows if r.status == "queued"}
    assert ages["mail"] == pytest.approx(30, abs=5)  # the job not due yet is not "ready"
    assert ages["pdf"] is not None
    assert ages["pdf"] < 5
    assert all(r.oldest_ready_age is None for r in rows if r.status != "queued")


def test_many_finished_jobs_are_estimated_from_the_statistics() -> None:
    add.using(queue="mail").enqueue(1, 1)
    insert_finished(3000, "done", queue="bulk")
    insert_finished(1000, "done", queue="mail")
    insert_finished(40, "dead", queue="mail")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    rows = gauges.compute("default", exact_limit=500)
    estimated = {(r.queue, r.status): r.jobs for r in rows if r.estimated}
    exact = {(r.queue, r.status): r.jobs for r in rows if not r.estimated}
    # Done jobs are past the limit: estimated. Dead ones are few: still counted.
    assert exact == {("mail", "queued"): 1, ("mail", "dead"): 40}
    assert set(estimated) == {("bulk", "done"), ("mail", "done"), (gauges.NOT_COUNTED, "done")}
    # The frequencies are the whole table's, queue and status independent: near, not exact.
    # Each status's total is the table's share of it; the split by queue follows
    # the queues' shares of the whole table.
    assert sum(estimated.values()) == pytest.approx(4000, rel=0.05)
    assert estimated[("bulk", "done")] == pytest.approx(4000 * 3000 / 4041, rel=0.05)
    rows = gauges.compute("default", exact_limit=20)
    assert {(r.queue, r.status) for r in rows if r.estimated} >= {("mail", "dead")}


def test_finished_jobs_neither_counted_nor_estimated_are_served_as_unknown() -> None:
    """Past the exact limit on a table never analyzed, no finished row is counted
    and the statistics estimate none: /metrics served pgqueue_queue_jobs
    {status="done"} as an exact 0. Absent is what says "unknown"."""
    pytest.importorskip("prometheus_client")
    from django_pgqueue.monitoring.gauges import families

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgqueue_job SET (autovacuum_enabled = off)")
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'pgqueue_job'::regclass")
    try:
        insert_finished(600, "done", queue="bulk")
        add.using(queue="bulk").enqueue(1, 1)
        rows = gauges.compute("default", exact_limit=500)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pgqueue_job RESET (autovacuum_enabled)")
    assert by_key(rows) == {("bulk", "queued"): 1, (gauges.NOT_COUNTED, "done"): 0}
    (jobs, *_rest) = families(rows)
    served = {(s.labels["queue"], s.labels["status"]): s.value for s in jobs.samples}
    # Dead jobs, few, were still counted: 0 is their exact count.
    assert served == {("bulk", "queued"): 1, ("bulk", "running"): 0, ("bulk", "dead"): 0}


def scanned(sql: str, params: dict[str, Any]) -> int:
    """Rows of pgqueue_job (table or index) that the executed plan looked at, in all."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        (document,) = cursor.fetchone()
    total, nodes = 0, [(document[0] if isinstance(document, list) else document)["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") == "pgqueue_job":
            looked_at = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            total += int(looked_at * node["Actual Loops"])
    return total


def test_the_statement_reads_the_backlog_and_no_more_than_the_limit_of_finished_rows() -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1], queue="mail") for i in range(50))
    insert_finished(60_000, "done")
    insert_finished(20_000, "dead")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE pgqueue_job")
    rows = scanned(query("queue_gauges"), {"exact_limit": 1000})
    # The 50 queued, and about the limit's worth of finished rows twice (all
    # finished, then dead): bounded by the limit, where a count would read 80,000.
    assert 50 <= rows <= 3 * 1000, rows
    dead = scanned(query("dead_since"), {"seconds": 3600})
    assert 20_000 <= dead <= 20_000 + 10, dead  # the dead of the last hour, not the done


def test_refresh_recomputes_once_per_interval_and_one_caller_at_a_time(db_url: str) -> None:
    add.using(queue="mail").enqueue(1, 1)
    insert_finished(2, "done", queue="mail")
    first = QueueGauge.objects.refresh(max_age=60)
    assert by_key(first) == {("mail", "queued"): 1, ("mail", "done"): 2}
    assert [r.age for r in first] == [0, 0]
    add.using(queue="mail").enqueue(1, 2)
    insert_finished(3, "done", queue="mail")
    # Fresh enough: the stored numbers, and nothing counted (the finished jobs
    # neither counted again nor added to the stored rows).
    second = QueueGauge.objects.refresh(max_age=60)
    assert by_key(second) == {("mail", "queued"): 1, ("mail", "done"): 2}
    assert all(r.age > 0 for r in second), second
    Job.objects.filter(status="done").delete()
    # Another session holds the refresh lock: the stored numbers, even when stale.
    with psycopg.connect(db_url, autocommit=False) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", [gauges.REFRESH_LOCK])
        assert by_key(QueueGauge.objects.refresh(max_age=0)) == {
            ("mail", "queued"): 1,
            ("mail", "done"): 2,
        }
    third = QueueGauge.objects.refresh(max_age=0)
    assert by_key(third) == {("mail", "queued"): 2}
    # A queue that emptied leaves the table; a status that appeared joins it.
    Job.objects.claim("w", limit=2, queues=["mail"])
    assert by_key(QueueGauge.objects.refresh(max_age=0)) == {("mail", "running"): 2}
    assert list(QueueGauge.objects.values_list("queue", "status", "jobs")) == [
        ("mail", "running", 2)
    ]


def test_a_queued_job_at_minus_infinity_counts_as_the_oldest_without_failing_the_readers() -> None:
    """``run_at`` takes ``-infinity`` (a row written by hand), and ``now() - run_at``
    then fails: stats(), the gauges and queuestats all raised, for every queue."""
    add.using(queue="mail").enqueue(1, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, queue, run_at) "
            "VALUES ('tests.testapp.tasks.noop', 'odd', '-infinity')"
        )
    ages = {s.queue: s.oldest_ready_age for s in Job.objects.stats() if s.status == "queued"}
    assert ages["mail"] is not None
    assert ages["mail"] < 60
    assert ages["odd"] is not None
    assert ages["odd"] > 2000 * 365 * 86400  # as old as the year 1
    rows = QueueGauge.objects.compute()
    assert by_key(rows) == {("mail", "queued"): 1, ("odd", "queued"): 1}
    gauge_ages = {r.queue: r.oldest_ready_age for r in rows}
    assert gauge_ages["odd"] == pytest.approx(ages["odd"], rel=1e-6)
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:  # the check fails on that job's age
        call_command("queuestats", "--check", "--max-ready-age", "1h", stdout=out)
    assert failed.value.returncode == 1
    assert "queue odd: the oldest ready job has waited" in out.getvalue()
    assert "queue mail: the oldest ready job" not in out.getvalue()
    call_command("queuestats", stdout=out)
    assert "mail" in out.getvalue()


@pytest.mark.parametrize("refreshed", ["'infinity'", "now() + interval '1 day'"])
def test_a_gauge_row_refreshed_ahead_of_the_clock_neither_fails_nor_freezes_the_gauges(
    refreshed: str, db_url: str
) -> None:
    """A row written by hand with ``refreshed_at = 'infinity'`` made every refresh
    fail (``now() - infinity``): each worker's maintenance thread logged a traceback
    every second and ``/metrics`` answered 500. One a day ahead kept its numbers
    for a day, never recomputed."""
    add.using(queue="mail").enqueue(1, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_queue_gauge (queue, status, jobs, estimated, refreshed_at) "
            f"VALUES ('mail', 'queued', 999, false, {refreshed})"
        )
    # Another session holds the refresh lock: the stored numbers, read without failing.
    with psycopg.connect(db_url, autocommit=False) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", [gauges.REFRESH_LOCK])
        (stored,) = QueueGauge.objects.refresh(max_age=60)
        assert (stored.jobs, stored.age) == (999, 0)
    assert by_key(QueueGauge.objects.refresh(max_age=60)) == {("mail", "queued"): 1}
    assert list(QueueGauge.objects.values_list("jobs", flat=True)) == [1]
