"""``manage.py resumequeue NAME``: workers claim the paused queue's jobs again."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_pgqueue import conf, validation
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.models import Job
from django_pgqueue.queue import pauses


class Command(PgQueueCommand):
    help = "Resume paused queues: workers claim their jobs again, woken at once."

    def add_arguments(self, parser: CommandParser) -> None:
        # Any name that is paused, as well as those pausequeue takes: a pause written
        # by an older version or by hand may hold a name today's rule refuses.
        parser.add_argument("names", nargs="+", metavar="NAME", help="A queue.")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.database()
        # Every name is checked before any queue is resumed, as argparse checked them.
        for name in options["names"]:
            if not pauses.pausable(name, alias):
                # The words argparse said for it, as pausequeue still says them.
                raise self.refuse(
                    f"argument NAME: expected {validation.QUEUE.expected}, got {name!r}"
                )
        for name in options["names"]:
            if Job.objects.resume_queue(name, using=alias):
                self.stdout.write(f"resumed queue {name!r}")
            else:
                self.stdout.write(f"queue {name!r} was not paused")
