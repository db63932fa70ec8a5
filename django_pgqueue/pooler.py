"""Is there a connection pooler between us and PostgreSQL?

The signal: at start-up a server sends the client its process id (with the key
that cancels its queries); ``pg_backend_pid()`` is the id of the process that
runs the query. Connected directly, the two are equal. A pooler (PgBouncer,
Odyssey, pgcat, Supavisor...) answers the start-up itself with a key of its own,
since the server process behind it changes from one transaction to the next, so
the two differ.

What it cannot tell: a pooler's mode. A session-mode pool looks pooled too,
though LISTEN and advisory locks work there; a plain TCP proxy (HAProxy) looks
direct, and is. So the worker treats "pooled" as "no session can be counted on"
for its own ``DATABASE`` only, and takes ``PGQUEUE["LISTEN_DATABASE"]`` at its
word when it is set (docs/operations.md). That setting is an alias of
``DATABASES`` or a DSN, a connection string for the listener alone.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connections
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from django_pgqueue.sql import query


def through_pooler(conn: psycopg.Connection[Any]) -> bool:
    """True when ``conn`` (an open psycopg connection) reaches PostgreSQL through a pooler."""
    row = conn.execute(query("backend_pid"), prepare=False).fetchone()
    assert row is not None
    return bool(row[0] != conn.info.backend_pid)


def is_dsn(database: str) -> bool:
    """Whether ``database`` is a DSN (``postgres://...`` or ``host=... dbname=...``)
    rather than an alias of ``DATABASES``."""
    return "://" in database or "=" in database


def shown(database: str) -> str:
    """``database`` as messages may show it: a DSN without its password."""
    if not is_dsn(database):
        return database
    try:
        params = conninfo_to_dict(database)
    except psycopg.ProgrammingError:
        return "(a DSN that cannot be parsed)"
    for secret in ("password", "sslpassword"):
        params.pop(secret, None)
    return make_conninfo("", **params)


def session_connection(alias: str) -> psycopg.Connection[Any]:
    """A new autocommit psycopg connection of Django database ``alias`` (or of a
    DSN), outside Django's per-thread connections and its pool (its caller closes it)."""
    if is_dsn(alias):
        return psycopg.connect(alias, autocommit=True)
    wrapper = connections[alias]
    params = wrapper.get_connection_params()
    if wrapper.settings_dict["OPTIONS"].get("pool"):
        # Not get_new_connection(): with Django's pool that lends one of the pool's
        # connections, which close() does not give back, so each session (a reconnect
        # after a restart or a failover) took a slot of the pool for good. As Django's
        # pool does: OPTIONS may hold "autocommit" too (Django passes them all).
        return psycopg.connect(**{**params, "autocommit": True})
    # Without a pool, the engine's own (a subclass may hook it: a password token).
    conn: psycopg.Connection[Any] = wrapper.get_new_connection(params)
    conn.autocommit = True
    return conn


def alias_through_pooler(alias: str) -> bool:
    """Whether Django database ``alias`` reaches PostgreSQL through a pooler (connects once)."""
    with session_connection(alias) as conn:
        return through_pooler(conn)


def preparing(alias: str, prepare: bool) -> str:
    """What makes statements on Django database ``alias`` prepared server-side, as
    messages name it (``PGQUEUE['PREPARE']``, given as ``prepare``, and psycopg's
    ``OPTIONS['prepare_threshold']``), or "" when nothing does."""
    threshold = connections[alias].settings_dict.get("OPTIONS", {}).get("prepare_threshold")
    what = ["PGQUEUE['PREPARE'] is True"] if prepare else []
    if threshold is not None:
        what.append(f"OPTIONS['prepare_threshold'] = {threshold!r}")
    return " and ".join(what)
