"""The Worker: claims jobs, runs them on a thread pool, records outcomes, and keeps going.

Start-to-end of one job: the claim loop (this module, on the thread that calls ``run()``)
claims up to its free slots in one statement, woken by NOTIFY, a finished job or a poll;
a pool thread runs the job outside any transaction the queue opened; the completer records
the outcome in a batch; until then the heartbeat thread renews the lease. The maintenance
thread reaps expired leases, prunes, marks jobs past their timeout and logs throughput.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from django_pgqueue.control import RunningJob
from django_pgqueue.exceptions import JobTimeout
from django_pgqueue.models import Job
from django_pgqueue.periodic.scheduler import scheduler_thread
from django_pgqueue.queue.claims import batch_size
from django_pgqueue.records import ClaimedJob, Failure, JobStatus, Outcome
from django_pgqueue.wording import shown
from django_pgqueue.worker import shutdown
from django_pgqueue.worker.banner import banner, warn_unknown_queues
from django_pgqueue.worker.completer import Completer
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.executor import admit, timed_out
from django_pgqueue.worker.housekeeping import Housekeeping
from django_pgqueue.worker.joblog import came_to, fields
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.listener import Listener
from django_pgqueue.worker.pool import JobPool
from django_pgqueue.worker.prefetch import GiveBack, Prefetch, give_back_lapsed
from django_pgqueue.worker.presence import Presence
from django_pgqueue.worker.services import (
    Backoff,
    ConnectionEpoch,
    Supervision,
    Timer,
    Timers,
    bookkeeping_thread,
    claim_failed,
    start_threads,
)
from django_pgqueue.worker.session import WorkerSession
from django_pgqueue.worker.startup import start_problem
from django_pgqueue.worker.waker import Waker

logger = logging.getLogger("django_pgqueue")

FIRST_IDLE_WAIT = 0.05
#: How long a freed slot may wait for others before it is refilled on its own:
#: short jobs free slots one by one, and a claim per slot would be a round trip per job.
REFILL_WINDOW = 0.005


class Worker:
    """One worker process's runtime; ``run()`` returns the exit status.

    It can run in any thread (tests run it in one, and wait on ``events``);
    ``runworker`` runs it on the main thread and installs the signal handlers.
    """

    def __init__(self, config: WorkerConfig, events: Events | None = None) -> None:
        self.config = config
        self.events = events or Events()
        # Plain attributes, not Events: signal handlers set them (see waker.py).
        self.stopping = False
        #: monotonic time the claim loop last went round (its liveness, for /healthz).
        self.loop_at = time.monotonic()
        self.stop_reason = "asked to stop"
        self.urgent_since: float | None = None
        self.fatal_reason: str | None = None
        self.waker = Waker()
        self.epoch = ConnectionEpoch()
        self.ledger = Ledger(lease=config.lease)
        self.supervision = supervision = Supervision(fatal=self.fail_fast, epoch=self.epoch)
        in_flight, own_writes = (lambda: self.ledger.busy), self.ledger.own_writes
        self.completer = Completer(
            config.worker_id, config.database, self._settled, supervision, in_flight, own_writes
        )
        self.pool = JobPool(config.concurrency, self._job_starting, self._job_done, self.epoch)
        fixed = None if config.prefetch == "auto" else int(config.prefetch)
        self.prefetch = Prefetch(config.concurrency, fixed, lambda: self.pool.pacing.width)
        self.give_back = GiveBack(config, self.prefetch, self.ledger, self.pool, self.events)
        channel = config.channel if config.listen else None
        self.session = WorkerSession(
            config.worker_id, config.database, config.listen_database, channel, config.poll_interval
        )
        self.listener: Listener | None = Listener(
            self.session,
            config.queues,
            self.waker.set,
            lambda: self.events.emit("listening"),
            supervision,
            # Asked to stop one of our jobs: renew now, which tells the job.
            on_abort=lambda: self.heartbeat.hurry("heartbeat"),
        )
        self.scheduler = scheduler_thread(config, supervision, self.events)
        self.housekeeping = Housekeeping(
            config, self.ledger, self.events, self.pool, self.waker, self.epoch
        )
        self.presence = Presence(config, self.ledger, self.events, self.session.lock_pid)
        self.maintenance = Timers(
            config.database,
            self.housekeeping.timers() + self.presence.maintenance_timers(),
            supervision,
            name="pgqueue-maintenance",
        )
        # The heartbeat on a thread of its own: a long prune or reap must never
        # delay the renewals that keep running jobs from being taken back.
        self.heartbeat = Timers(
            config.database,
            [
                Timer("heartbeat", config.heartbeat_interval, self.housekeeping.heartbeat),
                *self.presence.heartbeat_timers(),
            ],
            supervision,
            name="pgqueue-heartbeat",
            critical=True,
        )

    # -- public -----------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming now; running jobs get the shutdown timeout to finish.
        Safe to call from a signal handler (no lock is taken)."""
        self.stopping = True
        self.waker.set()

    def hurry(self) -> None:
        """Shut down now: give the running jobs back within a second, then stop.
        Safe to call from a signal handler."""
        self.urgent_since = time.monotonic()
        self.request_stop()

    def fail_fast(self, reason: str) -> None:
        """Stop because the worker cannot keep its promises: give jobs back, exit 1."""
        if self.fatal_reason is None:
            self.fatal_reason = reason
            logger.error("stopping: %s", reason)
        self.request_stop()

    def run(self) -> int:
        c = self.config
        problem, has_session = start_problem(
            c.database, self.session, wait_for_database=not c.burst, concurrency=c.concurrency
        )
        if problem:
            logger.error("%s", problem)
            return 1
        if not has_session:
            self.listener = None  # behind a pooler without LISTEN_DATABASE: poll
        logger.info("%s", banner(self.config, session=has_session))
        warn_unknown_queues(self.config)
        self.presence.enter(self.fail_fast)  # listed before its first job runs, not later
        threads = (self.completer, self.maintenance, self.heartbeat, self.listener, self.scheduler)
        if not start_threads(threads, self.pool):  # logged; those started are stopped
            self.presence.leave()
            self.session.close()
            return 1
        bookkeeping_thread()  # the claim loop runs here
        try:
            self._loop()
        except BaseException as exc:  # a bug of ours: give the jobs back, exit non-zero
            logger.exception("the claim loop failed")
            self.fail_fast(f"the claim loop failed: {type(exc).__name__}: {exc}")
        finally:
            status = shutdown.Shutdown(self).run()
            self.presence.leave()
            self.session.close()  # last: the worker id stays locked until its runs are settled
            bookkeeping_thread(on=False)
        self.events.emit("stopped", status=status)
        return status

    # -- the claim loop -----------------------------------------------------------

    def _capacity(self) -> int:
        """Jobs claimed and not finished: the threads, plus the prefetch."""
        return self.config.concurrency + self.prefetch.limit()

    def _min_batch(self) -> int:
        return max(1, self._capacity() // 2)

    def _free_slots(self) -> tuple[int, int]:
        """(slots free to claim for, jobs running now)."""
        busy = self.ledger.busy
        free = self._capacity() - busy
        if self.config.max_jobs is not None:
            free = min(free, self.config.max_jobs - self.ledger.claimed)
        return free, busy

    def _loop(self) -> None:
        c = self.config
        idle_wait = FIRST_IDLE_WAIT
        backoff = Backoff()
        refill_from: float | None = None
        while not self.stopping:
            self.loop_at = time.monotonic()
            self.waker.clear()
            wait = self.give_back.look()  # prefetched jobs stuck behind long ones go back
            free, busy = self._free_slots()
            if c.max_jobs is not None and self.ledger.claimed >= c.max_jobs:
                if not self.ledger.own_work_left():
                    return
                self.waker.wait(0.05)
                continue
            if free <= 0:
                self.waker.wait(wait)  # a finishing job wakes us
                continue
            if free < self._min_batch() and busy:
                # Let a few more slots free up so the claim stays a batch.
                now = time.monotonic()
                refill_from = refill_from or now
                if now - refill_from < REFILL_WINDOW:
                    self.waker.wait(REFILL_WINDOW - (now - refill_from))
                    continue
            refill_from = None
            free = batch_size(free)
            # Burst mode exits on an empty claim only if it began with all our outcomes written
            # (one written during it may have made a job ready again: a retry, a snooze).
            settled = c.burst and not self.ledger.own_work_left() and not self.completer.pending
            try:
                epoch, sent = self.epoch.value, time.monotonic()
                jobs = Job.objects.claim(
                    c.worker_id, limit=free, queues=c.queues, lease=c.lease, using=c.database
                )
                self.events.emit("polled", seconds=time.monotonic() - sent, jobs=len(jobs))
            except Exception as exc:
                if not claim_failed(exc, c.database, self.supervision):
                    return
                self.waker.wait(backoff.delay)
                backoff.delay = min(backoff.cap, backoff.delay * 2)
                continue
            backoff.reset()
            if jobs:
                self._start(jobs, sent, epoch)
                idle_wait = FIRST_IDLE_WAIT
                if len(jobs) == free:
                    continue  # there may be more ready right now
            else:
                self.events.emit("idle")
                if settled:
                    logger.info("burst: nothing ready and nothing running, exiting")
                    return
            # Nothing (more) ready: sleep until NOTIFY, a finished job, the poll, or the
            # give-back's next look (runs owed to the queue: every LOOK_EVERY).
            self.waker.wait(min(idle_wait, wait))
            idle_wait = min(c.poll_interval, idle_wait * 2)

    def _start(self, jobs: list[ClaimedJob], sent: float, epoch: int) -> None:
        self.ledger.add(jobs, sent, epoch)
        self.events.emit("claimed", jobs=jobs)
        for job in jobs if logger.isEnabledFor(logging.DEBUG) else ():
            logger.debug(
                "job %s %s attempt %s claimed",
                job.id,
                shown(job.task),
                job.attempt,
                extra=fields(job),
            )
        self.pool.submit(jobs)

    # -- callbacks from other threads ----------------------------------------------

    def _job_starting(self, job: ClaimedJob) -> RunningJob | Literal[False]:
        control = self.ledger.start(job, self.config.job_timeout, self.epoch.value)
        if control == "lapsed":
            give_back_lapsed(self.config, self.ledger, self.events, job)
            return False
        if control == "unconfirmed":  # claimed before a lost connection: a heartbeat confirms
            self.heartbeat.hurry("heartbeat")
            return False
        if control is not False and control._begin() is None and admit(job, control):
            self.events.emit("started", job=job)
        return control

    def _job_done(self, job: ClaimedJob, outcome: Outcome) -> None:
        held = self.ledger.finish(job)
        if held is None:
            logger.warning(
                "job %s finished after it was given back (shutdown) or its lease "
                "was lost; its outcome is dropped",
                job.id,
                extra=fields(job),
            )
        else:
            if held.control._ran:  # not one ended before its body ran (see above)
                self.prefetch.observe(time.monotonic() - (held.started or 0.0))
            late = held.control._overran()  # as task_finished said, if it was sent
            # A run that ended its job cancelled (its task raised Cancel, or stopped as
            # asked) stays so past the timeout: retrying it would redo what it gave up.
            if late is not None and not (isinstance(outcome, Failure) and outcome.cancel):
                outcome = timed_out(job, late)
            if logger.isEnabledFor(logging.DEBUG):  # a run past the job timeout too
                text = came_to(outcome)
                logger.debug("job %s %s %s", job.id, shown(job.task), text, extra=fields(job))
            self.completer.put(outcome)
        self.events.emit("finished", job=job, outcome=outcome)
        # Wake the claim loop only when a claim is worth making (slots for a batch, or
        # nothing running): a wake per job costs a thread switch and a GIL hand-off.
        busy = self.ledger.busy
        if self._capacity() - busy >= self._min_batch() or not busy or self.stopping:
            self.waker.set()

    def _settled(
        self,
        keys: list[tuple[int, int]],
        succeeded: int,
        buried: int,
        retried: int,
        statuses: dict[tuple[int, int], str | None],
    ) -> None:
        cancelled = sum(1 for status in statuses.values() if status == JobStatus.CANCELLED)
        refused = sum(1 for status in statuses.values() if status is None)
        self.ledger.settled(keys, succeeded, buried, retried, cancelled, refused)
        self.events.emit(
            "recorded",
            settled=keys,
            succeeded=succeeded,
            buried=buried,
            retried=retried,
            statuses=statuses,
        )


__all__ = ["JobTimeout", "Worker"]
