"""A session a test left holding a lock ends before the flush, and fails that test.

A test that fails while a second connection of its own (a raw psycopg connection
holding a row lock, say) is still open leaves that session behind: the traceback
keeps the connection alive. The flush after a transactional test (Django's
TransactionTestCase, pytest-django's ``transactional_db``) truncates every table
and so waits for the lock, forever; neither pytest-timeout's signal nor Ctrl-C
interrupts a libpq wait, and the whole run hangs.

So before each such flush, one query looks for client sessions of the test
database (never another database on a shared server) that hold or wait for a
lock, other than this thread's own Django connections (every alias). Any it
finds get a moment to end by themselves (a worker process the test has just
stopped may still be leaving), then are terminated, and the flush goes on. The
pytest plugin then fails the test's teardown, naming them (``take_report``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DatabaseError, connections

#: How long a session found holding a lock may take to end by itself.
GRACE = 2.0

#: Client sessions of this database (but ours) holding a lock other than their own
#: transaction's virtualxid, or waiting for one: those a flush could wait for.
HOLDING = """
SELECT a.pid, a.state, a.wait_event_type, a.application_name, left(a.query, 200){terminate}
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.backend_type = 'client backend'
  AND a.pid <> ALL(%(own)s) {among}
  AND EXISTS (
    SELECT FROM pg_locks l
    WHERE l.pid = a.pid AND (NOT l.granted OR l.locktype <> 'virtualxid')
  )
ORDER BY a.pid
"""
FIND = HOLDING.format(terminate="", among="")
RECHECK = HOLDING.format(terminate="", among="AND a.pid = ANY(%(among)s)")
# Waits (up to 5 s) for each to end, so that the flush finds their locks gone.
TERMINATE = HOLDING.format(
    terminate=", pg_terminate_backend(a.pid, 5000)", among="AND a.pid = ANY(%(among)s)"
)

_terminated: list[str] = []


def _own_pids() -> list[int]:
    """The server processes of this thread's Django connections, every alias."""
    pids = []
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is None or conn.vendor != "postgresql":
            continue
        info = getattr(raw, "info", None)  # psycopg 3; psycopg2 has get_backend_pid()
        pids.append(int(info.backend_pid if info is not None else raw.get_backend_pid()))
    return pids


def _describe(row: Sequence[Any]) -> str:
    pid, state, waiting, application, query = row[:5]
    how = f"{state}" + (", waiting for a lock" if waiting == "Lock" else "")
    named = f" ({application})" if application else ""
    return f"pid {pid}{named}, {how}: {query!r}"


def end_sessions_left_holding_locks(alias: str) -> list[str]:
    """Terminate the sessions of ``alias``'s database that a test left holding or
    waiting for locks; their descriptions (none, in one query, if there are none)."""
    conn = connections[alias]
    if conn.vendor != "postgresql":
        return []
    try:
        with conn.cursor() as cursor:
            own = _own_pids()
            cursor.execute(FIND, {"own": own})
            rows = cursor.fetchall()
            deadline = time.monotonic() + GRACE
            while rows and time.monotonic() < deadline:
                time.sleep(0.05)
                cursor.execute(RECHECK, {"own": own, "among": [row[0] for row in rows]})
                rows = cursor.fetchall()
            if not rows:
                return []
            cursor.execute(TERMINATE, {"own": own, "among": [row[0] for row in rows]})
            ended = [_describe(row) for row in cursor.fetchall()]
    except DatabaseError:  # the flush meets the same trouble, and says so
        return []
    _terminated.extend(ended)
    return ended


def take_report() -> str | None:
    """What the guard terminated since the last call, as a message for the test."""
    if not _terminated:
        return None
    ended = "\n".join(f"  {line}" for line in _terminated)
    _terminated.clear()
    return (
        "the test left sessions holding or waiting for locks, which its database's "
        "flush would have waited for forever; they were terminated (close each "
        "connection whatever fails: a with block or try/finally):\n" + ended
    )


def install() -> Callable[[], None]:
    """Guard every TransactionTestCase flush; returns the undo."""
    from django.test import TransactionTestCase

    original = TransactionTestCase.__dict__["_fixture_teardown"]

    def _fixture_teardown(self: TransactionTestCase) -> None:
        seen = set()
        for alias in self._databases_names(include_mirrors=False):  # type: ignore[attr-defined]
            name = connections[alias].settings_dict["NAME"]
            if name not in seen:
                seen.add(name)
                end_sessions_left_holding_locks(alias)
        original(self)

    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[attr-defined]

    def undo() -> None:
        TransactionTestCase._fixture_teardown = original  # type: ignore[attr-defined]

    return undo
