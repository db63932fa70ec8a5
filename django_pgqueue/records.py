"""The values the queue passes around: a job to enqueue, a claimed job, outcomes.

Plain frozen dataclasses with no database access; ``JobSpec.build`` is where
every enqueue option is validated before anything is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from django_pgqueue import conf
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.jsonargs import dumps

MIN_PRIORITY, MAX_PRIORITY = -100, 100
# Bounds the columns (and timestamp arithmetic) can hold, checked before writing.
MAX_KEY = 255
MAX_ATTEMPTS = 1_000_000
MAX_DELAY = 10 * 365 * 86400.0
MAX_BACKOFF = 365 * 86400.0


def _seconds_ok(value: Any, limit: float) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value) and 0 <= value <= limit)


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to enqueue, validated."""

    task: str
    args: str
    kwargs: str
    queue: str
    priority: int
    max_attempts: int
    run_at: dt.datetime | None
    unique_key: str | None
    concurrency_key: str | None
    backoff: float | None

    @classmethod
    def build(cls, task: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
              **options: Any) -> JobSpec:
        """Validate one job. ``task`` is a dotted path or a registered task, whose own
        options (``@task(queue=..., max_attempts=...)``) are the defaults."""
        return cls._build(task, args, kwargs, **{**getattr(task, "options", {}), **options})

    @classmethod
    def _build(cls, task: Any, args: Sequence[Any], kwargs: dict[str, Any] | None, *,
               queue: str | None = None, priority: int = 0, run_at: dt.datetime | None = None,
               delay: float | dt.timedelta | None = None, max_attempts: int | None = None,
               unique_key: str | None = None, concurrency_key: str | None = None,
               backoff: float | dt.timedelta | None = None) -> JobSpec:
        settings = conf.get()
        path = task if isinstance(task, str) else getattr(task, "path", None)
        if not isinstance(path, str) or "." not in path or len(path) > MAX_KEY:
            raise InvalidJob(f"task must be a dotted path (at most {MAX_KEY} chars) or a "
                             f"registered task, not {task!r}")
        queue = settings.DEFAULT_QUEUE if queue is None else queue
        if not isinstance(queue, str) or not conf.QUEUE_NAME_RE.match(queue):
            raise InvalidJob(f"queue {queue!r} is not a valid queue name "
                             "(1-64 letters, digits, _ . : -)")
        if (isinstance(priority, bool) or not isinstance(priority, int)
                or not MIN_PRIORITY <= priority <= MAX_PRIORITY):
            raise InvalidJob(f"priority {priority!r} must be a whole number from -100 to 100")
        max_attempts = settings.MAX_ATTEMPTS if max_attempts is None else max_attempts
        if (isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
                or not 1 <= max_attempts <= MAX_ATTEMPTS):
            raise InvalidJob(f"max_attempts {max_attempts!r} must be a whole number from 1 to "
                             f"{MAX_ATTEMPTS:,}")
        if run_at is not None and delay is not None:
            raise InvalidJob("give run_at or delay, not both")
        if delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
            if not _seconds_ok(seconds, MAX_DELAY):
                raise InvalidJob(f"delay {delay!r} must be a number of seconds from 0 to "
                                 f"{MAX_DELAY:,.0f} (ten years)")
            run_at = timezone.now() + dt.timedelta(seconds=seconds)
        elif run_at is not None and (not isinstance(run_at, dt.datetime) or
                                     timezone.is_naive(run_at)):
            raise InvalidJob(f"run_at {run_at!r} must be a timezone-aware datetime")
        for name, key in (("unique_key", unique_key), ("concurrency_key", concurrency_key)):
            if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_KEY
                                    or "\x00" in key):
                raise InvalidJob(f"{name} {key!r} must be a non-empty string of at most "
                                 f"{MAX_KEY} chars")
        if isinstance(backoff, dt.timedelta):
            backoff = backoff.total_seconds()
        if backoff is not None and not _seconds_ok(backoff, MAX_BACKOFF):
            raise InvalidJob(f"backoff {backoff!r} must be a number of seconds from 0 to "
                             f"{MAX_BACKOFF:,.0f} (a year)")
        if isinstance(args, str | bytes | dict) or not isinstance(args, Sequence):
            raise InvalidJob(f"args must be a list or tuple, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidJob(f"kwargs must be a dict, not {type(kwargs).__name__}")
        return cls(path, dumps(list(args), "args"), dumps(kwargs or {}, "kwargs"), queue,
                   priority, max_attempts, run_at, unique_key, concurrency_key,
                   None if backoff is None else float(backoff))


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job this worker holds the lease on: what the runner needs, nothing more."""

    id: int
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    attempt: int
    max_attempts: int
    concurrency_key: str | None
    unique_key: str | None
    backoff: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Success:
    job_id: int
    attempt: int
    result: str  # JSON text


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    job_id: int
    attempt: int
    error: str  # one line for last_error
    entry: dict[str, Any]  # attempt, exception, message, traceback
    delay: float  # seconds before the next try, if one is left
    final: bool = False  # bury now, whatever attempts are left


@dataclasses.dataclass(frozen=True, slots=True)
class ReapResult:
    returned: int = 0
    buried: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    status: str
    jobs: int
    oldest_ready_age: float | None
    dead_last_24h: int
    lease_expired: int
