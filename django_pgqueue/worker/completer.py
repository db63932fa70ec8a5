"""Records job outcomes in batches: one statement for all successes, one for the rest
(failures, snoozes, cancellations)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django_pgqueue.dberrors import first_line, is_transient
from django_pgqueue.exceptions import OutcomeNotStored
from django_pgqueue.models import Job
from django_pgqueue.queue.claims import Recorded
from django_pgqueue.records import Failure, JobStatus, Outcome, Success
from django_pgqueue.worker.executor import clean_text
from django_pgqueue.worker.services import ServiceThread, Supervision, reset_connection

logger = logging.getLogger("django_pgqueue")

MAX_BATCH = 1000
#: How long the completer waits after the first outcome, for others to share its
#: statement; when that brought BUSY or more, it is a stream of short jobs, and
#: it waits up to LINGER_BUSY in all (one statement per 10 ms, not per 3 ms).
#: Alone, an outcome waits LINGER: a chain of jobs sharing a concurrency key,
#: each claimable only once the one before is recorded, keeps its pace. With
#: none of the worker's jobs left in flight, nothing could join the statement,
#: and it is written at once.
LINGER = 0.003
LINGER_BUSY = 0.01
BUSY = 8
#: Outcomes whose rows another transaction held locked (an operator's cancel()
#: inside a long atomic block) are skipped by the write and tried again after
#: this long, doubling up to HELD_MAX while they stay locked; the rest go on.
HELD_FIRST = 0.01
HELD_MAX = 1.0
#: Called with the (id, run) pairs settled (written, or refused by the fence),
#: how many became done, how many dead and how many went back for a retry, and each
#: run's new status (None: fenced).
OnSettled = Callable[
    [list[tuple[int, int]], int, int, int, dict[tuple[int, int], str | None]], None
]


class Completer(ServiceThread):
    """Takes outcomes from job threads and writes them, batching whatever is waiting.

    An outcome is kept until it is written: when the database is away, the
    batch is retried with backoff (the thread's guard). It is critical: if it
    failed for good, outcomes would pile up unwritten while leases were renewed.
    """

    critical = True

    def __init__(
        self,
        worker_id: str,
        alias: str,
        on_settled: OnSettled,
        supervision: Supervision,
        in_flight: Callable[[], int] | None = None,
        own_writes: threading.Lock | None = None,
    ) -> None:
        super().__init__(alias, "pgqueue-completer", supervision)
        self.worker_id = worker_id
        self._on_settled = on_settled
        #: The worker's jobs claimed and not yet returned, whose outcomes could
        #: still join a batch (unknown: assume some).
        self._in_flight = in_flight or (lambda: 1)
        #: The ledger's: the heartbeat's statement and ours take turns (Ledger.own_writes).
        self._own_writes = own_writes or threading.Lock()
        self._outcomes: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._batch: list[Outcome] = []  # taken, not yet written (kept across retries)
        #: Skipped by the last write, their rows locked by another transaction:
        #: written again from ``_held_at`` (monotonic) on.
        self._held: list[Outcome] = []
        self._held_at = 0.0
        self._held_delay = HELD_FIRST
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Outcomes handed over and not yet settled."""
        with self._lock:
            return self._pending

    def stop(self) -> None:
        super().stop()
        self._outcomes.put(None)  # wakes a step waiting for outcomes, at once

    def put(self, outcome: Outcome) -> None:
        with self._lock:
            self._pending += 1
        self._outcomes.put(outcome)

    def flush(self, until: float) -> bool:
        """Wait until every outcome handed over is settled, or the monotonic time
        ``until``; False if some are left."""
        while self.pending and time.monotonic() < until and self.is_alive():
            time.sleep(0.005)
        return not self.pending

    def locked_out(self) -> list[int]:
        """Ids of the outcomes waiting because other transactions hold their rows."""
        return sorted(o.job_id for o in self._held)

    def unwritten(self) -> list[int]:
        """Ids of the outcomes not yet written (for the log, at exit)."""
        waiting = [*self._held, *self._batch]
        while True:
            try:
                outcome = self._outcomes.get_nowait()
            except queue.Empty:
                return sorted(o.job_id for o in waiting)
            if outcome is not None:
                waiting.append(outcome)

    def write_left(self) -> list[int]:
        """The last word at shutdown, once the thread has stopped: write, in the
        calling thread, what is still waiting (outcomes of jobs that returned after
        the last flush); the ids of those it could not write. While the thread is
        still inside a write, its batch is not ours to touch: nothing is written."""
        if self.is_alive():
            return self.unwritten()
        self._batch = [*self._held, *self._batch]
        held: list[Outcome] = []
        self._held = []
        while True:
            self._gather()
            if not self._batch:
                self._held = held
                return self.locked_out()
            try:
                held += self._write(self._batch)
            except Exception as exc:
                reset_connection(self.alias)
                logger.warning("writing the last outcomes failed: %s", first_line(exc))
                self._held = held
                return self.unwritten()
            self._batch = []

    def step(self) -> float:
        if not self._batch and self._held and time.monotonic() >= self._held_at:
            self._batch, self._held = self._held, []  # their turn again
            self._gather()
        elif not self._batch:
            wait = 0.1 if not self._held else min(0.1, self._held_at - time.monotonic())
            try:
                first = self._outcomes.get(timeout=max(0.0, wait))
            except queue.Empty:
                return 0.0
            if first is None:  # stop() woke us
                return 0.0
            self._batch = [first]
            self._gather()
            # Linger a moment so outcomes finishing together share a statement
            # (the jobs are done and their slots free, only the write waits),
            # unless no job of ours is left to finish.
            if self._in_flight():
                time.sleep(LINGER)
                self._gather()
                if len(self._batch) >= BUSY and self._in_flight():
                    time.sleep(LINGER_BUSY - LINGER)
                    self._gather()
        held = self._write(self._batch)  # a transient error leaves the batch for the retry
        self._batch = []
        if held:
            self._hold(held)
        elif not self._held:
            self._held_delay = HELD_FIRST
        return 0.0

    def _hold(self, held: list[Outcome]) -> None:
        """Keep outcomes whose rows were locked, to write after a pause."""
        if self._held_delay == HELD_FIRST:  # the first skip since writes went through
            logger.info(
                "jobs %s: their rows are locked by another transaction; their outcomes "
                "wait, the others are written",
                sorted(o.job_id for o in held),
            )
        self._held += held
        self._held_at = time.monotonic() + self._held_delay
        self._held_delay = min(HELD_MAX, self._held_delay * 2)

    def _gather(self) -> None:
        """Add the outcomes waiting now to the batch (up to MAX_BATCH)."""
        while len(self._batch) < MAX_BATCH:
            try:
                outcome = self._outcomes.get_nowait()
            except queue.Empty:
                return
            if outcome is not None:
                self._batch.append(outcome)

    def _record(self, batch: list[Outcome]) -> Recorded:
        successes = [o for o in batch if isinstance(o, Success)]
        failures = [o for o in batch if isinstance(o, Failure)]
        with self._own_writes:
            return Job.objects.record(self.worker_id, successes, failures, using=self.alias)

    def _record_each(self, batch: list[Outcome]) -> Recorded:
        """One outcome at a time, replacing any the database refuses by a final
        failure that says why, so that one bad outcome cannot hold up the rest."""
        done: set[int] = set()
        failed: dict[int, str] = {}
        busy: set[int] = set()
        for outcome in batch:
            try:
                one_done, one_failed, one_busy = self._record([outcome])
            except Exception as exc:
                if is_transient(exc):
                    raise
                reason = clean_text(f"{type(exc).__name__}: {exc}")
                logger.error(
                    "job %s: its outcome could not be stored (%s); burying it",
                    outcome.job_id,
                    reason.splitlines()[0],
                )
                replacement = Failure(
                    outcome.job_id,
                    outcome.run,
                    OutcomeNotStored.__name__,
                    reason,
                    "",
                    delay=0.0,
                    final=True,
                )
                try:
                    one_done, one_failed, one_busy = self._record([replacement])
                except Exception as again:
                    if is_transient(again):
                        raise
                    logger.exception("job %s: not even its failure could be stored", outcome.job_id)
                    continue
            done |= one_done
            failed.update(one_failed)
            busy |= one_busy
        return Recorded(done, failed, busy)

    def _write(self, batch: list[Outcome]) -> list[Outcome]:
        """Write ``batch``; the outcomes skipped because their rows were locked."""
        try:
            done, failed, busy = self._record(batch)
        except Exception as exc:
            if is_transient(exc):
                raise
            done, failed, busy = self._record_each(batch)
        held = [o for o in batch if o.job_id in busy]
        if held:
            batch = [o for o in batch if o.job_id not in busy]
        fenced = sorted(o.job_id for o in batch if o.job_id not in done and o.job_id not in failed)
        if fenced:
            # Our lease expired and the job was reaped (and maybe claimed again), or
            # the claim itself is gone (a failover to a standby that was behind):
            # the row is not our run's now.
            logger.warning(
                "the outcomes of jobs %s were refused: their leases had expired, or their "
                "claims were lost (a failover to a standby that was behind)",
                fenced,
            )
        overruled = sorted(
            o.job_id
            for o in batch
            if isinstance(o, Failure)
            and not o.cancel
            and failed.get(o.job_id) == JobStatus.CANCELLED
        )
        if overruled:
            # Logged as failing (retrying or buried) before the worker heard of the
            # operator's stop request: the record says cancelled, so the log does too.
            logger.info(
                "jobs %s ended cancelled: an operator had asked them to stop before "
                "their failure was recorded",
                overruled,
            )
        buried = sum(1 for status in failed.values() if status == JobStatus.DEAD)
        retried = sum(1 for status in failed.values() if status == JobStatus.QUEUED)
        statuses = {
            (o.job_id, o.run): JobStatus.DONE.value if o.job_id in done else failed.get(o.job_id)
            for o in batch
        }
        if batch:
            self._on_settled(list(statuses), len(done), buried, retried, statuses)
        with self._lock:
            self._pending -= len(batch)
        return held
