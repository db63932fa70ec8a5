"""The summary above the job list: what an operator paged at night looks at first."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping

from django_pgqueue import validation
from django_pgqueue.admin.display import duration
from django_pgqueue.models import JobStatus
from django_pgqueue.records import QueueStats

STATUSES = tuple(JobStatus.values)


@dataclasses.dataclass
class QueueSummary:
    """One queue's line: jobs by status and the numbers worth alerting on."""

    queue: str
    counts: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    oldest_ready_age: float | None = None
    dead_last_24h: int = 0
    lease_expired: int = 0
    #: The "all queues" line, whose links filter by status only.
    total: bool = False
    #: When the queue was paused (``Job.objects.pause_queue``); None: not paused.
    paused_since: dt.datetime | None = None

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    @property
    def pausable(self) -> bool:
        """A queue with a button: a name pause_queue() takes, or a paused queue
        (resume_queue() takes any); a row written by hand may hold another name
        ("a/b", which no button's URL can hold either)."""
        if self.total:
            return False
        return validation.QUEUE.is_valid(self.queue) or (self.paused and "/" not in self.queue)

    @property
    def by_status(self) -> list[tuple[str, int]]:
        """(status, count) in the state machine's order, for the template."""
        return [(status, self.counts[status]) for status in STATUSES]

    @property
    def oldest_ready(self) -> str:
        return "" if self.oldest_ready_age is None else duration(self.oldest_ready_age)

    def add(self, row: QueueStats, *, waiting_on_purpose: bool = False) -> None:
        self.counts[row.status] = self.counts.get(row.status, 0) + row.jobs
        if row.oldest_ready_age is not None and not waiting_on_purpose:
            self.oldest_ready_age = max(self.oldest_ready_age or 0.0, row.oldest_ready_age)
        self.dead_last_24h += row.dead_last_24h
        self.lease_expired += row.lease_expired


def summarise(
    rows: Iterable[QueueStats], paused: Mapping[str, dt.datetime | None] | None = None
) -> list[QueueSummary]:
    """One line per queue (a paused queue too, jobs or none), sorted by name, then an
    "all queues" line if there are several. The total's oldest ready job leaves out
    the paused queues, whose jobs wait on purpose."""
    paused = paused or {}
    queues: dict[str, QueueSummary] = {}
    total = QueueSummary(queue="all queues", total=True)
    for row in rows:
        queues.setdefault(row.queue, QueueSummary(queue=row.queue)).add(row)
        total.add(row, waiting_on_purpose=row.queue in paused)
    for name, since in paused.items():
        queues.setdefault(name, QueueSummary(queue=name)).paused_since = since
    lines = [queues[name] for name in sorted(queues)]
    return [*lines, total] if len(lines) > 1 else lines
