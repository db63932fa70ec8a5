"""A job's own database connections: what a worker thread checks and tidies around each run.

A request closes its connection when ``CONN_MAX_AGE`` is 0; a worker thread runs
thousands of jobs, and reconnecting (a server process fork) for each would cost
more than most jobs. So a job thread keeps its connections between jobs, and
this module makes sure the next job finds them in a clean state:

- a job that leaves a transaction open (a ``transaction.atomic()`` block it
  never left, or autocommit turned off) fails with :class:`TransactionLeftOpen`:
  its writes were never committed, so calling it a success would lose them;
  the connection is thrown away, so the next job starts clean;
- a connection that an error made unusable, or that ``CONN_MAX_AGE`` says is too
  old, is closed;
- after the worker lost its database (the server restarted), every kept
  connection is dropped before the next job, so no job is charged with a
  connection that broke before it started;
- a kept connection the server hung up on while it sat between jobs (an
  operator's ``pg_terminate_backend``, ``idle_session_timeout``) is closed before
  the next job: the server's goodbye is already in its socket, so seeing it costs
  a poll, not a round trip;
- a job that changes its session (``SET search_path``, ``SET ROLE``,
  ``set_config(...)``, ``DISCARD``: any session-level ``SET`` or ``RESET``) leaves
  its connection closed behind it, so the next job starts with the settings the
  connection was opened with, not what the last job left;
- a kept connection that sat idle for IDLE_CHECK seconds or more is asked
  ``SELECT 1`` before the next job, and closed if it does not answer: the server
  or something between (``idle_session_timeout``, an operator's
  ``pg_terminate_backend``, a proxy) may have closed it meanwhile, while the
  worker's own connections went on working.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_pgqueue.exceptions import PgQueueError
from django_pgqueue.sql.goodbye import hung_up
from django_pgqueue.sql.runner import count_if_hung_up, hung_up_found

logger = logging.getLogger("django_pgqueue")


class TransactionLeftOpen(PgQueueError):
    """The task returned with a database transaction still open; it was rolled back."""


#: The atomic blocks open on this thread's connections before a job started, when
#: jobs run inside a caller's transaction (django_pgqueue.testing.run_jobs in a
#: TestCase); unset in a worker, where a job starts with none open.
_callers = threading.local()

WORKER_IN_TRANSACTION = (
    "the worker is running inside an open transaction on database {alias!r} (a "
    "TestCase's, or a transaction.atomic() block): its own connections cannot see the rows "
    "this transaction has not committed, so it would claim jobs its threads cannot find. "
    "In tests use TransactionTestCase (with pytest, @pytest.mark.django_db(transaction=True)), "
    "or run the jobs in this thread with django_pgqueue.testing.run_jobs()"
)


def worker_in_transaction(alias: str) -> str | None:
    """Why a worker cannot run on this thread, if the connection ``alias`` is inside an
    atomic block (the claim loop runs on the thread that starts the worker)."""
    if connections[alias].in_atomic_block:
        return WORKER_IN_TRANSACTION.format(alias=alias)
    return None


@contextlib.contextmanager
def inside_callers_transaction() -> Iterator[None]:
    """Run jobs in this thread inside the caller's open transaction: a job "left a
    transaction open" only if it left a block beyond those open now."""
    _callers.depth = {
        conn.alias: len(conn.atomic_blocks) for conn in connections.all(initialized_only=True)
    }
    try:
        yield
    finally:
        del _callers.depth


def _left_open_in_callers(depth: dict[str, int]) -> None:
    left = [
        conn
        for conn in connections.all(initialized_only=True)
        if len(conn.atomic_blocks) > depth.get(conn.alias, 0)
    ]
    if not left:
        return
    error = TransactionLeftOpen(
        f"the task returned inside a transaction.atomic() block on "
        f"{', '.join(repr(conn.alias) for conn in left)} that it did not leave: its writes were "
        "rolled back, so the run cannot count as a success"
    )
    for conn in left:  # leave the blocks it left open, rolling them back
        while len(conn.atomic_blocks) > depth.get(conn.alias, 0):
            conn.atomic_blocks[-1].__exit__(TransactionLeftOpen, error, None)
    raise error


def _discard(alias: str) -> None:
    """Close ``alias``'s raw connection (the server rolls back) and forget Django's
    wrapper, whose atomic-block bookkeeping would otherwise outlive it."""
    wrapper = connections[alias]
    if wrapper.connection is not None:
        with contextlib.suppress(Exception):
            wrapper.connection.close()
    wrapper.connection = None
    del connections[alias]


def raise_if_transaction_left_open() -> None:
    """Call right after a task returns: discard any transaction it left open, and
    raise :class:`TransactionLeftOpen` if there was one."""
    depth = getattr(_callers, "depth", None)
    if depth is not None:
        _left_open_in_callers(depth)
        return
    left = [
        conn.alias
        for conn in connections.all(initialized_only=True)
        if conn.in_atomic_block or (conn.connection is not None and not conn.autocommit)
    ]
    if not left:
        return
    for alias in left:
        _discard(alias)
    raise TransactionLeftOpen(
        f"the task returned inside a transaction on {', '.join(map(repr, left))} (a "
        "transaction.atomic() block it did not leave, or autocommit turned off): its writes "
        "were rolled back, so the run cannot count as a success"
    )


def tidy() -> None:
    """After a job: close this thread's connections that are unfit for the next one."""
    changed = getattr(_changed, "aliases", ())
    _changed.aliases = ()
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.alias in changed and not conn.in_atomic_block:
            # The job changed its session: the next one gets a fresh one. Closed first,
            # as Django's close() gives a pooled one (OPTIONS["pool"]) back as it is.
            conn.connection.close()
            conn.close()
        elif conn.in_atomic_block or (conn.connection is not None and not conn.autocommit):
            _discard(conn.alias)  # a backstop: the runner's check has failed the job already
        elif conn.connection is None:
            continue
        elif conn.settings_dict.get("CONN_MAX_AGE"):
            if conn.errors_occurred:  # the job's statements may have met a lost connection
                count_if_hung_up(conn.connection)
            conn.close_if_unusable_or_obsolete()
        elif conn.errors_occurred and not conn.is_usable():
            hung_up_found()
            conn.close()


#: Seconds a job thread's kept connection may sit idle before the next job checks
#: it first (one round trip, only after such a pause: a busy thread never pays it).
IDLE_CHECK = 1.0


def check_idle(idle: float) -> None:
    """Before a job, after this thread sat ``idle`` seconds: close its kept
    connections that the server hung up on, or (after IDLE_CHECK seconds) that no
    longer answer, so that the job reconnects; and watch what the job runs on them."""
    for conn in connections.all():
        if _watch not in conn.execute_wrappers:
            conn.execute_wrappers.append(_watch)
        if conn.connection is None or conn.in_atomic_block:
            continue
        if hung_up(conn.connection) or (idle >= IDLE_CHECK and not conn.is_usable()):
            logger.info("a connection to %r was closed while idle; reconnecting", conn.alias)
            hung_up_found()  # the server may have restarted: a lost connection for the worker
            try:
                conn.close()
            except Exception:
                _discard(conn.alias)


#: A statement that changes the session beyond its transaction: a SET or RESET that
#: is not SET LOCAL / SET TRANSACTION / SET CONSTRAINTS, a DISCARD, or set_config()
#: (below).
_SESSION_CHANGE = r"\s*(?:(?:SET|RESET)\s+(?!(?:LOCAL|TRANSACTION|CONSTRAINTS)\b)|DISCARD\b)"
_CHANGES_AT_START = re.compile(_SESSION_CHANGE, re.IGNORECASE)
_CHANGES_AFTER = re.compile(";" + _SESSION_CHANGE, re.IGNORECASE)  # ';': a fast search
#: set_config() unless it is told ``true`` (local to the transaction, as row-level
#: security code sets a tenant for each job): a session-wide one, or one whose third
#: argument is a parameter, as this cannot tell which.
_SET_CONFIG = re.compile(r"\bset_config\s*\((?![^;]*?,\s*true\s*\))", re.IGNORECASE)
_changed = threading.local()


def changes_session(sql: str) -> bool:
    """Whether ``sql`` changes the session beyond its transaction. Run on every
    statement a job runs, so a search runs only where a substring test found what it
    needs: one regex searched at every character cost some 70 µs on a 2 KB SELECT."""
    return bool(
        _CHANGES_AT_START.match(sql)
        or (";" in sql and _CHANGES_AFTER.search(sql))
        or ("set_config" in sql.lower() and _SET_CONFIG.search(sql))
    )


def _watch(
    execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """Django's execute wrapper on a job thread's connections: note the aliases
    whose session a job changed, for :func:`tidy` to close after it, and a statement
    that met a lost connection: one inside transaction.atomic() is closed as the
    block exits, before :func:`tidy` could find it lost."""
    if isinstance(sql, str) and changes_session(sql):
        wrapper: BaseDatabaseWrapper = context["connection"]
        _changed.aliases = {*getattr(_changed, "aliases", ()), wrapper.alias}
    try:
        return execute(sql, params, many, context)
    except Exception:
        count_if_hung_up(context["connection"].connection)  # see check_idle
        raise


def drop_all() -> None:
    """Close every connection of this thread (they may be dead): the next query reconnects."""
    for conn in connections.all(initialized_only=True):
        try:
            if conn.in_atomic_block:
                _discard(conn.alias)
            else:
                conn.close()
        except Exception:
            logger.debug("closing a stale connection failed", exc_info=True)
            _discard(conn.alias)
