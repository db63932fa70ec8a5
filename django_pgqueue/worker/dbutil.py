"""Small helpers for threads that talk to the database through Django."""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connections

logger = logging.getLogger("django_pgqueue")

#: What a lost or restarting database raises through Django (psycopg's errors are wrapped).
DB_ERRORS = (DatabaseError,)


def reset_connection(alias: str) -> None:
    """Drop this thread's connection after an error, so the next call reconnects."""
    try:
        connections[alias].close()
    except DB_ERRORS:  # the socket is already gone: nothing to close cleanly
        logger.debug("closing a broken connection failed", exc_info=True)


class Backoff:
    """Doubling sleep for retrying a database call, interruptible by ``stop``."""

    def __init__(self, first: float = 0.2, cap: float = 5.0) -> None:
        self.first = self.delay = first
        self.cap = cap

    def reset(self) -> None:
        self.delay = self.first

    def sleep(self, stop: threading.Event) -> None:
        stop.wait(self.delay)
        self.delay = min(self.cap, self.delay * 2)
