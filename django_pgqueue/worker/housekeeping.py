"""The worker's periodic services: heartbeat, reaper, pruner, job timeouts, throughput.

Each is one method run by a :class:`~django_pgqueue.worker.services.Timers`
thread: the heartbeat on a thread of its own (a long prune or reap must never
delay the renewals that keep running jobs from being taken back), the others on
the maintenance thread. The reaper's statement is idempotent and skips rows
another worker has locked, and the pruner only deletes finished jobs, so every
worker runs both.

A worker's own reaper spares the runs this worker holds, while its heartbeat
keeps up: resumed after a pause (SIGSTOP, a frozen VM) longer than the lease, the
reaper and the heartbeat are due at once, and a reaper that came first gave back
the jobs whose threads were still running here, for the claim loop to take them
up again beside them. The heartbeat renews those leases instead (its fence reads
the run, not the lease's end). Behind for a whole lease (hung), the heartbeat
is no longer waited for: the reaper then reaps this worker's runs as any other's.
"""

from __future__ import annotations

import logging
import time

from django_pgqueue import wording
from django_pgqueue.models import Job
from django_pgqueue.records import ClaimedJob
from django_pgqueue.worker import joblog
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.executor import cancel_outcome
from django_pgqueue.worker.latency import Latency
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.pool import JobPool
from django_pgqueue.worker.prefetch import give_back
from django_pgqueue.worker.services import ConnectionEpoch, RunAgainIn, Timer, Timers
from django_pgqueue.worker.waker import Waker

logger = logging.getLogger("django_pgqueue")

#: Long runs named in a throughput line; the rest are counted.
NAMED_LONG_RUNS = 5
#: Seconds to the next heartbeat after one that skipped rows locked elsewhere.
BUSY_RETRY = 1.0


class Housekeeping:
    def __init__(
        self,
        config: WorkerConfig,
        ledger: Ledger,
        events: Events,
        pool: JobPool,
        waker: Waker,
        epoch: ConnectionEpoch | None = None,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.events = events
        self.pool = pool
        self.waker = waker  # the claim loop's: woken when a heartbeat frees slots
        self.epoch = epoch or ConnectionEpoch()
        self.latency = Latency(events)
        self._window_start = self._beat_at = time.monotonic()
        #: When the reaper first found the heartbeat behind (None: it keeps up), and
        #: the beat it found last then: one since ends that spell, seen or not.
        self._behind_since: float | None = None
        self._behind_beat = self._beat_at
        #: When the reaper last looked: a look far later than its interval means the
        #: whole process was stopped (SIGSTOP, a frozen VM), not the heartbeat alone.
        self._looked_at = self._beat_at
        #: The heartbeat is giving runs back (the shutdown waits for it: join_heartbeat).
        self.giving_back = False

    def timers(self) -> list[Timer]:
        """The maintenance thread's timers (the heartbeat has a thread of its own)."""
        c = self.config
        timers = [
            Timer("reaper", c.reap_interval, self.reap),
            Timer(
                "throughput",
                c.stats_interval,
                self.log_throughput,
                due=time.monotonic() + c.stats_interval,
            ),
        ]
        if c.job_timeout:
            timers.append(Timer("job timeout", min(1.0, c.job_timeout / 4), self.mark_overdue))
        if c.prune_after:
            timers.append(Timer("pruner", c.prune_interval, self.prune))
        return timers

    def heartbeat(self) -> RunAgainIn | None:
        """Renew the leases of every run this worker holds, in one statement, and tell
        the jobs an operator asked to stop (the statement says which). After a beat
        that skipped rows locked elsewhere, the next comes within BUSY_RETRY seconds:
        those leases were not renewed, and the lock may be gone by then."""
        # In id order, as cancel() locks them: two statements locking the same rows
        # in the same order cannot deadlock.
        keys = sorted(self.ledger.lease_keys())
        if not keys:
            self._beat_at = time.monotonic()
            self.events.emit("heartbeat", kept=set(), lost=[])
            return None
        epoch, sent = self.epoch.value, time.monotonic()  # a loss during it confirms nothing
        with self.ledger.own_writes:
            renewal = Job.objects.renew(
                self.config.worker_id, keys, lease=self.config.lease, using=self.config.database
            )
        self._beat_at = time.monotonic()
        kept = renewal.kept
        # A busy run (its row locked by someone else) is neither renewed nor lost:
        # the next beat tries it again.
        checked = [key for key in keys if key not in renewal.busy] if renewal.busy else keys
        lost = self.ledger.renewed(kept, checked, sent + self.config.lease, epoch)
        if renewal.busy:
            logger.debug("heartbeat: skipped jobs %s, their rows locked", sorted(renewal.busy))
        if lost:  # those still waiting for a thread (prefetched) free their slots now
            self.ledger.drop_lost(self.pool.take_waiting(set(lost)))
            self.waker.set()
        # Runs parked since a lost connection: the renewal's fence confirmed them (or lost
        # them). Not started: those of paused queues, and those the pool refuses (the
        # worker shuts down, and gave back the runs waiting): they go back, below.
        confirmed, paused = self.ledger.unpark(epoch), renewal.paused
        back = [job for job in confirmed if job.key in paused]
        ready = [job for job in confirmed if job.key not in paused]
        refused = self.pool.submit(ready) if ready else []
        asked = renewal.cancel_requested
        if asked:
            for job in self.ledger.request_cancel(asked):
                logger.info(
                    "job %s (%s): asked to stop (%s)",
                    *(job.id, wording.shown(job.task), wording.shown(asked[job.key])),
                    extra=joblog.fields(job),
                )
                self.events.emit("cancel_requested", job=job, reason=asked[job.key])
            # Those still waiting for a thread (prefetched) end now, not when a slot frees.
            self.pool.settle_waiting(asked.keys(), lambda job: cancel_outcome(job, asked[job.key]))
        if paused:  # claimed ahead, then their queue was paused: back to it, not started
            back += self.pool.take_waiting(paused)
        if back or refused:
            self.giving_back = True
            try:
                self._give_back(back, refused)
            finally:
                self.giving_back = False
        # Not those a reaper ended cancelled (told to stop above): they never run again.
        elsewhere = sorted(job_id for job_id, run in lost if (job_id, run) not in asked)
        if elsewhere:
            logger.warning("lost the lease on jobs %s: they may run again elsewhere", elsewhere)
        self.events.emit("heartbeat", kept=kept, lost=lost)
        return RunAgainIn(BUSY_RETRY) if renewal.busy else None

    def _give_back(self, paused: list[ClaimedJob], refused: list[ClaimedJob]) -> None:
        """Give back runs claimed ahead that no thread started: of ``paused`` queues,
        and ``refused`` by the pool (confirmed as the worker shut down)."""
        released = give_back(self.config, self.ledger, self.events, self.pool, paused + refused)
        if released:
            self.waker.set()
        for jobs, why in ((paused, "of paused queues"), (refused, "confirmed at the shutdown")):
            ids = sorted(job.id for job in jobs if job.id in released)
            if ids:
                logger.info(
                    "gave back %s %s, claimed ahead and not started: %s",
                    *(wording.count(len(ids), "job"), why, ids),
                )

    def join_heartbeat(self, heartbeat: Timers, short: float, until: float) -> None:
        """Wait for the (stopped) heartbeat's thread until ``short``, or ``until`` while
        it gives runs back: the runs it leaves owed (rows locked, a failed statement)
        go back in the shutdown's last give-back, which must come after it."""
        while heartbeat.is_alive() and time.monotonic() < (until if self.giving_back else short):
            heartbeat.join(0.02)

    def spared(self) -> list[tuple[int, int]]:
        """The runs this worker's reaper leaves alone: those the worker holds or owes, unless
        its heartbeat has been behind (no renewal for two intervals) for a lease, counted
        only while this thread kept looking (a stopped process is not a stuck heartbeat)."""
        now, beat_at = time.monotonic(), self._beat_at  # (written by the heartbeat's thread)
        c, gap = self.config, now - self._looked_at
        # A look far later than its interval; or, where looks come more often than a
        # lease, one a whole lease after the last (a spell begun there would be counted
        # whole at once: with LEASE = 30 s, 15 + 2 x 10 s let a 32 s stop through).
        paused = gap > c.reap_interval + 2 * c.heartbeat_interval or (
            c.reap_interval < c.lease <= gap
        )
        self._looked_at = now
        if now - beat_at <= 2 * c.heartbeat_interval:
            self._behind_since = None
        elif paused or self._behind_since is None or beat_at != self._behind_beat:
            # A pause just ended, or the heartbeat is stuck. (A beat since the last
            # spell began ends it, though no look saw it keep up: a second pause
            # before the reaper's next look is a new spell, not a lease behind. And
            # this thread stopped too since its last look: the process stood still,
            # so a spell seen just before a SIGSTOP does not count the stop.)
            self._behind_since, self._behind_beat = now, beat_at
        elif now - self._behind_since >= self.config.lease:
            return []
        # And the runs owed to the queue: their rows were locked, so their leases went
        # unrenewed, and the give-back that comes once the rows are free must not find
        # them taken back (their attempts spent) by this worker's own reaper.
        return self.ledger.lease_keys() + [job.key for job in self.ledger.owed(keep=True)]

    def reap(self) -> None:
        result = Job.objects.reap(using=self.config.database, spare=self.spared())
        if result.returned or result.buried or result.cancelled:
            logger.info(
                "reaper: %s with an expired lease returned to the queue, %d buried, "
                "%d cancelled (asked to stop)",
                wording.count(result.returned, "job"),
                result.buried,
                result.cancelled,
            )
        for job in (*result.returned_jobs, *result.buried_jobs):
            joblog.reaped(job)
        self.events.emit("reaped", result=result)

    def prune(self) -> None:
        assert self.config.prune_after is not None
        deleted = Job.objects.prune(self.config.prune_after, using=self.config.database)
        if deleted:
            logger.info(
                "pruner: deleted %s older than %gs",
                wording.count(deleted, "finished job"),
                self.config.prune_after,
            )

    def mark_overdue(self) -> None:
        assert self.config.job_timeout is not None
        for job in self.ledger.mark_overdue(time.monotonic() - self.config.job_timeout):
            logger.warning(
                "job %s (%s) exceeded the job timeout of %gs: it will be recorded as failed; "
                "until its thread returns it keeps its slot, its lease and its concurrency key",
                job.id,
                wording.shown(job.task),
                self.config.job_timeout,
                extra=joblog.fields(job),
            )

    def log_throughput(self) -> None:
        """One line per ``stats_interval``: what was settled in the window (retries
        too), what runs now, and by name the runs that have gone on for longer than a
        whole interval (they were running at the previous line already)."""
        now = time.monotonic()
        window = self.ledger.take_window()
        elapsed, self._window_start = now - self._window_start, now
        running = window.running
        overdue = sum(1 for held in running if held.overdue)
        threshold = self.config.stats_interval
        long = sorted(
            (h for h in running if h.started is not None and now - h.started > threshold),
            key=lambda h: h.started or now,
        )
        named = ", ".join(
            f"job {h.job.id} {h.job.task} ({wording.duration(now - (h.started or now))})"
            for h in long[:NAMED_LONG_RUNS]
        )
        if len(long) > NAMED_LONG_RUNS:
            named += f", and {len(long) - NAMED_LONG_RUNS} more"
        logger.info(
            "throughput: %s in %ss (%.1f/s): %d succeeded, %d retried, %d buried%s; "
            "%d running%s%s; %s; totals: claimed %d, succeeded %d, retried %d, buried %d%s",
            wording.count(window.settled, "job"),
            f"{elapsed:.0f}" if elapsed >= 10 else f"{elapsed:.1f}",
            window.settled / elapsed if elapsed else 0,
            window.succeeded,
            window.retried,
            window.buried,
            f", {window.cancelled} cancelled" if window.cancelled else "",
            len(running),
            f" ({overdue} past the job timeout)" if overdue else "",
            f", for over {threshold:g}s: {named}" if long else "",
            self.latency.take().describe(),
            self.ledger.claimed,
            self.ledger.succeeded,
            self.ledger.retried,
            self.ledger.buried,
            f", cancelled {self.ledger.cancelled}" if self.ledger.cancelled else "",
        )
