"""``manage.py pausequeue NAME``: no worker claims the queue's jobs until it is resumed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_pgqueue import conf
from django_pgqueue.management.arguments import PgQueueCommand, queue_name
from django_pgqueue.models import Job


class Command(PgQueueCommand):
    help = (
        "Pause queues: their jobs stay queued and no worker claims them (running jobs "
        "finish) until resumequeue."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="+", type=queue_name, metavar="NAME", help="A queue.")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in options["names"]:
            if Job.objects.pause_queue(name, using=conf.database()):
                self.stdout.write(f"paused queue {name!r}")
            else:
                self.stdout.write(f"queue {name!r} was paused already")
