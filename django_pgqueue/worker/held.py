"""One run a worker holds (:class:`Held`), and a throughput line's tally (:class:`Window`).

The :class:`~django_pgqueue.worker.ledger.Ledger` keeps them, under its lock.
"""

from __future__ import annotations

import dataclasses

from django_pgqueue.control import RunningJob
from django_pgqueue.records import ClaimedJob


@dataclasses.dataclass
class Held:
    job: ClaimedJob
    lease_until: float  # monotonic: when the lease lapses unless renewed
    control: RunningJob
    claimed: float  # monotonic: when the claim returned it
    started: float | None = None  # monotonic: a thread took it (None: waiting)
    returned: bool = False
    overdue: bool = False
    given_back: bool = False
    lost: bool = False
    #: The worker's connection epoch when the claim or a renewal last found the run
    #: ours: a lost connection since (the server may have crashed and undone the
    #: claim, ASYNC_COMMIT) leaves it to be confirmed before a thread starts it.
    epoch: int = 0

    @property
    def running(self) -> bool:
        return self.started is not None and not self.returned

    @property
    def ours(self) -> bool:
        return not (self.given_back or self.lost)


@dataclasses.dataclass
class Window:
    """Outcomes settled between two throughput lines, and the runs running at the end."""

    settled: int = 0
    succeeded: int = 0
    retried: int = 0
    buried: int = 0
    cancelled: int = 0
    running: list[Held] = dataclasses.field(default_factory=list)
