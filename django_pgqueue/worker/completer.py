"""Records job outcomes in batches: one statement for all successes, one for failures."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connections

from django_pgqueue.models import Job
from django_pgqueue.queue import Failure, Success
from django_pgqueue.worker.dbutil import (
    DB_ERRORS,
    Backoff,
    bookkeeping_thread,
    reset_connection,
)

logger = logging.getLogger("django_pgqueue")

MAX_BATCH = 1000
LINGER = 0.001


class Completer(threading.Thread):
    """Takes outcomes from job threads and writes them, batching whatever is waiting.

    An outcome is kept until it is written: when the database is away, the
    batch is retried with backoff. ``on_recorded(ids)`` is called with the ids
    whose outcome is settled (written, or refused by the fence).
    """

    def __init__(self, worker_id: str, alias: str,
                 on_recorded: Callable[[list[int], int, int], None]) -> None:
        super().__init__(name="pgqueue-completer", daemon=True)
        self.worker_id = worker_id
        self.alias = alias
        self._on_recorded = on_recorded
        self._outcomes: queue.SimpleQueue[Success | Failure] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._halt = threading.Event()

    @property
    def pending(self) -> int:
        """Outcomes handed over and not yet settled."""
        with self._lock:
            return self._pending

    def put(self, outcome: Success | Failure) -> None:
        with self._lock:
            self._pending += 1
        self._outcomes.put(outcome)

    def flush(self, timeout: float) -> bool:
        """Wait until every outcome handed over is settled; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self.pending

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        bookkeeping_thread(self.alias)
        try:
            self._run()
        finally:
            connections.close_all()  # this thread's connections; nobody else can close them

    def _run(self) -> None:
        backoff = Backoff()
        while not self._halt.is_set():
            try:
                first = self._outcomes.get(timeout=0.1)
            except queue.Empty:
                continue
            # Linger a moment so outcomes finishing together share a statement:
            # the jobs are done and their slots free, only the write waits.
            time.sleep(LINGER)
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._outcomes.get_nowait())
                except queue.Empty:
                    break
            while not self._write(batch):
                backoff.sleep(self._halt)
                if self._halt.is_set():
                    return
            backoff.reset()

    def _write(self, batch: list[Success | Failure]) -> bool:
        successes = [o for o in batch if isinstance(o, Success)]
        failures = [o for o in batch if isinstance(o, Failure)]
        try:
            done = Job.objects.complete(self.worker_id, successes, using=self.alias)
            failed = Job.objects.fail(self.worker_id, failures, using=self.alias)
        except DB_ERRORS as exc:
            logger.warning("recording %d outcomes failed, will retry: %s", len(batch),
                           str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            reset_connection(self.alias)
            return False
        fenced = len(batch) - len(done) - len(failed)
        if fenced:
            # Our lease expired and the job was reaped (and maybe claimed again):
            # the newer run owns the row now.
            logger.warning("%d outcomes were refused: their leases had expired", fenced)
        buried = sum(1 for status in failed.values() if status == "dead")
        self._on_recorded([o.job_id for o in batch], len(done), buried)
        with self._lock:
            self._pending -= len(batch)
        return True
