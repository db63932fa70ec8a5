"""What the job threads' session-change watcher (jobdb._watch) notes, and what it costs
each statement a job runs through Django (no database: the statement is not run)."""

from __future__ import annotations

import timeit
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
    ],
)
def test_an_ordinary_statement_is_not(sql: str) -> None:
    assert not noted(sql)


def test_watching_a_long_orm_statement_costs_a_scan_not_a_regex_at_every_character() -> None:
    """Every statement a job runs through Django is watched. A case-insensitive regex
    search through it cost some 70 µs on a 2 KB SELECT (200 ids in an IN list), most
    of what the query itself costs; plain substring tests find that nothing can
    match at a fraction of that (measured against copying the statement once)."""
    columns = ", ".join(f'"shop_order"."field_{n}"' for n in range(40))
    sql = (
        f'SELECT {columns} FROM "shop_order" WHERE "shop_order"."id" IN ({", ".join(["%s"] * 200)})'
    )
    assert len(sql) > 1500
    assert not noted(sql)
    context = {"connection": SimpleNamespace(alias="default")}

    def watch() -> None:
        jobdb._watch(lambda *args: None, sql, None, False, context)

    watched = min(timeit.repeat(watch, number=2000, repeat=5))
    copied = min(timeit.repeat(lambda: sql.encode(), number=2000, repeat=5))
    assert watched < 200 * copied, (watched / 2000, copied / 2000)
