"""``manage.py runworker``: run a worker process until SIGTERM/SIGINT (or, with --burst, idle)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser

from django_pgqueue.management.arguments import (
    PgQueueCommand,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    positive_seconds,
    queue_list,
    worker_id,
)
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.runner import Worker

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Command(PgQueueCommand):
    help = "Claim and run jobs. Defaults come from settings.PGQUEUE."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", type=queue_list, help="Comma-separated queues to serve "
                            "(default: PGQUEUE['QUEUES'], or every queue).")
        parser.add_argument("--concurrency", type=positive_int, help="Jobs run at once.")
        parser.add_argument("--prefetch", type=non_negative_int,
                            help="Jobs claimed ahead of free threads (short jobs).")
        parser.add_argument("--burst", action="store_true", help="Exit once nothing is ready "
                            "and none of this worker's jobs is running.")
        parser.add_argument("--max-jobs", type=positive_int, help="Exit after this many jobs.")
        parser.add_argument("--lease", type=positive_seconds, help="Lease length in seconds.")
        parser.add_argument("--poll-interval", type=positive_seconds,
                            help="Longest idle sleep between polls, in seconds.")
        parser.add_argument("--shutdown-timeout", type=non_negative_seconds,
                            help="Seconds running jobs get to finish after SIGTERM.")
        parser.add_argument("--job-timeout", type=positive_seconds,
                            help="Seconds a job may run before it is recorded as failed.")
        parser.add_argument("--worker-id", type=worker_id, help="Name in locked_by "
                            "(default: host:pid:random).")
        parser.add_argument("--no-listen", action="store_true",
                            help="Do not LISTEN for new jobs; poll only.")

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(options["verbosity"])
        try:
            config = WorkerConfig.from_settings(
                queues=options["queues"], concurrency=options["concurrency"],
                prefetch=options["prefetch"],
                burst=options["burst"] or None, max_jobs=options["max_jobs"],
                lease=options["lease"], poll_interval=options["poll_interval"],
                shutdown_timeout=options["shutdown_timeout"],
                job_timeout=options["job_timeout"], worker_id=options["worker_id"],
                listen=False if options["no_listen"] else None,
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        worker = Worker(config)
        self._install_signal_handlers(worker)
        status = worker.run()
        if status:
            sys.exit(status)

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_pgqueue")
        logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.INFO))
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)

    def _install_signal_handlers(self, worker: Worker) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            if worker.stopping.is_set():
                # Second signal: leave now; leases expire and the reaper recovers the jobs.
                os._exit(128 + signum)
            logging.getLogger("django_pgqueue").info(
                "%s: finishing running jobs (up to %gs), then exiting",
                signal.Signals(signum).name, worker.config.shutdown_timeout)
            worker.request_stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
