"""What a database error means to the worker: wait and retry, stop, or neither.

The one place that answers "is this error transient". The worker retries only
errors of the connection (the server went away, restarted, refused us, or a
statement was cancelled); a schema older than the code (a missing table, column
or function) ends the worker at once with the fix; anything else is a bug or
bad data, handled where it happens.
"""

from __future__ import annotations

import re

import psycopg
from django.db import InterfaceError, OperationalError, ProgrammingError

#: SQLSTATEs of a schema that is missing or older than the code.
_SCHEMA_STATES = {
    "42P01": "table",  # undefined_table
    "42703": "column",  # undefined_column
    "42883": "function",  # undefined_function
}


#: A connection the server refused in words that waiting cannot change: the database
#: does not exist (SQLSTATE 3D000), the role does not or may not log in, its password
#: is wrong, or pg_hba.conf turns it away (28000, 28P01), or it lacks CONNECT on the
#: database (42501). libpq gives a failed connection no SQLSTATE, so its words are
#: read (English, the server's default; in another language the worker waits, as for
#: a server that is down).
REFUSED_FOR_GOOD = re.compile(
    r'FATAL:  ((database|role) "[^"]*" does not exist|\w+ authentication failed|'
    r'role "[^"]*" is not permitted to log in|permission denied for database|'
    r"no pg_hba\.conf entry|pg_hba\.conf rejects)|fe_sendauth: no password supplied"
)


def _psycopg_error(exc: BaseException) -> BaseException:
    # Django wraps psycopg's errors; the original (with its sqlstate) is the cause.
    return exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc


#: A prepared statement a transaction pooler lost or doubled: the statement runner
#: stops preparing when it sees one, so the same statement, retried, works.
_PREPARE_STATES = {"26000", "42P05"}  # invalid_sql_statement_name, duplicate_prepared_statement


def prepare_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a prepared statement a transaction pooler lost or doubled."""
    return getattr(_psycopg_error(exc), "sqlstate", None) in _PREPARE_STATES


def lock_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement that waited for a lock past ``lock_timeout``."""
    return getattr(_psycopg_error(exc), "sqlstate", None) == "55P03"  # lock_not_available


def is_transient(exc: BaseException) -> bool:
    """True when waiting and retrying can cure ``exc``: the connection, not the statement."""
    if prepare_lost(exc):
        return True
    if isinstance(exc, ProgrammingError) or schema_problem(exc):
        return False
    return isinstance(
        exc, OperationalError | InterfaceError | psycopg.OperationalError | psycopg.InterfaceError
    )


def migrate_command(alias: str | None) -> str:
    """The command that creates the tables on ``alias``: a bare ``migrate`` works on
    ``default`` only, so another alias is named."""
    return (
        "manage.py migrate"
        if alias in (None, "default")
        else f"manage.py migrate --database {alias}"
    )


def schema_problem(exc: BaseException, alias: str | None = None) -> str | None:
    """One line saying the tables (on database ``alias``, when known) are missing or
    out of date, or None."""
    cause = _psycopg_error(exc)
    what = _SCHEMA_STATES.get(getattr(cause, "sqlstate", None) or "")
    if what is None:
        return None
    detail = str(cause).strip().splitlines()[0] if str(cause).strip() else what
    return (
        f"the job table is missing or older than this version of django-pgqueue "
        f"({detail}): run `{migrate_command(alias)}`"
    )


def first_line(exc: BaseException) -> str:
    """The first line of the error's message, for a log line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
