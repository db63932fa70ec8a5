"""A streaming standby of an embedded PostgreSQL, for the failover test.

:func:`start_standby` copies a running primary with ``pg_basebackup`` (the
standby then streams the primary's WAL, over 127.0.0.1, with the primary's
password, read from a password file in the standby's private folder, never from
a command line), and :func:`make_synchronous` makes the primary wait for it on
every commit that asks for durability. :func:`promote` turns it into a primary.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from devtools.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError, _server_ids

__all__ = ["make_synchronous", "promote", "start_standby"]


def start_standby(primary: EmbeddedPostgres, name: str = "standby1") -> EmbeddedPostgres:
    """A new embedded server streaming from ``primary`` as ``name`` (its
    application_name there); started. Its folder is removed by ``destroy()``."""
    standby = EmbeddedPostgres(password=primary.password, settings=dict(primary.settings))
    try:
        passfile = standby.private_dir / "pgpass"
        _write_private(passfile, f"127.0.0.1:{primary.port}:*:postgres:{primary.password}\n")
        conninfo = (
            f"host=127.0.0.1 port={primary.port} user=postgres "
            f"application_name={name} passfile={passfile}"
        )
        standby.run(
            "pg_basebackup", "-D", str(standby.data_dir), "-X", "stream", "-c", "fast",
            "-d", conninfo,
        )  # fmt: skip
        # Not pg_basebackup -R: it writes the options of its own libpq (18), which the
        # server's WAL receiver may load an older libpq for (the system's) and refuse.
        _write_private(standby.data_dir / "standby.signal", "")
        standby.settings |= {"primary_conninfo": conninfo, "hot_standby": "on"}
        standby.start()
    except BaseException:
        standby.destroy()
        raise
    return standby


def _write_private(path: Path, text: str) -> None:
    """Write a file only the server user may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    ids = _server_ids()
    if ids:
        os.chown(path, *ids)


def _wait(
    conn: psycopg.Connection[tuple[object, ...]], sql: str, what: str, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not (conn.execute(sql.encode()).fetchone() or (False,))[0]:
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def make_synchronous(
    primary: EmbeddedPostgres, name: str = "standby1", timeout: float = 30
) -> None:
    """Make ``primary``'s durable commits wait until standby ``name`` has flushed them."""
    with psycopg.connect(primary.url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'".encode())
        conn.execute(b"SELECT pg_reload_conf()")
        _wait(
            conn,
            f"SELECT EXISTS (SELECT 1 FROM pg_stat_replication "
            f"WHERE application_name = '{name}' AND sync_state = 'sync')",
            f"{name} to stream synchronously",
            timeout,
        )


def promote(standby: EmbeddedPostgres, timeout: float = 30) -> None:
    """Promote ``standby`` (``pg_ctl promote``) and wait until it accepts writes."""
    standby.run("pg_ctl", "-D", str(standby.data_dir), "-w", "-t", str(int(timeout)), "promote")
    with psycopg.connect(standby.url, autocommit=True) as conn:
        _wait(conn, "SELECT NOT pg_is_in_recovery()", "the promotion", timeout)
