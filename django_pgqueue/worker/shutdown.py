"""A worker's start-up check and its shutdown, each bounded and each saying what it did.

Shutdown takes at most ``shutdown_timeout + MARGIN`` seconds:

1. prefetched jobs no thread has started go back to the queue at once (those
   whose rows another transaction holds locked, as soon as it lets go: they are
   tried again while the shutdown waits, and at its end);
2. running jobs get the shutdown timeout to finish (less if their leases would
   lapse first, because the heartbeat is gone), or until a second signal; if some
   are still running, the ``exiting`` event comes on a thread of its own
   (runworker runs its atexit handlers there, while the leases are renewed and
   outcomes written), waited for until ``MARGIN / 2`` is left or a second signal;
3. the outcomes of the jobs that finished are written;
4. outcomes of jobs that returned meanwhile are written; as the very last
   statements, runs whose threads are still going (or whose outcomes could not
   be written) are given back, their attempt not spent, and runs past the job
   timeout are recorded as failed; the process exits right after, which ends
   those threads;
5. anything that could not be written (the database is away) is logged by job
   id: those jobs come back through the reaper once their leases expire.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from django_pgqueue import wording
from django_pgqueue.dberrors import first_line, is_transient
from django_pgqueue.queue import claims
from django_pgqueue.worker.completer import Completer
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events, emit_released
from django_pgqueue.worker.housekeeping import Housekeeping
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.listener import Listener
from django_pgqueue.worker.overdue import fail_overdue
from django_pgqueue.worker.pool import JobPool
from django_pgqueue.worker.prefetch import LOOK_EVERY, skipped
from django_pgqueue.worker.services import ServiceThread, Timers, reset_connection
from django_pgqueue.worker.waker import Waker

logger = logging.getLogger("django_pgqueue")

#: Seconds past the shutdown timeout for writing outcomes and giving jobs back.
MARGIN = 5.0
#: After a second signal: how long giving jobs back may take before the exit.
URGENT = 1.0
RELEASED = "worker shut down before the job finished"
UNSTARTED = "worker shut down before the job started"


def jobs(number: int) -> str:
    return wording.count(number, "job")


class Stopping(Protocol):
    """What a shutdown needs of the worker it stops."""

    config: WorkerConfig
    events: Events
    ledger: Ledger
    pool: JobPool
    completer: Completer
    heartbeat: Timers
    housekeeping: Housekeeping
    maintenance: Timers
    listener: Listener | None
    waker: Waker
    fatal_reason: str | None
    stop_reason: str
    urgent_since: float | None

    @property
    def scheduler(self) -> ServiceThread | None: ...


class Shutdown:
    def __init__(self, worker: Stopping) -> None:
        self.worker = worker
        self.started = time.monotonic()
        config = worker.config
        self.deadline = self.started + config.shutdown_timeout
        self.hard_deadline = self.deadline + MARGIN
        self.worker_id = config.worker_id
        self.alias = config.database
        self._told: set[int] = set()  # ids of owed runs whose locked rows were logged

    def _until(self, seconds: float) -> float:
        """A deadline ``seconds`` from now, never past the hard one (or the urgent one)."""
        end = self.hard_deadline
        if self.worker.urgent_since is not None:
            end = min(end, self.worker.urgent_since + URGENT)
        return min(end, time.monotonic() + seconds)

    def run(self) -> int:
        w = self.worker
        reason = w.fatal_reason or w.stop_reason
        logger.info("%s", reason)
        w.events.emit("stopping", reason=reason)
        for early in (w.listener, w.scheduler):  # no new work, here or for others
            if early is not None:
                early.stop()
        self._give_back_waiting(first=True)
        self._wait_for_running_jobs()
        if w.ledger.threads_in_jobs() and w.urgent_since is None and w.heartbeat.is_alive():
            # The process ends right after the last statements (runworker), and what it
            # runs on its way out (atexit handlers) runs now, first: the heartbeat still
            # renews the leases, so no other worker starts these jobs (or takes their
            # keys) while they run on here, and the completer records those that return.
            # (After a second signal, or with no heartbeat to hold the leases, the jobs
            # go back first.)
            self._exiting()
        flushed = w.completer.flush(until=self._until(max(1.0, MARGIN / 2)))
        for thread in (w.listener, w.maintenance, w.completer):
            if thread is not None:
                thread.stop()
        threads: tuple[ServiceThread | None, ...] = (
            w.listener,
            w.scheduler,
            w.maintenance,
            w.completer,
        )
        for service in threads:
            if service is not None:
                service.join(max(0.0, min(2.0, self.hard_deadline - time.monotonic())))
        # A job may have returned after the flush (while the threads stopped): its
        # outcome is written here, unless the database was already failing us.
        unwritten = w.completer.write_left() if flushed else w.completer.unwritten()
        locked = set(w.completer.locked_out())
        if locked:
            logger.error(
                "could not record the outcomes of jobs %s: other transactions held their "
                "rows locked until the end; the reaper returns them once their leases expire",
                sorted(locked),
            )
        if set(unwritten) - locked:
            logger.error(  # (the completer's error, or the database's, was logged)
                "could not record the outcomes of jobs %s: they are given back to run "
                "again (with the database out of reach, the reaper returns them once "
                "their leases expire)",
                sorted(set(unwritten) - locked),
            )
        # Idle job threads exit now; one still inside an overrunning job is a
        # daemon and ends with the process.
        leftovers = w.ledger.running()
        w.pool.stop(timeout=0.0 if leftovers else 1.0)
        w.heartbeat.stop()  # 2 s; longer while it gives back runs, which may leave some owed
        bound = self._until(float("inf"))  # (given up after 2 s, they went to the reaper)
        w.housekeeping.join_heartbeat(w.heartbeat, min(time.monotonic() + 2, bound), bound - URGENT)
        # Runs parked since (a thread took them before the pool closed), or owed since
        # (a give-back that failed: the closed pool refused them).
        self._give_back_waiting()
        # The last statements: runs whose threads are still going are given back
        # (or failed, past their timeout). The process exits right after them,
        # which ends those threads, so another worker cannot start one of those
        # jobs (or take its concurrency key) while it still runs here.
        # Runs that returned and whose outcomes are still unwritten (a job that
        # returned after the completer's last word) are given back too: left
        # running, the reaper would charge them an attempt.
        leftovers = w.ledger.running()
        overdue = [held.job for held in leftovers if held.overdue]
        unfinished = [held.job.key for held in leftovers if not held.overdue]
        listed = {held.job.key for held in leftovers}  # one may return between the reads
        unfinished += [key for key in w.ledger.unsettled() if key not in listed]
        if unfinished:
            w.ledger.give_back(unfinished)
            self._release(unfinished, RELEASED, unstarted=False)
        if overdue:
            w.ledger.give_back([job.key for job in overdue])
            fail_overdue(w.config, w.ledger, w.events, overdue)
        status = 1 if w.fatal_reason else 0
        logger.info(
            "stopped %s: claimed %d, succeeded %d, retried %d, buried %d, cancelled %d%s",
            self.worker_id,
            w.ledger.claimed,
            w.ledger.succeeded,
            w.ledger.retried,
            w.ledger.buried,
            w.ledger.cancelled,
            f"; exit status {status}" if status else "",
        )
        return status

    def _exiting(self) -> None:
        """The ``exiting`` event, on a thread of its own: its subscribers get until
        half the margin is left, or until a second signal. The give-back comes then
        even if one is still going (a handler that hangs), so the jobs still go back
        before the watchdog's exit, and promptly after a second signal."""
        w = self.worker
        running = sorted(h.job.id for h in w.ledger.running())
        thread = threading.Thread(
            target=lambda: w.events.emit("exiting", running=running),
            name="pgqueue-exiting",
            daemon=True,
        )
        thread.start()
        until = self.hard_deadline - MARGIN / 2
        while thread.is_alive() and w.urgent_since is None and time.monotonic() < until:
            thread.join(0.02)
        if thread.is_alive():
            logger.warning(
                "shutdown: the exit handlers are still running: giving back jobs %s first",
                running,
            )

    def _give_back_waiting(self, *, first: bool = False) -> None:
        """Prefetched jobs no thread has started go back to the queue at once, with
        those a give-back skipped earlier (owed: their rows were locked). The pool
        refuses any more (a heartbeat that confirms parked runs gives them back).
        The ``first`` time, tried once: the runs it could not give back stay owed,
        tried again while the shutdown waits for running jobs (:meth:`_give_back_owed`)
        and at its end. (Given up after 5 s, they were left for the reaper while the
        worker waited on, their leases no longer renewed: once their rows were free,
        a reaper took them back, spending the attempt of a job that never ran.)"""
        ledger = self.worker.ledger
        waiting = self.worker.pool.close() + ledger.unpark(None)
        if waiting:
            ledger.forget(waiting)
        waiting += ledger.owed()
        if first:
            ledger.owe(waiting)
            self._give_back_owed()
        elif waiting:
            self._release([job.key for job in waiting], UNSTARTED, unstarted=True)

    def _give_back_owed(self) -> None:
        """One try at the runs owed to the queue (their rows locked elsewhere, or the
        database away): those still left stay owed, for the next look."""
        w = self.worker
        owed = w.ledger.owed()
        if not owed:
            return
        keys = [job.key for job in owed]
        try:
            statuses = claims.release(self.worker_id, keys, UNSTARTED, self.alias, wait=False)
        except Exception as exc:
            reset_connection(self.alias)
            w.ledger.owe(owed)
            logger.debug("shutdown: could not give back jobs %s yet: %s", keys, first_line(exc))
            return
        left = skipped(owed, statuses)
        w.ledger.owe(left)
        if untold := sorted({job.id for job in left} - self._told):
            self._told.update(untold)
            logger.warning(
                "shutdown: jobs %s, not started, go back to the queue once another "
                "transaction lets go of their rows",
                untold,
            )
        done = [key for key in keys if statuses.get(key[0], "") is not None]
        released = emit_released(w.events, w.ledger, done, statuses, unstarted=True)
        if released:
            logger.warning("shutdown: put %s back in the queue: %s", jobs(len(released)), released)

    def _wait_for_running_jobs(self) -> None:
        w = self.worker
        config = w.config
        logged, looked = False, time.monotonic()
        while w.ledger.running_own() and w.urgent_since is None:
            if time.monotonic() - looked >= LOOK_EVERY:  # as the claim loop did
                looked = time.monotonic()
                self._give_back_owed()
            limit = self.deadline
            if not w.heartbeat.is_alive():
                # Nobody renews the leases: give the jobs back before they lapse,
                # or another worker would start them while they still run here.
                lease_end = w.ledger.earliest_lease_end()
                if lease_end is not None:
                    limit = min(limit, lease_end - min(1.0, config.lease / 4))
            now = time.monotonic()
            if now >= limit:
                return
            if not logged:
                logged = True
                logger.info(
                    "waiting up to %.1fs for %s to finish",
                    limit - now,
                    jobs(len(w.ledger.running())),
                )
            w.waker.wait(min(0.05, limit - now))
            w.waker.clear()

    def _release(self, keys: list[tuple[int, int]], reason: str, *, unstarted: bool) -> None:
        until = self._until(MARGIN)
        delay = 0.1
        statuses: dict[int, str | None] = {}
        while True:
            try:
                # Rows another transaction holds are skipped (an operator's open
                # transaction must not hang the exit) and tried again until ``until``.
                busy = [k for k in keys if k[0] not in statuses or statuses[k[0]] is None]
                statuses |= claims.release(self.worker_id, busy, reason, self.alias, wait=False)
                if any(statuses.get(k[0], "") is None for k in keys) and (
                    time.monotonic() + 0.05 < until
                ):
                    time.sleep(0.05)
                    continue
            except Exception as exc:
                reset_connection(self.alias)
                if not is_transient(exc) or time.monotonic() + delay >= until:
                    logger.error(
                        "could not give jobs %s back (%s): the reaper returns them "
                        "once their leases expire",
                        sorted(k[0] for k in keys if statuses.get(k[0]) is None),
                        first_line(exc),
                    )
                    statuses = {i: s for i, s in statuses.items() if s is not None}
                    keys = [k for k in keys if k[0] in statuses]  # the rest: not fenced
                else:
                    time.sleep(delay)
                    delay = min(1.0, delay * 2)
                    continue
            released = emit_released(
                self.worker.events, self.worker.ledger, keys, statuses, unstarted=unstarted
            )
            if released:
                logger.warning(
                    "shutdown: put %s back in the queue: %s", jobs(len(released)), released
                )
            locked = sorted(k[0] for k in keys if k[0] in statuses and statuses[k[0]] is None)
            if locked:
                logger.warning(
                    "shutdown: could not give back jobs %s: another transaction held their "
                    "rows locked; the reaper returns them once their leases expire",
                    locked,
                )
            return
