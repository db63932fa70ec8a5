"""``manage.py runworker``: run a worker process until SIGTERM/SIGINT (or, with --burst, idle)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from importlib.util import find_spec
from types import FrameType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser

from django_pgqueue import conf
from django_pgqueue.management.arguments import (
    PgQueueCommand,
    non_negative_seconds,
    port,
    positive_int,
    positive_seconds,
    prefetch,
    queue_list,
    worker_id,
)
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.runner import Worker
from django_pgqueue.worker.shutdown import MARGIN, URGENT
from django_pgqueue.worker.waker import Waker

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Command(PgQueueCommand):
    help = "Claim and run jobs. Defaults come from settings.PGQUEUE."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=queue_list,
            help="Comma-separated queues to serve (default: PGQUEUE['QUEUES'], or every queue).",
        )
        parser.add_argument("--concurrency", type=positive_int, help="Jobs run at once.")
        parser.add_argument(
            "--prefetch",
            type=prefetch,
            help="Jobs claimed ahead of free threads: auto (follows the jobs' durations, "
            "none for long jobs) or a number (default: PGQUEUE['PREFETCH'], auto).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit once nothing is ready and none of this worker's jobs is running.",
        )
        parser.add_argument("--max-jobs", type=positive_int, help="Exit after this many jobs.")
        parser.add_argument("--lease", type=positive_seconds, help="Lease length in seconds.")
        parser.add_argument(
            "--poll-interval",
            type=positive_seconds,
            help="Longest idle sleep between polls, in seconds.",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=non_negative_seconds,
            help="Seconds running jobs get to finish after SIGTERM.",
        )
        parser.add_argument(
            "--job-timeout",
            type=positive_seconds,
            help="Seconds a job may run before it is recorded as failed.",
        )
        parser.add_argument(
            "--worker-id", type=worker_id, help="Name in locked_by (default: host:pid:random)."
        )
        parser.add_argument(
            "--no-listen", action="store_true", help="Do not LISTEN for new jobs; poll only."
        )
        parser.add_argument(
            "--stats-interval",
            type=positive_seconds,
            help="Seconds between throughput lines (default 60).",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            help="Serve /metrics and /healthz on this port, 0 for any free one (default: "
            "PGQUEUE['METRICS_PORT'], none). Needs the metrics extra (prometheus-client).",
        )
        parser.add_argument(
            "--metrics-addr",
            help="Address the metrics server listens on (default: PGQUEUE['METRICS_ADDR'], "
            "127.0.0.1).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(options["verbosity"])
        try:
            config = WorkerConfig.from_settings(
                queues=options["queues"],
                concurrency=options["concurrency"],
                prefetch=options["prefetch"],
                burst=options["burst"] or None,
                max_jobs=options["max_jobs"],
                lease=options["lease"],
                poll_interval=options["poll_interval"],
                shutdown_timeout=options["shutdown_timeout"],
                job_timeout=options["job_timeout"],
                worker_id=options["worker_id"],
                listen=False if options["no_listen"] else None,
                stats_interval=options["stats_interval"],
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        worker = Worker(config)
        exporter = serve_metrics(worker, options["metrics_port"], options["metrics_addr"])
        exits = ExitGuard(worker)
        exits.install()
        try:
            status = exits.status(worker.run())
        finally:
            if exporter is not None:
                exporter.close()
        if worker.ledger.running():
            # A job thread is still inside an overrunning job, and its job was
            # given back: end the process now, not after interpreter teardown.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        if status:
            sys.exit(status)

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_pgqueue")
        logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.INFO))
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)


def serve_metrics(worker: Worker, port: int | None, addr: str | None) -> Any:
    """The worker's metrics exporter, serving, when a port is set; else None, and
    nothing of the metrics is imported."""
    settings = conf.get()
    port = settings.METRICS_PORT if port is None else port
    if port is None:
        return None
    if find_spec("prometheus_client") is None:
        raise CommandError(
            "serving metrics needs prometheus-client: pip install 'django-pgqueue[metrics]'"
        )
    import prometheus_client

    from django_pgqueue.monitoring import exporter

    addr = addr or settings.METRICS_ADDR
    try:
        # The default registry: the process's own metrics and any a task defines come along.
        return exporter.serve(worker, addr, port, prometheus_client.REGISTRY)
    except OSError as exc:
        raise CommandError(f"cannot serve metrics on {addr}:{port}: {exc}") from None


class ExitGuard:
    """SIGTERM/SIGINT for a worker process, and a bound on how long its exit takes.

    The first signal asks the worker to stop (running jobs get the shutdown
    timeout); the second makes it give them back within a second and exit with
    128 + the signal number. The handlers only set attributes and write to the
    worker's pipe (no locks, no logging: a handler can interrupt the main
    thread inside either). A watchdog thread ends the process if the shutdown
    overruns its bound anyway (a database call that hangs).
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.signalled: int | None = None
        self.second: int | None = None
        self._exit_by: float | None = None
        self._bell = Waker()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        threading.Thread(target=self._watch, name="pgqueue-exit-watchdog", daemon=True).start()

    def status(self, status: int) -> int:
        return 128 + self.second if self.second is not None else status

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.signalled is None:
            self.signalled = signum
            name = signal.Signals(signum).name
            self.worker.stop_reason = (
                f"{name}: finishing running jobs (up to "
                f"{self.worker.config.shutdown_timeout:g}s), then exiting; send {name} again "
                "to exit now (running jobs are given back first)"
            )
            self._exit_by = now + self.worker.config.shutdown_timeout + MARGIN + 2.0
            self.worker.request_stop()
        else:
            self.second = signum
            self._exit_by = min(self._exit_by or now, now) + URGENT + 1.0
            self.worker.hurry()
        self._bell.set()

    def _watch(self) -> None:
        while True:
            exit_by = self._exit_by
            self._bell.wait(3600.0 if exit_by is None else exit_by - time.monotonic())
            self._bell.clear()
            if self._exit_by is not None and time.monotonic() >= self._exit_by:
                logging.getLogger("django_pgqueue").error(
                    "shutdown overran its bound: exiting now; the reaper returns what was "
                    "not given back once its lease expires"
                )
                logging.shutdown()
                os._exit(self.status(1))
