"""``pgqueue_schedule``: one row per schedule that settings declare or once declared.

Workers write the rows: when a scheduler starts it adds the schedules of its
settings and marks the ones they no longer name as not configured; each tick it
enqueues moves ``last_tick`` on (a compare-and-set, in the statement that
inserts the tick's job). Operators only flip ``enabled``, which is kept here so
that disabling a schedule needs no deploy (switching a declared schedule that no
worker has written yet writes its row first).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from django.apps import apps
from django.db import models
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Now

from django_pgqueue import conf
from django_pgqueue.basemodel import OnJobDatabaseModel
from django_pgqueue.exceptions import InvalidSchedule
from django_pgqueue.periodic.spec import MAX_EXPRESSION, MAX_NAME
from django_pgqueue.queue import schedules
from django_pgqueue.validation import MAX_KEY


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def configured(self) -> ScheduleQuerySet:
        """Schedules the settings of the latest worker to start still declare."""
        return self.filter(configured=True)

    def removed(self) -> ScheduleQuerySet:
        return self.filter(configured=False)

    def with_last_job_status(self) -> ScheduleQuerySet:
        """Each row with ``last_job_status``: its last tick's job's status, None when
        there is none or it was pruned (one query for the whole list)."""
        # By name: the job model's module imports this one.
        job = apps.get_model("django_pgqueue", "Job")
        status = job.objects.filter(pk=OuterRef("last_job_id")).values("status")[:1]
        return self.annotate(last_job_status=Subquery(status))


_ScheduleManagerBase = models.Manager.from_queryset(ScheduleQuerySet)


class ScheduleManager(conf.OnJobDatabase["Schedule"], _ScheduleManagerBase["Schedule"]):
    def set_enabled(
        self, names: Iterable[str], enabled: bool, *, using: str | None = None
    ) -> list[str]:
        """Enable or disable schedules by name, for every worker at once; the names
        changed. A schedule of the settings that no worker has written yet gets its
        row here, so it can be switched before the first worker starts.
        InvalidSchedule for a name neither the settings nor the table know;
        SchedulesBusy, nothing switched, when another transaction holds the table
        (an UPDATE by hand not committed) for more than 2 seconds. One name given as
        a string is that name, as the command takes it, not its letters."""
        if isinstance(names, str):
            names = [names]
        alias = self._alias(using)
        # Under the rows' lock: a worker's sync writes several rows too.
        with schedules.locked(alias, schedules.BUSY_WAIT):
            return self._switch(sorted(set(names)), enabled, alias)

    def _switch(self, wanted: list[str], enabled: bool, alias: str) -> list[str]:
        known = set(self.using(alias).filter(name__in=wanted).values_list("name", flat=True))
        declared = {spec.name: spec for spec in conf.get().schedules}
        unknown = [name for name in wanted if name not in known and name not in declared]
        if unknown:
            raise InvalidSchedule(
                f"no schedule named {', '.join(map(repr, unknown))}: it is neither in "
                "PGQUEUE['PERIODIC'] nor in the schedule table"
            )
        self.using(alias).bulk_create(
            [
                Schedule(
                    name=spec.name,
                    task=spec.task,
                    expression=spec.expression,
                    timezone=spec.timezone,
                    # On in no worker's settings yet: the first worker to write it
                    # starts it from its next tick, as a schedule it adds itself.
                    settings_enabled=False,
                )
                for spec in (declared[name] for name in wanted if name not in known)
            ],
            ignore_conflicts=True,  # a worker starting meanwhile wrote it first
        )
        changed = list(
            self.using(alias)
            .filter(name__in=wanted)
            .exclude(enabled=enabled)
            .values_list("name", flat=True)
        )
        # Enabled again, it goes on from its next tick: the ticks it skipped are not due.
        restart = {"restarted_at": Now()} if enabled else {}
        self.using(alias).filter(name__in=changed).update(
            enabled=enabled, updated_at=Now(), **restart
        )
        return sorted(changed)


class Schedule(OnJobDatabaseModel):
    """A periodic job's schedule, its operator switch and its last tick."""

    name = models.CharField(primary_key=True, max_length=MAX_NAME)
    task = models.CharField(max_length=MAX_KEY, help_text="The task path settings give.")
    expression = models.CharField(
        max_length=MAX_EXPRESSION, help_text="The cron expression, or 'every Ns'."
    )
    timezone = models.CharField(max_length=64, help_text="The time zone of a cron expression.")
    enabled = models.BooleanField(
        default=True,
        db_default=True,
        help_text="Off: no worker enqueues its ticks (set by an operator, kept across deploys).",
    )
    configured = models.BooleanField(
        default=True,
        db_default=True,
        help_text="Off: the settings of the latest worker to start no longer declare it.",
    )
    settings_enabled = models.BooleanField(
        default=True,
        db_default=True,
        help_text='The settings\' "enabled", as the latest worker to start read them.',
    )
    last_tick = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The latest tick taken: enqueued (its job's run_at), or passed while disabled.",
    )
    restarted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When it was last enabled again or changed: it goes on from its next tick "
        "after this, and no tick before it is enqueued.",
    )
    last_job_id = models.BigIntegerField(
        null=True, blank=True, help_text="The job of the latest tick (it may have been pruned)."
    )
    ticks = models.BigIntegerField(default=0, db_default=0, help_text="Ticks enqueued in all.")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects: ClassVar[ScheduleManager] = ScheduleManager()

    class Meta:
        db_table = "pgqueue_schedule"
        ordering = ("name",)
        verbose_name = "schedule"
        # Rows are written by workers; operators may look, and switch schedules.
        default_permissions = ("view",)
        permissions = (("toggle_schedule", "Can enable and disable schedules"),)

    def __str__(self) -> str:
        return self.name
