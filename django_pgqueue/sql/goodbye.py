"""Whether the server has closed an idle connection, seen without a round trip.

A server ends an idle session on its own (``idle_session_timeout``, an operator's
``pg_terminate_backend``, a pooler's restart) by sending a FATAL error and closing
the stream. Both wait in the socket: reading them before a statement runs turns a
failed statement (and a retry, or a job charged with it) into a quiet reconnect.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg import pq


def hung_up(raw: Any) -> bool:
    """Whether the server closed ``raw``, a psycopg connection with no statement in
    flight, without a round trip: unasked, a server sends an idle connection only a
    notification or its goodbye (a FATAL error, then the end of the stream)."""
    pgconn = getattr(raw, "pgconn", None)
    if pgconn is None or not hasattr(select, "poll"):  # poll: not on Windows
        return False
    try:
        for _ in range(2):  # the goodbye, then the end of the stream
            if pgconn.status != pq.ConnStatus.OK:
                return True
            poller = select.poll()
            poller.register(pgconn.socket, select.POLLIN)
            if not poller.poll(0):
                return False
            if _said_goodbye(pgconn):  # its end may come a moment later
                return True
    except psycopg.Error:
        return True
    return bool(pgconn.status != pq.ConnStatus.OK)


def _said_goodbye(pgconn: Any) -> bool:
    """Read what the server sent unasked; whether it was its goodbye (libpq hands an
    idle connection's FATAL error to the notice handler; other notices go on). Each
    notification goes to psycopg, as its own reads do: left in libpq, notifies()
    would wait for the socket."""
    forward, said = pgconn.notice_handler, [False]

    def take(result: Any) -> None:
        if result.error_field(pq.DiagnosticField.SEVERITY_NONLOCALIZED) in _GOODBYE:
            said[0] = True
        elif forward is not None:
            forward(result)

    pgconn.notice_handler = take
    try:
        pgconn.consume_input()  # raises at the end of the stream
        pgconn.is_busy()  # parses what came
    finally:
        pgconn.notice_handler = forward
    while (notify := pgconn.notifies()) is not None:
        if pgconn.notify_handler is not None:
            pgconn.notify_handler(notify)
    return said[0]


_GOODBYE = {b"FATAL", b"PANIC"}
