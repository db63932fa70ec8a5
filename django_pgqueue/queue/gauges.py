"""The queue gauges (jobs by queue and status, the oldest ready job's age) and the
numbers the health check reads, each from a statement that stays cheap on a big
table (see ``_queue_gauges`` in queries.sql)."""

from __future__ import annotations

import dataclasses

from django_pgqueue.sql import runner

#: Finished jobs are counted exactly below this many rows, estimated above.
EXACT_LIMIT = 100_000
#: The advisory lock that lets one caller at a time recompute the gauges.
REFRESH_LOCK = 0x7067_7175_6575_6731  # "pgqueug1"


#: The queue of the row that says the finished jobs were not counted (estimated,
#: or unknown on a table never analyzed): no queue has an empty name.
NOT_COUNTED = ""


@dataclasses.dataclass(frozen=True, slots=True)
class QueueGaugeRow:
    queue: str
    status: str
    jobs: int
    oldest_ready_age: float | None  # queued rows only: None when none is ready
    estimated: bool  # from the planner's statistics, not counted
    age: float  # seconds since these numbers were computed


def _rows(rows: list[dict[str, object]]) -> list[QueueGaugeRow]:
    return [QueueGaugeRow(**row) for row in rows]  # type: ignore[arg-type]


def refresh(max_age: float, alias: str, exact_limit: int = EXACT_LIMIT) -> list[QueueGaugeRow]:
    """The gauges as ``pgqueue_queue_gauge`` keeps them, recomputed first if they are
    older than ``max_age`` seconds and no one else is recomputing them now."""
    params = {"max_age": max_age, "lock": REFRESH_LOCK, "exact_limit": exact_limit}
    return _rows(runner.fetch("refresh_queue_gauges", params, alias))


def compute(alias: str, exact_limit: int = EXACT_LIMIT) -> list[QueueGaugeRow]:
    """The gauges computed now, written nowhere."""
    return _rows(runner.fetch("queue_gauges", {"exact_limit": exact_limit}, alias))


def dead_since(seconds: float, alias: str) -> dict[str, int]:
    """Jobs buried ``dead`` in the last ``seconds``, by queue."""
    rows = runner.fetch("dead_since", {"seconds": seconds}, alias)
    return {row["queue"]: int(row["jobs"]) for row in rows}
