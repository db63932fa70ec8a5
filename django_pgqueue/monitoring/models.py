"""The worker registry and the queue gauges' snapshot: two small tables.

``pgqueue_worker`` has one row per running worker, written by its heartbeat and
removed when it exits; a row whose heartbeat stopped (the worker was killed, or
hangs) is shown as gone once ``alive_until`` passes, which is before the leases
of its jobs expire, and deleted an hour later (once no job runs under its id).
``pgqueue_queue_gauge`` holds the queue gauges as one worker at a time last
computed them.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import ClassVar

from django.db import models
from django.db.models.functions import Now

from django_pgqueue import conf
from django_pgqueue.basemodel import OnJobDatabaseModel
from django_pgqueue.queue import gauges, presence
from django_pgqueue.queue.gauges import QueueGaugeRow
from django_pgqueue.queue.presence import Registration

#: A gone worker's row is kept this long (seconds) so operators see it, then deleted.
FORGET_AFTER = 3600.0


#: How far ahead a heartbeat may write alive_until: a row further ahead (written by
#: hand: infinity) vouches for no worker and is gone.
AHEAD = dt.timedelta(seconds=presence.UNWRITTEN_ALIVE)


def alive_now() -> models.Q:
    """Alive by the database's clock, which writes alive_until."""
    return models.Q(alive_until__gte=Now(), alive_until__lte=Now() + AHEAD)


class WorkerQuerySet(models.QuerySet["RegisteredWorker"]):
    def alive(self) -> WorkerQuerySet:
        return self.filter(alive_now())

    def gone(self) -> WorkerQuerySet:
        return self.exclude(alive_now())

    def serving(self, queue: str) -> WorkerQuerySet:
        """Workers serving ``queue``: those with it in their queues, and those serving all."""
        return self.filter(models.Q(queues__isnull=True) | models.Q(queues__contains=[queue]))


_WorkerManagerBase = models.Manager.from_queryset(WorkerQuerySet)


class WorkerManager(conf.OnJobDatabase["RegisteredWorker"], _WorkerManagerBase["RegisteredWorker"]):
    """The registry's writes, each a named statement on ``using``."""

    def register(
        self,
        entry: Registration,
        *,
        running: int = 0,
        done: int = 0,
        starting: bool = False,
        using: str | None = None,
        lock_pid: int | None = None,
    ) -> None:
        presence.register(
            entry, running, done, starting=starting, alias=self._alias(using), lock_pid=lock_pid
        )

    def leave(self, worker: str, *, using: str | None = None) -> bool:
        return presence.leave(worker, self._alias(using))

    def forget(self, after: float = FORGET_AFTER, *, using: str | None = None) -> list[str]:
        return presence.forget(after, self._alias(using))


class RegisteredWorker(OnJobDatabaseModel):
    """A running worker process, as its heartbeat last described it."""

    id = models.CharField(
        primary_key=True, max_length=255, help_text="The worker id (locked_by of its jobs)."
    )
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(
        null=True, blank=True, help_text="The queues it serves; empty: every queue."
    )
    concurrency = models.IntegerField()
    version = models.CharField(max_length=64, help_text="django-pgqueue's version.")
    started_at = models.DateTimeField(db_default=Now())
    last_seen = models.DateTimeField(db_default=Now(), help_text="Its latest heartbeat.")
    alive_until = models.DateTimeField(
        help_text="Shown as gone after this, unless a heartbeat moves it on; this is "
        "before the leases of its jobs expire."
    )
    schedules = models.BooleanField(
        default=True,
        db_default=True,
        help_text="Whether it runs the scheduler of periodic jobs (--burst and --max-jobs "
        "workers do not).",
    )
    schedule_names = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="The schedules its scheduler runs: those enabled in its settings.",
    )
    lock_key = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="The advisory lock its session holds on its id (none when the session goes "
        "through a pooler): it ends with the process, so a killed worker is gone at once.",
    )
    lock_pid = models.IntegerField(
        null=True,
        blank=True,
        help_text="The server process of the session holding that lock: a worker of "
        "another database on the server may hold the same key.",
    )
    jobs_running = models.IntegerField(default=0, db_default=0)
    jobs_done = models.BigIntegerField(
        default=0, db_default=0, help_text="Outcomes it recorded since it started."
    )

    objects: ClassVar[WorkerManager] = WorkerManager()

    class Meta:
        db_table = "pgqueue_worker"
        verbose_name = "worker"
        ordering = ("hostname", "id")
        # Written by the workers only: the admin may look, nothing else.
        default_permissions = ("view",)

    def __str__(self) -> str:
        return self.id

    def alive_at(self, now: dt.datetime) -> bool:
        return now <= self.alive_until <= now + AHEAD

    def queue_names(self) -> list[str] | None:
        """The queues it serves, None for every queue. A worker writes a list of
        names; anything else (a row written by hand) is shown as its JSON, which
        names no queue, rather than failing the pages and commands that list it."""
        if self.queues is None:
            return None
        if not isinstance(self.queues, list):
            return [json.dumps(self.queues)]
        return [q if isinstance(q, str) else json.dumps(q) for q in self.queues]


class GaugeManager(conf.OnJobDatabase["QueueGauge"]):
    def refresh(self, max_age: float, *, using: str | None = None) -> list[QueueGaugeRow]:
        """The queue gauges, recomputed first when older than ``max_age`` seconds
        (by one caller at a time: the others read what it wrote)."""
        return gauges.refresh(max_age, self._alias(using))

    def compute(self, *, using: str | None = None) -> list[QueueGaugeRow]:
        """The queue gauges computed now, written nowhere."""
        return gauges.compute(self._alias(using))

    def dead_since(self, seconds: float, *, using: str | None = None) -> dict[str, int]:
        """Jobs buried dead in the last ``seconds``, by queue."""
        return gauges.dead_since(seconds, self._alias(using))


class QueueGauge(OnJobDatabaseModel):
    """One queue and status, counted (or estimated) when ``refreshed_at`` says."""

    queue = models.CharField(max_length=64)
    status = models.CharField(max_length=16)
    jobs = models.BigIntegerField()
    oldest_ready_age = models.FloatField(null=True, blank=True)
    estimated = models.BooleanField(default=False)
    refreshed_at = models.DateTimeField()

    objects: ClassVar[GaugeManager] = GaugeManager()

    class Meta:
        db_table = "pgqueue_queue_gauge"
        default_permissions = ()  # not in the admin
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["queue", "status"], name="pgqueue_queue_gauge_unique")
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.status}: {self.jobs}"
