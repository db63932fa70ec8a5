"""The Worker: claims jobs, runs them on a thread pool, records outcomes, and keeps going.

Start-to-end of one job: the main loop claims up to its free slots in one
statement (woken by NOTIFY or a poll), a pool thread runs the job outside any
transaction the queue opened, the completer records the outcome in a batch, and
until then the maintenance thread renews the job's lease.
"""

from __future__ import annotations

import logging
import threading
import time

from django.utils.module_loading import autodiscover_modules

from django_pgqueue.models import Job
from django_pgqueue.queue import ClaimedJob, Success
from django_pgqueue.worker.completer import Completer
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.dbutil import (
    DB_ERRORS,
    Backoff,
    bookkeeping_thread,
    reset_connection,
)
from django_pgqueue.worker.executor import failure
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.listener import Listener
from django_pgqueue.worker.maintenance import Maintenance, Service, pruner, reaper
from django_pgqueue.worker.pool import JobPool, Outcome

logger = logging.getLogger("django_pgqueue")

FIRST_IDLE_WAIT = 0.05
#: How long a freed slot may wait for others before it is refilled on its own:
#: short jobs free slots one by one, and a claim per slot would be a round trip per job.
REFILL_WINDOW = 0.005


class JobTimeout(Exception):
    """A job ran past the worker's job timeout."""


class Worker:
    """One worker process's runtime; ``run()`` returns the exit status."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self.ledger = Ledger()
        # Jobs claimed and not finished may exceed the threads by the prefetch.
        self._capacity = config.concurrency + config.prefetch
        self._min_batch = max(1, self._capacity // 2)
        self._window_start = time.monotonic()
        self.completer = Completer(config.worker_id, config.database, self.ledger.recorded)
        self.pool = JobPool(config.concurrency, self.ledger.start, self._job_done)
        self.listener = (Listener(config.database, config.channel, config.queues, self._wake)
                         if config.listen else None)
        self.maintenance = Maintenance(config.database, self._services())
        # The heartbeat on a thread of its own: a long prune or reap must never
        # delay the renewals that keep running jobs from being taken back.
        self.heartbeat = Maintenance(config.database, [
            Service("heartbeat", config.heartbeat_interval, self._heartbeat)],
            name="pgqueue-heartbeat")

    def _services(self) -> list[Service]:
        c = self.config
        services = [Service("reaper", c.reap_interval, reaper(c.database)),
                    Service("throughput", c.stats_interval, self._log_throughput,
                            due=time.monotonic() + c.stats_interval)]
        if c.job_timeout:
            services.append(Service("job timeout", min(1.0, c.job_timeout / 4),
                                    self._expire_overdue))
        if c.prune_after:
            services.append(Service("pruner", c.prune_interval, pruner(c.database,
                                                                        c.prune_after)))
        return services

    # -- public -----------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming now; running jobs get the shutdown timeout to finish."""
        self.stopping.set()
        self._wake.set()

    def run(self) -> int:
        autodiscover_modules("tasks")
        logger.info("starting %s", self.config.describe())
        self.completer.start()
        self.pool.start()
        self.maintenance.start()
        self.heartbeat.start()
        if self.listener:
            self.listener.start()
        bookkeeping_thread(self.config.database)  # the claim loop runs here
        try:
            self._loop()
        finally:
            self._shutdown()
            bookkeeping_thread(self.config.database, on=False)
        return 0

    # -- the claim loop -----------------------------------------------------------

    def _free_slots(self) -> tuple[int, int]:
        """(slots free to claim for, jobs running now)."""
        busy = self.ledger.busy
        free = self._capacity - busy
        if self.config.max_jobs is not None:
            free = min(free, self.config.max_jobs - self.ledger.claimed)
        return free, busy

    def _loop(self) -> None:
        c = self.config
        idle_wait = FIRST_IDLE_WAIT
        backoff = Backoff()
        refill_from: float | None = None
        min_batch = self._min_batch
        while not self.stopping.is_set():
            self._wake.clear()
            free, busy = self._free_slots()
            if c.max_jobs is not None and self.ledger.claimed >= c.max_jobs:
                if not self.ledger.own_work_left():
                    return
                self._wake.wait(0.05)
                continue
            if free <= 0:
                self._wake.wait(c.poll_interval)  # a finishing job sets wake
                continue
            if free < min_batch and busy:
                # Let a few more slots free up so the claim stays a batch.
                now = time.monotonic()
                refill_from = refill_from or now
                if now - refill_from < REFILL_WINDOW:
                    self._wake.wait(REFILL_WINDOW - (now - refill_from))
                    continue
            refill_from = None
            try:
                jobs = Job.objects.claim(c.worker_id, limit=free, queues=c.queues,
                                         lease=c.lease, using=c.database)
            except DB_ERRORS as exc:
                logger.warning("claim failed, retrying in %.1fs: %s", backoff.delay,
                               str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                reset_connection(c.database)
                backoff.sleep(self.stopping)
                continue
            backoff.reset()
            if jobs:
                self._start(jobs)
                idle_wait = FIRST_IDLE_WAIT
                if len(jobs) == free:
                    continue  # there may be more ready right now
            elif c.burst and not self.ledger.own_work_left() and not self.completer.pending:
                logger.info("burst: nothing ready and nothing running, exiting")
                return
            # Nothing (more) ready: sleep until NOTIFY, a finished job, or the poll.
            self._wake.wait(idle_wait)
            idle_wait = min(c.poll_interval, idle_wait * 2)

    def _start(self, jobs: list[ClaimedJob]) -> None:
        self.ledger.add(jobs)
        for job in jobs:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("job %s %s attempt %s claimed", job.id, job.task, job.attempt)
            self.pool.submit(job)

    # -- callbacks from other threads ----------------------------------------------

    def _job_done(self, job: ClaimedJob, outcome: Outcome) -> None:
        if not self.ledger.finish(job):
            logger.warning("job %s finished after it was given up (timeout or shutdown); "
                           "its outcome is dropped", job.id)
        else:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("job %s %s %s", job.id, job.task,
                             "succeeded" if isinstance(outcome, Success) else "failed")
            self.completer.put(outcome)
        # Wake the claim loop only when a claim is worth making: enough slots
        # free for a batch, or nothing left running. Waking it for every job
        # costs a thread switch (and a GIL hand-off) per job.
        busy = self.ledger.busy
        if self._capacity - busy >= self._min_batch or not busy or self.stopping.is_set():
            self._wake.set()

    # -- maintenance services ---------------------------------------------------------

    def _heartbeat(self) -> None:
        ids = self.ledger.lease_ids()
        if not ids:
            return
        kept = Job.objects.heartbeat(self.config.worker_id, ids, lease=self.config.lease,
                                     using=self.config.database)
        lost = self.ledger.still_held(set(ids) - kept)  # recorded meanwhile is not lost
        if lost:
            logger.warning("lost the lease on jobs %s: they may run again elsewhere",
                           sorted(lost))

    def _expire_overdue(self) -> None:
        assert self.config.job_timeout is not None
        overdue = self.ledger.abandon_running(
            started_before=time.monotonic() - self.config.job_timeout)
        for job in overdue:
            # Python cannot stop the thread: the job is recorded as failed and its
            # lease released now; the thread keeps its slot until it returns.
            logger.warning("job %s exceeded the job timeout of %gs; recorded as failed",
                           job.id, self.config.job_timeout)
            self.completer.put(failure(job, JobTimeout(
                f"job exceeded the worker's job timeout of {self.config.job_timeout:g}s"),
                trace=""))

    def _log_throughput(self) -> None:
        now = time.monotonic()
        done, running = self.ledger.take_window()
        elapsed, self._window_start = now - self._window_start, now
        logger.info("throughput: %d jobs in %.0fs (%.1f/s), %d running; totals: claimed %d, "
                    "succeeded %d, buried %d", done, elapsed, done / elapsed if elapsed else 0,
                    running, self.ledger.claimed, self.ledger.succeeded, self.ledger.buried)

    # -- shutdown ------------------------------------------------------------------

    def _shutdown(self) -> None:
        c = self.config
        if self.listener:
            self.listener.stop()
        waiting = self.pool.take_waiting()
        if waiting:
            self.ledger.forget(waiting)
            self._release([(job.id, job.attempt) for job in waiting])
        deadline = time.monotonic() + c.shutdown_timeout
        while time.monotonic() < deadline and self.ledger.running_own():
            self._wake.wait(0.05)
            self._wake.clear()
        leftover = self.ledger.abandon_running()
        self.completer.flush(timeout=max(5.0, c.lease / 2))
        if leftover:
            self._release([(job.id, job.attempt) for job in leftover])
        self.maintenance.stop()
        self.heartbeat.stop()
        self.completer.stop()
        if self.listener:
            self.listener.join(2.0)
        self.maintenance.join(5.0)
        self.heartbeat.join(5.0)
        self.completer.join(5.0)
        # Idle job threads exit now; one still inside an overrunning job is a
        # daemon and does not hold the process up.
        self.pool.stop(timeout=0.0 if leftover else 1.0)
        logger.info("stopped %s: claimed %d, succeeded %d, buried %d", c.worker_id,
                    self.ledger.claimed, self.ledger.succeeded, self.ledger.buried)

    def _release(self, held: list[tuple[int, int]]) -> None:
        backoff = Backoff()
        for _ in range(5):
            try:
                released = Job.objects.release(self.config.worker_id, held,
                                               using=self.config.database)
            except DB_ERRORS as exc:
                logger.warning("could not put jobs back yet: %s", exc)
                reset_connection(self.config.database)
                backoff.sleep(threading.Event())
                continue
            logger.warning("shutdown: put %d unfinished jobs back in the queue: %s",
                           len(released), sorted(released))
            return
        logger.error("could not put jobs %s back; the reaper will once their leases expire",
                     [h[0] for h in held])
