"""Small helpers for threads that talk to the database through Django."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created

logger = logging.getLogger("django_pgqueue")

_bookkeeping = threading.local()


def bookkeeping_thread(alias: str, on: bool = True) -> None:
    """Mark (or unmark) this thread as one of the worker's own: with
    ``ASYNC_COMMIT``, its connections commit without waiting for the WAL flush.
    Job threads are never marked: a job's writes keep the durability the project
    configured. A connection the thread already holds is switched too."""
    from django_pgqueue import conf
    from django_pgqueue.models import Job

    _bookkeeping.on = on
    wrapper = connections[alias]
    if conf.get().ASYNC_COMMIT and wrapper.connection is not None and wrapper.is_usable():
        Job.objects.relax_commit(on, using=alias)


def _relax_new_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    if getattr(_bookkeeping, "on", False) and connection.vendor == "postgresql":
        from django_pgqueue import conf
        from django_pgqueue.models import Job

        if conf.get().ASYNC_COMMIT:
            Job.objects.relax_commit(using=connection.alias)


connection_created.connect(_relax_new_connection, dispatch_uid="pgqueue-relax-commit")

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


class BookkeepingThread(threading.Thread):
    """A worker thread of its own (completer, heartbeat, maintenance): marked for
    ``ASYNC_COMMIT``, stopped by :meth:`stop`, and closing its own connections on
    exit, which no other thread can close. Subclasses implement ``_run``."""

    def __init__(self, alias: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.alias = alias
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        bookkeeping_thread(self.alias)
        try:
            self._run()
        finally:
            connections.close_all()

    def _run(self) -> None:
        raise NotImplementedError
