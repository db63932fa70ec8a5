"""A worker's Prometheus metrics, kept up to date from the worker's events.

Imported only when a worker serves metrics (``--metrics-port``): without it
nothing here is imported, and the worker's events have no subscriber (each
costs a dictionary lookup). The counters are exact for what this worker did:
each run is counted once, when its outcome is recorded (or its lease is found
lost, or it is given back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from django_pgqueue.records import ClaimedJob, JobStatus, ReapResult, RunOutcome
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.latency import waited

Key = tuple[int, int]
#: Seconds: jobs of milliseconds to jobs of an hour.
JOB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class WorkerMetrics:
    """The worker's metrics, in ``registry``; :meth:`subscribe` wires them to a worker."""

    def __init__(self, registry: CollectorRegistry, slots: int) -> None:
        self.registry = registry
        self.completed = Counter(
            "pgqueue_jobs_completed_total",
            "Runs whose outcome this worker recorded, by outcome.",
            ["queue", "task", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "pgqueue_job_duration_seconds",
            "How long jobs ran, from their thread's start to its return.",
            ["queue", "task"],
            buckets=JOB_BUCKETS,
            registry=registry,
        )
        self.wait = Histogram(
            "pgqueue_job_wait_seconds",
            "How long jobs waited from their run_at to their start.",
            ["queue"],
            buckets=JOB_BUCKETS,
            registry=registry,
        )
        self.running = Gauge(
            "pgqueue_jobs_running", "Jobs running on this worker now.", registry=registry
        )
        self.slots = Gauge(
            "pgqueue_worker_slots", "Jobs this worker runs at once (threads).", registry=registry
        )
        self.slots.set(slots)
        self.claims = Counter(
            "pgqueue_claims_total",
            "Claim statements run (including those that found nothing).",
            registry=registry,
        )
        self.claim_duration = Histogram(
            "pgqueue_claim_duration_seconds",
            "How long a claim statement took.",
            buckets=CLAIM_BUCKETS,
            registry=registry,
        )
        self.lease_lost = Counter(
            "pgqueue_lease_lost_total",
            "Runs whose lease this worker lost (found at a heartbeat, or by the fence).",
            registry=registry,
        )
        self.reaped = Counter(
            "pgqueue_reaped_total",
            "Jobs with an expired lease this worker's reaper returned, buried or cancelled.",
            ["result"],
            registry=registry,
        )
        for result in ("returned", "buried", JobStatus.CANCELLED.value):
            self.reaped.labels(result)  # every series from the start, at 0
        self._labels: dict[Key, tuple[str, str]] = {}  # claimed runs: (queue, task)
        self._start_times: dict[Key, float] = {}
        self._lock = threading.Lock()

    def subscribe(self, events: Events) -> None:
        for name in ("claimed", "started", "finished", "recorded", "released"):
            events.subscribe(name, getattr(self, f"_{name}"))
        events.subscribe("heartbeat", self._heartbeat)
        events.subscribe("polled", self._polled)
        events.subscribe("reaped", self._reaped)

    def close(self) -> None:
        """Take the metrics out of the registry (a worker run in a process that
        starts another, such as a test)."""
        for collector in (
            self.completed,
            self.duration,
            self.wait,
            self.running,
            self.slots,
            self.claims,
            self.claim_duration,
            self.lease_lost,
            self.reaped,
        ):
            self.registry.unregister(collector)

    # -- event subscribers (called on the thread that emits: kept short) -------------

    def _claimed(self, jobs: Sequence[ClaimedJob]) -> None:
        with self._lock:
            for job in jobs:
                self._labels[job.key] = (job.queue, job.task)

    def _started(self, job: ClaimedJob) -> None:
        self._start_times[job.key] = time.monotonic()
        self.running.inc()
        self.wait.labels(job.queue).observe(waited(job))

    def _finished(self, job: ClaimedJob, outcome: Any) -> None:
        started = self._start_times.pop(job.key, None)
        if started is not None:  # not one that ended before it started (asked to stop)
            self.running.dec()
            self.duration.labels(job.queue, job.task).observe(time.monotonic() - started)

    def _count(self, key: Key, outcome: RunOutcome) -> None:
        with self._lock:
            labels = self._labels.pop(key, None)
        if labels is not None:
            self.completed.labels(*labels, outcome.value).inc()

    def _recorded(self, statuses: dict[Key, str | None], **data: Any) -> None:
        for key, status in statuses.items():
            if status is None:
                self._lost([key])  # the fence refused it: the lease was lost
            else:
                self._count(key, RunOutcome.of(status))

    def _released(self, keys: Sequence[Key]) -> None:
        for key in keys:
            self._count(key, RunOutcome.RELEASED)

    def _lost(self, keys: Sequence[Key]) -> None:
        with self._lock:
            counted = [key for key in keys if self._labels.pop(key, None) is not None]
        if counted:
            self.lease_lost.inc(len(counted))  # once per run, however it was found

    def _heartbeat(self, kept: Any, lost: Sequence[Key]) -> None:
        if lost:
            self._lost(lost)

    def _polled(self, seconds: float, jobs: int) -> None:
        self.claims.inc()
        self.claim_duration.observe(seconds)

    def _reaped(self, result: ReapResult) -> None:
        if result.returned:
            self.reaped.labels("returned").inc(result.returned)
        if result.buried:
            self.reaped.labels("buried").inc(result.buried)
        if result.cancelled:  # runs an operator had asked to stop
            self.reaped.labels(JobStatus.CANCELLED.value).inc(result.cancelled)
