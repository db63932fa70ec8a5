"""Typed settings: ``PGQUEUE = {...}`` in Django settings, one attribute per key.

Every default lives here, and every value is checked when read, so a mistake in
settings fails loudly at start-up with the key's name rather than deep inside a
worker.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from functools import cache
from typing import Any, TypeVar

from django.apps import apps
from django.conf import settings as django_settings
from django.core.exceptions import AppRegistryNotReady, ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, models, router

from django_pgqueue import conf_rules, validation
from django_pgqueue.periodic import spec as periodic
from django_pgqueue.unknown_keys import unknown_keys_text


@dataclasses.dataclass(frozen=True)
class Settings:
    """django-pgqueue's settings; see docs/reference/settings for each key."""

    #: Database alias of the job table (enqueue, workers, commands, the Tasks backend);
    #: ``None``: the one the database routers' ``db_for_write(Job)`` picks.
    DATABASE: str | None = None
    #: Database alias of the worker's one session connection (LISTEN and its worker
    #: id's lock): one that reaches PostgreSQL without a transaction pooler.
    #: ``None``: the worker uses DATABASE.
    LISTEN_DATABASE: str | None = None
    #: Queues a worker serves when ``--queues`` is not given; ``None`` serves every queue.
    QUEUES: tuple[str, ...] | None = None
    #: Queue of a job enqueued without one.
    DEFAULT_QUEUE: str = "default"
    #: Attempts a job gets before it is buried as ``dead``.
    MAX_ATTEMPTS: int = 3
    #: Seconds a claim is leased for; the heartbeat renews it while the job runs.
    LEASE: float = 60.0
    #: Seconds between lease renewals; ``None`` means a third of LEASE.
    HEARTBEAT_INTERVAL: float | None = None
    #: Jobs one worker process runs at once (threads).
    CONCURRENCY: int = 10
    #: Jobs claimed ahead of free threads, so short jobs never wait for a claim:
    #: ``"auto"`` follows the jobs' durations (none for long jobs), or a fixed number.
    PREFETCH: int | str = "auto"
    #: Longest sleep between polls of an idle worker, in seconds.
    POLL_INTERVAL: float = 2.0
    #: Seconds running jobs get to finish after SIGTERM before they are put back.
    SHUTDOWN_TIMEOUT: float = 30.0
    #: Seconds a job may run before it is recorded as failed; ``None``: no limit.
    JOB_TIMEOUT: float | None = None
    #: Seconds between reaper passes inside each worker.
    REAP_INTERVAL: float = 15.0
    #: Delete done/dead jobs older than this many seconds; ``None`` keeps them.
    PRUNE_AFTER: float | None = None
    #: Seconds between prune passes inside a worker (when PRUNE_AFTER is set).
    PRUNE_INTERVAL: float = 3600.0
    #: First retry delay in seconds; it doubles with each attempt.
    BACKOFF_BASE: float = 5.0
    #: Longest retry delay in seconds.
    BACKOFF_MAX: float = 3600.0
    #: Fraction of the delay added or taken away at random (0 to 1).
    BACKOFF_JITTER: float = 0.2
    #: Times a job may snooze (``raise Snooze(...)``); the next Snooze buries it.
    MAX_SNOOZES: int = 100
    #: Send NOTIFY on enqueue and LISTEN in workers; polling is the fallback.
    LISTEN_NOTIFY: bool = True
    #: The NOTIFY channel.
    CHANNEL: str = "pgqueue_jobs"
    #: The worker's own statements (claim, complete, fail, heartbeat, reap) commit
    #: without waiting for the WAL flush. Never applies to enqueues or to jobs.
    ASYNC_COMMIT: bool = True
    #: Bind parameters server-side and prepare the queue's statements once per
    #: connection. Turn off behind a pooler that cannot keep prepared statements.
    PREPARE: bool = True
    #: Modules outside the installed apps that workers may import to find tasks
    #: (each with its submodules), such as a project's own ``mysite.tasks``.
    TASK_MODULES: tuple[str, ...] = ()
    #: Port a worker serves ``/metrics`` and ``/healthz`` on (needs the ``metrics``
    #: extra); ``None``: no metrics, and no metrics code loaded. 0 picks a free port.
    METRICS_PORT: int | None = None
    #: Address the metrics server listens on.
    METRICS_ADDR: str = "127.0.0.1"
    #: Seconds between recomputations of the queue gauges (one worker at a time).
    METRICS_REFRESH_INTERVAL: float = 15.0
    #: Periodic jobs: schedule name to ``{"task": ..., "cron": ... or "every": ...}``
    #: (see docs/periodic.md); every worker enqueues their ticks, each exactly once.
    PERIODIC: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _check(field.name, getattr(self, field.name))
        if rule := conf_rules.broken(self):  # the rules between keys (conf_rules.RULES)
            raise _fail(rule.key, getattr(self, rule.key), rule.expected(self))

    @property
    def heartbeat_interval(self) -> float:
        return self.HEARTBEAT_INTERVAL or self.LEASE / 3

    @functools.cached_property
    def schedules(self) -> tuple[periodic.ScheduleSpec, ...]:
        """PERIODIC's entries, checked (they were when the settings were read), parsed
        once: the admin's job list and every worker start read them."""
        return periodic.parse_all(self.PERIODIC)


#: The shortest LEASE: a claim must outlast the moment from claiming a job to starting it.
MIN_LEASE = 0.1
#: The keys given in seconds, which a timedelta may give too.
DURATIONS = frozenset(
    {
        "LEASE",
        "HEARTBEAT_INTERVAL",
        "POLL_INTERVAL",
        "SHUTDOWN_TIMEOUT",
        "JOB_TIMEOUT",
        "REAP_INTERVAL",
        "PRUNE_AFTER",
        "PRUNE_INTERVAL",
        "BACKOFF_BASE",
        "BACKOFF_MAX",
        "METRICS_REFRESH_INTERVAL",
    }
)


def valid_port(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= 65535


def _fail(key: str, value: Any, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"PGQUEUE[{key!r}] = {value!r}: expected {expected}")


def _seconds(value: Any, *, zero: bool) -> bool:
    # Bounded above too: PostgreSQL's interval arithmetic overflows on absurd values.
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (value >= 0 if zero else value > 0)
        and value <= validation.MAX_DELAY
    )


#: Keys whose values are job options: checked by the job option's own rule.
_OPTION_RULES: dict[str, validation.Rule[Any]] = {
    "MAX_ATTEMPTS": validation.ATTEMPTS,
    "DEFAULT_QUEUE": validation.QUEUE,
    "BACKOFF_BASE": validation.BACKOFF,
    "CHANNEL": validation.CHANNEL,
}


def _check(key: str, value: Any) -> None:
    positive = {
        "LEASE",
        "POLL_INTERVAL",
        "REAP_INTERVAL",
        "PRUNE_INTERVAL",
        "METRICS_REFRESH_INTERVAL",
    }
    optional_positive = {"HEARTBEAT_INTERVAL", "JOB_TIMEOUT", "PRUNE_AFTER"}
    rule = _OPTION_RULES.get(key)
    if rule is not None:
        if not rule.is_valid(value):
            raise _fail(key, value, rule.expected)
    elif key in positive | optional_positive:
        if value is None and key in optional_positive:
            return
        if not _seconds(value, zero=False):
            raise _fail(key, value, "a number of seconds greater than 0 (at most ten years)")
        if key == "LEASE" and value < MIN_LEASE:  # it would lapse before the job starts
            raise _fail(key, value, f"at least {MIN_LEASE:g} seconds")
    elif key == "BACKOFF_MAX":
        if not _seconds(value, zero=False) or not validation.BACKOFF.is_valid(value):
            raise _fail(key, value, "a number of seconds above 0 and at most a year")
    elif key == "SHUTDOWN_TIMEOUT":
        if not _seconds(value, zero=True):
            raise _fail(key, value, "a number of seconds, 0 or more (at most ten years)")
    elif key == "PREFETCH":
        if value != "auto" and (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 <= value <= validation.MAX_COUNT
        ):
            raise _fail(key, value, f'"auto" or a whole number from 0 to {validation.MAX_COUNT:,}')
    elif key == "MAX_SNOOZES":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
            raise _fail(key, value, "a whole number from 0 to 1,000,000")
    elif key == "CONCURRENCY":
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 1 <= value <= validation.MAX_CONCURRENCY
        ):
            raise _fail(key, value, f"a whole number from 1 to {validation.MAX_CONCURRENCY:,}")
    elif key == "BACKOFF_JITTER":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise _fail(key, value, "a fraction between 0 and 1")
    elif key in {"LISTEN_NOTIFY", "PREPARE", "ASYNC_COMMIT"}:
        if not isinstance(value, bool):
            raise _fail(key, value, "True or False")
    elif key == "QUEUES":
        if value is not None and (
            not isinstance(value, tuple)
            or not value
            or not all(validation.QUEUE.is_valid(q) for q in value)
        ):
            raise _fail(
                key,
                value,
                "None or a non-empty list of queue names (1-64 letters, digits, _ . : -)",
            )
    elif key == "METRICS_ADDR" and (not isinstance(value, str) or not value):
        raise _fail(key, value, "a non-empty string")
    elif (
        key == "LISTEN_DATABASE" and value is not None and (not isinstance(value, str) or not value)
    ):
        raise _fail(key, value, "None, a database alias or a DSN (a non-empty string)")
    elif key == "METRICS_PORT" and value is not None and not valid_port(value):
        raise _fail(key, value, "None or a port number, 0 to 65535 (0 picks a free port)")
    elif key == "DATABASE" and value is not None and (not isinstance(value, str) or not value):
        raise _fail(key, value, "None or a non-empty database alias")
    elif key == "PERIODIC":
        periodic.parse_all(value)  # InvalidSchedule (ImproperlyConfigured) names the entry
    elif key == "TASK_MODULES" and (
        not isinstance(value, tuple)
        or not all(
            isinstance(m, str) and m and all(p.isidentifier() for p in m.split(".")) for m in value
        )
    ):
        raise _fail(key, value, "a list of dotted module names")


def check_value(key: str, value: Any) -> None:
    """Raise ImproperlyConfigured unless ``value`` is valid for ``PGQUEUE[key]``."""
    _check(key, value)


def _build(raw: Any) -> Settings:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"PGQUEUE must be a dict, not {type(raw).__name__}")
    known = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ImproperlyConfigured(unknown_keys_text(unknown, known))
    return Settings(**{key: normalised(key, value) for key, value in raw.items()})


def normalised(key: str, value: Any) -> Any:
    """``value`` as ``PGQUEUE[key]`` holds it, before its rule checks it: a timedelta as
    its seconds (as run_after and "every" take it), a list of names as a tuple."""
    if key in DURATIONS and isinstance(value, dt.timedelta):
        return value.total_seconds()
    if key in {"QUEUES", "TASK_MODULES"} and isinstance(value, list | tuple):
        return tuple(value)
    return value


@cache
def get() -> Settings:
    """The validated settings, read once and re-read when a test overrides them."""
    return _build(getattr(django_settings, "PGQUEUE", None))


def database() -> str:
    """The alias jobs are written to, claimed from and read from: ``PGQUEUE["DATABASE"]``
    when set, else what the database routers' ``db_for_write(Job)`` says (with no
    router, or none with an opinion, ``"default"``).

    Asked with the model only, no instance, on every enqueue and once when a worker
    starts: a router must give the same answer in both places, or jobs would be
    written where no worker claims them.
    """
    alias = get().DATABASE
    if alias is not None:
        return alias
    if not router.routers:  # the common case, and every enqueue asks
        return DEFAULT_DB_ALIAS
    try:
        model = apps.get_model("django_pgqueue", "Job")
    except (LookupError, AppRegistryNotReady):  # not installed (checks report it), or too early
        return DEFAULT_DB_ALIAS
    return str(router.db_for_write(model))


_M = TypeVar("_M", bound=models.Model)


class OnJobDatabase(models.Manager[_M]):
    """A manager of this app's tables: its querysets go to the job table's database
    (:func:`database`), unless ``db_manager()`` or ``using()`` names another alias.
    Workers write every table of the app there, whatever the routers say of each
    model, so reads (the admin's, your code's) look there too."""

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(self._alias(None))

    def _alias(self, using: str | None) -> str:
        """Where a method of the manager acts: see :func:`where`."""
        return where(using, self._db)


def where(using: str | None, current: str | None) -> str:
    """The alias an app's manager or model instance acts on: the ``using`` its caller
    named, else the alias it already has (a ``db_manager()``'s, or the one an instance
    was read from), else :func:`database`."""
    return using or current or database()


def _reset(*, setting: str, **kwargs: Any) -> None:
    # TIME_ZONE too: it is the default time zone of PERIODIC's cron entries.
    if setting in {"PGQUEUE", "TIME_ZONE"}:
        get.cache_clear()


setting_changed.connect(_reset)
