"""The worker's session connection: the lock on its worker id, and LISTEN.

Both need a session: a connection that stays one server process for the life of
the worker. Everything else a worker runs is one transaction at a time and may go
through a transaction pooler. The connection is ``PGQUEUE["LISTEN_DATABASE"]``'s,
or ``DATABASE``'s when that is unset and reaches PostgreSQL directly; behind a
pooler without ``LISTEN_DATABASE`` the worker has no session, so it polls and
cannot tell whether another worker uses its id (a warning says so).

The lock: ``--worker-id`` names a worker in ``locked_by``, where it fences every
outcome and lease renewal. Two live workers with one id could renew and record
each other's runs, so a worker holds an advisory lock on its id for as long as
it runs, and refuses to start (or stops, should it find the lock taken after
reconnecting) when another session holds it. Not through a pooler, even one
named in ``LISTEN_DATABASE``: there the lock proves nothing, and a transaction
pool would keep it on a server connection after the worker is gone.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django.conf import settings
from psycopg import sql

from django_pgqueue.dberrors import REFUSED_FOR_GOOD, first_line, is_transient
from django_pgqueue.exceptions import WorkerIdInUse
from django_pgqueue.pooler import (
    alias_through_pooler,
    preparing,
    session_connection,
    shown,
    through_pooler,
)
from django_pgqueue.queue.presence import lock_key
from django_pgqueue.sql import query
from django_pgqueue.sql.runner import fetch

logger = logging.getLogger("django_pgqueue")
#: The server version that has idle_session_timeout (see keep_session).
IDLE_SESSION_TIMEOUT_SINCE = 140000


class SessionUnavailable(Exception):
    """The worker's database goes through a pooler and no LISTEN_DATABASE is set."""


class SessionElsewhere(Exception):
    """LISTEN_DATABASE connects directly to another database than the jobs'."""


def say_unavailable(exc: SessionUnavailable) -> None:
    """System check W002's warning, at the worker's start; silenced with it (at INFO)."""
    silenced = "django_pgqueue.W002" in settings.SILENCED_SYSTEM_CHECKS
    logger.log(logging.INFO if silenced else logging.WARNING, "%s", exc)


class WorkerSession:
    """The session connection of worker ``worker_id``; ``channel``: what to LISTEN on."""

    def __init__(
        self,
        worker_id: str,
        database: str,
        listen_database: str | None,
        channel: str | None,
        poll_interval: float,
    ) -> None:
        self.worker_id = worker_id
        #: The worker's own database alias (where its jobs are).
        self.database = database
        #: Where the session connects: LISTEN_DATABASE (an alias or a DSN), or database.
        self.alias = listen_database or database
        self.explicit = listen_database is not None
        self.channel = channel
        self.poll_interval = poll_interval
        self.conn: psycopg.Connection[Any] | None = None
        #: Whether the open session's id lock proves no other live process has the
        #: id: not through a pooler (its server connection is shared or swapped).
        self.lock_holds = False
        self._said_pooled = False

    @property
    def is_open(self) -> bool:
        return self.conn is not None and not self.conn.closed

    def open(self) -> None:
        """Connect, take the worker id's lock (not through a pooler), LISTEN. Raises
        :class:`WorkerIdInUse`, :class:`SessionUnavailable`, :class:`SessionElsewhere`,
        or the connection's error."""
        self.close()
        conn = session_connection(self.alias)
        try:
            pooled = through_pooler(conn)
            if pooled and self.explicit and not self._said_pooled:
                # A session-mode pool is fine and looks the same from here.
                self._said_pooled = True
                logger.warning(
                    "PGQUEUE['LISTEN_DATABASE'] (%r) reaches PostgreSQL through a connection "
                    "pooler: unless it is a session-mode pool, no NOTIFY reaches this worker "
                    "(it polls every %gs at most) and its LISTEN stays on a server connection "
                    "of the pool, which other clients are handed next; and it takes no lock on "
                    "its id there, so it cannot detect another worker using its id; point it "
                    "at PostgreSQL directly",
                    shown(self.alias),
                    self.poll_interval,
                )
            if pooled and not self.explicit:
                # Told not to listen (--no-listen, LISTEN_NOTIFY off), it polls anyway:
                # what it loses is only the lock.
                polls = (
                    f"polls for new jobs (every {self.poll_interval:g}s at most) instead of "
                    "listening, and "
                    if self.channel is not None
                    else ""
                )
                raise SessionUnavailable(
                    f"database {self.alias!r} reaches PostgreSQL through a connection pooler, "
                    f"which keeps no session: this worker {polls}cannot detect another worker "
                    "using its id; set PGQUEUE['LISTEN_DATABASE'] to a database alias, or a "
                    "DSN, that connects to PostgreSQL directly"
                )
            if not pooled and self.explicit:
                self._same_database(conn)
            if not pooled:
                # Through a pooler the lock proves nothing, and a transaction pool keeps
                # a session-level lock on its server connection after this worker is
                # gone: the id's next worker would find it taken and refuse to start.
                if conn.info.server_version >= IDLE_SESSION_TIMEOUT_SINCE:
                    conn.execute(query("keep_session"), prepare=False)
                self._lock_id(conn)
            if self.channel is not None:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            conn.close()
            raise
        self.conn, self.lock_holds = conn, not pooled

    def _same_database(self, conn: psycopg.Connection[Any]) -> None:
        """NOTIFY and advisory locks are the database's: a session on another database
        of the server (a DSN without the right dbname) hears no new job, and its lock
        on the id keeps out no worker whose session is on the jobs' database. The
        jobs' database away (its pooler not up yet), the session is not opened
        unchecked: its error is the open's, and the listener thread opens it later."""
        (row,) = fetch("backend_pid", {}, self.database, prepare=False)
        if row["database"] != conn.info.dbname:
            raise SessionElsewhere(
                f"PGQUEUE['LISTEN_DATABASE'] ({shown(self.alias)!r}) connects to database "
                f"{conn.info.dbname!r}, but the jobs of database {self.database!r} are in "
                f"{row['database']!r}: no NOTIFY of a new job would reach this worker there, "
                "and its lock on its worker id would not keep out a worker with the same id; "
                "point it at the same database"
            )

    def _lock_id(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(
            query("lock_worker_id"), {"key": lock_key(self.worker_id)}, prepare=False
        ).fetchone()
        if not (row and row[0]):
            raise WorkerIdInUse(
                f"worker id {self.worker_id!r} is in use: another live worker holds its lock "
                f"on database {shown(self.alias)!r}; give each worker its own --worker-id, "
                "or leave it unset (host:pid:random is unique)"
            )

    def lock_pid(self) -> int | None:
        """The server process holding the id's lock, for the registry row: None with
        no session, or through a pooler (whose process ids are not the server's)."""
        conn = self.conn
        if conn is None or conn.closed or not self.lock_holds:
            return None
        return conn.info.backend_pid or None

    def close(self) -> None:
        """Close the connection: the lock and the LISTEN end with it."""
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: nothing to close cleanly
                logger.debug("closing the session connection failed", exc_info=True)


def open_at_start(session: WorkerSession, database: str) -> tuple[str | None, bool]:
    """Open the session before the worker claims anything.

    Returns (why the worker must not start, or None; whether it has a session). A
    database that cannot be reached yet is no reason not to start: the listener
    thread opens the session once it can, and stops the worker then if the id is
    taken. A LISTEN_DATABASE that turns the worker away for good (REFUSED_FOR_GOOD)
    is, as DATABASE is, and so is one on another database than the jobs'. Also
    warns when statements are prepared behind a pooler (W001's warning)."""
    pooled: bool | None = None
    has_session = True
    try:
        session.open()
        pooled = False if not session.explicit else None
    except (WorkerIdInUse, SessionElsewhere) as exc:
        return str(exc), False
    except SessionUnavailable as exc:
        say_unavailable(exc)
        pooled, has_session = True, False
    except Exception as exc:
        if not is_transient(exc):
            raise
        if session.explicit and REFUSED_FOR_GOOD.search(str(exc)):
            # As for DATABASE (startup): no wait cures it, and without its session the
            # worker would run unlocked (a twin with its id beside it) and deaf.
            where = f"PGQUEUE['LISTEN_DATABASE'] ({shown(session.alias)!r})"
            return f"cannot reach {where}: {first_line(exc)}", False
        logger.warning("cannot open the worker's session connection yet: %s", first_line(exc))
    # System check W001's warning about psycopg's own preparing, silenced with it.
    # PGQUEUE['PREPARE'] needs none: the first statement looks for a pooler and
    # stops preparing, with its own warning (sql.runner._look_for_a_pooler).
    what = preparing(database, prepare=False)
    if (
        what
        and pooled is not False
        and "django_pgqueue.W001" not in settings.SILENCED_SYSTEM_CHECKS
    ):
        try:
            pooled = alias_through_pooler(database) if pooled is None else pooled
        except Exception as exc:
            if not is_transient(exc):
                raise
        if pooled:
            logger.warning(
                "database %r reaches PostgreSQL through a connection pooler while %s: unless "
                "the pooler keeps prepared statements (PgBouncer 1.21+ with "
                "max_prepared_statements, or a session-mode pool), psycopg prepares the "
                "queries of task code there and they fail; leave it unset "
                "(django_pgqueue.W001)",
                database,
                what,
            )
    return None, has_session
