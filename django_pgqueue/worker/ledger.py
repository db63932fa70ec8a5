"""What one worker holds: the runs it claimed and has not settled, under one lock.

The claim loop, the job threads, the completer and the heartbeat all read and
change this state; keeping it in one small class keeps the rules in one place.
An entry is one run of one job, keyed by (job id, run token), so a job claimed
again by this same worker is a new entry that the older run cannot touch.

- A run is *held* from its claim until its outcome is settled (recorded, or
  refused by the fence): the heartbeat renews exactly these leases, so the row
  stays ``running`` and its concurrency key taken until then.
- It is *busy* (takes a slot) from its claim until its thread returns, however
  long that is, so the worker never runs more threads than its slots; a run that
  never gets a thread (given back, or lost while it waited) frees it then.
- An *overdue* run passed the job timeout. Python cannot stop a thread, so it
  keeps its slot, its lease and its key until the thread returns; then it is
  recorded as failed.
- A run *given back* (released at shutdown) is no longer this worker's; a
  *lost* one had its lease taken away. The outcome of either is dropped.
- Each run has its :class:`~django_pgqueue.control.RunningJob`, the job's line
  to the worker: when a heartbeat finds that an operator asked the job to stop,
  the ledger tells it there.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Literal

from django_pgqueue.control import RunningJob
from django_pgqueue.records import ClaimedJob
from django_pgqueue.worker.held import Held, Window

Key = tuple[int, int]

__all__ = ["Held", "Ledger", "Window"]


class Ledger:
    def __init__(self, lease: float = 60.0) -> None:
        self._lock = threading.Lock()
        #: Held by the heartbeat and the completer around their statements: each
        #: skips rows another transaction holds locked, and must not skip the
        #: other's (which lock every row they write, for a moment) and so each
        #: other's runs, over and over, while the worker holds thousands.
        self.own_writes = threading.Lock()
        self._held: dict[Key, Held] = {}
        self._lease = lease
        self.busy = 0
        self.claimed = self.succeeded = self.buried = self.retried = self.cancelled = 0
        self._window = Window()
        self._owed: list[ClaimedJob] = []
        self._parked: list[ClaimedJob] = []  # waiting, unconfirmed since a lost connection

    def add(self, jobs: list[ClaimedJob], sent: float | None = None, epoch: int = 0) -> None:
        """Hold a claim's runs, leased from when it was ``sent`` (as in the table), not
        later, and found ours in connection ``epoch`` (read before it was sent)."""
        now = time.monotonic()
        lease_until = (now if sent is None else sent) + self._lease
        with self._lock:
            for job in jobs:
                self._held[job.key] = Held(job, lease_until, RunningJob(job), now, epoch=epoch)
            self.claimed += len(jobs)
            self.busy += len(jobs)

    def start(
        self, job: ClaimedJob, timeout: float | None = None, epoch: int = 0
    ) -> RunningJob | Literal[False, "lapsed", "unconfirmed"]:
        """A thread is about to run ``job`` (under the job ``timeout``, in connection
        ``epoch``): its control, False if it is no longer ours to run, ``"lapsed"`` if
        its lease ran out while it waited, unrenewed (dropped too: the caller gives it
        back), or ``"unconfirmed"`` if the worker lost its database since the run was
        last found ours (parked: a heartbeat confirms it, see :meth:`unpark`)."""
        with self._lock:
            held = self._held.get(job.key)
            if held is None:  # forgotten (given back unstarted): its slot is free already
                return False
            if not held.ours:  # lost while it waited, and the heartbeat did not drop it
                self._drop(job.key)
                return False
            now = time.monotonic()
            if held.lease_until - min(1.0, self._lease / 10) <= now:
                # No renewal reached it in time (the process was paused, the database
                # slow): the reaper may have given the job to another worker already,
                # which the heartbeat would learn only after this thread started it.
                self._drop(job.key)
                self.claimed -= 1  # as forget(): given back, it was never ours to run
                return "lapsed"
            if held.epoch != epoch:
                self._parked.append(job)
                return "unconfirmed"
            held.started = now  # the job timeout counts from here
            held.control._start(held.started, timeout)
            return held.control

    def finish(self, job: ClaimedJob) -> Held | None:
        """``job``'s thread returned: its entry, if the outcome is still ours to record."""
        with self._lock:
            self.busy -= 1
            held = self._held.get(job.key)
            if held is None:
                return None
            held.returned = True
            if not held.ours:
                del self._held[job.key]
                return None
            return held

    def settled(
        self,
        keys: list[Key],
        succeeded: int,
        buried: int,
        retried: int = 0,
        cancelled: int = 0,
        refused: int = 0,
    ) -> None:
        """The outcomes of these runs are recorded, or (``refused`` of them) were
        fenced out: a refused run is no outcome of ours, so it is not counted."""
        with self._lock:
            for key in keys:
                held = self._held.get(key)
                if held is not None and held.returned:
                    del self._held[key]
            self.succeeded += succeeded
            self.buried += buried
            self.retried += retried
            self.cancelled += cancelled
            window = self._window
            window.settled += len(keys) - refused
            window.succeeded += succeeded
            window.buried += buried
            window.retried += retried
            window.cancelled += cancelled

    def waiting_since(self) -> float | None:
        """When the longest-waiting prefetched run (ours, no thread yet) was claimed;
        not one parked (:meth:`start`): it waits for a heartbeat, not for a thread."""
        with self._lock:
            parked = {job.key for job in self._parked}
            waiting = (h for key, h in self._held.items() if h.ours and key not in parked)
            return min((h.claimed for h in waiting if h.started is None), default=None)

    def forget(self, jobs: list[ClaimedJob]) -> None:
        """Drop runs no thread started (given back): no longer claimed, for --max-jobs."""
        with self._lock:
            for job in jobs:
                self._held.pop(job.key, None)
            self.busy -= len(jobs)
            self.claimed -= len(jobs)

    def stopped_instead(self, count: int, *, unstarted: bool) -> None:
        """``count`` runs given back ended cancelled (an operator had asked them to
        stop). Unstarted ones were forgotten, but they count as claimed after all."""
        with self._lock:
            self.cancelled += count
            self._window.cancelled += count
            if unstarted:
                self.claimed += count

    def held_ids(self) -> list[int]:
        """Ids of every run not settled yet, given back or not (for a last word)."""
        with self._lock:
            return sorted({job_id for job_id, _ in self._held})

    def give_back(self, keys: list[Key]) -> None:
        """These runs were released: a late outcome is not ours to record."""
        with self._lock:
            for key in keys:
                held = self._held.get(key)
                if held is not None:
                    held.given_back = True
                    if held.returned:
                        del self._held[key]

    def owe(self, jobs: list[ClaimedJob]) -> None:
        """Runs given back unstarted (forgotten) whose rows another transaction held
        locked: still this worker's in the table, owed to the queue until given back."""
        with self._lock:
            self._owed += jobs

    def owed(self, *, keep: bool = False) -> list[ClaimedJob]:
        """Take the runs owed to the queue (:meth:`owe`), to give them back; or read
        them (``keep``: still owed)."""
        with self._lock:
            owed = self._owed
            self._owed = owed[:] if keep else []
            return owed

    def take_back(self, jobs: list[ClaimedJob], margin: float = 1.0) -> list[ClaimedJob]:
        """Giving these runs (none started) back failed: those whose leases still hold
        for ``margin`` seconds are ours again, and returned; the rest are forgotten,
        for the reaper (the heartbeat skipped them while they went back)."""
        ending = time.monotonic() + margin
        with self._lock:
            kept = [h.job for j in jobs if (h := self._held.get(j.key)) and h.lease_until > ending]
            for job in kept:
                self._held[job.key].given_back = False
        self.forget([job for job in jobs if job not in kept])
        return kept

    # -- the heartbeat -------------------------------------------------------------

    def lease_keys(self) -> list[Key]:
        """Runs whose leases the heartbeat must renew."""
        with self._lock:
            return [key for key, held in self._held.items() if held.ours]

    def renewed(
        self, kept: set[Key], asked: list[Key], lease_until: float, epoch: int = 0
    ) -> list[Key]:
        """Record a heartbeat (sent in connection ``epoch``); the runs it found lost.
        Those settled meanwhile are not, nor is a run whose thread returned: its outcome
        may be committed already and its settling still to come, and if it was lost,
        the fence refuses the outcome and the completer says so."""
        lost = []
        with self._lock:
            for key in asked:
                held = self._held.get(key)
                if held is None or not held.ours:
                    continue
                if key in kept:
                    held.lease_until = lease_until
                    held.epoch = max(held.epoch, epoch)
                elif not held.returned:
                    held.lost = True
                    lost.append(key)
        return lost

    def drop_lost(self, jobs: list[ClaimedJob]) -> None:
        """Runs lost while they waited for a thread (taken from the pool): no thread
        will run them, so their slots are free now, not when a thread reaches them
        behind a long job. They stay counted as claimed."""
        with self._lock:
            for job in jobs:
                held = self._held.get(job.key)
                if held is not None and not held.ours and held.started is None:
                    self._drop(job.key)

    def unpark(self, epoch: int | None) -> list[ClaimedJob]:
        """Parked runs (:meth:`start`) a heartbeat of connection ``epoch`` found ours,
        to start (all of them still ours, for None: to give back); those it found lost
        are dropped, their slots free (they stay counted as claimed)."""
        with self._lock:
            parked, self._parked, ready = self._parked, [], []
            for job in parked:
                held = self._held.get(job.key)
                if held is None:
                    continue
                if not held.ours:
                    self._drop(job.key)
                elif epoch is None or held.epoch == epoch:
                    ready.append(job)
                else:
                    self._parked.append(job)
            return ready

    def _drop(self, key: Key) -> None:
        del self._held[key]
        self.busy -= 1

    def request_cancel(self, requests: dict[Key, str]) -> list[ClaimedJob]:
        """Tell these runs that an operator asked them to stop, lost ones too (a reaper
        ended their job cancelled); the jobs told now (those told before are left out)."""
        with self._lock:
            held = [self._held.get(key) for key in requests]
        return [
            h.job
            for h in held
            if h is not None and not h.given_back and h.control.request_cancel(requests[h.job.key])
        ]

    def earliest_lease_end(self) -> float | None:
        with self._lock:
            ends = [h.lease_until for h in self._held.values() if h.ours]
        return min(ends) if ends else None

    # -- timeouts, shutdown and stats -------------------------------------------------

    def mark_overdue(self, started_before: float) -> list[ClaimedJob]:
        """Runs whose thread started before ``started_before`` and is still running,
        not yet marked: marks and returns them. One whose task returned in time (its
        thread busy after it, in a slow task_finished receiver, say) is not late: that
        was decided as it returned (``RunningJob._overran``)."""
        with self._lock:
            late = [
                h
                for h in self._held.values()
                if h.running
                and h.ours
                and not h.overdue
                and h.started is not None
                and h.started < started_before
                and h.control._late_now()
            ]
            for held in late:
                held.overdue = True
        return [h.job for h in late]

    def running(self) -> list[Held]:
        """Runs whose thread has not returned (copies of the entries)."""
        with self._lock:
            return [dataclasses.replace(h) for h in self._held.values() if h.running and h.ours]

    def threads_in_jobs(self) -> bool:
        """Whether a job thread is still inside its job, given back or not."""
        with self._lock:
            return any(h.running for h in self._held.values())

    def own_work_left(self) -> bool:
        """Anything claimed and not yet settled, or owed (burst mode waits for it)."""
        with self._lock:
            return bool(self._owed) or any(h.ours for h in self._held.values())

    def running_own(self) -> bool:
        with self._lock:
            return any(h.running and h.ours for h in self._held.values())

    def unsettled(self) -> list[Key]:
        """Runs whose thread returned and whose outcome is not recorded yet."""
        with self._lock:
            return [k for k, h in self._held.items() if h.returned and h.ours]

    def take_window(self) -> Window:
        """What was settled since the last call, and the runs running now."""
        with self._lock:
            window, self._window = self._window, Window()
            window.running = [dataclasses.replace(h) for h in self._held.values() if h.running]
            return window
