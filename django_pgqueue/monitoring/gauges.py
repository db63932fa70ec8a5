"""The queue gauges as a Prometheus collector, for a worker's ``/metrics`` and for
the web tier's view. Imported only where ``prometheus-client`` is installed."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from django_pgqueue.queue.gauges import NOT_COUNTED, QueueGaugeRow
from django_pgqueue.records import JobStatus


def families(
    rows: Sequence[QueueGaugeRow], held: float = 0.0, paused: Collection[str] = ()
) -> Iterable[Metric]:
    """The metric families of ``rows``, which were read ``held`` seconds ago (counted
    in whole seconds in their age), with the queues ``paused`` then."""
    jobs = GaugeMetricFamily(
        "pgqueue_queue_jobs",
        "Jobs in the table by queue and status (finished ones estimated on a big table).",
        labels=["queue", "status"],
    )
    oldest = GaugeMetricFamily(
        "pgqueue_queue_oldest_ready_age_seconds",
        "How long the oldest ready job of the queue has waited (0: none is ready).",
        labels=["queue"],
    )
    pauses = GaugeMetricFamily(
        "pgqueue_queue_paused",
        "1 while the queue is paused (no worker claims its jobs), 0 otherwise.",
        labels=["queue"],
    )
    age = GaugeMetricFamily(
        "pgqueue_queue_gauges_age_seconds",
        "Seconds since the queue gauges were computed.",
    )
    queues: dict[str, float] = {}
    counts: dict[tuple[str, str], float] = {}
    for row in rows:
        if row.queue == NOT_COUNTED:
            continue
        counts[row.queue, row.status] = counts.get((row.queue, row.status), 0) + row.jobs
        queues.setdefault(row.queue, 0.0)
        if row.oldest_ready_age is not None:
            queues[row.queue] = max(queues[row.queue], row.oldest_ready_age)
    # Every status of every known queue, 0 when it has no job: a drained queue's
    # backlog reads 0 rather than vanishing. Finished ones only when they were
    # counted: an estimate leaves out the queues it knows nothing of, and absent
    # says "unknown" where 0 would be a false count.
    filled = set(JobStatus.values) - not_counted(rows)
    for queue in sorted(queues):
        for status in JobStatus.values:
            if (queue, status) in counts or status in filled:
                jobs.add_metric([queue, status], counts.get((queue, status), 0))
    for queue, seconds in sorted(queues.items()):
        oldest.add_metric([queue], seconds)
    for queue in sorted(queues.keys() | set(paused)):
        pauses.add_metric([queue], 1.0 if queue in paused else 0.0)
    yield jobs
    yield oldest
    yield pauses
    # Also without rows: a table without jobs was counted all the same, and gauges
    # never computed (every refresh failing since the worker started) age from then,
    # or the alert on their age would never see them.
    age.add_metric([], max((row.age for row in rows), default=0.0) + int(held))
    yield age


def not_counted(rows: Sequence[QueueGaugeRow]) -> set[str]:
    """The statuses ``rows`` did not count exactly. A statement past its exact limit
    returns a NOT_COUNTED row for ``done`` (and ``cancelled``), even when the
    statistics estimated nothing, and one for ``dead`` too unless it still counted
    the dead jobs (few of them): those are exact, and a queue without any has 0."""
    if not any(row.estimated for row in rows):
        return set()
    marked = {row.status for row in rows if row.queue == NOT_COUNTED}
    estimated = {row.status for row in rows if row.estimated}
    done, dead = JobStatus.DONE.value, JobStatus.DEAD.value
    finished = {done, JobStatus.CANCELLED.value, dead}
    if done not in marked or dead in marked | estimated:
        return finished  # (rows without the marker, or dead ones estimated too)
    return finished - {dead}


class QueueGauges(Collector):
    """Serves the rows it was last given (``update``). Their age grows while they are
    served: a refresh that hangs or fails shows as stale gauges, not as fresh ones
    (before the first update, the age counts from the collector's creation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: tuple[Sequence[QueueGaugeRow], float, frozenset[str]] = (
            (),
            time.monotonic(),
            frozenset(),
        )

    def update(self, rows: Sequence[QueueGaugeRow], paused: Collection[str] = ()) -> None:
        # Replaced whole, with when: a scrape never sees half an update.
        with self._lock:
            self._read = (tuple(rows), time.monotonic(), frozenset(paused))

    def update_paused(self, paused: Collection[str]) -> None:
        """The paused queues, read again (at each scrape of a worker's /metrics). Under
        the lock: a refresh between reading the rows and writing them back would be
        undone by the older rows."""
        with self._lock:
            rows, at, _ = self._read
            self._read = (rows, at, frozenset(paused))

    def collect(self) -> Iterator[Metric]:
        rows, at, paused = self._read
        yield from families(rows, time.monotonic() - at, paused)
