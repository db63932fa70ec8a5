"""Runs the named statements of ``queries.sql`` on a Django connection.

The one way the queue executes SQL. Each statement runs on a psycopg cursor of
the queue's own over the Django connection of ``alias`` (one per connection,
kept), so it joins whatever transaction the caller has open and its errors
arrive as ``django.db`` exceptions. Rows come
back as dicts keyed by column name: a reordered ``RETURNING`` cannot shift a
field. With ``PGQUEUE["PREPARE"]`` every statement (all are fully typed) is
bound server-side and prepared once per connection; without it, none is
prepared, as a transaction pooler needs. Should a pooler lose or mix up a
prepared statement anyway, the process stops preparing on that database alias
at once, with a warning, and the failed statement counts as transient (the
worker retries it). Statements
still count in Django's query log, so ``assertNumQueries`` and debug tools see
them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.utils.connection import ConnectionDoesNotExist
from psycopg import pq
from psycopg.rows import dict_row

from django_pgqueue import conf, wording
from django_pgqueue.dberrors import schema_problem
from django_pgqueue.pooler import through_pooler
from django_pgqueue.sql import query
from django_pgqueue.sql.goodbye import hung_up

Row = dict[str, Any]
_ROWS = pq.ExecStatus.TUPLES_OK
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
_NO_ZONE = object()
_thread = threading.local()
logger = logging.getLogger("django_pgqueue")
#: The aliases where a pooler is in the way (found by the look, or by a prepared
#: statement lost or mixed up): this process prepares nothing there from then on,
#: whatever ``PREPARE`` says. Another alias (a direct connection) still prepares.
_unprepared: set[str] = set()
_PREPARE_LOST = (psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName)


def bookkeeping(on: bool = True) -> None:
    """Mark (or unmark) this thread as one of a worker's own: with ``ASYNC_COMMIT``,
    its bookkeeping statements commit without waiting for the WAL flush. Job
    threads are never marked: a job's writes keep the project's durability."""
    _thread.bookkeeping = on


#: Connections of a worker's own threads found closed while idle (a restarted server,
#: pg_terminate_backend), replaced without a failed statement, and those of its job
#: threads found closed before or after a job (``jobdb``): each is a lost connection
#: all the same (see ``worker.services.ConnectionEpoch``).
_hangups = 0


def hangups() -> int:
    return _hangups


def hung_up_found() -> None:
    """A connection of the worker's was found closed by the server (see ``_hangups``)."""
    global _hangups
    _hangups += 1


def count_if_hung_up(raw: Any) -> None:
    """Count ``raw`` (a DB-API connection, or None) as lost if the server closed it:
    the one check after a statement, or an error, met a connection (``_hangups``)."""
    if raw is not None and hung_up(raw):
        hung_up_found()


def commit_mode() -> str | None:
    """The ``commit`` parameter of the bookkeeping statements: ``'off'`` on a worker's
    own thread with ``ASYNC_COMMIT``, else None (the setting left as it is). It is
    transaction-local: nothing stays set on the connection (see queries.sql)."""
    if getattr(_thread, "bookkeeping", False) and conf.get().ASYNC_COMMIT:
        return "off"
    return None


#: With PREPARE, the connection's own threshold for preparing statements it has not
#: been asked to: never. Django opens connections with ``prepare_threshold=None``,
#: which makes psycopg ignore ``prepare=True`` too; only our statements ask.
_ONLY_WHEN_ASKED = 2**31 - 1


def missing_database(alias: str) -> ConnectionDoesNotExist:
    """Django's error for ``alias``, not in DATABASES, with which setting names it, the
    alias meant and the check that says so (where checks do not run: a shell, a
    script, a command run with ``--skip-checks``)."""
    where = "PGQUEUE['DATABASE'] = " if alias == conf.get().DATABASE else "database "
    return ConnectionDoesNotExist(
        f"The connection '{alias}' doesn't exist: {where}{alias!r} is not in DATABASES"
        f"{wording.did_you_mean([alias], connections.settings)}: see manage.py check "
        "(django_pgqueue.E002)"
    )


def usable(alias: str) -> BaseDatabaseWrapper:
    """``alias``'s connection, not yet opened; E002's error, where checks do not run (a
    shell, a script, a command with ``--skip-checks``), if it is missing or not
    PostgreSQL."""
    try:
        wrapper = connections[alias]
    except ConnectionDoesNotExist:
        raise missing_database(alias) from None
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"django-pgqueue needs PostgreSQL, but database {alias!r} is {wrapper.vendor}: "
            "see manage.py check (django_pgqueue.E002)"
        )
    return wrapper


def _ready(alias: str) -> BaseDatabaseWrapper:
    wrapper = usable(alias)
    # Closed by the server while it sat idle (idle_session_timeout, an operator's
    # pg_terminate_backend): a new one, not a failed statement and a retry. Not in
    # a transaction (atomic, or autocommit off): the statement must fail with it.
    if wrapper.connection is not None and wrapper.autocommit and hung_up(wrapper.connection):
        logger.info("a connection to %r was closed while idle; reconnecting", alias)
        wrapper.close()
        if getattr(_thread, "bookkeeping", False):
            hung_up_found()
    wrapper.ensure_connection()
    if wrapper.in_atomic_block:  # before anything runs, as Django's own cursors do
        wrapper.validate_no_broken_transaction()
    raw = wrapper.connection
    # Work only on a new connection, or until this alias has been looked at.
    if (raw.prepare_threshold is None or alias not in _looked) and conf.get().PREPARE:
        if raw.prepare_threshold is None:
            raw.prepare_threshold = _ONLY_WHEN_ASKED
        if alias not in _looked:
            _look_for_a_pooler(wrapper, alias, raw)
    return wrapper


#: The aliases whose way to PostgreSQL this process has looked at (with PREPARE).
_looked: set[str] = set()


def _look_for_a_pooler(
    wrapper: BaseDatabaseWrapper, alias: str, raw: psycopg.Connection[Any]
) -> None:
    """Once per alias and process, with PREPARE: through a connection pooler, prepare
    nothing from the start. A pooler without prepared-statement support hands each
    transaction any server connection, where another client's statement may have
    the name ours has (``_pg3_0``): a lost or doubled name fails and is caught, but
    one of the same shape would run instead of ours. Not when the pooler keeps
    prepared statements, which silencing system check W001 says.

    The alias counts as looked at only once the look has an answer: a look that
    fails (an aborted transaction, a lost connection) raises as our statements do,
    a ``django.db`` error, and the next statement looks again; and another thread
    never prepares on the word of a look still under way (it looks too)."""
    if "django_pgqueue.W001" not in settings.SILENCED_SYSTEM_CHECKS:
        with wrapper.wrap_database_errors:
            pooled = through_pooler(raw)
        if pooled:
            _stop_preparing(alias, "it reaches PostgreSQL through a connection pooler")
    _looked.add(alias)


#: Where a Django connection keeps the cursor our statements run on.
_CURSOR = "_pgqueue_cursor"
_CURSOR_ZONE = "_pgqueue_cursor_zone"  # the zone its times are read in


def _cursor(wrapper: BaseDatabaseWrapper) -> psycopg.Cursor[Row]:
    """The cursor our statements run on, one per raw connection, made on first use.

    A cursor keeps the adapters it has looked up (a dumper per parameter type, a
    loader per column type). A new cursor for every statement looked them all up
    again, and with its set-up and close that cost some 30 µs of CPU a statement,
    a fifth of an enqueue. A Django connection belongs to one thread, and so does
    its cursor; a reconnect brings a new raw connection, and with it a new cursor.

    It reads times in the zone Django's own cursors read them in (``None``, naive,
    with ``USE_TZ = False``): a connection opened before ``override_settings``
    changed ``USE_TZ`` still holds the zone it was opened with, which Django's
    cursors correct for, and so does this one.
    """
    raw = wrapper.connection
    zone = wrapper.timezone  # cached on the wrapper, until USE_TZ or TIME_ZONE change
    cursor: psycopg.Cursor[Row] | None = getattr(wrapper, _CURSOR, None)
    if (
        cursor is not None
        and cursor.connection is raw
        and not cursor.closed
        and getattr(wrapper, _CURSOR_ZONE, _NO_ZONE) is zone
    ):
        return cursor
    cursor = psycopg.Cursor(raw, row_factory=dict_row)
    loader = raw.adapters.get_loader(_TIMESTAMPTZ_OID, pq.Format.TEXT)
    if getattr(loader, "timezone", _NO_ZONE) != zone:  # as Django's create_cursor does
        register_tzloader(zone, cursor)
    setattr(wrapper, _CURSOR, cursor)
    setattr(wrapper, _CURSOR_ZONE, zone)
    return cursor


def _log(wrapper: BaseDatabaseWrapper, name: str, text: str, started: float) -> None:
    if wrapper.queries_logged:
        wrapper.queries_log.append(
            {"sql": f"/* pgqueue: {name} */ {text}", "time": f"{time.monotonic() - started:.3f}"}
        )


def fetch(
    name: str,
    params: dict[str, Any],
    alias: str,
    *,
    prepare: bool | None = None,
    text: str | None = None,
) -> list[Row]:
    """Run statement ``name``; its rows (none for a statement that returns none).

    ``prepare=False`` for the statements PostgreSQL cannot prepare (``SET``);
    ``text`` for a variant of the statement (``sql.variant()``)."""
    wrapper = _ready(alias)
    text = query(name) if text is None else text
    started = time.monotonic()
    cursor = _cursor(wrapper)
    if prepare is None:
        prepare = conf.get().PREPARE and alias not in _unprepared
    try:
        rows = _execute(wrapper, cursor, text, params, prepare)
    except DatabaseError as exc:
        problem = schema_problem(exc, alias)
        if problem is not None:  # a missing table: say "migrate" under the traceback
            exc.add_note(problem)
        raise
    _log(wrapper, name, text, started)
    return rows


def _execute(
    wrapper: BaseDatabaseWrapper,
    cursor: psycopg.Cursor[Row],
    text: str,
    params: dict[str, Any],
    prepare: bool,
) -> list[Row]:
    with wrapper.wrap_database_errors:
        try:
            cursor.execute(text, params, prepare=prepare)
        except _PREPARE_LOST as exc:
            _stop_preparing(wrapper.alias, _lost(exc))
            raise
        except psycopg.errors.ProtocolViolation as exc:
            # Another client's statement of the same name, on the same server
            # connection, takes other parameters ("bind message supplies ...").
            if prepare:
                _stop_preparing(wrapper.alias, _lost(exc))
            raise
        # The result's status, not cursor.description: that builds a Column per
        # column (twenty for the claim) only to say whether there are rows.
        result = cursor.pgresult
        return cursor.fetchall() if result is not None and result.status == _ROWS else []


def _lost(exc: BaseException) -> str:
    said = str(exc).strip()
    return "a prepared statement was lost or doubled: " + (
        said.splitlines()[0] if said else type(exc).__name__
    )


def _stop_preparing(alias: str, found: str) -> None:
    """A transaction pooler that keeps no prepared statements is in the way of
    ``alias`` (what showed it: ``found``): stop preparing there (the statement that
    failed is retried by whoever retries it)."""
    if alias not in _unprepared:
        _unprepared.add(alias)
        logger.warning(
            "database %r: %s: a transaction pooler without prepared-statement support "
            "(PgBouncer before 1.21, or without max_prepared_statements) may be in the way; "
            "this process prepares no statement from now on there: set PGQUEUE['PREPARE'] = "
            "False (or, if the pooler keeps prepared statements, silence django_pgqueue.W001)",
            alias,
            found,
        )


def fetch_one(name: str, params: dict[str, Any], alias: str) -> Row:
    """Run statement ``name``, which returns exactly one row."""
    (row,) = fetch(name, params, alias)
    return row


def copy(name: str, rows: Iterable[Sequence[Any]], alias: str) -> int:
    """Stream ``rows`` through the ``COPY ... FROM STDIN`` statement ``name``; the count."""
    wrapper = _ready(alias)
    started = time.monotonic()
    count = 0
    with (
        wrapper.wrap_database_errors,
        psycopg.Cursor(wrapper.connection) as cursor,
        cursor.copy(query(name)) as stream,
    ):
        for row in rows:
            stream.write_row(row)
            count += 1
    _log(wrapper, name, f"{count} rows", started)
    return count
