"""A ``migrate`` stopped part-way through a non-atomic migration (the process killed,
its connection terminated) leaves the statements it had sent committed and the
migration not recorded: running ``migrate`` again must finish it, to the schema a
clean ``migrate`` makes. Every migration here is run by real ``manage.py migrate``
processes on databases of their own, copied from one at the migration before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest
from django.db import connection

from tests.worker.conftest import ROOT, WorkerProcess, django_command, wait_for

pytestmark = pytest.mark.slow

APP = "django_pgqueue"

#: Each non-atomic migration, the one before it, and the statements it sends that
#: change something (the last records it in django_migrations).
STATEMENTS = {
    "0006_lease_token_and_error_cap": ("0005_job_backoff", 15),
    "0007_ready_by_queue_index": ("0006_lease_token_and_error_cap", 2),
    "0008_job_control": ("0007_ready_by_queue_index", 13),
    "0011_schedule": ("0010_observability", 5),
}
#: The index each builds with CREATE INDEX CONCURRENTLY.
CONCURRENT_INDEX = {
    "0007_ready_by_queue_index": "pgqueue_job_ready_by_queue",
    "0008_job_control": "pgqueue_job_finished",
    "0011_schedule": "pgqueue_job_schedule",
}

#: The app's tables' columns, indexes (and whether they are valid), constraints (and
#: whether validated), storage options, and functions; and the migrations recorded.
SCHEMA = """
SELECT 'column', table_name || '.' || column_name,
       concat_ws(' ', ordinal_position, data_type, character_maximum_length, is_nullable,
                 column_default)
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name LIKE 'pgqueue%'
UNION ALL
SELECT 'index', c.relname,
       pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid AND i.indisready THEN ''
                                             ELSE ' INVALID' END
FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
WHERE t.relname LIKE 'pgqueue%' AND t.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'constraint', c.conrelid::regclass || '.' || c.conname,
       pg_get_constraintdef(c.oid) || CASE WHEN c.convalidated THEN '' ELSE ' NOT VALIDATED' END
FROM pg_constraint AS c JOIN pg_class AS t ON t.oid = c.conrelid
WHERE t.relname LIKE 'pgqueue%' AND t.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'table', relname, coalesce(array_to_string(reloptions, ','), '')
FROM pg_class WHERE relname LIKE 'pgqueue%' AND relkind = 'r'
  AND relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'function', p.oid::regprocedure::text, pg_get_functiondef(p.oid)
FROM pg_proc AS p WHERE p.proname LIKE 'pgqueue%'
  AND p.pronamespace = current_schema()::regnamespace
UNION ALL
SELECT 'migration', name, '' FROM django_migrations WHERE app = 'django_pgqueue'
"""


def schema(url: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(url) as conn:
        return {(kind, name): definition for kind, name, definition in conn.execute(SCHEMA)}


class Server:
    """Databases next to the test database, each dropped at the end of the module:
    one per migration the cases start at (copied for each case), and the reference."""

    def __init__(self) -> None:
        params = connection.get_connection_params()
        user = quote(params.get("user") or "postgres", safe="")
        if params.get("password"):
            user += ":" + quote(params["password"], safe="")
        self.root = f"postgres://{user}@{params.get('host') or '127.0.0.1'}:" + str(
            params.get("port") or 5432
        )
        self.prefix = connection.settings_dict["TEST"]["NAME"] + "_rerun"
        self.created: list[str] = []
        self.bases: dict[str, str] = {}

    def url(self, name: str) -> str:
        return f"{self.root}/{name}"

    def create(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            copy = f' TEMPLATE "{template}"' if template else ""
            admin.execute(f'CREATE DATABASE "{name}"{copy}')
        if name not in self.created:
            self.created.append(name)
        return self.url(name)

    def migrated(self, name: str, *target: str) -> str:
        """A new database, ``migrate``d by a subprocess to ``target``."""
        url = self.create(name)
        done = django_command(url, "migrate", *target, "-v", "0")
        assert done.returncode == 0, done.stderr
        return url

    def case_at(self, migration: str) -> str:
        """A database of its own, at ``migration``."""
        if migration not in self.bases:
            base = f"{self.prefix}_{migration[:4]}"
            self.migrated(base, APP, migration)
            self.bases[migration] = base
        return self.create(f"{self.prefix}_case", template=self.bases[migration])

    def drop_all(self) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            for name in self.created:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    server = Server()
    try:
        yield server
    finally:
        server.drop_all()


@pytest.fixture(scope="module")
def clean_schema(server: Server) -> dict[tuple[str, str], str]:
    """The schema a clean ``migrate`` of the app makes."""
    return schema(server.migrated(f"{server.prefix}_clean", APP))


def killed_migrate(url: str, kill_before: int, target: str) -> subprocess.CompletedProcess[str]:
    """``migrate`` to ``target``, killed just before its statement ``kill_before``."""
    return subprocess.run(
        [sys.executable, "-m", "tests.integration.killed_migrate", str(kill_before), APP, target],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def recorded(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name FROM django_migrations WHERE app = %s", [APP])
        return sorted(name for (name,) in rows)


@pytest.mark.parametrize("name", STATEMENTS)
def test_the_cases_below_stop_before_every_statement(server: Server, name: str) -> None:
    """The migration sends as many statements as the cases below stop before."""
    before, count = STATEMENTS[name]
    url = server.case_at(before)
    done = killed_migrate(url, 1000, name)
    assert done.returncode == 0, done.stderr
    sent = done.stderr.splitlines()
    assert len(sent) == count, done.stderr
    assert sent[-1].startswith(f'statement {count - 1}: INSERT INTO "django_migrations"')


@pytest.mark.parametrize(
    ("name", "kill_before"),
    [(name, n) for name, (_, count) in STATEMENTS.items() for n in range(1, count)],
)
def test_migrate_killed_between_two_statements_runs_again_to_the_clean_schema(
    server: Server, clean_schema: dict[tuple[str, str], str], name: str, kill_before: int
) -> None:
    before, _ = STATEMENTS[name]
    url = server.case_at(before)
    killed = killed_migrate(url, kill_before, name)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(killed.stderr.splitlines()) == kill_before, killed.stderr
    assert name not in recorded(url)

    again = django_command(url, "migrate", APP, "-v", "0")
    assert again.returncode == 0, again.stderr
    assert schema(url) == clean_schema


BUILDING = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND wait_event = 'virtualxid'
  AND query LIKE 'CREATE INDEX CONCURRENTLY %'
"""


@pytest.mark.parametrize("name", CONCURRENT_INDEX)
def test_an_index_build_stopped_part_way_is_built_again(
    server: Server, clean_schema: dict[tuple[str, str], str], name: str
) -> None:
    """CREATE INDEX CONCURRENTLY commits the index's entry before it builds it: its
    connection terminated while it waits (here for a transaction whose snapshot is
    older than the build), it leaves an INVALID index of that name behind, which the
    claim would not use and ``IF NOT EXISTS`` alone would keep for ever."""
    before, _ = STATEMENTS[name]
    url = server.case_at(before)
    with psycopg.connect(url, autocommit=True) as holder, psycopg.connect(url) as watcher:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        migrate = WorkerProcess(url, APP, name, "-v", "0", command="migrate")
        try:

            def building() -> bool:
                watcher.rollback()
                return bool(watcher.execute(BUILDING).fetchall())

            wait_for(building, 60, "the index build to wait for the old snapshot")
            watcher.execute(
                "SELECT pg_terminate_backend(pid) FROM (" + BUILDING + ") AS b"
            ).fetchall()
            watcher.commit()
            assert migrate.wait(30) == 1
        finally:
            migrate.kill()
        holder.execute("ROLLBACK")
        index = CONCURRENT_INDEX[name]
        valid = watcher.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [index]
        ).fetchall()
    assert "terminating connection" in migrate.output
    assert valid == [(False,)]
    assert name not in recorded(url)

    again = django_command(url, "migrate", APP, "-v", "0")
    assert again.returncode == 0, again.stderr
    assert schema(url) == clean_schema
