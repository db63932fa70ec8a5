"""Named events a worker emits, for tests and metrics (River's test signals).

``claimed(jobs)``, ``started(job)``, ``finished(job, outcome)``,
``recorded(settled, succeeded, buried, retried, statuses)`` (``statuses``: each
settled run's new job status, None for one the fence refused; also for jobs asked to
stop that a give-back or the shutdown ended cancelled), ``heartbeat(kept,
lost)``, ``cancel_requested(job, reason)`` (the worker told a running job to stop),
``listening()``, ``idle()``, ``reaped(result)``, ``polled(seconds, jobs)`` (every
claim statement: how long it took and how many jobs it took), ``released(keys)``
(runs a stopping worker, or a give-back of prefetched jobs, put back in the
queue), ``scheduled(schedule, tick, job_id)`` (this worker's scheduler took a
tick; ``job_id`` is None when a live job held the task's unique key),
``stopping(reason)`` and ``stopped(status)``.
A subscriber is called in the thread that emits, so it must be quick; one that
raises is logged and does not disturb the worker. With no subscriber an event
costs one dictionary lookup.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

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
