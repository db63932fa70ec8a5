"""Records job outcomes in batches: one statement for all successes, one for failures."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, transaction

from django_pgqueue.models import Job
from django_pgqueue.queue import Failure, Success
from django_pgqueue.worker.dbutil import Backoff, BookkeepingThread, reset_connection
from django_pgqueue.worker.executor import MAX_ERROR_LINE, clean_text

logger = logging.getLogger("django_pgqueue")

MAX_BATCH = 1000
#: The database is away (or the connection broke): keep the outcomes and retry.
TRANSIENT_ERRORS = (OperationalError, InterfaceError)
LINGER = 0.001


class Completer(BookkeepingThread):
    """Takes outcomes from job threads and writes them, batching whatever is waiting.

    An outcome is kept until it is written: when the database is away, the
    batch is retried with backoff. ``on_recorded(ids)`` is called with the ids
    whose outcome is settled (written, or refused by the fence).
    """

    def __init__(self, worker_id: str, alias: str,
                 on_recorded: Callable[[list[tuple[int, int]], int, int], None]) -> None:
        super().__init__(alias, name="pgqueue-completer")
        self.worker_id = worker_id
        self._on_recorded = on_recorded
        self._outcomes: queue.SimpleQueue[Success | Failure] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()

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

    def _record(self, batch: list[Success | Failure]) -> tuple[set[int], dict[int, str]]:
        successes = [o for o in batch if isinstance(o, Success)]
        failures = [o for o in batch if isinstance(o, Failure)]
        if successes and failures:
            # Both or neither: a retried batch must not find half of it recorded.
            with transaction.atomic(using=self.alias):
                return (Job.objects.complete(self.worker_id, successes, using=self.alias),
                        Job.objects.fail(self.worker_id, failures, using=self.alias))
        return (Job.objects.complete(self.worker_id, successes, using=self.alias),
                Job.objects.fail(self.worker_id, failures, using=self.alias))

    def _record_each(self, batch: list[Success | Failure]) -> tuple[set[int], dict[int, str]]:
        """One outcome at a time, replacing any the database refuses by a final
        failure that says why, so that one bad outcome cannot hold up the rest."""
        done: set[int] = set()
        failed: dict[int, str] = {}
        for outcome in batch:
            try:
                one_done, one_failed = self._record([outcome])
            except TRANSIENT_ERRORS:
                raise
            except Exception as exc:
                reason = clean_text(f"{type(exc).__name__}: {exc}")[:MAX_ERROR_LINE]
                logger.error("job %s: its outcome could not be stored (%s); burying it",
                             outcome.job_id, reason)
                replacement = Failure(
                    outcome.job_id, outcome.attempt, f"OutcomeNotStored: {reason}",
                    {"attempt": outcome.attempt, "exception": "OutcomeNotStored",
                     "message": reason, "traceback": ""}, delay=0.0, final=True)
                try:
                    one_done, one_failed = self._record([replacement])
                except TRANSIENT_ERRORS:
                    raise
                except Exception:
                    logger.exception("job %s: not even its failure could be stored",
                                     outcome.job_id)
                    continue
            done |= one_done
            failed.update(one_failed)
        return done, failed

    def _write(self, batch: list[Success | Failure]) -> bool:
        try:
            try:
                done, failed = self._record(batch)
            except TRANSIENT_ERRORS:
                raise
            except Exception:
                reset_connection(self.alias)
                done, failed = self._record_each(batch)
        except TRANSIENT_ERRORS as exc:
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
        self._on_recorded([(o.job_id, o.attempt) for o in batch], len(done), buried)
        with self._lock:
            self._pending -= len(batch)
        return True
