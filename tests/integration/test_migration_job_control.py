"""Migration 0008 on rows the old code wrote: "Cancelled" dead jobs become cancelled,
and migrating back turns cancelled jobs into dead ones the old check accepts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.integration.migrating import migrate, migrated_to

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("django_pgqueue", "0007_ready_by_queue_index")
AFTER = ("django_pgqueue", "0008_job_control")


@pytest.fixture
def at_0007() -> Iterator[None]:
    with migrated_to(BEFORE):
        yield


def insert(status: str, exception: str | None) -> int:
    errors = (
        "[]"
        if exception is None
        else f'[{{"attempt": 0, "exception": "{exception}", "message": "why", "traceback": ""}}]'
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, errors, worker_ids, "
            "last_error, done_at) VALUES ('a.b', '[]', '{}', %s, %s::jsonb, '[]', '', "
            "CASE WHEN %s IN ('done', 'dead') THEN now() END) RETURNING id",
            [status, errors, status],
        )
        (job_id,) = cursor.fetchone()
    return int(job_id)


def statuses() -> dict[int, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, status FROM pgqueue_job")
        return dict(cursor.fetchall())


def test_old_cancelled_dead_rows_become_cancelled_and_back(at_0007: None) -> None:
    cancelled = insert("dead", "Cancelled")
    failed = insert("dead", "ValueError")
    done = insert("done", None)
    queued = insert("queued", None)
    migrate(AFTER)
    assert statuses() == {
        cancelled: "cancelled",
        failed: "dead",
        done: "done",
        queued: "queued",
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'pgqueue_job_finished' "
            "UNION ALL SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'pgqueue_job_status_valid' AND convalidated"
        )
        index, check = (row[0] for row in cursor.fetchall())
    assert "'cancelled'" in index  # pruning finds them
    assert "'cancelled'" in check
    migrate(BEFORE)
    assert statuses()[cancelled] == "dead"  # the old check constraint accepts it
