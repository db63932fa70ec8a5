"""Contract of issue 2 (the job table and its operations), driven as a user would:
through the catalog PostgreSQL keeps, the manager's calls and the management
commands. Each test pins what no other test pinned, or pinned only loosely.
Issue 11's rules are in test_contract_core_rules.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.queue.enqueue import COPY_THRESHOLD
from django_pgqueue.records import Failure, JobSpec, Success
from django_pgqueue.sql import query
from tests.conftest import status_counts
from tests.testapp.tasks import add, retries_io_only

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]  # the checkout: docs/ is not in the wheel


def catalog(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return list(cursor.fetchall())


# -- the table ---------------------------------------------------------------------


def test_the_table_has_every_column_the_issue_names_with_the_type_the_docs_give() -> None:
    found = {
        name: (kind, length)
        for name, kind, length in catalog(
            "SELECT column_name, data_type, character_maximum_length "
            "FROM information_schema.columns WHERE table_name = 'pgqueue_job'"
        )
    }
    varchar, stamp = "character varying", "timestamp with time zone"
    expected = {
        "id": ("bigint", None),
        "task": (varchar, 255),
        "args": ("jsonb", None),
        "kwargs": ("jsonb", None),
        "queue": (varchar, 64),
        "priority": ("smallint", None),
        "status": (varchar, 16),
        "attempts": ("integer", None),
        "max_attempts": ("integer", None),
        "run_at": (stamp, None),
        "locked_until": (stamp, None),
        "locked_by": (varchar, 255),
        "created_at": (stamp, None),
        "started_at": (stamp, None),
        "done_at": (stamp, None),
        "last_error": ("text", None),
        "errors": ("jsonb", None),
        "unique_key": (varchar, 255),
        "concurrency_key": (varchar, 255),
        "result": ("jsonb", None),
    }
    assert {name: found.get(name) for name in expected} == expected


@pytest.mark.parametrize(
    ("columns", "values", "constraint"),
    [
        ("status", "'bogus'", "pgqueue_job_status_valid"),
        ("priority", "101", "pgqueue_job_priority_range"),
        ("priority", "-101", "pgqueue_job_priority_range"),
        ("attempts", "-1", "pgqueue_job_attempts_gte_0"),
        ("attempts, max_attempts", "4, 3", "pgqueue_job_attempts_lte_max"),
        ("max_attempts", "0", "pgqueue_job_max_attempts_gte_1"),
        ("backoff", "-1", "pgqueue_job_backoff_gte_0"),
        ("queue", "''", "pgqueue_job_queue_not_empty"),
        ("status", "'running'", "pgqueue_job_running_has_lease"),
    ],
)
def test_the_named_checks_refuse_rows_written_by_hand(
    columns: str, values: str, constraint: str
) -> None:
    with (
        pytest.raises(IntegrityError, match=constraint),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f"INSERT INTO pgqueue_job (task, {columns}) "
            f"VALUES ('tests.testapp.tasks.add', {values})"
        )
    assert Job.objects.count() == 0


def test_the_claim_the_reaper_and_the_dedupe_have_their_partial_indexes() -> None:
    defs = dict(
        catalog("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'pgqueue_job'")
    )
    queued, running = "(status)::text = 'queued'::text", "(status)::text = 'running'::text"
    assert defs["pgqueue_job_ready"].endswith(f"(priority DESC, run_at, id) WHERE ({queued})")
    assert defs["pgqueue_job_leases"].endswith(f"(locked_until) WHERE ({running})")
    unique = defs["pgqueue_job_unique_live"]
    assert unique.startswith("CREATE UNIQUE INDEX pgqueue_job_unique_live ")
    assert "btree (unique_key) WHERE " in unique
    assert "'queued'" in unique
    assert "'running'" in unique
    assert "'done'" not in unique


def test_the_autovacuum_settings_of_the_migration_are_on_the_job_table() -> None:
    ((options,),) = catalog("SELECT reloptions FROM pg_class WHERE relname = 'pgqueue_job'")
    assert sorted(options) == [
        "autovacuum_analyze_scale_factor=0.02",
        "autovacuum_vacuum_cost_delay=1",
        "autovacuum_vacuum_insert_scale_factor=0.01",
        "autovacuum_vacuum_scale_factor=0.01",
    ]


def test_makemigrations_finds_nothing_to_write() -> None:
    # --check exits with status 1 when the models and the migrations differ.
    call_command("makemigrations", "django_pgqueue", "--check", "--dry-run", verbosity=0)


def test_the_reaper_reads_the_lease_index_with_many_finished_rows() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, status, attempts, run_at, done_at) "
            "SELECT 'tests.testapp.tasks.add', 'done', 1, now(), now() "
            "FROM generate_series(1, 50000)"
        )
        cursor.execute("ANALYZE pgqueue_job")
    Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(5))
    Job.objects.claim("w", limit=5, lease=30)
    params: dict[str, Any] = {"limit": 1000, "beyond": 1e9, "spare_ids": [], "spare_runs": []}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query("expired_leases"), params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pgqueue_job_leases" in plan, plan
    assert "Seq Scan on pgqueue_job" not in plan, plan


def test_the_table_page_names_every_column_constraint_and_index() -> None:
    """docs/table.md is the table's reference: nothing the database has is missing."""
    page = (ROOT / "docs" / "table.md").read_text()
    columns = [
        name
        for (name,) in catalog(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'pgqueue_job'"
        )
    ]
    named = [
        name
        for (name,) in catalog(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'pgqueue_job'::regclass "
            "AND contype = 'c' UNION SELECT indexname FROM pg_indexes "
            "WHERE tablename = 'pgqueue_job' AND indexname <> 'pgqueue_job_pkey'"
        )
    ]
    missing = sorted(c for c in columns if f"`{c}`" not in page)
    missing += sorted(n for n in named if f"`{n}`" not in page)
    assert missing == []


# -- the operations ------------------------------------------------------------------


def test_a_job_is_the_same_row_by_enqueue_by_enqueue_many_and_by_copy() -> None:
    """The three ways in (one INSERT, one statement of arrays, COPY from 500 jobs)
    write the same row: COPY's column list cannot drift from the others."""
    options: dict[str, Any] = {
        "queue": "q1",
        "priority": 7,
        "max_attempts": 4,
        "concurrency_key": "ck",
        "backoff": 1.5,
        "retry_on": (KeyError,),
        "discard_on": ValueError,
    }
    later = timezone.now() + dt.timedelta(hours=1)
    one = Job.objects.enqueue(retries_io_only, ["a"], {"error": "x"}, run_at=later, **options)
    spec = JobSpec.build(retries_io_only, ["a"], {"error": "x"}, run_at=later, **options)
    (few,) = Job.objects.enqueue_many([spec])
    copied = Job.objects.enqueue_many([spec] * COPY_THRESHOLD)
    rows = [
        {k: v for k, v in model_to_dict(Job.objects.get(pk=pk)).items() if k != "id"}
        for pk in (one.pk, few, copied[0], copied[-1])
    ]
    assert rows[0]["run_at"] == later
    assert rows[0]["retry_policy"] == {
        "retry_on": ["builtins.KeyError"],
        "discard_on": ["builtins.ValueError"],
    }
    created = {row.pop("created_at") for row in rows}
    assert len(created) == 3  # one per transaction; COPY's jobs share theirs
    assert rows[0] == rows[1] == rows[2] == rows[3]


def test_each_attempt_is_recorded_and_the_first_start_kept() -> None:
    job = add.enqueue(1, 2)
    (first,) = Job.objects.claim("w1")
    started = Job.objects.get(pk=job.pk)
    assert started.started_at == started.attempted_at is not None
    assert Job.objects.fail("w1", [Failure(first.id, first.run, "E", "m", "tb", 0)]) == {
        job.pk: "queued"
    }
    (second,) = Job.objects.claim("w2")
    assert Job.objects.complete("w2", [Success(second.id, second.run, "3")]) == {job.pk}
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.result, row.worker_ids) == ("done", 2, 3, ["w1", "w2"])
    assert (row.locked_until, row.started_at) == (None, started.started_at)
    assert started.attempted_at is not None
    assert row.attempted_at is not None
    assert row.attempted_at > started.attempted_at
    assert row.done_at is not None


def test_enqueue_registers_no_on_commit_callback(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    """The row and its NOTIFY travel with the caller's transaction: nothing waits for
    the commit on the Python side."""
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        add.enqueue(1, 1)
        Job.objects.enqueue("tests.testapp.tasks.add", [1, 2], unique_key="u")
        Job.objects.enqueue_many([JobSpec.build(add, [i, i]) for i in range(COPY_THRESHOLD)])
    assert callbacks == []
    assert status_counts() == {"queued": COPY_THRESHOLD + 2}


def test_prune_deletes_in_batches_of_batch_size() -> None:
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(10))
    old = timezone.now() - dt.timedelta(days=2)
    Job.objects.filter(pk__in=ids[:8]).update(status="done", done_at=old)
    with CaptureQueriesContext(connection) as queries:
        assert Job.objects.prune(dt.timedelta(days=1), batch_size=3) == 8
    statements = [q["sql"].split("*/")[0] for q in queries.captured_queries]
    assert statements == ["/* pgqueue: prune "] * 3  # 3 + 3 + 2
    assert status_counts() == {"queued": 2}


@pytest.mark.parametrize("ending", ["done", "dead", "cancelled"])
def test_a_unique_key_is_free_again_once_its_job_finished(ending: str) -> None:
    first = add.using(unique_key="k", max_attempts=1).enqueue(1, 1)
    assert add.using(unique_key="k").enqueue(2, 2).duplicate is True  # while queued
    if ending == "cancelled":
        assert Job.objects.cancel([first.pk]) == [first.pk]
    else:
        (claimed,) = Job.objects.claim("w")
        assert add.using(unique_key="k").enqueue(3, 3).pk == first.pk  # while running
        if ending == "done":
            Job.objects.complete("w", [Success(claimed.id, claimed.run, "2")])
        else:
            Job.objects.fail("w", [Failure(claimed.id, claimed.run, "E", "m", "", 0)])
    assert status_counts() == {ending: 1}
    again = add.using(unique_key="k").enqueue(4, 4)
    assert (again.duplicate, again.pk != first.pk) == (False, True)
    assert status_counts() == {ending: 1, "queued": 1}


def test_retry_and_cancel_leave_what_they_do_not_apply_to_alone() -> None:
    done, cancelled = add.enqueue(1, 1), add.enqueue(2, 2)
    (claimed,) = Job.objects.claim("w")
    Job.objects.complete("w", [Success(claimed.id, claimed.run, "2")])
    assert Job.objects.cancel([cancelled.pk], reason="no longer wanted") == [cancelled.pk]
    assert Job.objects.retry([done.pk]) == []
    assert Job.objects.cancel([done.pk]) == []
    assert Job.objects.cancel([cancelled.pk]) == []
    assert status_counts() == {"done": 1, "cancelled": 1}
    assert Job.objects.retry([cancelled.pk]) == [cancelled.pk]
    row = Job.objects.get(pk=cancelled.pk)
    assert (row.status, row.attempts, row.done_at) == ("queued", 0, None)
    assert [job.id for job in Job.objects.claim("w", queues=("default",))] == [cancelled.pk]


def test_stats_counts_every_status_and_ages_only_ready_jobs() -> None:
    buried = add.using(max_attempts=1).enqueue(1, 1)
    add.enqueue(2, 2)  # held past its lease below
    cancelled = add.enqueue(3, 3)
    add.using(delay=3600, queue="later").enqueue(4, 4)  # queued, not ready
    ready = add.using(run_at=timezone.now() - dt.timedelta(seconds=30)).enqueue(5, 5)
    (claimed,) = Job.objects.claim("w")
    assert claimed.id == ready.pk
    Job.objects.complete("w", [Success(claimed.id, claimed.run, "10")])
    add.using(run_at=timezone.now() - dt.timedelta(seconds=60)).enqueue(6, 6)  # oldest ready
    (claimed,) = Job.objects.claim("w")
    Job.objects.enqueue(add, [7, 7])  # ready, younger
    (dead,) = Job.objects.claim("w")
    assert dead.id == buried.pk
    Job.objects.fail("w", [Failure(dead.id, dead.run, "E", "m", "", 0)])
    Job.objects.cancel([cancelled.pk])
    (held,) = Job.objects.claim("w", lease=30)
    Job.objects.filter(pk=held.id).update(locked_until=timezone.now() - dt.timedelta(seconds=1))
    stats = {(s.queue, s.status): s for s in Job.objects.stats()}
    assert {key: s.jobs for key, s in stats.items()} == {
        ("default", "queued"): 1,
        ("default", "running"): 2,
        ("default", "done"): 1,
        ("default", "dead"): 1,
        ("default", "cancelled"): 1,
        ("later", "queued"): 1,
    }
    assert stats["later", "queued"].oldest_ready_age is None  # nothing of it is due
    age = stats["default", "queued"].oldest_ready_age
    assert age is not None
    assert 0 <= age < 30  # the job enqueued now, not the one running since
    assert stats["default", "dead"].dead_last_24h == 1
    assert stats["default", "running"].lease_expired == 1
    assert held.id not in (claimed.id, dead.id)
