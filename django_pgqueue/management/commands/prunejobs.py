"""``manage.py prunejobs``: delete old finished jobs in batches."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_pgqueue import conf, wording
from django_pgqueue.management.arguments import (
    FINISHED_STATUSES,
    duration,
    finished_statuses,
    positive_int,
)
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.models import Job


class Command(PgQueueCommand):
    help = "Delete done, dead and cancelled jobs older than a bound, in batches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=duration,
            required=True,
            help="Age bound such as 7d, 12h or 30m (by done_at).",
        )
        parser.add_argument(
            "--status",
            type=finished_statuses,
            action="extend",  # --status dead --status cancelled: both, as dead,cancelled
            help="Which finished jobs: done, dead, cancelled, or several comma-separated "
            "or repeated (default: done,dead,cancelled).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=5000,
            help="Jobs deleted per statement, each in its own transaction (default: 5000).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        given = options["status"]  # None: not given (an empty value is refused before handle())
        statuses = FINISHED_STATUSES if given is None else tuple(dict.fromkeys(given))
        count = Job.objects.prune(
            options["older_than"],
            statuses=statuses,
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            using=conf.database(),
        )
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write(f"{verb} {wording.count(count, 'job')} ({','.join(statuses)})")
