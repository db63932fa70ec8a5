"""The summary above the job list: what an operator paged at night looks at first."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

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

    @property
    def by_status(self) -> list[tuple[str, int]]:
        """(status, count) in the state machine's order, for the template."""
        return [(status, self.counts[status]) for status in STATUSES]

    @property
    def oldest_ready(self) -> str:
        return "" if self.oldest_ready_age is None else duration(self.oldest_ready_age)

    def add(self, row: QueueStats) -> None:
        self.counts[row.status] = self.counts.get(row.status, 0) + row.jobs
        if row.oldest_ready_age is not None:
            self.oldest_ready_age = max(self.oldest_ready_age or 0.0, row.oldest_ready_age)
        self.dead_last_24h += row.dead_last_24h
        self.lease_expired += row.lease_expired


def summarise(rows: Iterable[QueueStats]) -> list[QueueSummary]:
    """One line per queue, sorted by name, then an "all queues" line if there are several."""
    queues: dict[str, QueueSummary] = {}
    total = QueueSummary(queue="all queues", total=True)
    for row in rows:
        queues.setdefault(row.queue, QueueSummary(queue=row.queue)).add(row)
        total.add(row)
    lines = [queues[name] for name in sorted(queues)]
    return [*lines, total] if len(lines) > 1 else lines
