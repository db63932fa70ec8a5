"""The schedule table's statements: the declared schedules written, one tick
enqueued (with its job), and since when schedulers have been up."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterator, Sequence

from django.db import OperationalError, transaction

from django_pgqueue.dberrors import first_line, lock_timed_out
from django_pgqueue.exceptions import SchedulesBusy
from django_pgqueue.queue.enqueue import notify_params
from django_pgqueue.queue.presence import UNWRITTEN_ALIVE
from django_pgqueue.records import JobSpec
from django_pgqueue.sql import runner
from django_pgqueue.validation import EARLIEST, LATEST, aware

#: The times a worker writes lie between these (exclusive): the statements count
#: any other (a row written by hand: infinity, a year BC) as none.
BOUNDS = {"earliest": EARLIEST, "latest": LATEST}
#: The advisory lock of the writers of several schedule rows (see :func:`locked`).
ROWS_LOCK = 0x7067_7173_6368_6564  # "pgqsched"
#: The longest a sync or an operator's switch waits for a lock (the table's, or a
#: row's, held for milliseconds by a tick or another writer): past it, SchedulesBusy.
BUSY_WAIT = "2s"


@contextlib.contextmanager
def locked(alias: str, lock_wait: str | None = None) -> Iterator[None]:
    """A transaction in which no other sync or operator switch writes schedule rows:
    two that lock several rows each, in orders of their own, could deadlock (workers
    with different settings starting together). ``lock_wait`` (PostgreSQL's words:
    ``'2s'``) bounds each of its waits for a lock, past which :class:`SchedulesBusy`;
    None waits as the setting says."""
    try:
        with transaction.atomic(using=alias):
            if lock_wait is not None:
                (row,) = runner.fetch("schedules_lock_wait", {"lock_wait": lock_wait}, alias)
            runner.fetch("schedules_lock", {"lock": ROWS_LOCK}, alias)
            yield
            if lock_wait is not None:
                runner.fetch("schedules_lock_wait", {"lock_wait": row["before"]}, alias)
    except OperationalError as exc:
        if lock_wait is None or not lock_timed_out(exc):
            raise
        raise SchedulesBusy(
            f"another transaction holds pgqueue_schedule, its lock or a row ({first_line(exc)}; "
            "an UPDATE by hand not committed?)"
        ) from exc


@dataclasses.dataclass(frozen=True, slots=True)
class Declared:
    """A schedule as one worker's settings declare it: what its row must say."""

    name: str
    task: str
    expression: str
    timezone: str
    #: The settings' "enabled" (False: declared, but no worker of these settings ticks it).
    enabled: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Synced:
    """A declared schedule's row, after the sync."""

    name: str
    enabled: bool
    #: Where its ticking goes on: the later of its last tick and its restart, if any.
    resume_from: dt.datetime | None
    created_at: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Sync:
    rows: list[Synced]
    #: Schedules this sync marked as no longer configured.
    removed: int
    #: The database's clock at the sync.
    now: dt.datetime


def sync(declared: Sequence[Declared], alias: str, lock_wait: str | None = None) -> Sync:
    """Write the declared schedules' rows and mark the others not configured (one
    sync at a time: see :func:`locked`, and its ``lock_wait``)."""
    params = {
        "names": [d.name for d in declared],
        "tasks": [d.task for d in declared],
        "expressions": [d.expression for d in declared],
        "timezones": [d.timezone for d in declared],
        "enabled": [d.enabled for d in declared],
        **BOUNDS,
    }
    with locked(alias, lock_wait):
        rows = runner.fetch("schedules_sync", params, alias)
    # Aware, as the ticks are, with USE_TZ = False too (where Django's loaders drop the zone).
    return Sync(
        rows=[
            Synced(
                r["name"],
                r["enabled"],
                None if r["resume_from"] is None else aware(r["resume_from"]),
                aware(r["created_at"]),
            )
            for r in rows
            if r["name"] is not None
        ],
        removed=rows[0]["removed"] if rows else 0,
        now=aware(rows[0]["now"]),
    )


class TickBlocked(Exception):
    """A tick's statement waited for a lock longer than it was allowed to: the
    schedule's row, or a job holding its task's unique_key that an open transaction
    enqueued. Nothing was taken or enqueued."""


class RowMissing(Exception):
    """The schedule has no row (deleted by hand while workers ran): nothing was taken."""


def tick_params(
    declared: Declared, spec: JobSpec, moment: dt.datetime, lock_wait: str | None = None
) -> dict[str, object]:
    """The ``schedule_tick`` statement's parameters for the tick ``moment``."""
    return {
        "name": declared.name,
        "tick": moment,
        "job_task": spec.task,
        "args": spec.args,
        "kwargs": spec.kwargs,
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "unique_key": spec.unique_key,
        "concurrency_key": spec.concurrency_key,
        "backoff": spec.backoff,
        "retry_policy": spec.retry_policy,
        "lock_wait": lock_wait,
        **BOUNDS,
        **notify_params(),
    }


def tick(
    declared: Declared,
    spec: JobSpec,
    moment: dt.datetime,
    alias: str,
    lock_wait: str | None = None,
) -> tuple[bool, int | None]:
    """Enqueue the tick ``moment`` of a schedule unless a worker did: (whether this
    call took the tick, the id of the job it enqueued, None when a live job held
    the task's unique_key). ``lock_wait`` (PostgreSQL's words: ``'500ms'``) bounds
    its waits for a lock; past it, :class:`TickBlocked`. :class:`RowMissing` when
    the schedule has no row."""
    params = tick_params(declared, spec, moment, lock_wait)
    try:
        # Never prepared: psycopg keeps a prepared statement only once it succeeds, so a
        # tick held back at each look on a connection where it never ran (the worker
        # started, or reconnected, behind an open transaction) left one more on the
        # server each time. One statement per tick is no hot path.
        (row,) = runner.fetch("schedule_tick", params, alias, prepare=False)
    except OperationalError as exc:
        if not lock_timed_out(exc):
            raise
        raise TickBlocked(f"schedule {declared.name}: {first_line(exc)}") from exc
    if not row["known"]:
        raise RowMissing(declared.name)
    return bool(row["ticked"]), row["id"]


def up_since(alias: str) -> dict[str, dt.datetime]:
    """By schedule name, the start of the oldest worker the registry shows alive
    whose scheduler runs it."""
    params = {**BOUNDS, "beyond": UNWRITTEN_ALIVE}
    return {
        row["name"]: aware(row["since"])
        for row in runner.fetch("schedulers_up_since", params, alias)
    }
