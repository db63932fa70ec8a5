"""What a worker says when it starts: its settings, the queues it serves and the tasks
it may run (as Celery's ``[tasks]`` does), and a warning for a queue nobody uses.

A worker serving ``--queues emials`` while jobs wait in ``emails`` would otherwise
idle without a word. A served queue is *known* when a ``TASKS`` backend of ours
lists it, a registered task uses it, it is the default queue, or a row of the job
table names it; for any other the worker warns, with the known names that look
alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings as django_settings
from django.db import DatabaseError, connections, transaction
from psycopg.errors import QueryCanceled

from django_pgqueue import conf, registry, wording
from django_pgqueue.dberrors import first_line
from django_pgqueue.models import Job
from django_pgqueue.worker.config import WorkerConfig

logger = logging.getLogger("django_pgqueue")

BACKEND_PATHS = (
    "django_pgqueue.backend.PgQueueBackend",
    "django_pgqueue.backend.core.PgQueueBackend",
)


def task_queue(target: Any) -> str | None:
    """The queue a registered task's jobs go to by default, if it says."""
    queue = getattr(target, "queue_name", None)  # a Tasks-framework Task
    if queue is None and isinstance(getattr(target, "options", None), dict):
        queue = target.options.get("queue", conf.get().DEFAULT_QUEUE)  # @django_pgqueue.task
    return queue if isinstance(queue, str) else None


def _unqueued() -> dict[str, str]:
    try:
        from django_pgqueue.backend.worker import unqueued_tasks
    except ImportError:  # no Tasks framework installed: no Tasks either
        return {}
    return unqueued_tasks()


def banner(config: WorkerConfig, *, session: bool = True) -> str:
    """The start lines: the settings, then ``[queues]`` and ``[tasks]``."""
    tasks = registry.runnables()
    lines = [f"starting {config.describe(session=session)}", "[queues]"]
    if config.queues:
        lines += [f"  . {queue}" for queue in config.queues]
    else:
        lines.append("  . every queue (--queues not given)")
    lines.append(f"[tasks] {wording.count(len(tasks), 'task')}")
    elsewhere = _unqueued()  # enqueue() of these never reaches the queue (W003)
    for path, runnable in tasks.items():
        queue = task_queue(runnable.target)
        note = f"{elsewhere[path]}: not queued" if path in elsewhere else f"queue {queue}"
        if path not in elsewhere and queue and config.queues and queue not in config.queues:
            # `--queues default` beside a task on "emails": its jobs would wait unseen.
            note += ", which this worker does not serve"
        lines.append(f"  . {path}" + (f"  ({note})" if queue or path in elsewhere else ""))
    if not tasks:
        lines.append("  (none found: tasks live in an installed app's tasks.py)")
    return "\n".join(lines)


def configured_queues() -> set[str]:
    """Queue names the settings give: TASKS["QUEUES"] of our backends, the default queue."""
    names = {conf.get().DEFAULT_QUEUE}
    for params in getattr(django_settings, "TASKS", {}).values():
        if isinstance(params, dict) and params.get("BACKEND") in BACKEND_PATHS:
            queues = params.get("QUEUES", ["default"])
            if isinstance(queues, str):  # check E108 says to make it a list
                queues = [queues]
            if isinstance(queues, list | tuple | set | frozenset):
                names.update(q for q in queues if isinstance(q, str))
    return names


#: How long (ms) start-up looks for a finished job of a queue nothing else names.
#: Finished rows have no index by queue: on a big table a name no row holds would
#: read all of them, so the look stops there and counts as "no job", a typo's answer.
LOOK_FOR_ROWS_MS = 200


def _waiting(queues: Iterable[str], alias: str) -> set[str]:
    """Which of ``queues`` a job names: a queued one (one index probe each), else
    any row; each queue looked for for at most LOOK_FOR_ROWS_MS."""
    found = set()
    for queue in queues:
        rows = Job.objects.using(alias).filter(queue=queue)
        try:
            # A transaction, or a savepoint inside the caller's: the timeout is set
            # for it alone, and put back before a savepoint is released into the
            # caller's transaction (a savepoint rolled back puts it back itself).
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                cursor.execute(
                    "SELECT current_setting('statement_timeout'), "
                    "set_config('statement_timeout', %s, true)",
                    [str(LOOK_FOR_ROWS_MS)],
                )
                (before, _) = cursor.fetchone()
                if rows.queued().exists() or rows.exists():
                    found.add(queue)
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
        except DatabaseError as exc:
            if not isinstance(exc.__cause__, QueryCanceled):
                raise
            logger.debug("stopped looking for jobs of queue %r: %s", queue, first_line(exc))
    return found


def unknown_queues(queues: Iterable[str], alias: str) -> dict[str, str]:
    """Of ``queues``, those nothing names (no TASKS["QUEUES"], no registered task, no
    periodic schedule, no job), each with what to say of it: " (did you mean
    'emails'?)" or ""."""
    known = configured_queues()
    known.update(
        q for r in registry.runnables().values() if (q := task_queue(r.target)) is not None
    )
    known.update(s.queue for s in conf.get().schedules if s.queue is not None)
    unknown = [q for q in queues if q not in known]
    if unknown:
        try:
            waiting = _waiting(unknown, alias)
        except Exception as exc:  # the database is not there yet: the claim loop waits for it
            logger.debug("could not look for jobs in %s: %s", unknown, first_line(exc))
            waiting = set(unknown)
        unknown = [q for q in unknown if q not in waiting]
    hints = {}
    for queue in unknown:
        meant = wording.alike(queue, known)
        hints[queue] = f" (did you mean {meant}?)" if meant else ""
    return hints


#: What is said of a queue nothing names (see unknown_queues).
UNKNOWN_QUEUE = (
    "queue %r is in no TASKS['QUEUES'], is used by no registered task and no job names it"
)


def warn_unknown_queues(config: WorkerConfig) -> list[str]:
    """Warn for each served queue that nothing names; returns those queues."""
    if not config.queues:
        return []
    unknown = unknown_queues(config.queues, config.database)
    for queue, hint in unknown.items():
        logger.warning(UNKNOWN_QUEUE + ": this worker may wait for ever%s", queue, hint)
    return list(unknown)
