"""``manage.py runworker``: run a worker process until SIGTERM/SIGINT (or, with --burst, idle)."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
import threading
from importlib.util import find_spec
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser

from django_pgqueue import conf
from django_pgqueue.exceptions import InvalidSchedule
from django_pgqueue.jobdb import worker_in_transaction
from django_pgqueue.management.arguments import (
    concurrency,
    lease_seconds,
    metrics_address,
    non_negative_seconds,
    port,
    positive_int,
    positive_seconds,
    prefetch,
    queue_list,
    setting_default,
    worker_id,
)
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.management.console import configure_logging
from django_pgqueue.management.process import ExitGuard
from django_pgqueue.management.reload import in_reloading_child, run_reloading
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.runner import Worker

VERBOSITY_HELP = (
    "What the worker logs. 0: warnings and errors only (each failed run, rows it "
    "refuses, lost leases, database trouble, jobs given back at shutdown). 1 (default): "
    "also the start banner with the queues and the tasks, a throughput line every "
    "--stats-interval seconds, cancelled runs and the shutdown; Django's task-signal "
    "lines for failed runs. "
    "2 and 3: also a line per job claimed and finished, and Django's line per run."
)


class Command(PgQueueCommand):
    help = (
        "Claim and run jobs until SIGTERM or SIGINT (a second one gives the running jobs "
        "back and exits at once). Defaults come from settings.PGQUEUE."
    )

    #: In ``--reload``'s child: the system checks are run with the worker (see execute).
    reload_checks = False
    #: Run as ``manage.py runworker`` (the process ends with it), not by call_command().
    own_process = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.own_process = True
        super().run_from_argv(argv)

    def execute(self, *args: Any, **options: Any) -> Any:
        if options.get("reload"):
            # The child runs the checks, before it builds the worker: an error there
            # (E010 for a schedule's task whose module has a typo) leaves it watching
            # for the fix, as runserver does; the parent checks nothing.
            self.reload_checks = in_reloading_child() and not options.get("skip_checks")
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        for action in parser._actions:
            if action.dest == "verbosity":
                action.help = VERBOSITY_HELP
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        add = parser.add_argument
        add(
            "--queues",
            type=queue_list,
            action="extend",  # --queues a --queues b: both, as a,b
            help=f"Comma-separated (or repeated) queues to serve (default: "
            f"{setting_default('QUEUES')}; none means every queue).",
        )
        add(
            "--concurrency",
            type=concurrency,
            help=f"Jobs run at once, one thread each (default: {setting_default('CONCURRENCY')}).",
        )
        add(
            "--prefetch",
            type=prefetch,
            help="Jobs claimed ahead of free threads: auto (follows the jobs' durations, "
            f"none for long jobs) or a number (default: {setting_default('PREFETCH')}).",
        )
        add(
            "--burst",
            action="store_true",
            help="Exit once nothing is ready and none of this worker's jobs is running "
            "(default: off, run until stopped).",
        )
        add(
            "--max-jobs",
            type=positive_int,
            help="Claim at most this many jobs, finish them and exit (default: unlimited).",
        )
        add(
            "--lease",
            type=lease_seconds,
            help=f"Seconds a claim holds, at least 0.1; renewed while the job runs (default: "
            f"{setting_default('LEASE')}).",
        )
        add(
            "--poll-interval",
            type=positive_seconds,
            help="Longest idle sleep between polls, in seconds "
            f"(default: {setting_default('POLL_INTERVAL')}).",
        )
        add(
            "--shutdown-timeout",
            type=non_negative_seconds,
            help="Seconds running jobs get to finish after SIGTERM before they are given back "
            f"(default: {setting_default('SHUTDOWN_TIMEOUT')}).",
        )
        add(
            "--job-timeout",
            type=positive_seconds,
            help="Seconds a job may run before it is recorded as failed "
            f"(default: {setting_default('JOB_TIMEOUT')}).",
        )
        add(
            "--worker-id",
            type=worker_id,
            help="Name stored in locked_by and worker_ids (default: host:pid:random).",
        )
        add(
            "--no-listen",
            action="store_true",
            help="Do not LISTEN for new jobs; poll only "
            f"(default: listen if {setting_default('LISTEN_NOTIFY')}).",
        )
        add(
            "--stats-interval",
            type=positive_seconds,
            help="Seconds between throughput lines; a job running longer than this is named "
            "in them (default: 60).",
        )
        add(
            "--reload",
            action="store_true",
            help="Restart the worker when Python code changes, with Django's autoreloader as "
            "runserver does; running jobs are given back at each restart. For development "
            "only, never in production (default: off).",
        )
        add(
            "--metrics-port",
            type=port,
            help="Serve /metrics and /healthz on this port, 0 for any free one (default: "
            f"{setting_default('METRICS_PORT')}). Needs the metrics extra (prometheus-client).",
        )
        add(
            "--metrics-addr",
            type=metrics_address,
            help=f"Address the metrics server listens on, IPv4 or IPv6 (default: "
            f"{setting_default('METRICS_ADDR')}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if (
            options["metrics_addr"] is not None
            and options["metrics_port"] is None
            and conf.get().METRICS_PORT is None  # no port: no server to listen there
        ):
            raise self.refuse(
                "--metrics-addr needs a port: give --metrics-port (or set "
                "PGQUEUE['METRICS_PORT']); without one the worker serves no metrics"
            )
        configure_logging(options["verbosity"])
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
        problem = worker_in_transaction(config.database)
        if problem:  # call_command("runworker") inside a TestCase
            raise CommandError(problem)
        port, addr = options["metrics_port"], options["metrics_addr"]
        if options["reload"]:

            def build() -> Worker:  # in the reloading child, each time it starts
                return new_worker(config, exits_with_process=self.own_process)

            checks = self.check if self.reload_checks else None
            status = run_reloading(build, checks, lambda worker: serve_metrics(worker, port, addr))
            worker = None
        else:
            worker = new_worker(config, exits_with_process=self.own_process)
            exporter = serve_metrics(worker, port, addr)
            exits = ExitGuard(worker)
            exits.install()
            # What start-up built (Django, the apps, the tasks) lives as long as the
            # process: out of the collector's reach, its full passes, every few
            # thousand jobs, no longer walk it.
            gc.freeze()
            try:
                status = exits.status(worker.run())
            finally:
                if exporter is not None:
                    exporter.close()
        # Taken, the atexit handlers are ours to run; held, the shutdown's ``exiting``
        # thread is still inside them (one that overran its share of the bound).
        handlers_busy = not EXIT_HANDLERS.acquire(blocking=False)
        if (
            handlers_busy
            or worker is None
            or worker.ledger.running()
            or (self.own_process and worker.ledger.threads_in_jobs())
        ):
            # A job thread is still inside an overrunning job, and its job was
            # given back: end the process now, not after interpreter teardown
            # (which would join the thread asgiref runs an async job's loop in).
            # (The reloading child's worker ran on a thread of its own: the same.)
            # The atexit handlers still run, as at a normal exit (an error reporter's
            # flush, a tracer's export, logging's own flush), before the job threads'
            # end; when jobs were given back, they ran before it (see new_worker), and
            # any still running there are not started again here.
            if not handlers_busy:
                atexit._run_exitfuncs()
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        # The process ends now: spare it the interpreter's final collections of a heap
        # this size (some 50 ms), so that a stopped worker is gone at once. atexit
        # handlers and the normal teardown still run.
        gc.freeze()
        EXIT_HANDLERS.release()  # the interpreter's exit runs them
        if status:
            sys.exit(status)


def new_worker(config: WorkerConfig, *, exits_with_process: bool = False) -> Worker:
    """The worker of ``config``, or a CommandError for a schedule whose job it would
    refuse (a task it cannot find, arguments the task does not take): the system
    check (E010) says so first, unless ``--skip-checks`` skipped it.

    ``exits_with_process``: the process ends with the worker, which then runs the
    atexit handlers before giving back the runs still going (``exiting``), not after:
    a slow one (an error reporter's flush) would leave them running here while
    another worker started them again."""
    try:
        worker = Worker(config)
    except InvalidSchedule as exc:
        raise CommandError(str(exc)) from None
    if exits_with_process:
        worker.events.subscribe("exiting", run_exit_handlers)
    return worker


#: Held while the atexit handlers run: the shutdown runs them on a thread of its own and
#: gives the jobs back without waiting for one that overruns; the process's exit then
#: must not start them a second time beside it.
EXIT_HANDLERS = threading.Lock()


def run_exit_handlers(**data: Any) -> None:
    """The atexit handlers, now (each runs once: the early exit's call is then a no-op),
    but logging's own: the worker still logs what it gives back, and a handler closed
    now (a FileHandler opened with mode "w") would drop those lines."""
    if not EXIT_HANDLERS.acquire(blocking=False):
        return  # the process's exit is running them
    atexit.unregister(logging.shutdown)
    try:
        atexit._run_exitfuncs()
    finally:
        atexit.register(logging.shutdown)
        EXIT_HANDLERS.release()


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
