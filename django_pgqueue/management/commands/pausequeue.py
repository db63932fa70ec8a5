"""``manage.py pausequeue NAME``: no worker claims the queue's jobs until it is resumed."""

from __future__ import annotations

import contextlib
from typing import Any

from django.core.management.base import CommandParser

from django_pgqueue import conf, registry
from django_pgqueue.management.arguments import queue_name
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.models import Job
from django_pgqueue.worker.banner import UNKNOWN_QUEUE, unknown_queues


class Command(PgQueueCommand):
    help = (
        "Pause queues: their jobs stay queued and no worker claims them (running jobs "
        "finish) until resumequeue."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="+", type=queue_name, metavar="NAME", help="A queue.")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.database()
        for name in options["names"]:
            if Job.objects.pause_queue(name, using=alias):
                self.stdout.write(f"paused queue {name!r}")
            else:
                self.stdout.write(f"queue {name!r} was paused already")
        # Paused all the same (a queue may be paused before its first job), but a
        # typo would leave the real queue running: say so.
        with contextlib.suppress(Exception):  # a warning is not worth failing for
            registry.discover()  # the tasks' queues count as known
        for name, hint in unknown_queues(options["names"], alias).items():
            self.stderr.write(f"warning: {UNKNOWN_QUEUE % name}{hint}")
