"""Periodic services inside every worker: heartbeat, reaper, pruner, job timeouts.

One thread runs them on their own timers. The reaper's statement is idempotent
and skips rows another worker has locked, and the pruner only deletes finished
jobs, so every worker can run both.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from django_pgqueue.models import Job
from django_pgqueue.worker.dbutil import DB_ERRORS, BookkeepingThread, reset_connection

logger = logging.getLogger("django_pgqueue")


@dataclasses.dataclass
class Service:
    name: str
    interval: float
    action: Callable[[], None]
    due: float = 0.0  # monotonic time of the next run; 0 runs it at start


class Maintenance(BookkeepingThread):
    """Runs each service when it is due; a failing service is logged and retried next time."""

    def __init__(self, alias: str, services: list[Service],
                 name: str = "pgqueue-maintenance") -> None:
        super().__init__(alias, name=name)
        self.services = services

    def _run(self) -> None:
        while not self._halt.is_set():
            now = time.monotonic()
            for service in self.services:
                if service.due <= now:
                    service.due = now + service.interval
                    try:
                        service.action()
                    except DB_ERRORS as exc:
                        logger.warning("%s failed, will retry: %s", service.name,
                                       str(exc).strip().splitlines()[0] if str(exc).strip()
                                       else exc)
                        reset_connection(self.alias)
                        service.due = now + min(service.interval, 1.0)
            next_due = min(s.due for s in self.services)
            self._halt.wait(max(0.01, next_due - time.monotonic()))


def reaper(alias: str) -> Callable[[], None]:
    def reap() -> None:
        result = Job.objects.reap(using=alias)
        if result.returned or result.buried:
            logger.info("reaper: %d jobs with expired leases returned to the queue, %d buried",
                        result.returned, result.buried)
    return reap


def pruner(alias: str, older_than: float) -> Callable[[], None]:
    def prune() -> None:
        deleted = Job.objects.prune(older_than, using=alias)
        if deleted:
            logger.info("pruner: deleted %d finished jobs older than %gs", deleted, older_than)
    return prune
