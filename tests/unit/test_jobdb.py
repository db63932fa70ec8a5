"""What the job threads' session-change watcher (jobdb._watch) notes (no database: the
statement is not run). What it costs a statement is a benchmark's to say, not a test's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from django_pgqueue import jobdb


def noted(sql: str) -> bool:
    """Whether _watch notes ``sql`` as changing the session (it runs ``execute`` either way)."""
    jobdb._changed.aliases = ()
    ran: list[str] = []
    jobdb._watch(
        lambda sql, *rest: ran.append(sql),
        sql,
        None,
        False,
        {"connection": SimpleNamespace(alias="default")},
    )
    assert ran == [sql]
    changed: Any = jobdb._changed.aliases
    jobdb._changed.aliases = ()
    return "default" in changed


@pytest.mark.parametrize(
    "sql",
    [
        "SET search_path TO pg_catalog",
        "  set role reporting",
        "SET\tSESSION AUTHORIZATION nobody",
        "RESET ALL",
        "DISCARD ALL",
        "SELECT 1; SET statement_timeout = 5",
        "SELECT set_config('search_path', 'pg_catalog', false)",
        "select pg_catalog.SET_CONFIG ('a.b', 'c', false)",
        "SELECT set_config('app.tenant', %s, %s)",
    ],
)
def test_a_session_change_is_noted(sql: str) -> None:
    assert noted(sql)


@pytest.mark.parametrize(
    "sql",
    [
        'UPDATE "shop_order" SET "paid" = %s WHERE "shop_order"."id" = %s',
        "SET LOCAL search_path TO pg_catalog",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET CONSTRAINTS ALL DEFERRED",
        'SELECT "a"."reset_at", "a"."offset" FROM "a"',
        'SELECT "my_set_config"(%s)',
        "SELECT set_config('app.tenant', %s, true)",
        "select set_config('app.tenant', current_setting('app.next'), TRUE)",
    ],
)
def test_an_ordinary_statement_is_not(sql: str) -> None:
    assert not noted(sql)
