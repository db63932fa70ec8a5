"""LISTEN for new jobs on a dedicated connection and wake the worker.

Notifications are a latency optimisation only: they can be lost (a listener
reconnecting, a job whose run_at arrives later), so the worker keeps polling.
The same channel carries the requests to stop running jobs
(``Job.objects.cancel``): a JSON payload ``{"abort": worker_id}``, which no
queue name can be, makes the worker named in it renew its leases at once, and
the heartbeat that does so tells the jobs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import psycopg
from django.db import connections
from psycopg import sql

from django_pgqueue.worker.services import ServiceThread, Supervision

logger = logging.getLogger("django_pgqueue")


class Listener(ServiceThread):
    """Calls ``wake()`` whenever a job is committed to one of ``queues`` (None: any),
    ``on_abort()`` when a job held by ``worker_id`` was asked to stop, and
    ``on_listening()`` each time it (re)connects."""

    def __init__(
        self,
        alias: str,
        channel: str,
        queues: tuple[str, ...] | None,
        wake: Callable[[], None],
        on_listening: Callable[[], None],
        supervision: Supervision,
        *,
        worker_id: str = "",
        on_abort: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(alias, "pgqueue-listener", supervision)
        self.channel = channel
        self.queues = frozenset(queues) if queues else None
        self.wake = wake
        self.on_listening = on_listening
        self.worker_id = worker_id
        self.on_abort = on_abort

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
                for note in conn.notifies(timeout=0.5):
                    if note.payload.startswith("{"):
                        self._control(note.payload)
                    elif self.queues is None or note.payload in self.queues:
                        self.wake()
                self.last_ok = time.monotonic()
        return 0.0

    def _control(self, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return  # not ours: someone else's message on the channel
        if isinstance(message, dict) and message.get("abort") == self.worker_id:
            self.on_abort()
