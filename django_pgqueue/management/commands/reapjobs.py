"""``manage.py reapjobs``: return jobs whose lease expired (or bury them)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

from django.core.management.base import CommandParser
from django.db import connections

from django_pgqueue import conf, wording
from django_pgqueue.dberrors import first_line, is_transient
from django_pgqueue.management.arguments import positive_seconds, setting_default
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.models import Job
from django_pgqueue.worker import joblog
from django_pgqueue.worker.waker import Waker


class Command(PgQueueCommand):
    help = "Return running jobs whose lease expired to the queue, or bury them when spent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep reaping until stopped.")
        parser.add_argument(
            "--interval",
            type=positive_seconds,
            default=None,
            help=f"Seconds between passes with --loop (default: "
            f"{setting_default('REAP_INTERVAL')}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["interval"] is not None and not options["loop"]:
            raise self.refuse("--interval goes with --loop (one pass has no interval)")
        settings = conf.get()
        interval = options["interval"] or settings.REAP_INTERVAL
        alias = conf.database()
        # SIGTERM (a supervisor) or SIGINT (Ctrl-C): finish the pass, then exit 0. The
        # handler only writes to a pipe: Event.set() takes the lock the interrupted
        # main thread may hold inside Event.wait(), and would wait for it for ever.
        stop = Waker()
        handlers: dict[int, Any] = {}
        if options["loop"] and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                handlers[signum] = signal.signal(signum, lambda *_: stop.set())
        try:
            self._loop(options["loop"], interval, alias, stop)
        finally:
            for number, handler in handlers.items():  # before the pipe closes
                signal.signal(number, handler)
            stop.close()

    def _loop(self, loop: bool, interval: float, alias: str, stop: Waker) -> None:
        while not stop.wait(0):
            try:
                result = Job.objects.reap(using=alias)
            except Exception as exc:
                if not loop or not is_transient(exc):
                    raise
                # The database went away: a reaper that runs for ever waits for it.
                self.stderr.write(f"reap failed, retrying in {interval:g}s: {first_line(exc)}")
                with contextlib.suppress(Exception):
                    connections[alias].close()
            else:
                # Each a failed attempt, logged as a worker's reaper logs it.
                for job in (*result.returned_jobs, *result.buried_jobs):
                    joblog.reaped(job)
                # Runs of jobs an operator had asked to stop end cancelled.
                cancelled = f", cancelled {result.cancelled}" if result.cancelled else ""
                self.stdout.write(
                    f"returned {wording.count(result.returned, 'job')} to the queue, "
                    f"buried {result.buried}{cancelled}"
                )
                if not loop:
                    return
                # A pipe (a container's log, a supervisor) gets each pass as it
                # happens, not when Python's buffer fills.
                self.stdout.flush()
            stop.wait(interval)
        self.stdout.write("stopped")
