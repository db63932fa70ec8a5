"""The thread that keeps the worker's session connection: LISTEN, and the worker id's lock.

Notifications are a latency optimisation only: they can be lost (a listener
reconnecting, a job whose run_at arrives later), so the worker keeps polling.
The session itself (worker/session.py) is opened by the worker before it claims
anything; this thread reopens it after the connection is lost, and stops the
worker if its id was taken meanwhile.

The same channel carries the requests to stop running jobs
(``Job.objects.cancel``): a JSON payload ``{"abort": worker_id}``, which no
queue name can be, makes the worker named in it renew its leases at once, and
the heartbeat that does so tells the jobs. So does ``{"paused": queue}`` (a queue
paused) for every worker serving that queue: the heartbeat gives back the jobs of
it claimed ahead that no thread has started.
"""

from __future__ import annotations

import json
import logging
import select
import time
from collections.abc import Callable

from django_pgqueue.exceptions import WorkerIdInUse
from django_pgqueue.worker.services import ServiceThread, Supervision
from django_pgqueue.worker.session import (
    SessionElsewhere,
    SessionUnavailable,
    WorkerSession,
    say_unavailable,
)
from django_pgqueue.worker.waker import Waker

logger = logging.getLogger("django_pgqueue")


class Listener(ServiceThread):
    """Calls ``wake()`` whenever a job is committed to one of ``queues`` (None: any),
    ``on_abort()`` when a job this worker holds was asked to stop (or a queue it
    serves was paused), and
    ``on_listening()`` each time it (re)connects and listens."""

    def __init__(
        self,
        session: WorkerSession,
        queues: tuple[str, ...] | None,
        wake: Callable[[], None],
        on_listening: Callable[[], None],
        supervision: Supervision,
        *,
        on_abort: Callable[[], None] = lambda: None,
    ) -> None:
        # The thread's Django connections are the worker database's: the session's own
        # connection (maybe a DSN, which names no Django connection) is not one of them.
        super().__init__(session.database, "pgqueue-listener", supervision)
        self.session = session
        self.queues = frozenset(queues) if queues else None
        self.wake = wake
        self.on_listening = on_listening
        self.on_abort = on_abort
        self._announced = False
        # stop() must not wait for a quiet socket's timeout: it rings this too.
        self._bell = Waker()

    def stop(self) -> None:
        super().stop()
        self._bell.set()

    def _reopen(self) -> bool:
        """Open the session if it is not; False when this thread must end."""
        if self.session.is_open and self._announced:
            return True
        if not self.session.is_open:
            try:
                self.session.open()
            except (WorkerIdInUse, SessionElsewhere) as exc:
                self.supervision.fatal(str(exc))
                return False
            except SessionUnavailable as exc:
                say_unavailable(exc)
                return False
        self._announced = True
        if self.session.channel is not None:
            logger.info("listening for new jobs on channel %r", self.session.channel)
            self.on_listening()
            self.wake()  # anything sent while we were away was missed
        return True

    def step(self) -> float:
        """Listen until stopped; a lost connection goes to the thread's guard."""
        if not self._reopen():
            self.stop()
            return 0.0
        conn = self.session.conn
        assert conn is not None
        try:
            while not self.stopped:
                # Without a channel this only waits, and notices a lost connection.
                readable, _, _ = select.select([conn.fileno(), self._bell.fileno], [], [], 0.5)
                if conn.fileno() in readable:
                    for note in conn.notifies(timeout=0):  # what arrived, without waiting
                        if note.payload.startswith("{"):
                            self._control(note.payload)
                        elif self.queues is None or note.payload in self.queues:
                            self.wake()
                self.last_ok = time.monotonic()
        except BaseException:
            self.session.close()
            self._announced = False
            raise
        return 0.0

    def _control(self, payload: str) -> None:
        try:
            message = json.loads(payload)
        except (ValueError, RecursionError):  # (nested past what Python reads)
            return  # not ours: someone else's message on the channel
        if not isinstance(message, dict):
            return
        paused = message.get("paused")
        if message.get("abort") == self.session.worker_id or (
            isinstance(paused, str) and (self.queues is None or paused in self.queues)
        ):
            self.on_abort()
