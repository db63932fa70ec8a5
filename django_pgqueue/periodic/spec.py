"""One entry of ``PGQUEUE["PERIODIC"]``, checked, and the instants it ticks at.

A tick is a pure function of the entry: a cron expression in its time zone
(read by ``cronsim``; Debian cron's rules across DST changes, see ``ticks``), or ``every`` N
seconds counted from the Unix epoch. Every worker computes the same instants,
so the database can tell two workers enqueueing the same tick apart from two
ticks (see ``queries.sql``, ``schedule_tick``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
import zoneinfo
from collections.abc import Iterator, Mapping
from typing import Any

from cronsim import CronSim, CronSimError
from django.utils import timezone

from django_pgqueue import validation
from django_pgqueue.exceptions import InvalidJob, InvalidSchedule
from django_pgqueue.periodic import ticks

#: catch_up values: what a schedule enqueues for the ticks no worker was up for.
CATCH_UP = ("latest", "none", "all")
#: The most ticks one check enqueues for one schedule ("all" catches up this many).
MAX_TICKS = 100
#: Longest schedule name (the column's width).
MAX_NAME = 200
#: The longest cron expression the schedule table stores.
MAX_EXPRESSION = 255
#: Shortest interval of an ``every`` schedule: the scheduler looks once a second.
MIN_EVERY = 1.0
KEYS = frozenset(
    {
        "task",
        "cron",
        "every",
        "timezone",
        "args",
        "kwargs",
        "queue",
        "priority",
        "max_attempts",
        "enabled",
        "catch_up",
    }
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    """A periodic job as settings declare it."""

    name: str
    task: str
    cron: str | None
    every: float | None
    timezone: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    enabled: bool = True
    catch_up: str = "latest"

    @property
    def expression(self) -> str:
        """What the schedule row and the listings show: the cron line, or ``every 30s``."""
        if self.cron is not None:
            return self.cron
        every = float(self.every or 0)  # one of the two is set (parse)
        # Whole seconds as such (every 2592000s, not 2.592e+06s); fractions as given.
        return f"every {int(every)}s" if every == int(every) else f"every {every!r}s"

    def _zone(self) -> dt.tzinfo:
        zone = named_zone(self.timezone)
        assert zone is not None  # parse() took only known zones
        return zone

    def after(self, moment: dt.datetime) -> Iterator[dt.datetime]:
        """The ticks strictly after ``moment``, in order (aware datetimes, UTC)."""
        if self.every is not None:
            step = round(self.every * 1_000_000)
            since = (moment - _EPOCH) // dt.timedelta(microseconds=1)
            first = (since // step + 1) * step
            for n in itertools.count():
                yield _EPOCH + dt.timedelta(microseconds=first + n * step)
        yield from ticks.after(expanded(self.cron or ""), self._zone(), moment)

    def at_or_before(self, moment: dt.datetime) -> Iterator[dt.datetime]:
        """The ticks at or before ``moment``, newest first: those :meth:`after` gives."""
        if self.every is not None:
            step = round(self.every * 1_000_000)
            since = (moment - _EPOCH) // dt.timedelta(microseconds=1)
            last = since // step * step
            for n in itertools.count():
                yield _EPOCH + dt.timedelta(microseconds=last - n * step)
        yield from ticks.at_or_before(expanded(self.cron or ""), self._zone(), moment)

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first tick after ``moment``; StopIteration for none (see :meth:`next_or_none`)."""
        return next(self.after(moment))

    def next_or_none(self, moment: dt.datetime) -> dt.datetime | None:
        """The first tick after ``moment``; None when none comes (settings refuse such an
        expression, but the zone's rules may change, or the tick lie past year 9999)."""
        try:
            return next(self.after(moment), None)
        except OverflowError:
            return None

    def between(self, start: dt.datetime, end: dt.datetime, limit: int) -> list[dt.datetime]:
        """The newest ``limit`` ticks in (start, end], oldest first."""
        back = itertools.takewhile(lambda t: t > start, self.at_or_before(end))
        return list(itertools.islice(back, max(limit, 0)))[::-1]


def invalid(name: str, message: str) -> InvalidSchedule:
    """The error for entry ``name`` of PERIODIC, prefixed with where it is."""
    return InvalidSchedule(f"PGQUEUE['PERIODIC'][{name!r}]: {message}")


def _every(name: str, value: Any) -> float:
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not MIN_EVERY <= seconds <= validation.MAX_DELAY
    ):
        raise invalid(
            name,
            f"'every' = {value!r}: expected a number of seconds (or a timedelta) "
            f"from {MIN_EVERY:g} to ten years",
        )
    return float(seconds)


#: cron's nicknames, which cronsim does not read, as the expressions they stand for.
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def named_zone(name: str) -> dt.tzinfo | None:
    """The time zone called ``name``; None when there is none (a directory of the
    zone database, such as ``America``, is none either)."""
    if name == "UTC":
        return dt.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return None


def expanded(cron: str) -> str:
    """``cron`` with a nickname (``@daily``) replaced by its expression."""
    return NICKNAMES.get(cron.strip().lower(), cron)


#: Zone names each host reads its own way (links the host's zone files make): workers
#: on hosts set differently would each tick a cron expression at their own instants.
HOST_ZONES = frozenset({"localtime", "posixrules"})


def _cron(name: str, value: Any, zone: str) -> str:
    if not isinstance(value, str):
        raise invalid(name, f"'cron' = {value!r}: expected a cron expression such as '0 3 * * *'")
    if zone.lower() in HOST_ZONES:
        raise invalid(
            name,
            f"the time zone {zone!r} is each host's own: workers on hosts set differently "
            "would each enqueue its ticks at their own instants; give 'timezone' a zone "
            "name such as 'Europe/Paris'",
        )
    if len(value) > MAX_EXPRESSION:  # the schedule table's column
        raise invalid(name, f"'cron' = {value!r} is longer than {MAX_EXPRESSION} chars")
    try:
        CronSim(expanded(value), dt.datetime.now(named_zone(zone)))
    except (CronSimError, ValueError) as exc:
        raise invalid(name, f"'cron' = {value!r} is not a valid cron expression: {exc}") from None
    # cron reads it, yet its every time may be one the clocks skip: a worker would
    # look for its next tick for ever.
    where = named_zone(zone) or dt.UTC
    if next(ticks.after(expanded(value), where, dt.datetime.now(dt.UTC)), None) is None:
        raise invalid(
            name,
            f"'cron' = {value!r} never ticks in {zone!r}: each time it names is one the "
            f"clocks skip (none in the next {ticks.HORIZON.days // 366} years)",
        )
    return value


def default_zone() -> str:
    """The zone of an entry without ``timezone``: TIME_ZONE's, by the name Django gives
    it, or by TIME_ZONE itself where that name is no zone (Django names a zone of one
    fixed offset by its abbreviation: ``Etc/GMT+5`` is ``-05``) or that is a host's
    own zone (Django names the ``localtime`` of a host set to UTC ``UTC``: another
    host would not)."""
    key = getattr(timezone.get_default_timezone(), "key", None)
    name = timezone.get_default_timezone_name()
    if key and (key.lower() in HOST_ZONES or named_zone(name) is None):
        return str(key)
    return name


def _zone(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(name, f"'timezone' = {value!r}: expected a time zone name such as 'UTC'")
    if named_zone(value) is None:
        raise invalid(name, f"'timezone' = {value!r} is not a known time zone")
    return value


def _option(name: str, key: str, entry: Mapping[str, Any], rule: validation.Rule[Any]) -> Any:
    value = entry.get(key)
    if value is None:
        return None
    try:
        return rule(value, key)
    except InvalidJob as exc:
        raise invalid(name, str(exc)) from None


def parse(name: Any, entry: Any) -> ScheduleSpec:
    """The checked entry; InvalidSchedule naming it and the bad key otherwise.

    Only what can be told without importing anything: that the task exists and
    takes these arguments is the system check's part (``periodic.calls``).
    """
    if (
        not isinstance(name, str)
        or not name
        or len(name) > MAX_NAME
        or not validation.storable(name)
    ):
        raise InvalidSchedule(
            f"PGQUEUE['PERIODIC'] key {name!r}: expected a schedule name "
            f"(a non-empty string of at most {MAX_NAME} chars, no NUL)"
        )
    if not isinstance(entry, Mapping):
        raise invalid(name, f"expected a dict with 'task' and 'cron' or 'every', not {entry!r}")
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise invalid(
            name,
            f"unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(KEYS))}",
        )
    task = entry.get("task")
    if not isinstance(task, str) or not validation.TASK_PATH.is_valid(task):
        raise invalid(name, f"'task' = {task!r}: expected the dotted path of a task")
    if ("cron" in entry) == ("every" in entry):
        raise invalid(name, "give one of 'cron' (an expression) or 'every' (seconds)")
    zone = _zone(name, entry.get("timezone", default_zone()))
    args, kwargs = entry.get("args", ()), entry.get("kwargs", {})
    if isinstance(args, str | bytes) or not isinstance(args, list | tuple):
        raise invalid(name, f"'args' = {args!r}: expected a list")
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise invalid(name, f"'kwargs' = {kwargs!r}: expected a dict with string keys")
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise invalid(name, f"'enabled' = {enabled!r}: expected True or False")
    catch_up = entry.get("catch_up", "latest")
    if catch_up not in CATCH_UP:
        raise invalid(
            name, f"'catch_up' = {catch_up!r}: expected one of {', '.join(map(repr, CATCH_UP))}"
        )
    return ScheduleSpec(
        name=name,
        task=task,
        cron=_cron(name, entry["cron"], zone) if "cron" in entry else None,
        every=_every(name, entry["every"]) if "every" in entry else None,
        timezone=zone,
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=_option(name, "queue", entry, validation.QUEUE),
        priority=_option(name, "priority", entry, validation.PRIORITY),
        max_attempts=_option(name, "max_attempts", entry, validation.ATTEMPTS),
        enabled=enabled,
        catch_up=catch_up,
    )


def parse_all(raw: Any) -> tuple[ScheduleSpec, ...]:
    """Every entry of ``PGQUEUE["PERIODIC"]``, in the order settings give them."""
    if not isinstance(raw, Mapping):
        raise InvalidSchedule(
            f"PGQUEUE['PERIODIC'] = {raw!r}: expected a dict of schedule names to entries"
        )
    specs, problems = [], []
    for name, entry in raw.items():  # every bad entry named, not only the first
        try:
            specs.append(parse(name, entry))
        except InvalidSchedule as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidSchedule("\n".join(problems))
    return tuple(specs)
