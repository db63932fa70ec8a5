"""What operators read about schedules (``manage.py schedules``, the admin): the
settings' entries and the table's rows side by side, with each schedule's last
tick, its job's status and its next tick."""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.utils import timezone

from django_pgqueue import conf
from django_pgqueue.periodic.models import Schedule
from django_pgqueue.periodic.spec import ScheduleSpec, named_zone
from django_pgqueue.validation import aware

#: A schedule's state, as listings say it.
ACTIVE = "active"
DISABLED = "disabled"  # by an operator (admin or command), kept in the database
OFF_IN_SETTINGS = "off in settings"  # "enabled": False in PGQUEUE["PERIODIC"]
REMOVED = "removed"  # no longer in the settings of the latest worker to start
NOT_IN_SETTINGS = "not in these settings"  # configured, but these settings lack it


def local_moment(value: dt.datetime | None, zone: str) -> str:
    """``value`` in a schedule's own time zone, as its cron expression reads, with the
    zone's name: ``2026-12-05 03:00:00 CET``; ``-`` for none."""
    if not value:
        return "-"
    value = aware(value)  # a row's, with USE_TZ = False
    named = named_zone(zone)  # None for a row of other settings with an unknown zone
    local = value.astimezone(named) if named is not None else timezone.localtime(value)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


@dataclasses.dataclass(frozen=True)
class ScheduleView:
    name: str
    task: str
    expression: str
    timezone: str
    state: str
    last_tick: dt.datetime | None
    last_job_id: int | None
    #: The last tick's job's status; None when there is none (or it was pruned).
    last_job_status: str | None
    next_tick: dt.datetime | None
    ticks: int
    #: Whether a worker has written the schedule's row yet.
    seen: bool

    def as_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        for key in ("last_tick", "next_tick"):
            moment = data[key]
            data[key] = moment.isoformat() if moment is not None else None
        return data


def _state(spec: ScheduleSpec | None, row: Schedule | None) -> str:
    if row is not None and not row.configured:
        return REMOVED
    if spec is None:
        return NOT_IN_SETTINGS
    if not spec.enabled:
        return OFF_IN_SETTINGS
    if row is not None and not row.enabled:
        return DISABLED
    return ACTIVE


def describe(
    name: str,
    spec: ScheduleSpec | None,
    row: Schedule | None,
    last_job_status: str | None,
    now: dt.datetime,
) -> ScheduleView:
    """One schedule as listings show it: its settings entry and its row side by side."""
    state = _state(spec, row)
    source = spec or row
    return ScheduleView(
        name=name,
        task=source.task if source is not None else "",
        expression=source.expression if source is not None else "",
        timezone=source.timezone if source is not None else "",
        state=state,
        # A last_tick equal to restarted_at is a restart point that an earlier
        # version wrote there (migration 0015): never a tick.
        last_tick=aware(row.last_tick)
        if row and row.last_tick and row.last_tick != row.restarted_at
        else None,
        last_job_id=row.last_job_id if row else None,
        last_job_status=last_job_status,
        next_tick=spec.next_after(aware(now)) if spec is not None and state == ACTIVE else None,
        ticks=row.ticks if row else 0,
        seen=row is not None,
    )


def overview(alias: str | None = None, now: dt.datetime | None = None) -> list[ScheduleView]:
    """Every schedule the settings declare or the table holds, by name."""
    alias = alias or conf.database()
    now = now or dt.datetime.now(dt.UTC)
    specs = {spec.name: spec for spec in conf.get().schedules}
    rows = {row.name: row for row in Schedule.objects.using(alias).with_last_job_status()}
    return [
        describe(
            name,
            specs.get(name),
            rows.get(name),
            getattr(rows.get(name), "last_job_status", None),
            now,
        )
        for name in sorted(set(specs) | set(rows))
    ]
