"""The upgrade path as a user upgrading a live project meets it: rows written by
the schema of each earlier migration keep their meaning after ``migrate``, every
migration reverses to the same schema it came from, and no migration after the
first version holds the job table locked for a scan."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from django_pgqueue.models import Job, RegisteredWorker, Schedule
from django_pgqueue.queue import gauges
from django_pgqueue.records import Failure
from django_pgqueue.sql import query
from tests.integration.migrating import migrate
from tests.testapp.tasks import add
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)

APP = "django_pgqueue"


def _names() -> list[str]:
    executor = MigrationExecutor(connection)
    nodes = [n for n in executor.loader.graph.forwards_plan(_latest()) if n[0] == APP]
    return [name for _, name in nodes]


def _latest() -> tuple[str, str]:
    (leaf,) = MigrationExecutor(connection).loader.graph.leaf_nodes(APP)
    return (str(leaf[0]), str(leaf[1]))


NAMES = [
    "0001_initial",
    "0002_autovacuum",
    "0003_job_permissions",
    "0004_dead_index",
    "0005_job_backoff",
    "0006_lease_token_and_error_cap",
    "0007_ready_by_queue_index",
    "0008_job_control",
    "0009_job_retry_policy",
    "0010_observability",
    "0011_schedule",
    "0012_worker_schedules",
    "0013_error_entry_time",
    "0014_schedule_settings_enabled",
    "0015_schedule_restarted_at",
    "0016_json_column_defaults",
    "0017_worker_schedule_names",
    "0018_worker_lock_key",
]


def test_the_list_of_migrations_is_the_apps() -> None:
    """The parametrized tests below cover every migration: a new one is added here."""
    assert _names() == NAMES


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    yield
    migrate(_latest())


def _execute(
    sql: str, params: list[str | int | float | None] | None = None
) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


# Columns every version of pgqueue_job has (0001's), so the rows below can be
# written at any migration. The JSON columns are given: before 0016 they have no
# database default.
PLANT = """
INSERT INTO pgqueue_job (task, args, kwargs, status, attempts, max_attempts, run_at,
                         locked_until, locked_by, started_at, attempted_at, done_at,
                         last_error, errors, worker_ids)
VALUES (%s, '[1]', '{}', %s, %s, 3, now() + make_interval(secs => %s),
        CASE WHEN %s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %s) END,
        CASE WHEN %s = 'running' THEN 'old-worker' END,
        CASE WHEN %s > 0 THEN now() - interval '1 hour' END,
        CASE WHEN %s > 0 THEN now() - interval '1 hour' END,
        CASE WHEN %s IN ('done', 'dead') THEN now() - interval '1 hour' END,
        %s, %s::jsonb, CASE WHEN %s > 0 THEN '["old-worker"]' ELSE '[]' END::jsonb)
RETURNING id
"""


def _plant(
    status: str,
    *,
    attempts: int = 0,
    run_in: float = -60.0,
    lease_in: float | None = None,
    exception: str | None = None,
) -> int:
    errors = (
        "[]"
        if exception is None
        else f'[{{"attempt": {attempts}, "at": "2026-01-01T00:00:00+00:00", '
        f'"exception": "{exception}", "message": "why", "traceback": ""}}]'
    )
    last_error = "" if exception is None else f"{exception}: why"
    ((job_id,),) = _execute(
        PLANT,
        [
            "tests.testapp.tasks.add",
            status,
            attempts,
            run_in,
            lease_in,
            lease_in,
            status,
            attempts,
            attempts,
            status,
            last_error,
            errors,
            attempts,
        ],
    )
    assert isinstance(job_id, int)
    return job_id


@pytest.mark.parametrize("start", NAMES[:-1])
def test_rows_of_every_earlier_schema_keep_their_meaning(start: str, back_to_latest: None) -> None:
    """Jobs in every status, workers and schedules written at ``start`` are claimed,
    reaped, retried and pruned through the public API after ``migrate``."""
    migrate((APP, start))
    at = NAMES.index(start)
    queued = _plant("queued")
    later = _plant("queued", run_in=3600.0)
    expired = _plant("running", attempts=1, lease_in=-60.0)
    held = _plant("running", attempts=1, lease_in=3600.0)
    done = _plant("done", attempts=1)
    dead = _plant("dead", attempts=3, exception="ValueError")
    # The first version's cancel buried the job with a "Cancelled" entry; from 0008
    # on it is a status of its own.
    cancelled = (
        _plant("dead", attempts=1, exception="Cancelled")
        if at < NAMES.index("0008_job_control")
        else _plant("cancelled", attempts=1, exception="Cancelled")
    )
    if at >= NAMES.index("0010_observability"):
        _execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, queues, concurrency, version, "
            "alive_until) VALUES ('old-worker', 'h', 1, NULL, 4, '0.1', "
            "now() + interval '1 hour')"
        )
    if at >= NAMES.index("0011_schedule"):
        _execute(
            "INSERT INTO pgqueue_schedule (name, task, expression, timezone, last_tick, ticks) "
            "VALUES ('nightly', 'tests.testapp.tasks.add', '0 3 * * *', 'UTC', "
            "'2026-01-01 03:00+00', 5)"
        )
    migrate(_latest())

    assert dict(Job.objects.values_list("id", "status")) == {
        queued: "queued",
        later: "queued",
        expired: "running",
        held: "running",
        done: "done",
        dead: "dead",
        cancelled: "cancelled",
    }
    # A queued job is claimed, one scheduled later is not.
    assert [job.id for job in Job.objects.claim("new-worker", limit=10)] == [queued]
    # Dead and cancelled jobs are retried, and claimed at once.
    assert sorted(Job.objects.retry([dead, cancelled])) == sorted([dead, cancelled])
    claimed = Job.objects.claim("new-worker", limit=10)
    assert sorted(job.id for job in claimed) == sorted([dead, cancelled])
    assert all(job.run > 0 for job in claimed)
    # The expired lease is reaped (back to queued: its attempt 1 of 3), the live one
    # is left alone.
    reaped = Job.objects.reap()
    assert (reaped.returned, reaped.buried, reaped.cancelled) == (1, 0, 0)
    assert [r.id for r in reaped.returned_jobs] == [expired]
    assert Job.objects.get(pk=expired).status == "queued"
    assert Job.objects.get(pk=held).status == "running"
    # The done job is pruned; nothing else is finished.
    assert Job.objects.prune(0) == 1
    assert not Job.objects.filter(pk=done).exists()
    if at >= NAMES.index("0010_observability"):
        worker = RegisteredWorker.objects.get(pk="old-worker")
        assert (worker.schedules, worker.schedule_names, worker.lock_key) == (True, [], None)
    if at >= NAMES.index("0011_schedule"):
        schedule = Schedule.objects.get(pk="nightly")
        assert (schedule.last_tick, schedule.ticks, schedule.restarted_at) == (
            dt.datetime(2026, 1, 1, 3, tzinfo=dt.UTC),
            5,
            None,
        )
        assert (schedule.enabled, schedule.settings_enabled) == (True, True)


SCHEMA = """
SELECT 'column', table_name || '.' || column_name,
       concat_ws(' ', data_type, character_maximum_length, is_nullable, column_default)
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name LIKE 'pgqueue%%'
UNION ALL
SELECT 'index', indexname, indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename LIKE 'pgqueue%%'
UNION ALL
SELECT 'constraint', c.conrelid::regclass || '.' || c.conname,
       pg_get_constraintdef(c.oid) || CASE WHEN c.convalidated THEN '' ELSE ' NOT VALIDATED' END
FROM pg_constraint AS c JOIN pg_class AS t ON t.oid = c.conrelid
WHERE t.relname LIKE 'pgqueue%%' AND t.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'table', relname, coalesce(array_to_string(reloptions, ','), '')
FROM pg_class WHERE relname LIKE 'pgqueue%%' AND relkind = 'r'
  AND relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'function', p.oid::regprocedure::text, pg_get_functiondef(p.oid)
FROM pg_proc AS p WHERE p.proname LIKE 'pgqueue%%'
  AND p.pronamespace = current_schema()::regnamespace
"""


def _schema() -> dict[tuple[str, str], str]:
    return {(str(kind), str(name)): str(definition) for kind, name, definition in _execute(SCHEMA)}


def _difference(
    before: dict[tuple[str, str], str], after: dict[tuple[str, str], str]
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    return {
        key: (before.get(key), after.get(key))
        for key in before.keys() | after.keys()
        if before.get(key) != after.get(key)
    }


def test_zero_removes_everything_and_forwards_again_rebuilds_the_same_schema(
    back_to_latest: None,
) -> None:
    """``migrate django_pgqueue zero`` reverses every migration, on a table with rows,
    and leaves none of the app's tables, functions or rows behind."""
    latest = _schema()
    assert ("table", "pgqueue_job") in latest
    _plant("queued")
    _plant("dead", attempts=3, exception="ValueError")
    _plant("cancelled", attempts=1, exception="Cancelled")
    call_command("migrate", APP, "zero", verbosity=0)
    assert _schema() == {}
    call_command("migrate", APP, verbosity=0)
    assert _difference(latest, _schema()) == {}


@pytest.mark.parametrize("name", NAMES[1:])
def test_each_migration_reverses_to_the_schema_it_came_from(
    name: str, back_to_latest: None
) -> None:
    """Back one step from ``name`` gives the schema forwards to the step before had,
    and forwards again the schema ``name`` made, with rows in the table."""
    before = NAMES[NAMES.index(name) - 1]
    migrate((APP, before))
    expected_before = _schema()
    migrate((APP, name))
    expected_after = _schema()
    _plant("queued")
    _plant("running", attempts=1, lease_in=60.0)
    _plant("dead", attempts=3, exception="Cancelled")
    migrate((APP, before))
    assert _difference(expected_before, _schema()) == {}
    migrate((APP, name))
    assert _difference(expected_after, _schema()) == {}


#: The first version's last migration: from here on, a migration runs on the job
#: table of a live project, whose web processes enqueue while it runs.
FIRST_VERSION = "0005_job_backoff"

#: Statements that read every row of pgqueue_job, or write it again, under a lock
#: that blocks enqueues and claims: a CHECK added valid (ACCESS EXCLUSIVE for the
#: scan), an index built without CONCURRENTLY (SHARE), a column's type changed or a
#: column added with a volatile default (a rewrite under ACCESS EXCLUSIVE).
BLOCKING = (
    re.compile(r"ADD CONSTRAINT \S+ CHECK (?!.*NOT VALID)", re.S),
    re.compile(r"CREATE (UNIQUE )?INDEX (?!CONCURRENTLY)", re.S),
    re.compile(r"ALTER COLUMN \S+ TYPE", re.S),
    re.compile(r"ADD COLUMN .* DEFAULT .*\(", re.S),
)


def test_no_migration_after_the_first_version_blocks_enqueues_for_a_scan(
    back_to_latest: None,
) -> None:
    """Upgrading a live project, each migration on pgqueue_job blocks its writers for
    a moment only: a check constraint is added NOT VALID and validated in a
    transaction of its own (VALIDATE takes SHARE UPDATE EXCLUSIVE, which lets
    enqueues and claims through), indexes are built concurrently."""
    migrate((APP, FIRST_VERSION))
    statements: list[tuple[str, bool]] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        statements.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        migrate(_latest())
    job_table = [
        (sql, atomic)
        for sql, atomic in statements
        if re.search(r'(ALTER TABLE|ON) "?pgqueue_job"? ', sql)
    ]
    assert job_table  # the wrapper saw the migrations' statements
    blocking = [sql for sql, _ in job_table if any(p.search(sql) for p in BLOCKING)]
    assert blocking == []
    # A VALIDATE inside the transaction that added the constraint would keep that
    # ALTER TABLE's ACCESS EXCLUSIVE lock for the whole scan: in an atomic block, or
    # sent in one string with it (RunSQL does not split a script on PostgreSQL, and
    # the server runs a string of several statements as one transaction).
    validated = [(sql, atomic) for sql, atomic in job_table if "VALIDATE CONSTRAINT" in sql]
    assert len(validated) == 7  # 0006's five, 0008's two
    assert [
        sql
        for sql, atomic in validated
        if atomic or len([s for s in sql.split(";") if s.strip()]) > 1
    ] == []


@pytest.fixture
def tenant_first_on_the_path() -> Iterator[None]:
    """A search_path whose first schema exists but holds none of the queue's tables
    (django-tenants and the like: ``tenant, public``, the app's tables in public)."""
    _execute("CREATE SCHEMA pgq_tenant")
    _execute("SET search_path TO pgq_tenant, public")
    try:
        yield
    finally:
        _execute("RESET search_path")
        _execute("DROP SCHEMA pgq_tenant CASCADE")
        _execute("DELETE FROM pgqueue_job")
        _execute("ANALYZE pgqueue_job")  # later tests' plans see an empty table again


def test_the_gauges_estimate_finished_jobs_whatever_schema_comes_first_on_the_path(
    tenant_first_on_the_path: None,
) -> None:
    """The estimate reads the statistics of the table the statement reads, wherever
    the search path finds it, not those of a table of the first schema on the path."""
    assert _execute("SELECT current_schema()") == [("pgq_tenant",)]
    _execute(
        "INSERT INTO pgqueue_job (task, queue, status, attempts, done_at) "
        "SELECT 'tests.testapp.tasks.noop', 'bulk', 'done', 1, now() "
        "FROM generate_series(1, 3000)"
    )
    _execute("ANALYZE pgqueue_job")
    rows = gauges.compute("default", exact_limit=500)
    estimated = {(r.queue, r.status): r.jobs for r in rows if r.estimated}
    assert set(estimated) == {("bulk", "done"), (gauges.NOT_COUNTED, "done")}
    assert estimated[("bulk", "done")] == pytest.approx(3000, rel=0.05)


@pytest.fixture
def a_schema_of_its_own() -> Iterator[None]:
    """The queue migrated into a schema of its own, the only one on the search path
    (its tables, functions and django_migrations there; public's are not seen)."""
    _execute("CREATE SCHEMA pgq_own")
    _execute("SET search_path TO pgq_own")
    try:
        yield
    finally:
        _execute("RESET search_path")
        _execute("DROP SCHEMA pgq_own CASCADE")


def test_the_queue_works_in_a_schema_of_its_own(a_schema_of_its_own: None) -> None:
    migrate(_latest())
    assert _execute(
        "SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE c.oid = 'pgqueue_job'::regclass"
    ) == [("pgq_own",)]
    job = add.enqueue(1, 2)
    (claimed,) = Job.objects.claim("w", limit=5, lease=30)
    assert claimed.id == job.pk
    failed = Job.objects.fail(
        "w", [Failure(job.pk, claimed.run, "ValueError", "no", "", delay=0.0, final=True)]
    )
    assert failed == {job.pk: "dead"}
    assert Job.objects.retry([job.pk]) == [job.pk]
    assert [j.id for j in Job.objects.claim("w", limit=5, lease=30)] == [job.pk]
    _execute("UPDATE pgqueue_job SET locked_until = now() - interval '1 minute'")
    assert Job.objects.reap().returned == 1
    _execute(
        "INSERT INTO pgqueue_job (task, queue, status, attempts, done_at) "
        "SELECT 'tests.testapp.tasks.noop', 'bulk', 'done', 1, now() - interval '2 days' "
        "FROM generate_series(1, 3000)"
    )
    _execute("ANALYZE pgqueue_job")
    rows = gauges.compute("default", exact_limit=500)
    assert {(r.queue, r.status) for r in rows if r.estimated} >= {("bulk", "done")}
    assert Job.objects.prune(dt.timedelta(days=1)) == 3000
    assert list(Job.objects.values_list("id", "status")) == [(job.pk, "queued")]


@pytest.fixture
def two_databases(db_url: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    """Two empty databases, ``default`` and ``queue``, and the environment of a
    subprocess whose settings route the queue to the second."""
    names = [f"{connection.settings_dict['NAME']}_{alias}" for alias in ("web", "queue")]
    server = db_url.rsplit("/", 1)[0]
    with psycopg.connect(server + "/postgres", autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.integration.queue_router",
        "PGQUEUE_TEST_DATABASES": json.dumps(
            {"default": {"NAME": names[0]}, "queue": {"NAME": names[1]}}
        ),
        "PGQUEUE_TEST_PGQUEUE": json.dumps({"DATABASE": "queue"}),
    }
    try:
        yield server + "/" + names[0], server + "/" + names[1], env
    finally:
        with psycopg.connect(server + "/postgres", autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _objects(url: str) -> list[str]:
    """The tables and functions of a database's public schema, sorted."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' UNION ALL "
            "SELECT proname || '()' FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
        ).fetchall()
    return sorted(name for (name,) in rows)


def test_migrate_database_queue_creates_the_queue_there_and_nowhere_else(
    db_url: str, two_databases: tuple[str, str, dict[str, str]]
) -> None:
    web, queue, env = two_databases
    migrated = django_command(db_url, "migrate", "-v", "0", env=env)
    assert migrated.returncode == 0, migrated.stderr
    ours = [name for name in _objects(web) if name.startswith("pgqueue")]
    assert ours == []
    assert _objects(queue) == []
    migrated = django_command(db_url, "migrate", "--database", "queue", "-v", "0", env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert [name for name in _objects(web) if name.startswith("pgqueue")] == []
    assert _objects(queue) == [
        "django_migrations",
        "pgqueue_error_entry()",
        "pgqueue_error_line()",
        "pgqueue_job",
        "pgqueue_push_error()",
        "pgqueue_queue",
        "pgqueue_queue_gauge",
        "pgqueue_schedule",
        "pgqueue_worker",
    ]
    # The commands act there: a job enqueued, reaped, counted and pruned.
    enqueued = django_command(
        db_url,
        "shell",
        "-c",
        "from tests.testapp.tasks import add; print(add.enqueue(1, 2).pk)",
        env=env,
    )
    assert enqueued.returncode == 0, enqueued.stderr
    with psycopg.connect(queue, autocommit=True) as conn:
        conn.execute("UPDATE pgqueue_job SET status = 'done', done_at = now() - interval '2 days'")
    stats = django_command(db_url, "queuestats", env=env)
    assert stats.returncode == 0, stats.stderr
    assert "done" in stats.stdout
    for command in (("reapjobs",), ("prunejobs", "--older-than", "1d")):
        ran = django_command(db_url, *command, env=env)
        assert ran.returncode == 0, ran.stderr
    with psycopg.connect(queue) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue_job").fetchone() == (0,)


@pytest.fixture
def a_big_finished_table() -> Iterator[None]:
    """100,000 finished jobs (1 in 100 dead), analyzed; emptied and analyzed again
    after, so that later tests' plans see an empty table."""
    _execute(
        "INSERT INTO pgqueue_job (task, status, attempts, done_at) "
        "SELECT 'tests.testapp.tasks.noop', CASE WHEN i % 100 = 0 THEN 'dead' ELSE 'done' END, "
        "1, now() - make_interval(secs => i) FROM generate_series(1, 100000) AS i"
    )
    _execute("ANALYZE pgqueue_job")
    try:
        yield
    finally:
        _execute("DELETE FROM pgqueue_job")
        _execute("ANALYZE pgqueue_job")


#: The parameters of the statements below: a few ids, a bound a day back.
PARAMS: dict[str, Any] = {
    "worker": "w",
    "commit": None,
    "ids": [5, 6, 7],
    "runs": [1, 1, 1],
    "results": ["1", "1", "1"],
    "beyond": 1e9,
    "statuses": ["done", "dead", "cancelled"],
    "before": dt.datetime.now(dt.UTC) - dt.timedelta(days=1),
    "channel": "pgqueue",
    "notify": False,
    "reason": "r",
    "limit": 1000,
    "seconds": 86400.0,
}


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("complete", "pgqueue_job_pkey"),
        ("retry", "pgqueue_job_pkey"),
        ("cancel", "pgqueue_job_pkey"),
        ("prune", "pgqueue_job_finished"),
        ("count_prunable", "pgqueue_job_finished"),
        ("dead_since", "pgqueue_job_dead"),
    ],
)
def test_the_statements_read_their_index_on_a_big_table(
    name: str, index: str, a_big_finished_table: None
) -> None:
    """Each statement reads the index migrations create for it, not the table (the
    claim's and the reaper's plans have tests of their own: test_claim, test_contract_core)."""
    text = query(name)
    params = {key: PARAMS[key] for key in re.findall(r"%\((\w+)\)s", text)}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + text, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert index in plan, plan
    assert "Seq Scan on pgqueue_job" not in plan, plan
