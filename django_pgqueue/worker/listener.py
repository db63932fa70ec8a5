"""LISTEN for new jobs on a dedicated connection and wake the worker.

Notifications are a latency optimisation only: they can be lost (a listener
reconnecting, a job whose run_at arrives later), so the worker keeps polling.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable

import psycopg
from django.db import connections
from psycopg import sql

from django_pgqueue.worker.services import ServiceThread, Supervision
from django_pgqueue.worker.waker import Waker

logger = logging.getLogger("django_pgqueue")


class Listener(ServiceThread):
    """Calls ``wake()`` whenever a job is committed to one of ``queues`` (None: any),
    and ``on_listening()`` each time it (re)connects."""

    def __init__(
        self,
        alias: str,
        channel: str,
        queues: tuple[str, ...] | None,
        wake: Callable[[], None],
        on_listening: Callable[[], None],
        supervision: Supervision,
    ) -> None:
        super().__init__(alias, "pgqueue-listener", supervision)
        self.channel = channel
        self.queues = frozenset(queues) if queues else None
        self.wake = wake
        self.on_listening = on_listening
        # stop() must not wait for a quiet socket's timeout: it rings this too.
        self._bell = Waker()

    def stop(self) -> None:
        super().stop()
        self._bell.set()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        # A connection of its own, outside Django's per-thread pool: it sits in
        # LISTEN for the life of the worker, which must be a session (not a
        # transaction-pooled PgBouncer) connection.
        wrapper = connections[self.alias]
        conn: psycopg.Connection[tuple[object, ...]] = wrapper.get_new_connection(
            wrapper.get_connection_params()
        )
        conn.autocommit = True
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    def step(self) -> float:
        """Listen until stopped; a lost connection goes to the thread's guard."""
        with self._connect() as conn:
            logger.info("listening for new jobs on channel %r", self.channel)
            self.on_listening()
            self.wake()  # anything sent while we were away was missed
            while not self.stopped:
                readable, _, _ = select.select([conn.fileno(), self._bell.fileno], [], [], 0.5)
                if conn.fileno() in readable:
                    for note in conn.notifies(timeout=0):  # what arrived, without waiting
                        if self.queues is None or note.payload in self.queues:
                            self.wake()
                self.last_ok = time.monotonic()
        return 0.0
