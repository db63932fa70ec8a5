"""Claim latency and queue lag over the throughput line's window.

Fed by the worker's events (``polled`` once per claim statement, on the claim
loop; ``started`` once per job, on its thread), read and reset by the
throughput line. Queue lag is how long a job waited from its ``run_at`` to its
start, measured with this host's clock against the database's ``run_at``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from django_pgqueue.records import ClaimedJob
from django_pgqueue.worker.events import Events


@dataclasses.dataclass(frozen=True)
class Window:
    claims: int = 0
    claim_seconds: float = 0.0  # their total
    started: int = 0
    lag_seconds: float = 0.0  # the started jobs' total
    lag_max: float = 0.0

    def describe(self) -> str:
        """``claims 12 (avg 0.4 ms), queue lag avg 0.05s, max 1.20s`` for the log line."""
        claims = (
            f"claims {self.claims} (avg {1000 * self.claim_seconds / self.claims:.1f} ms)"
            if self.claims
            else "claims 0"
        )
        if not self.started:
            return f"{claims}, queue lag -"
        return (
            f"{claims}, queue lag avg {self.lag_seconds / self.started:.2f}s, "
            f"max {self.lag_max:.2f}s"
        )


#: The longest wait reported (some 3,000 years): a run_at of -infinity, written by
#: hand, would make every sum and histogram it reaches infinite for good.
LONGEST_WAIT = 1e11


def waited(job: ClaimedJob) -> float:
    """How long ``job`` waited since its ``run_at``, as it starts (0 for a start
    before it: the worker's clock may be behind the database's)."""
    return max(0.0, min(time.time() - job.run_at, LONGEST_WAIT))


class Latency:
    def __init__(self, events: Events) -> None:
        self._lock = threading.Lock()
        self._reset()
        events.subscribe("polled", self._polled)
        events.subscribe("started", self._started)

    def _reset(self) -> None:
        self._claims = self._started_jobs = 0
        self._claim_seconds = self._lag_seconds = self._lag_max = 0.0

    def _polled(self, seconds: float, **data: Any) -> None:
        with self._lock:  # plain counters: this runs for every claim and every job
            self._claims += 1
            self._claim_seconds += seconds

    def _started(self, job: ClaimedJob) -> None:
        lag = waited(job)
        with self._lock:
            self._started_jobs += 1
            self._lag_seconds += lag
            self._lag_max = max(self._lag_max, lag)

    def take(self) -> Window:
        """The window since the last call; the next one starts empty."""
        with self._lock:
            window = Window(
                self._claims,
                self._claim_seconds,
                self._started_jobs,
                self._lag_seconds,
                self._lag_max,
            )
            self._reset()
        return window
