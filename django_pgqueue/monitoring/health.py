"""What ``queuestats --check`` checks, each condition one line when it fails.

Every number comes from statements that stay cheap on a big table: the queue
gauges computed now (the partial indexes of queued and running jobs), the
worker registry, and the dead jobs of the last hour (a range of the finished
index).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db.models.functions import Now

from django_pgqueue import conf, tolerant, wording
from django_pgqueue.models import Job
from django_pgqueue.monitoring.models import QueueGauge, RegisteredWorker
from django_pgqueue.records import JobStatus

#: The window of ``--max-dead``.
DEAD_WINDOW = 3600.0


@dataclasses.dataclass(frozen=True)
class Limits:
    max_ready_age: float | None = None  # seconds
    max_dead: int | None = None  # jobs dead in the last hour


def serves(worker: RegisteredWorker, queue: str) -> bool:
    # The stored value, not queue_names(): what that shows for a row written by
    # hand ([1, null] as "1", "null") names no queue, though it spells queue names.
    queues = worker.queues
    return queues is None or (isinstance(queues, list) and queue in queues)


def problems(limits: Limits, *, using: str) -> list[str]:
    """One line per failed condition; empty when healthy. Alive or gone is the
    database's clock's word, as the workers write ``alive_until`` with it: a host
    whose clock is off would call live workers gone."""
    # A paused queue's jobs wait on purpose (pausequeue): not a failed condition.
    paused = set(Job.objects.paused_queues(using=using))
    ready = {
        row.queue: row.oldest_ready_age
        for row in QueueGauge.objects.compute(using=using)
        if row.status == JobStatus.QUEUED
        and row.oldest_ready_age is not None
        and row.queue not in paused
    }
    with tolerant.readable(using):  # a time written by hand (infinity) reads as the nearest
        alive = list(RegisteredWorker.objects.using(using).alive())
    found = []
    for queue, age in sorted(ready.items()):
        if not any(serves(worker, queue) for worker in alive):
            found.append(
                f"queue {wording.shown(queue)}: jobs are ready (the oldest waiting {age:.1f}s) "
                "and no live worker serves it"
            )
    # Leases that expired a while ago and are still running: nothing reaps (the
    # reaper runs in every worker, or as reapjobs), so their jobs never come back.
    grace = 2 * conf.get().REAP_INTERVAL
    stuck = (
        Job.objects.using(using)
        .running()
        .filter(locked_until__lt=Now() - dt.timedelta(seconds=grace))  # the database's clock
        .count()
    )
    if stuck:
        found.append(
            f"{stuck} running job(s) lost their lease more than {grace:g}s ago and no reaper "
            "returned them: is any worker (or reapjobs) running?"
        )
    if limits.max_ready_age is not None:
        for queue, age in sorted(ready.items()):
            if age > limits.max_ready_age:
                found.append(
                    f"queue {wording.shown(queue)}: the oldest ready job has waited {age:.1f}s "
                    f"(more than --max-ready-age {limits.max_ready_age:g}s)"
                )
    if limits.max_dead is not None:
        dead = QueueGauge.objects.dead_since(DEAD_WINDOW, using=using)
        total = sum(dead.values())
        if total > limits.max_dead:
            by_queue = ", ".join(f"{wording.shown(q)} {n}" for q, n in sorted(dead.items()))
            found.append(
                f"{wording.count(total, 'job')} died in the last hour (more than --max-dead "
                f"{limits.max_dead}): {by_queue}"
            )
    return found
