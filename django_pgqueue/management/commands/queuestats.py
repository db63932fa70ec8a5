"""``manage.py queuestats``: counts by queue and status, the workers, and what to
alert on; ``--check`` exits 1 with one line per failed condition (``call_command()``
raises ``CommandError`` instead), and 2 for a command line it cannot take. Every
mode gives up, exit 1, when the database has not answered within ``--timeout``."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError, connections, transaction
from psycopg.errors import QueryCanceled

from django_pgqueue import conf, tolerant
from django_pgqueue.management.arguments import age_limit, duration, non_negative_int
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.management.deadline import Deadline
from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.monitoring import health
from django_pgqueue.queue import presence
from django_pgqueue.records import QueueStats
from django_pgqueue.wording import shown

#: Seconds queuestats (``--check`` or not) gives the database before it gives up
#: (``--timeout``).
CHECK_TIMEOUT = 10.0
#: The longest statement_timeout PostgreSQL takes (some 24 days): a longer --timeout is
#: the process's bound alone.
PG_MAX_TIMEOUT_MS = 2**31 - 1

WORKERS_HEADER = (
    "worker                           state queues           slots running     done  last seen"
)


class Command(PgQueueCommand):
    help = (
        "Show jobs by queue and status, the oldest ready job's age, recent deaths and the "
        "paused queues and the workers; with --check, exit 1 with one line per failed "
        "condition."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON for monitoring.")
        parser.add_argument(
            "--check",
            action="store_true",
            help="Check health instead: exit 0 when healthy, 1 with one line per failure "
            "(a queue with ready jobs and no live worker serving it, and the limits below).",
        )
        parser.add_argument(
            "--max-ready-age",
            type=age_limit,
            help="With --check: fail when a queue's oldest ready job has waited longer (30s, 5m; "
            "0: any ready job).",
        )
        parser.add_argument(
            "--max-dead",
            type=non_negative_int,
            help="With --check: fail when more jobs than this died in the last hour.",
        )
        parser.add_argument(
            "--timeout",
            type=duration,
            help=f"Fail (exit 1, one line) when the database has not answered within this "
            f"long: a lock, a server that hangs (default: {CHECK_TIMEOUT:g}s).",
        )

    #: The command line's bound on the run (None from call_command()).
    _deadline: Deadline | None = None

    def execute(self, *args: Any, **options: Any) -> Any:
        if self._parsed:
            # From the first statement on (the system checks, the connection itself):
            # nothing the server does ends a connection attempt that gets no answer.
            # Every mode: a monitoring script runs the table or --json every minute,
            # and one hung behind a lock must not pile up behind the next.
            seconds = options.get("timeout") or CHECK_TIMEOUT
            self._deadline = Deadline(seconds, no_answer(seconds)).start()
        try:
            return super().execute(*args, **options)
        finally:
            if self._deadline is not None:
                self._deadline.done()

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.database()
        if not options["check"] and (
            options["max_ready_age"] is not None or options["max_dead"] is not None
        ):
            raise self.refuse("--max-ready-age and --max-dead go with --check")
        if options["check"] and options["json"]:
            raise self.refuse(
                "--json and --check exclude each other: "
                "--check prints ok, or a line per failed condition"
            )
        seconds = options["timeout"] or CHECK_TIMEOUT
        if options["check"]:
            self._check(options, alias, seconds)
            return
        stats, paused, now, workers, orphans = self._answered(
            lambda: read_stats(alias), alias, seconds
        )
        # A gone worker's last heartbeat is stale: count what the table still holds.
        alive = {w.id for w in workers if w.alive_at(now)}
        left_on = collections.Counter(worker for _, worker in orphans)
        running = {w.id: w.jobs_running if w.id in alive else left_on[w.id] for w in workers}
        # A paused queue's jobs wait on purpose: they are not what the alert is for.
        ages = [
            s.oldest_ready_age
            for s in stats
            if s.oldest_ready_age is not None and s.queue not in paused
        ]
        summary = {
            "oldest_ready_age_seconds": max(ages) if ages else None,
            "dead_last_24h": sum(s.dead_last_24h for s in stats),
            "running_past_lease": sum(s.lease_expired for s in stats),
            "paused_queues": paused,
            "running_on_gone_workers": [job_id for job_id, _ in orphans],
            "queues": [{**dataclasses.asdict(s), "paused": s.queue in paused} for s in stats],
            "workers": [
                {
                    "id": w.id,
                    "hostname": w.hostname,
                    "pid": w.pid,
                    "queues": w.queue_names(),
                    "concurrency": w.concurrency,
                    "version": w.version,
                    "started_at": w.started_at.isoformat(),
                    "last_seen": w.last_seen.isoformat(),
                    "alive": w.id in alive,
                    "jobs_running": running[w.id],
                    "jobs_done": w.jobs_done,
                }
                for w in workers
            ],
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary, indent=2))
            return
        self.stdout.write(f"{'queue':<20} {'status':<9} {'jobs':>10} {'oldest ready':>14}")
        for s in stats:
            age = f"{s.oldest_ready_age:.1f}s" if s.oldest_ready_age is not None else "-"
            # Names from rows, perhaps written by hand: one line each, whatever they hold.
            name = shown(s.queue) + (" (paused)" if s.queue in paused else "")
            self.stdout.write(f"{name:<20} {s.status:<9} {s.jobs:>10} {age:>14}")
        oldest = summary["oldest_ready_age_seconds"]
        self.stdout.write(
            f"oldest ready job: {f'{oldest:.1f}s' if oldest is not None else 'none'}; "
            f"dead in the last 24h: {summary['dead_last_24h']}; "
            f"running past their lease: {summary['running_past_lease']}; "
            f"paused queues: {', '.join(map(shown, paused)) if paused else 'none'}"
        )
        self.stdout.write("")
        self.stdout.write(WORKERS_HEADER)
        for w in workers:
            names = w.queue_names()
            queues = ",".join(map(shown, names)) if names is not None else "*"
            # A heartbeat ahead of the clock (a row written by hand) was seen just now.
            seen = f"{max(0.0, (now - w.last_seen).total_seconds()):.0f}s ago"
            state = "alive" if w.id in alive else "gone"
            self.stdout.write(
                f"{shown(w.id):<32} {state:<5} {queues:<16} {w.concurrency:>5} {running[w.id]:>7} "
                f"{w.jobs_done:>8} {seen:>10}"
            )
        if not workers:
            self.stdout.write("no workers registered")
        if orphans:
            listed = ", ".join(f"#{job_id} on {shown(str(worker))}" for job_id, worker in orphans)
            self.stdout.write(
                f"running on gone workers ({len(orphans)}; the reaper returns them once "
                f"their leases expire): {listed}"
            )

    def _answered[T](self, read: Callable[[], T], alias: str, seconds: float) -> T:
        """What ``read`` returns, its statements bounded by ``seconds`` (exit 1 with
        one line past it); the process's own bound ends with it."""
        try:
            found = bounded(read, alias, seconds)
        except DatabaseError as exc:
            if not isinstance(exc.__cause__, QueryCanceled):
                raise
            raise CommandError(no_answer(seconds), returncode=1) from exc
        if self._deadline is not None:
            self._deadline.done()  # from here on, only our own lines
        return found

    def _check(self, options: dict[str, Any], alias: str, seconds: float) -> None:
        limits = health.Limits(max_ready_age=options["max_ready_age"], max_dead=options["max_dead"])
        found = self._answered(lambda: health.problems(limits, using=alias), alias, seconds)
        for line in found:
            self.stdout.write(line)
        if found:
            if self._parsed:  # the command line: exit 1 with those lines, nothing more
                sys.exit(1)
            # call_command(): an exception its caller can catch, not the process's end.
            raise CommandError(f"unhealthy: {'; '.join(found)}", returncode=1)
        self.stdout.write("ok")


def no_answer(seconds: float) -> str:
    return (
        f"the database did not answer the health check within {seconds:g}s (--timeout): "
        "a lock it waits for, or a server that hangs"
    )


Stats = tuple[list[QueueStats], list[str], dt.datetime, list[RegisteredWorker], list[Any]]


def read_stats(alias: str) -> Stats:
    """The counts, the paused queues, the database's clock, the workers and the jobs
    running on gone ones (id, worker)."""
    stats = Job.objects.stats(using=alias)
    paused = Job.objects.paused_queues(using=alias)
    now = presence.database_now(alias)  # the clock alive_until is written with
    with tolerant.readable(alias):  # a time written by hand (infinity) reads as the nearest
        workers = list(RegisteredWorker.objects.using(alias).all())
    gone = {w.id for w in workers if not w.alive_at(now)}
    orphans = list(
        Job.objects.using(alias)
        .running()
        .filter(locked_by__in=gone)
        .order_by("id")
        .values_list("id", "locked_by")
    )
    return stats, paused, now, workers, orphans


def bounded[T](read: Callable[[], T], alias: str, seconds: float) -> T:
    """What ``read`` returns, each of its statements ended by the server past
    ``seconds`` (a ``QueryCanceled``): in a transaction, or a savepoint inside the
    caller's, with ``statement_timeout`` set for it alone and put back before a
    savepoint is released into the caller's transaction."""
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('statement_timeout'), "
            "set_config('statement_timeout', %s, true)",
            [str(min(max(1, round(seconds * 1000)), PG_MAX_TIMEOUT_MS))],
        )
        (before, _) = cursor.fetchone()
        found = read()
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    return found
