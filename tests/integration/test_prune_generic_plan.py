"""Prune's statements planned without their parameters' values: what psycopg's
server-side bound statements get under ``plan_cache_mode = force_generic_plan`` (set
on the server or the role), and what a prepared statement may get after five runs.
``status = ANY($1)`` alone could not show the planner that the finished index
(``pgqueue_job_finished``, partial on the finished statuses) holds the rows, and each
batch read and sorted the whole table."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.queue.maintenance import UNWRITTEN_DONE
from django_pgqueue.sql import query
from tests.conftest import status_counts

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED_ROWS = 30_000
QUEUED_ROWS = 10_000


@pytest.fixture
def big_table() -> Iterator[None]:
    """Tens of thousands of finished jobs, days old, beside a backlog of queued ones."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, attempts, max_attempts, "
            "run_at, done_at, errors, worker_ids) SELECT 'tests.testapp.tasks.add', '[]', "
            "'{}', (ARRAY['done', 'dead', 'cancelled'])[1 + g %% 3], 1, 3, now(), "
            "now() - make_interval(days => 2, secs => g), '[]', '[]' "
            "FROM generate_series(1, %s) g",
            [FINISHED_ROWS],
        )
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, run_at, errors, worker_ids) "
            "SELECT 'tests.testapp.tasks.add', '[]', '{}', 'queued', now(), '[]', '[]' "
            "FROM generate_series(1, %s)",
            [QUEUED_ROWS],
        )
        cursor.execute("ANALYZE pgqueue_job")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET plan_cache_mode")


def generic_plan(name: str, params: dict[str, Any]) -> str:
    """EXPLAIN of statement ``name`` prepared and run under force_generic_plan, as the
    server plans it for psycopg's bound parameters then."""
    order: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", placeholder, query(name))
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_{name} AS {text}")
        try:
            values = ", ".join(["%s"] * len(order))
            cursor.execute(
                f"EXPLAIN EXECUTE generic_{name}({values})", [params[key] for key in order]
            )
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute(f"DEALLOCATE generic_{name}")


def scans(plan: str) -> list[str]:
    """The plan's scans of the job table, each as '<kind> [using <index>]'."""
    found = re.findall(
        r"((?:Bitmap Index|Index Only|Index|Seq) Scan)(?: using (\w+))? on pgqueue_job\b", plan
    )
    return [f"{kind} using {index}" if index else kind for kind, index in found]


def params(statuses: list[str]) -> dict[str, Any]:
    return {
        "statuses": statuses,
        "before": timezone.now() - dt.timedelta(days=1),
        "limit": 5000,
        "beyond": UNWRITTEN_DONE,
    }


@pytest.mark.usefixtures("big_table")
@pytest.mark.parametrize("statuses", [["done", "dead", "cancelled"], ["dead"]])
def test_prunes_old_rows_are_read_from_the_finished_index_under_a_generic_plan(
    statuses: list[str],
) -> None:
    plan = generic_plan("prune", params(statuses))
    # The old rows, those without done_at, those ahead of any worker's clock: each a
    # range of the finished index, in its order; then the rows deleted, by id.
    assert scans(plan) == [
        "Index Scan using pgqueue_job_finished",
        "Index Scan using pgqueue_job_finished",
        "Index Scan using pgqueue_job_finished",
        "Index Scan using pgqueue_job_pkey",
    ], plan
    assert "Sort" not in plan, plan


@pytest.mark.usefixtures("big_table")
def test_count_prunable_reads_the_finished_index_under_a_generic_plan() -> None:
    plan = generic_plan("count_prunable", params(["done", "dead", "cancelled"]))
    assert "Seq Scan" not in plan, plan
    assert set(scans(plan)) <= {
        "Index Scan using pgqueue_job_finished",
        "Index Only Scan using pgqueue_job_finished",
        "Bitmap Index Scan using pgqueue_job_finished",
    }, plan


@pytest.mark.usefixtures("big_table")
def test_prune_under_a_generic_plan_deletes_what_it_did() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
    assert Job.objects.prune(dt.timedelta(days=1), statuses=["dead"], dry_run=True) == 10_000
    assert Job.objects.prune(dt.timedelta(days=1), statuses=["dead"], batch_size=4000) == 10_000
    assert Job.objects.prune(dt.timedelta(days=1)) == 20_000
    assert status_counts() == {"queued": QUEUED_ROWS}
