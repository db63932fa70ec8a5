"""Threads that run jobs, as many at a time as the jobs can use (see pacing.py).

Daemon threads rather than a ThreadPoolExecutor: a job that overruns the
shutdown deadline (or its timeout) cannot be interrupted in Python, and an
executor's threads would keep the process alive until it returned. Such a job
keeps its lease until the worker process ends (docs/guarantees.md).

``--concurrency N`` is the most jobs that run at once. How many threads are
*hot* (take the next waiting job as soon as they finish one) follows
:class:`~django_pgqueue.worker.pacing.Pacing`: all of them while the jobs wait
on I/O, fewer while the jobs keep the interpreter busy, where more threads only
take turns at the GIL. A job never waits behind a slow one: a thread whose job
has run longer than the pacing's *handoff* stops counting as hot, and an idle
thread (the *standby*, on a timed wait while jobs wait) takes the next job.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Literal

from django.db import connections

from django_pgqueue import jobdb
from django_pgqueue.control import RunningJob
from django_pgqueue.records import ClaimedJob, Outcome
from django_pgqueue.worker.executor import execute, failure
from django_pgqueue.worker.pacing import Pacing
from django_pgqueue.worker.services import ConnectionEpoch

logger = logging.getLogger("django_pgqueue")


class _Parking:
    """Where one idle thread waits: a gate it blocks on, opened to wake it."""

    __slots__ = ("gate", "woken")

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()  # closed: acquiring it again blocks until it is opened
        self.woken = 0  # why it was woken: NOT_WOKEN, FOR_A_JOB or TO_WATCH


NOT_WOKEN, FOR_A_JOB, TO_WATCH = 0, 1, 2
#: (wall, CPU) seconds of one job's run.
Ran = tuple[float, float]


class JobPool:
    """``size`` threads; each runs one job at a time and reports its outcome.

    ``on_start(job)`` gives the job's control, or False if the job is no longer
    ours to run; ``on_done(job, outcome)`` receives what happened.
    """

    def __init__(
        self,
        size: int,
        on_start: Callable[[ClaimedJob], RunningJob | Literal[False]],
        on_done: Callable[[ClaimedJob, Outcome], None],
        epoch: ConnectionEpoch,
        pacing: Pacing | None = None,
    ) -> None:
        self.pacing = pacing or Pacing(size)
        self._on_start = on_start
        self._on_done = on_done
        self._epoch = epoch
        self._lock = threading.Lock()
        self._waiting: collections.deque[ClaimedJob] = collections.deque()
        #: Monotonic start of the job each running thread is in, by thread ident.
        self._starts: dict[int, float] = {}
        self._idle: list[_Parking] = []  # parked threads, the last parked on top
        self._waking = 0  # threads woken for a job, not yet back for it
        self._standby: _Parking | None = None  # the idle thread watching waiting jobs
        self._stopping = False
        self._closed = False  # submits refused (close())
        self._threads = [
            threading.Thread(target=self._loop, name=f"pgqueue-job-{n}", daemon=True)
            for n in range(size)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, jobs: Sequence[ClaimedJob]) -> list[ClaimedJob]:
        """Queue ``jobs``, waking as many idle threads as the pacing has room for; the
        jobs refused: all of them once the pool is closed (:meth:`close`)."""
        with self._lock:
            if self._closed:
                return list(jobs)
            self._waiting.extend(jobs)
            room = self.pacing.width - len(self._hot(time.monotonic())) - self._waking
            for _ in range(min(room, len(jobs), len(self._idle))):
                self._wake(FOR_A_JOB)
            # Jobs left waiting while the hot threads' jobs just started: one of
            # those may be slow, so an idle thread watches (else they would wait
            # for a hot thread to come back, however long its job takes).
            if len(self._waiting) > self._waking and self._standby is None and self._idle:
                self._wake(TO_WATCH)
        return []

    def take_waiting(self, keys: Collection[tuple[int, int]] | None = None) -> list[ClaimedJob]:
        """Remove and return the jobs no thread has started (prefetched ones), or
        those of them among ``keys``."""
        with self._lock:
            if keys is None:
                waiting = list(self._waiting)
                self._waiting.clear()
                return waiting
            taken: list[ClaimedJob] = []
            kept: list[ClaimedJob] = []
            for job in self._waiting:
                (taken if job.key in keys else kept).append(job)
            if taken:
                self._waiting.clear()
                self._waiting.extend(kept)
            return taken

    def close(self) -> list[ClaimedJob]:
        """The worker shuts down: remove and return the jobs no thread has started, to
        give them back, and refuse those submitted from now on (the caller gives them
        back): confirmed by a heartbeat just after, one would start after all."""
        with self._lock:
            self._closed = True
            waiting = list(self._waiting)
            self._waiting.clear()
            return waiting

    def settle_waiting(
        self, keys: Collection[tuple[int, int]], outcome_of: Callable[[ClaimedJob], Outcome]
    ) -> list[ClaimedJob]:
        """Settle the waiting jobs among ``keys`` on the calling thread, with
        ``outcome_of(job)`` and without running them (jobs asked to stop before a
        thread took them); the jobs settled."""
        taken = self.take_waiting(keys)
        settled = []
        for job in taken:
            if self._on_start(job) is not False:
                self._on_done(job, outcome_of(job))
                settled.append(job)
        return settled

    def stop(self, timeout: float = 0.0) -> None:
        """Let idle threads exit; wait up to ``timeout`` for each (busy ones may not;
        those that never started, their start refused, are not waited for)."""
        with self._lock:
            self._stopping = True
            while self._idle:
                self._wake(TO_WATCH)
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout)

    # -- the threads (under self._lock) ---------------------------------------------

    def _wake(self, why: int) -> None:
        parking = self._idle.pop()  # the most recently parked: its caches are warm
        parking.woken = why
        if why == FOR_A_JOB:
            self._waking += 1
        parking.gate.release()

    def _hot(self, now: float) -> list[float]:
        """Start times of the running threads whose job started within the handoff:
        they will be back for the next job soon. One past it may be blocked for
        long, so it does not count, and an idle thread may take the next job."""
        since = now - self.pacing.handoff
        return [started for started in self._starts.values() if started > since]

    def _watch_for(self, now: float) -> float:
        """How long the standby waits: until the first hot job passes the handoff."""
        hot = self._hot(now)
        return max(0.0005, min(hot) + self.pacing.handoff - now) if hot else self.pacing.handoff

    def _next(self, me: int, parking: _Parking, ran: Ran | None) -> ClaimedJob | None:
        """The next job for this thread, waiting as the pacing says; None: exit.
        ``ran``: (wall, CPU) seconds of the job this thread just ran."""
        with self._lock:
            now = time.monotonic()
            self._starts.pop(me, None)
            if ran is not None:
                self.pacing.observe(*ran, now)
            while True:
                if self._waiting:
                    hot = len(self._hot(now)) + self._waking
                    if self._stopping or hot < self.pacing.width:
                        self._starts[me] = now
                        job = self._waiting.popleft()
                        # Room for more (the width grew), or someone to watch the rest.
                        more = min(self.pacing.width - hot - 1, len(self._waiting), len(self._idle))
                        for _ in range(more):
                            self._wake(FOR_A_JOB)
                        if self._waiting and self._standby is None and self._idle:
                            self._wake(TO_WATCH)
                        return job
                elif self._stopping:
                    return None
                self._park(parking)
                now = time.monotonic()

    def _park(self, parking: _Parking) -> None:
        """Wait until woken, or for the handoff if this thread is the standby."""
        timeout = -1.0
        if self._waiting and self._standby is None:
            self._standby, timeout = parking, self._watch_for(time.monotonic())
        self._idle.append(parking)
        self._lock.release()
        try:
            parking.gate.acquire(timeout=timeout)
        finally:
            self._lock.acquire()
        if self._standby is parking:
            self._standby = None
        if parking.woken == NOT_WOKEN:  # the standby's wait ran out: still listed
            self._idle.remove(parking)
            return
        if parking.woken == FOR_A_JOB:
            self._waking -= 1
        parking.woken = NOT_WOKEN
        parking.gate.acquire(blocking=False)  # closed again, whether or not the wait took it

    def _loop(self) -> None:
        me = threading.get_ident()
        parking = _Parking()
        seen_epoch = self._epoch.value
        ran: Ran | None = None
        tidied = time.monotonic()
        while (job := self._next(me, parking, ran)) is not None:
            ran = None
            # Before the start: a connection this thread finds lost is a lost
            # connection of the worker's (the epoch), and a run claimed ahead before it
            # then waits for a heartbeat to confirm its claim.
            try:
                jobdb.check_idle(time.monotonic() - tidied)
            except Exception:
                logger.exception("job %s: checking its idle connections failed", job.id)
                jobdb.drop_all()
            if self._epoch.value != seen_epoch:
                # The worker lost its database since this thread's last job: its
                # kept connections are likely dead, and not this job's fault (nor
                # the start's, whose checks and Tasks reports may query).
                seen_epoch = self._epoch.value
                jobdb.drop_all()
            control = self._on_start(job)
            if control is False:
                continue  # given back while it waited
            wall, cpu = time.monotonic(), time.thread_time()
            try:
                outcome = execute(job, control)
            except BaseException as exc:
                # execute() turns everything a job does into an outcome; this is
                # the backstop for a bug of ours, so that a thread never dies
                # holding a job whose lease the heartbeat would renew forever.
                logger.exception("job %s: unexpected error running it; burying it", job.id)
                outcome = failure(job, exc, final=True)
            finally:
                try:
                    jobdb.tidy()
                except Exception:
                    logger.exception("job %s: tidying its connections failed", job.id)
                    jobdb.drop_all()
            tidied = time.monotonic()
            if control._ran:  # not one ended before its body ran (asked to stop, unknown)
                ran = (tidied - wall, time.thread_time() - cpu)
            self._on_done(job, outcome)
        connections.close_all()
