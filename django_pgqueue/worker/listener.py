"""LISTEN for new jobs on a dedicated connection and wake the worker.

Notifications are a latency optimisation only: they can be lost (a listener
reconnecting, a job whose run_at arrives later), so the worker keeps polling.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from django.db import connections
from psycopg import sql

from django_pgqueue.worker.dbutil import Backoff

logger = logging.getLogger("django_pgqueue")


class Listener(threading.Thread):
    """Sets ``wake`` whenever a job is committed to one of ``queues`` (None: any)."""

    def __init__(self, alias: str, channel: str, queues: tuple[str, ...] | None,
                 wake: threading.Event) -> None:
        super().__init__(name="pgqueue-listener", daemon=True)
        self.alias = alias
        self.channel = channel
        self.queues = frozenset(queues) if queues else None
        self.wake = wake
        self.listening = threading.Event()
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        # A connection of its own, outside Django's per-thread pool: it sits in
        # LISTEN for the life of the worker, which must be a session (not a
        # transaction-pooled PgBouncer) connection.
        wrapper = connections[self.alias]
        conn: psycopg.Connection[tuple[object, ...]] = wrapper.get_new_connection(
            wrapper.get_connection_params())
        conn.autocommit = True
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    def run(self) -> None:
        backoff = Backoff(first=0.5, cap=10.0)
        while not self._halt.is_set():
            try:
                with self._connect() as conn:
                    self.listening.set()
                    backoff.reset()
                    self.wake.set()  # anything sent while we were away was missed
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if self.queues is None or note.payload in self.queues:
                                self.wake.set()
            except psycopg.Error as exc:
                self.listening.clear()
                logger.warning("listener lost its connection, reconnecting: %s",
                               str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                backoff.sleep(self._halt)
