"""One rule per job option, shared by every way in.

The direct API, the Tasks backend, the system checks, the settings and the
management commands all check an option with the same :class:`Rule`, so a value
is accepted or refused the same way everywhere and the message is worded once.
Each caller frames the message for its context (``queue 'x y' must be ...`` at
enqueue, ``PGQUEUE['DEFAULT_QUEUE'] = 'x y': expected ...`` in settings) and
raises its own exception class; the rule itself raises :class:`InvalidJob`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from django_pgqueue import wording
from django_pgqueue.exceptions import InvalidJob

MIN_PRIORITY, MAX_PRIORITY = -100, 100
#: Longest task path, unique_key and concurrency_key (the columns' width).
MAX_KEY = 255
MAX_ATTEMPTS = 1_000_000
MAX_DELAY = 10 * 365 * 86400.0
#: The most job threads one worker process may run (CONCURRENCY, --concurrency).
MAX_CONCURRENCY = 1000
#: The largest count a statement takes (a batch size: PostgreSQL's int4).
MAX_COUNT = 2**31 - 1
MAX_BACKOFF = 365 * 86400.0
#: PostgreSQL truncates identifiers (a NOTIFY channel is one) to 63 bytes.
MAX_CHANNEL_BYTES = 63
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def stored_backoff(value: float | None) -> float | None:
    """A row's backoff as the worker reads it: NaN and Infinity (written by hand;
    enqueue refuses both, and the column's check lets NaN >= 0 through) say no
    number of seconds, so they count as none (PGQUEUE["BACKOFF_BASE"])."""
    return value if value is None or math.isfinite(value) else None


def storable(text: str) -> bool:
    """PostgreSQL stores neither NUL characters nor lone surrogates."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True  # no surrogates, and no copy to find out
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _whole(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def run_key_part(value: Any) -> bool:
    """Whether ``value`` may be a job id or a run number: an int the bigint columns hold."""
    return _whole(value, -(2**63), 2**63 - 1)


def _seconds(value: Any, limit: float) -> float | None:
    """``value`` (a number or a timedelta) in seconds if it is in 0..limit, else None."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        # (No math.isfinite: it overflows on an int past a float's range, 10**400;
        # the range refuses NaN and the infinities as well.)
        or not 0 <= value <= limit
    ):
        return None
    return float(value)


@dataclasses.dataclass(frozen=True, slots=True)
class Rule[T]:
    """How one option is checked: ``convert`` returns the value to use, or None to refuse."""

    name: str
    expected: str
    convert: Callable[[Any], T | None]
    #: How a refused value is described; {name}, {value} and {expected} are filled in.
    refusal: str = "{name} {value!r} must be {expected}"

    def __call__(self, value: Any, name: str | None = None) -> T:
        """The checked value, or :class:`InvalidJob` naming it."""
        converted = self.convert(value)
        if converted is None:
            raise InvalidJob(self.message(value, name))
        return converted

    def message(self, value: Any, name: str | None = None) -> str:
        return self.refusal.format(name=name or self.name, value=value, expected=self.expected)

    def is_valid(self, value: Any) -> bool:
        return self.convert(value) is not None


def _task_path(value: Any) -> str | None:
    if (
        isinstance(value, str)
        and "." in value.strip(".")
        and len(value) <= MAX_KEY
        and storable(value)
    ):
        return value
    return None


def _queue(value: Any) -> str | None:
    return value if isinstance(value, str) and QUEUE_NAME.fullmatch(value) else None


def _key(value: Any) -> str | None:
    if isinstance(value, str) and value and len(value) <= MAX_KEY and storable(value):
        return value
    return None


def aware(value: dt.datetime) -> dt.datetime:
    """``value`` with its time zone. A naive datetime, as Django reads and writes them
    with ``USE_TZ = False``, is in ``TIME_ZONE``: the database connection's zone."""
    if timezone.is_naive(value):
        return timezone.make_aware(value, timezone.get_default_timezone())
    return value


#: The moments a job may be given: a day inside Python's years 1 to 9999 in UTC, so
#: that the stored time reads back as a datetime in any session time zone
#: (PostgreSQL would store year 10000 or a year BC, which nothing could read back).
EARLIEST = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
LATEST = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)


def _run_at(value: Any) -> dt.datetime | None:
    if not isinstance(value, dt.datetime):
        return None
    if timezone.is_naive(value) and settings.USE_TZ:
        return None
    try:
        moment = aware(value)
        in_range = EARLIEST <= moment.astimezone(dt.UTC) <= LATEST
    except (OverflowError, ValueError):  # its UTC time is before year 1 or after 9999
        return None
    return moment if in_range else None


def _channel(value: Any) -> str | None:
    if (
        isinstance(value, str)
        and value
        and storable(value)
        and len(value.encode("utf-8")) <= MAX_CHANNEL_BYTES
    ):
        return value
    return None


class _TaskPathRule(Rule[str]):
    def message(self, value: Any, name: str | None = None) -> str:
        path = getattr(value, "module_path", None)
        if isinstance(path, str) and not isinstance(value, str):  # a django.tasks Task
            return (
                f"{value.__class__.__name__} {path!r} is a django.tasks Task: enqueue it with "
                f"its own .enqueue(...), or pass its path {path!r} to enqueue it through "
                "django-pgqueue's own API"
            )
        return super().message(value, name)


TASK_PATH: Rule[str] = _TaskPathRule(
    "task", f"a dotted path (at most {MAX_KEY} chars) or a registered task", _task_path
)
QUEUE: Rule[str] = Rule(
    "queue",
    "a queue name (1-64 letters, digits, _ . : -)",
    _queue,
    "{name} {value!r} is not a valid queue name (1-64 letters, digits, _ . : -)",
)
PRIORITY: Rule[int] = Rule(
    "priority",
    f"a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}",
    lambda v: v if _whole(v, MIN_PRIORITY, MAX_PRIORITY) else None,
)
ATTEMPTS: Rule[int] = Rule(
    "max_attempts",
    f"a whole number from 1 to {MAX_ATTEMPTS:,}",
    lambda v: v if _whole(v, 1, MAX_ATTEMPTS) else None,
)
BACKOFF: Rule[float] = Rule(
    "backoff",
    f"a number of seconds from 0 to {MAX_BACKOFF:,.0f} (a year)",
    lambda v: _seconds(v, MAX_BACKOFF),
)
DELAY: Rule[float] = Rule(
    "delay",
    f"a number of seconds from 0 to {MAX_DELAY:,.0f} (ten years)",
    lambda v: _seconds(v, MAX_DELAY),
)
RUN_AT: Rule[dt.datetime] = Rule(
    "run_at",
    "a timezone-aware datetime (or a naive one with USE_TZ = False) "
    "from 0001-01-02 to 9999-12-30 UTC",
    _run_at,
)
KEY: Rule[str] = Rule(
    "key",
    f"a non-empty string of at most {MAX_KEY} chars, without NUL characters or lone surrogates",
    _key,
)
CHANNEL: Rule[str] = Rule(
    "channel",
    f"a non-empty name of at most {MAX_CHANNEL_BYTES} bytes (PostgreSQL cuts longer identifiers)",
    _channel,
)


def _exception_classes(value: Any) -> tuple[type[BaseException], ...] | None:
    classes = tuple(value) if isinstance(value, list | tuple) else (value,)
    if all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        return classes
    return None


#: retry_on and discard_on: what a task's retry policy matches (isinstance).
EXCEPTIONS: Rule[tuple[type[BaseException], ...]] = Rule(
    "exceptions", "an exception class or a tuple of exception classes", _exception_classes
)


#: The options an enqueue takes beside the task and its arguments, each with the
#: rule its value must pass.
OPTION_RULES: dict[str, Rule[Any]] = {
    "queue": QUEUE,
    "priority": PRIORITY,
    "run_at": RUN_AT,
    "delay": DELAY,
    "max_attempts": ATTEMPTS,
    "unique_key": KEY,
    "concurrency_key": KEY,
    "backoff": BACKOFF,
    "retry_on": EXCEPTIONS,
    "discard_on": EXCEPTIONS,
}
_OPTION_NAMES = frozenset(OPTION_RULES)
#: Those a Tasks-framework Task has no field for, which a PgQueueTask carries beside
#: Django's ``queue_name``, ``priority`` and ``run_after``.
TASK_EXTRAS = ("max_attempts", "unique_key", "concurrency_key", "backoff", "retry_on", "discard_on")


def check_options(options: dict[str, Any], *, values: bool = True) -> None:
    """Refuse an option the queue does not know (and, with ``values``, a bad value)
    where it is given: ``@task(...)``, ``.using(...)``, an enqueue."""
    if not options.keys() <= _OPTION_NAMES:
        unknown = sorted(options.keys() - _OPTION_NAMES)
        hint = (
            " (Django's run_after is run_at= or delay= here)"
            if "run_after" in unknown
            else " (Django's queue_name is queue= here)"
            if "queue_name" in unknown
            else wording.did_you_mean(unknown, _OPTION_NAMES)
        )
        raise InvalidJob(
            f"unknown option {', '.join(map(repr, unknown))}{hint}: the options are "
            f"{', '.join(OPTION_RULES)}"
        )
    if values:
        for name, value in options.items():
            if value is not None:
                OPTION_RULES[name](value, name)
