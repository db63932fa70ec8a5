"""How many jobs a worker claims beyond its free threads.

A fixed number (``--prefetch N``), or, by default, one that follows the jobs:
the worker keeps a moving average of how long its jobs run, and claims ahead
as many as its threads can start within ``TARGET_WAIT``:
``width * TARGET_WAIT / average``, at most ``MAX_PER_THREAD`` per thread, where
the width is how many threads run jobs back to back (``pacing.py``; all of
them for jobs that wait, fewer for jobs that keep the interpreter busy, which
would take turns at it anyway).
Short jobs (milliseconds) get a deep prefetch, so a thread never waits for a
claim round trip between two jobs; jobs of a second or longer get none, so no job
waits in one worker behind long ones while another worker could run it. Until
the first job has finished it claims no more than its threads. A prefetched job's
lease is renewed while it waits, and its job timeout counts from its start.

The average learns only from jobs that finish, so when short jobs give way to
long ones it still says "short" while the long ones run. :class:`GiveBack`
covers that: a prefetched job that has waited ``GIVE_BACK_AFTER`` for a thread
goes back to the queue with the others waiting (their attempts not spent, no
error recorded), for any worker with a free thread, and the prefetch stops until
the jobs that finish say otherwise. A fixed ``--prefetch`` is left as asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from django_pgqueue import wording
from django_pgqueue.dberrors import first_line, is_transient
from django_pgqueue.queue import claims
from django_pgqueue.records import ClaimedJob
from django_pgqueue.worker import joblog
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events, emit_released
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.pool import JobPool
from django_pgqueue.worker.services import reset_connection

logger = logging.getLogger("django_pgqueue")

#: How long a prefetched job may expect to wait for a thread, in seconds.
TARGET_WAIT = 0.05
#: The deepest prefetch, per thread.
MAX_PER_THREAD = 8
#: Weight of the newest duration in the moving average.
SMOOTHING = 0.2
#: How long a prefetched job may wait for a thread before it goes back, in seconds.
GIVE_BACK_AFTER = 1.0
#: How often the claim loop looks for such jobs, at most, in seconds.
LOOK_EVERY = 0.25


class Prefetch:
    def __init__(
        self, concurrency: int, fixed: int | None, width: Callable[[], int] | None = None
    ) -> None:
        self.concurrency = concurrency
        self.fixed = fixed
        self._width = width or (lambda: concurrency)
        self._average: float | None = None
        self._limit = 0 if fixed is None else fixed  # read on every job: kept ready
        self._lock = threading.Lock()

    @property
    def adaptive(self) -> bool:
        return self.fixed is None

    def limit(self) -> int:
        """Jobs to hold beyond the threads right now."""
        return self._limit

    def observe(self, seconds: float) -> None:
        """A job ran for ``seconds`` (from its start, not its claim)."""
        if self.fixed is not None:
            return
        with self._lock:
            average = self._average
            average = seconds if average is None else average + SMOOTHING * (seconds - average)
            self._average = average
            deepest = MAX_PER_THREAD * self.concurrency
            self._limit = (
                deepest
                if average <= 0
                else min(deepest, int(self._width() * TARGET_WAIT / average))
            )

    def stalled(self, waited: float) -> None:
        """Prefetched jobs waited ``waited`` seconds for a thread: the jobs running
        are long. Claim no more than the threads until finished jobs say otherwise."""
        with self._lock:
            self._average = max(self._average or 0.0, waited)
            self._limit = 0

    def describe(self) -> str:
        return "auto" if self.fixed is None else str(self.fixed)


class GiveBack:
    """The claim loop's check for prefetched jobs stuck behind long ones (above)."""

    def __init__(
        self,
        config: WorkerConfig,
        prefetch: Prefetch,
        ledger: Ledger,
        pool: JobPool,
        events: Events,
    ) -> None:
        self.config, self.prefetch, self.ledger, self.pool = config, prefetch, ledger, pool
        self.events = events
        self._looked = 0.0
        self._owing = False  # runs owed to the queue are left (their rows locked)

    def look(self) -> float:
        """Give back the runs owed to the queue (:func:`give_back_owed`), and the
        waiting jobs if the oldest has waited too long; how long the claim loop may
        sleep before it should look again."""
        now, sleep = time.monotonic(), self.config.poll_interval
        if now - self._looked < LOOK_EVERY:
            return min(sleep, self._looked + LOOK_EVERY - now) if self._owing else sleep
        self._looked = now
        self._owing = give_back_owed(self.config, self.ledger, self.events)
        if self._owing:
            sleep = min(sleep, LOOK_EVERY)
        if not self.prefetch.adaptive:
            return sleep
        since = self.ledger.waiting_since()
        if since is None:
            return sleep
        if now - since < GIVE_BACK_AFTER:
            return min(sleep, since + GIVE_BACK_AFTER - now + LOOK_EVERY)
        waiting = self.pool.take_waiting()
        if not waiting:
            return sleep
        self.prefetch.stalled(now - since)
        released = give_back(self.config, self.ledger, self.events, self.pool, waiting)
        if released:
            logger.info(
                "gave back %s that waited %.1fs for a thread behind long ones, for any "
                "worker to run: %s",
                wording.count(len(released), "prefetched job"),
                now - since,
                released,
            )
        return sleep


def give_back(
    config: WorkerConfig, ledger: Ledger, events: Events, pool: JobPool, waiting: list[ClaimedJob]
) -> list[int]:
    """Put prefetched jobs (taken from the pool: no thread started them) back in the
    queue for any worker, their attempt not spent; a job an operator asked to stop
    ends cancelled instead. The ids back in the queue.

    The runs stay this worker's until the release is written: one that fails (tried
    twice, on a fresh connection the second time) puts back in the pool those whose
    leases still hold, renewed again from then on, to run here or be given back at
    the next look (once the shutdown closed the pool, they are owed to the queue, for
    its last give-back). Forgotten first, they were left to the reaper, which spends
    an attempt (and buries a job that had one, though it never ran).

    A run whose row another transaction holds locked (an operator's cancel() in a
    long atomic block) is skipped, not waited for, which stalled the claim loop or
    the heartbeat that gives back: owed to the queue, it goes back at a later look
    (:func:`give_back_owed`)."""
    keys = [job.key for job in waiting]
    ledger.give_back(keys)  # the heartbeat leaves them alone while they go back
    for last in (False, True):
        try:
            statuses = claims.release(config.worker_id, keys, None, config.database, wait=False)
        except Exception as exc:
            reset_connection(config.database)
            if last:
                kept = ledger.take_back(waiting)
                refused = pool.submit(kept)  # the worker shuts down: for its last give-back
                ledger.forget(refused)
                ledger.owe(refused)
                logger.warning(
                    "could not give back jobs %s (%s): %s stay with this worker",
                    sorted(k[0] for k in keys),
                    first_line(exc),
                    sorted(job.id for job in kept),
                )
                return []
        else:
            break
    ledger.forget(waiting)
    owe(ledger, skipped(waiting, statuses))
    return emit_released(events, ledger, keys, statuses, unstarted=True)


def skipped(jobs: list[ClaimedJob], statuses: Mapping[int, str | None]) -> list[ClaimedJob]:
    """The runs of ``jobs`` a give-back skipped: their rows were locked (status None)."""
    return [job for job in jobs if job.id in statuses and statuses[job.id] is None]


def owe(ledger: Ledger, locked: list[ClaimedJob], why: str = "") -> None:
    """These runs, given back unstarted, were skipped: their rows were locked."""
    if locked:
        ledger.owe(locked)
        logger.info(
            "jobs %s: %stheir rows are locked by another transaction: not started, they "
            "go back to the queue once it lets go (this worker goes on meanwhile)",
            sorted(job.id for job in locked),
            why,
        )


def give_back_owed(config: WorkerConfig, ledger: Ledger, events: Events) -> bool:
    """Give back the runs owed to the queue, skipping those whose rows are still
    locked; True if some are left. Fenced: a run the reaper returned meanwhile (its
    lease lapsed) is no longer this worker's, and nothing is written for it."""
    owed = ledger.owed()
    if not owed:
        return False
    keys = [job.key for job in owed]
    try:
        statuses = claims.release(config.worker_id, keys, None, config.database, wait=False)
    except Exception as exc:
        reset_connection(config.database)
        if not is_transient(exc):
            logger.error(
                "could not give back jobs %s (%s): the reaper returns them",
                sorted(k[0] for k in keys),
                first_line(exc),
            )
            return False
        ledger.owe(owed)
        logger.warning(
            "could not give back jobs %s yet: %s", sorted(k[0] for k in keys), first_line(exc)
        )
        return True
    left = skipped(owed, statuses)
    ledger.owe(left)
    done = [k for k in keys if k[0] not in statuses or statuses[k[0]] is not None]
    if done:
        released = emit_released(events, ledger, done, statuses, unstarted=True)
        logger.info(
            "jobs %s: the other transaction let go of their rows; %s",
            sorted(k[0] for k in done),
            f"given back to the queue: {released}" if released else "none went back",
        )
    return bool(left)


def give_back_lapsed(config: WorkerConfig, ledger: Ledger, events: Events, job: ClaimedJob) -> None:
    """A prefetched run whose lease lapsed before a thread started it (the ledger
    dropped it, :meth:`Ledger.start`): back in the queue unstarted, its attempt not
    spent; fenced, so nothing is written if the reaper returned the job already
    (counted as a lost lease, :func:`emit_released`).
    Called on the job thread: a row locked elsewhere is not waited for (the thread
    goes on with other jobs), it is owed to the queue (:func:`give_back_owed`)."""
    try:
        statuses = claims.release(config.worker_id, [job.key], None, config.database, wait=False)
    except Exception as exc:
        reset_connection(config.database)
        logger.warning(
            "job %s: its lease lapsed before it started; giving it back failed (%s), "
            "the reaper returns it",
            job.id,
            first_line(exc),
            extra=joblog.fields(job),
        )
        return
    if skipped([job], statuses):
        return owe(ledger, [job], "its lease lapsed while it waited for a thread; ")
    back = emit_released(events, ledger, [job.key], statuses, unstarted=True)
    logger.warning(
        "job %s: its lease lapsed while it waited for a thread (was the worker paused?): "
        "not started, %s",
        job.id,
        "given back to the queue" if back else "no longer this worker's",
        extra=joblog.fields(job),
    )
