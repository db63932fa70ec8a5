"""``manage.py resumequeue NAME``: workers claim the paused queue's jobs again."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_pgqueue import conf
from django_pgqueue.management.arguments import queue_name
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.models import Job


class Command(PgQueueCommand):
    help = "Resume paused queues: workers claim their jobs again, woken at once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="+", type=queue_name, metavar="NAME", help="A queue.")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in options["names"]:
            if Job.objects.resume_queue(name, using=conf.database()):
                self.stdout.write(f"resumed queue {name!r}")
            else:
                self.stdout.write(f"queue {name!r} was not paused")
