"""``manage.py queuestats``: counts by queue and status, and what to alert on."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.core.management.base import CommandParser

from django_pgqueue import conf
from django_pgqueue.management.arguments import PgQueueCommand
from django_pgqueue.models import Job


class Command(PgQueueCommand):
    help = "Show jobs by queue and status, the oldest ready job's age and recent deaths."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON for monitoring.")

    def handle(self, *args: Any, **options: Any) -> None:
        stats = Job.objects.stats(using=conf.database())
        ages = [s.oldest_ready_age for s in stats if s.oldest_ready_age is not None]
        summary = {
            "oldest_ready_age_seconds": max(ages) if ages else None,
            "dead_last_24h": sum(s.dead_last_24h for s in stats),
            "running_past_lease": sum(s.lease_expired for s in stats),
            "queues": [dataclasses.asdict(s) for s in stats],
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary, indent=2))
            return
        self.stdout.write(f"{'queue':<20} {'status':<8} {'jobs':>10} {'oldest ready':>14}")
        for s in stats:
            age = f"{s.oldest_ready_age:.1f}s" if s.oldest_ready_age is not None else "-"
            self.stdout.write(f"{s.queue:<20} {s.status:<8} {s.jobs:>10} {age:>14}")
        oldest = summary["oldest_ready_age_seconds"]
        self.stdout.write(
            f"oldest ready job: {f'{oldest:.1f}s' if oldest is not None else 'none'}; "
            f"dead in the last 24h: {summary['dead_last_24h']}; "
            f"running past their lease: {summary['running_past_lease']}"
        )
