"""Named events a worker emits, for tests and metrics (River's test signals).

``claimed(jobs)``, ``started(job)`` (its body runs: not for a job asked to stop
before a thread took it, nor for one that cannot run at all, its task unknown or
its arguments unfit, which is buried unrun), ``finished(job, outcome)``,
``recorded(settled, succeeded, buried, retried, statuses)`` (``statuses``: each
settled run's new job status, None for one the fence refused; also for jobs asked to
stop that a give-back or the shutdown ended cancelled, and for runs past the job
timeout that the shutdown recorded as failed), ``heartbeat(kept,
lost)``, ``cancel_requested(job, reason)`` (the worker told a running job to stop),
``listening()``, ``idle()``, ``reaped(result)``, ``polled(seconds, jobs)`` (every
claim statement: how long it took and how many jobs it took), ``released(keys)``
(runs a stopping worker, or a give-back of prefetched jobs, put back in the
queue; a run the give-back's fence refused, its lease lost, comes as ``recorded``
with status None), ``scheduled(schedule, tick, job_id)`` (this worker's scheduler took a
tick; ``job_id`` is None when a live job held the task's unique key),
``stopping(reason)``, ``exiting(running)`` (a stopping worker is about to give
back runs whose threads are still inside their jobs, ``running`` their ids, and
the process should end right after: runworker runs its atexit handlers here,
while the leases are still renewed; it comes on a thread of its own, and the
give-back does not wait for a subscriber still running at the shutdown's bound
less half its margin, or at a second signal) and ``stopped(status)``.
A subscriber is called in the thread that emits, so it must be quick; one that
raises is logged and does not disturb the worker. With no subscriber an event
costs one dictionary lookup.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django_pgqueue import wording
from django_pgqueue.records import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.worker.ledger import Ledger

logger = logging.getLogger("django_pgqueue")

NAMES = frozenset(
    {
        "claimed",
        "started",
        "finished",
        "recorded",
        "heartbeat",
        "cancel_requested",
        "listening",
        "idle",
        "reaped",
        "polled",
        "released",
        "scheduled",
        "stopping",
        "exiting",
        "stopped",
    }
)
Subscriber = Callable[..., None]


class Events:
    def __init__(self) -> None:
        self._subscribers: dict[str, tuple[Subscriber, ...]] = {}
        self._lock = threading.Lock()

    def subscribe(self, name: str, subscriber: Subscriber) -> None:
        """Call ``subscriber(**data)`` each time ``name`` is emitted."""
        if name not in NAMES:
            raise ValueError(f"no worker event {name!r}; events: {', '.join(sorted(NAMES))}")
        with self._lock:
            self._subscribers[name] = (*self._subscribers.get(name, ()), subscriber)

    def emit(self, name: str, **data: Any) -> None:
        subscribers = self._subscribers.get(name)
        if not subscribers:
            return
        for subscriber in subscribers:
            try:
                subscriber(**data)
            except Exception:
                logger.exception("a subscriber of the worker event %r raised", name)


def emit_released(
    events: Events,
    ledger: Ledger,
    keys: Sequence[tuple[int, int]],
    statuses: Mapping[int, str | None],
    *,
    unstarted: bool,
) -> list[int]:
    """Tell what giving ``keys`` back came to (``statuses``, from ``claims.release``):
    ``released`` for the jobs back in the queue, ``recorded`` (and the ledger's
    count) for those that ended cancelled because an operator had asked them to
    stop, and ``recorded`` with status None for those the fence refused (no longer
    this worker's: their leases were lost); the ids given back. ``unstarted``: the
    runs were prefetched ones, which the ledger already forgot."""
    fenced = [k for k in keys if k[0] not in statuses]
    if fenced and unstarted:
        # Claimed ahead and never started here (a lapsed lease the reaper returned, an
        # owed row it took meanwhile): nothing ran here, so nothing can run twice.
        logger.info(
            "jobs %s, claimed ahead and not started, were no longer this worker's when "
            "given back: their leases were lost",
            sorted(k[0] for k in fenced),
        )
    elif fenced:
        logger.warning(
            "lost the lease on jobs %s before giving them back: they may run again elsewhere",
            sorted(k[0] for k in fenced),
        )
    if fenced:
        events.emit(
            "recorded",
            settled=fenced,
            succeeded=0,
            buried=0,
            retried=0,
            statuses=dict.fromkeys(fenced, None),
        )
    back = [k for k in keys if statuses.get(k[0]) == JobStatus.QUEUED]
    stopped = [k for k in keys if statuses.get(k[0]) == JobStatus.CANCELLED]
    if stopped:
        ledger.stopped_instead(len(stopped), unstarted=unstarted)
        logger.info(
            "%s asked to stop ended cancelled instead of going back: %s",
            wording.count(len(stopped), "job"),
            sorted(k[0] for k in stopped),
        )
        events.emit(
            "recorded",
            settled=stopped,
            succeeded=0,
            buried=0,
            retried=0,
            statuses=dict.fromkeys(stopped, JobStatus.CANCELLED.value),
        )
    events.emit("released", keys=back)
    return sorted(k[0] for k in back)
