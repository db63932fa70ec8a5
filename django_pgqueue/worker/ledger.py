"""What one worker holds: the jobs it claimed and has not recorded, under one lock.

The claim loop, the pool threads, the completer and the maintenance services
all read and change this state; keeping it in one small class keeps the rules
in one place:

- a job is *held* from its claim until its outcome is recorded (the heartbeat
  renews exactly these leases);
- it is *busy* (occupies a slot) from its claim until its thread returns, even
  after it was abandoned, so the worker never runs more threads than its slots;
- an *abandoned* job (timed out, or given back at shutdown) is no longer the
  worker's: its late outcome is dropped;
- entries are per attempt: a job reclaimed by this same worker (after a lost
  lease or a timeout) is a new entry, which the old attempt's thread, outcome
  or timeout must not touch.
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
    running: bool = False  # a prefetched job waits for a thread first
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
            held = self._current(job)
            if held is None or held.abandoned:
                return False
            held.started = time.monotonic()  # the job timeout counts from here
            held.running = True
            return True

    def finish(self, job: ClaimedJob) -> bool:
        """``job``'s thread returned; True if its outcome is still ours to record."""
        with self._lock:
            self.busy -= 1
            held = self._current(job)
            if held is None:  # forgotten, or an older attempt of a reclaimed job
                return False
            held.running = False
            if held.abandoned:
                del self._held[job.id]
                return False
            return True

    def _current(self, job: ClaimedJob) -> Held | None:
        held = self._held.get(job.id)
        return held if held is not None and held.job.attempt == job.attempt else None

    def recorded(self, settled: list[tuple[int, int]], succeeded: int, buried: int) -> None:
        """Outcomes settled for these (job id, attempt) pairs."""
        with self._lock:
            for job_id, attempt in settled:
                held = self._held.get(job_id)
                # A timed-out job's thread keeps its slot until it returns.
                if held is not None and held.job.attempt == attempt and not held.running:
                    del self._held[job_id]
            self.succeeded += succeeded
            self.buried += buried
            self._window_done += len(settled)

    def forget(self, jobs: list[ClaimedJob]) -> None:
        """Drop jobs no thread started (prefetched ones given back at shutdown)."""
        with self._lock:
            for job in jobs:
                if self._current(job) is not None:
                    del self._held[job.id]
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
        """Give up jobs a thread is running (all, or those started before a time);
        jobs still waiting for a thread are not touched. Returns them."""
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
