"""What one worker holds: the jobs it claimed and has not recorded, under one lock.

The claim loop, the pool threads, the completer and the maintenance services
all read and change this state; keeping it in one small class keeps the rules
in one place:

- a job is *held* from its claim until its outcome is recorded (the heartbeat
  renews exactly these leases);
- it is *busy* (occupies a slot) from its claim until its thread returns, even
  after it was abandoned, so the worker never runs more threads than its slots;
- an *abandoned* job (timed out, or given back at shutdown) is no longer the
  worker's: its late outcome is dropped.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from django_pgqueue.records import ClaimedJob


@dataclasses.dataclass
class Held:
    job: ClaimedJob
    started: float
    running: bool = True
    abandoned: bool = False


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, Held] = {}
        self.busy = 0
        self.claimed = self.succeeded = self.buried = 0
        self._window_done = 0

    def add(self, jobs: list[ClaimedJob]) -> None:
        now = time.monotonic()
        with self._lock:
            for job in jobs:
                self._held[job.id] = Held(job, now)
            self.claimed += len(jobs)
            self.busy += len(jobs)

    def start(self, job: ClaimedJob) -> bool:
        """A thread is about to run ``job``; False if it was given back meanwhile."""
        with self._lock:
            held = self._held.get(job.id)
            if held is None or held.abandoned:
                return False
            held.started = time.monotonic()  # the job timeout counts from here
            return True

    def finish(self, job: ClaimedJob) -> bool:
        """``job``'s thread returned; True if its outcome is still ours to record."""
        with self._lock:
            self.busy -= 1
            held = self._held.get(job.id)
            if held is None:
                return False
            held.running = False
            if held.abandoned:
                del self._held[job.id]
                return False
            return True

    def recorded(self, job_ids: list[int], succeeded: int, buried: int) -> None:
        with self._lock:
            for job_id in job_ids:
                held = self._held.get(job_id)
                # A timed-out job's thread keeps its slot until it returns.
                if held is not None and not held.running:
                    del self._held[job_id]
            self.succeeded += succeeded
            self.buried += buried
            self._window_done += len(job_ids)

    def forget(self, jobs: list[ClaimedJob]) -> None:
        """Drop jobs no thread started (prefetched ones given back at shutdown)."""
        with self._lock:
            for job in jobs:
                self._held.pop(job.id, None)
            self.busy -= len(jobs)

    def own_work_left(self) -> bool:
        with self._lock:
            return any(not h.abandoned for h in self._held.values())

    def running_own(self) -> bool:
        with self._lock:
            return any(h.running and not h.abandoned for h in self._held.values())

    def lease_ids(self) -> list[int]:
        """Jobs whose leases the heartbeat must renew."""
        with self._lock:
            return [i for i, h in self._held.items() if not h.abandoned]

    def still_held(self, job_ids: set[int]) -> set[int]:
        with self._lock:
            return {i for i in job_ids if i in self._held}

    def abandon_running(self, started_before: float | None = None) -> list[ClaimedJob]:
        """Give up running jobs (all, or those started before a time); returns them."""
        with self._lock:
            given_up = [h for h in self._held.values() if h.running and not h.abandoned
                        and (started_before is None or h.started < started_before)]
            for held in given_up:
                held.abandoned = True
        return [h.job for h in given_up]

    def take_window(self) -> tuple[int, int]:
        """(outcomes recorded since the last call, jobs running now)."""
        with self._lock:
            done, self._window_done = self._window_done, 0
            return done, sum(1 for h in self._held.values() if h.running)
