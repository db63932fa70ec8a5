"""The argparse types of our commands' options.

Each type turns a bad value into ``argparse.ArgumentTypeError`` with a message
that names what was expected; :class:`~django_pgqueue.management.base.PgQueueCommand`
turns every parser error into a ``CommandError``, which Django prints as a single
line.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

from django_pgqueue import conf, validation
from django_pgqueue.records import FINISHED

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_TIMEDELTA = re.compile(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
FINISHED_STATUSES = FINISHED


def _number[N: (int, float)](
    parse: Callable[[str], N], low: N, high: N, *, inclusive: bool, expected: str
) -> Callable[[str], N]:
    """An argparse type: ``parse`` the value and require it above (or at) ``low`` and
    at most ``high`` (the settings' bounds: past them, time and thread arithmetic
    fails later, in the middle of a run)."""

    def convert(value: str) -> N:
        try:
            number = parse(value)
        except ValueError:
            number = None
        # NaN and infinity are floats too, and no sane count of seconds.
        if (
            number is None
            or not math.isfinite(number)
            or not (number >= low if inclusive else number > low)
            or number > high
        ):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
        return number

    convert.__name__ = expected
    return convert


positive_int = _number(
    int,
    1,
    validation.MAX_COUNT,
    inclusive=True,
    expected=f"a whole number from 1 to {validation.MAX_COUNT:,}",
)
non_negative_int = _number(
    int,
    0,
    validation.MAX_COUNT,
    inclusive=True,
    expected=f"a whole number from 0 to {validation.MAX_COUNT:,}",
)
concurrency = _number(
    int,
    1,
    validation.MAX_CONCURRENCY,
    inclusive=True,
    expected=f"a whole number from 1 to {validation.MAX_CONCURRENCY:,}",
)
positive_seconds = _number(
    float,
    0.0,
    validation.MAX_DELAY,
    inclusive=False,
    expected="a number of seconds above 0 (at most ten years)",
)
#: ``--lease``: LEASE's bounds, so a lease too short to outlast a claim is a bad option
#: value (exit status 2) as every other, not an error once the worker starts.
lease_seconds = _number(
    float,
    conf.MIN_LEASE,
    validation.MAX_DELAY,
    inclusive=True,
    expected=f"a number of seconds, at least {conf.MIN_LEASE:g} (at most ten years)",
)
non_negative_seconds = _number(
    float,
    0.0,
    validation.MAX_DELAY,
    inclusive=True,
    expected="a number of seconds, 0 or more (at most ten years)",
)


def prefetch(value: str) -> int | str:
    """``auto`` or a whole number, 0 or more (within int4, as PREFETCH)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return non_negative_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected auto or a whole number from 0 to {validation.MAX_COUNT:,}, got {value!r}"
        ) from None


def _duration(*, zero: bool) -> Callable[[str], float]:
    """An argparse type: ``90``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds;
    0 too when ``zero`` (an age limit: any wait is too long), not for a prune bound,
    where 0 would delete every finished job."""
    lowest = "0 or more" if zero else "above 0"

    def convert(value: str) -> float:
        match = _DURATION.fullmatch(value.strip().lower())
        seconds = float(match[1]) * _UNIT_SECONDS[match[2]] if match else -1.0
        if (spelt := _TIMEDELTA.fullmatch(value.strip())) is not None:
            # str(timedelta): how call_command() passes one for a required option.
            days, hours, minutes, rest = spelt.groups(default="0")
            seconds = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + float(rest)
        if seconds < 0 or (seconds == 0 and not zero) or seconds > validation.MAX_DELAY:
            raise argparse.ArgumentTypeError(
                f"expected a duration {lowest} and at most ten years, such as 30s, 15m, 12h, "
                f"7d or 2w, got {value!r}"
            )
        return seconds

    convert.__name__ = "duration"
    return convert


duration = _duration(zero=False)
age_limit = _duration(zero=True)


def queue_list(value: str) -> tuple[str, ...]:
    queues = tuple(q.strip() for q in value.split(",") if q.strip())
    if not queues or not all(validation.QUEUE.is_valid(q) for q in queues):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated queue names, each {validation.QUEUE.expected}; got {value!r}"
        )
    return queues


def queue_name(value: str) -> str:
    if not validation.QUEUE.is_valid(value):
        raise argparse.ArgumentTypeError(f"expected {validation.QUEUE.expected}, got {value!r}")
    return value


def finished_statuses(value: str) -> tuple[str, ...]:
    statuses = tuple(s.strip() for s in value.split(",") if s.strip())
    if not statuses or set(statuses) - set(FINISHED_STATUSES):
        raise argparse.ArgumentTypeError(
            f"expected one or more of {', '.join(FINISHED_STATUSES)}, comma-separated "
            f"(such as done,dead), got {value!r}"
        )
    return tuple(dict.fromkeys(statuses))


def port(value: str) -> int:
    """A TCP port, 0 to 65535 (0: any free one)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number, 0 to 65535 (0 picks a free port), got {value!r}"
        )
    return number


def worker_id(value: str) -> str:
    if not value.strip() or len(value) > 200 or not validation.storable(value):
        raise argparse.ArgumentTypeError(
            "expected a non-empty worker id of at most 200 chars, in UTF-8 and without NUL"
        )
    return value.strip()


def metrics_address(value: str) -> str:
    """An address for the metrics server to listen on: not empty."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "expected an address such as 127.0.0.1, 0.0.0.0 or ::, got ''"
        )
    return value


def setting_default(key: str) -> str:
    """``PGQUEUE['KEY'], now 10``: where an option's default comes from, and its value."""
    try:
        value = getattr(conf.get(), key)
    except ImproperlyConfigured:  # --help still works; check() reports the settings
        value = next(f.default for f in dataclasses.fields(conf.Settings) if f.name == key)
    if value is None:
        shown = "none"
    elif isinstance(value, float):
        shown = f"{value:g}"
    elif isinstance(value, tuple):
        shown = ",".join(value)
    else:
        shown = str(value)
    return f"PGQUEUE['{key}'], now {shown}"
