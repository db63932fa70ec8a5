"""What operators read about schedules (``manage.py schedules``, the admin): the
settings' entries and the table's rows side by side, with each schedule's last
tick, its job's status and its next tick.

A row written by hand may hold a time Python cannot (``infinity``, a year BC):
it is read as the nearest (:mod:`django_pgqueue.tolerant`) and shown as out of
range, and the workers count it as none. A last tick ahead of the clock (a
worker's clock running fast) holds the schedule until then: the listing says so,
and gives the tick that comes after it as the next one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.utils import timezone

from django_pgqueue import conf
from django_pgqueue.periodic.models import Schedule
from django_pgqueue.periodic.spec import ScheduleSpec, named_zone
from django_pgqueue.tolerant import out_of_range, readable
from django_pgqueue.validation import aware

#: A schedule's state, as listings say it.
ACTIVE = "active"
DISABLED = "disabled"  # by an operator (admin or command), kept in the database
OFF_IN_SETTINGS = "off in settings"  # "enabled": False in PGQUEUE["PERIODIC"]
REMOVED = "removed"  # no longer in the settings of the latest worker to start
NOT_IN_SETTINGS = "not in these settings"  # configured, but these settings lack it
#: How a time of the row that the workers count as none is shown.
OUT_OF_RANGE = "out of range (ignored)"
#: A last tick (or restart) further ahead of the clock than this is said to hold
#: the schedule (a worker's clock may be a little ahead: the next tick tells that).
AHEAD = dt.timedelta(minutes=1)


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
    #: The row's last tick is a time no worker writes (a row written by hand:
    #: ``infinity``, a year BC): the workers count it as none (last_tick is None).
    last_tick_out_of_range: bool = False
    #: An active schedule's last tick (or restart), when it is ahead of the clock by
    #: more than :data:`AHEAD`: no tick up to it is enqueued (next_tick comes after it).
    held_until: dt.datetime | None = None

    def as_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        for key in ("last_tick", "next_tick", "held_until"):
            moment = data[key]
            data[key] = moment.isoformat() if moment is not None else None
        return data

    def state_text(self) -> str:
        """The state, and why an active schedule enqueues nothing for now."""
        if self.held_until is None:
            return self.state
        held_by = "last tick" if self.held_until == self.last_tick else "restart"
        return f"{self.state} (held: its {held_by} is ahead of the clock)"

    def last_tick_text(self) -> str:
        """The last tick in the schedule's own time zone, or why it is not shown."""
        if self.last_tick_out_of_range:
            return OUT_OF_RANGE
        return local_moment(self.last_tick, self.timezone)


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


def _next_tick(spec: ScheduleSpec, after: dt.datetime) -> dt.datetime | None:
    """The schedule's first tick after ``after``; None past what Python's dates hold
    (a last tick written by hand in year 9999), or when none comes."""
    return spec.next_or_none(after)


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
    now = aware(now)
    last_tick = row.last_tick if row else None
    ignored = last_tick is not None and out_of_range(last_tick)
    # Where ticking goes on, as the workers read the row (schedule_tick): no tick
    # at or before its last tick or its restart, unless no worker wrote that time.
    written = (last_tick, row.restarted_at) if row else ()
    marks = [aware(t) for t in written if t is not None and not out_of_range(t)]
    resume = max([now, *marks])
    return ScheduleView(
        name=name,
        task=source.task if source is not None else "",
        expression=source.expression if source is not None else "",
        timezone=source.timezone if source is not None else "",
        state=state,
        # A last_tick equal to restarted_at is a restart point that an earlier
        # version wrote there (migration 0015): never a tick.
        last_tick=aware(last_tick)
        if row and last_tick and not ignored and last_tick != row.restarted_at
        else None,
        last_job_id=row.last_job_id if row else None,
        last_job_status=last_job_status,
        next_tick=_next_tick(spec, resume) if spec is not None and state == ACTIVE else None,
        ticks=row.ticks if row else 0,
        seen=row is not None,
        last_tick_out_of_range=ignored,
        held_until=resume if state == ACTIVE and resume - now > AHEAD else None,
    )


def overview(alias: str | None = None, now: dt.datetime | None = None) -> list[ScheduleView]:
    """Every schedule the settings declare or the table holds, by name."""
    alias = alias or conf.database()
    now = now or dt.datetime.now(dt.UTC)
    specs = {spec.name: spec for spec in conf.get().schedules}
    with readable(alias):  # a row written by hand with a time Python cannot hold
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
