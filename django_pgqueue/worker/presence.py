"""The worker's row in the registry (``pgqueue_worker``): written at start, renewed
on the heartbeat thread, removed at exit; and the rows of workers long gone
forgotten, on the maintenance thread.

A row is shown as gone once ``alive_until`` passes: halfway between the moment
the next heartbeat was due and the moment the leases it renewed expire, so a
job running on a killed (or hung) worker shows as such before the reaper may
take it back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import django_pgqueue
from django_pgqueue import conf, wording
from django_pgqueue.dberrors import first_line, is_transient, schema_problem
from django_pgqueue.monitoring.models import RegisteredWorker
from django_pgqueue.queue.presence import Registration
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.ledger import Ledger
from django_pgqueue.worker.services import Timer, reset_connection

logger = logging.getLogger("django_pgqueue")


def gone_after(config: WorkerConfig) -> float:
    """Seconds after a heartbeat past which a worker that sent no other is gone."""
    return (config.heartbeat_interval + config.lease) / 2


class Presence:
    def __init__(
        self,
        config: WorkerConfig,
        ledger: Ledger,
        events: Events,
        lock_pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.config = config
        #: The server process of the session holding the id's lock, if any.
        self.lock_pid = lock_pid
        self.ledger = ledger
        scheduling = not config.burst and config.max_jobs is None
        self.entry = Registration(
            worker=config.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=config.queues,
            concurrency=config.concurrency,
            version=django_pgqueue.__version__,
            gone_after=gone_after(config),
            schedules=scheduling,
            schedule_names=[s.name for s in conf.get().schedules if s.enabled]
            if scheduling
            else [],
        )
        self.done = 0
        self._registered = False
        self._left = False
        self._lock = threading.Lock()
        #: The heartbeat thread's renewal of the row; its first round comes at once,
        #: unless ``enter`` wrote the row (then a heartbeat interval later).
        self.renewal = Timer("registry", config.heartbeat_interval, self.beat)
        events.subscribe("recorded", self._recorded)

    def _recorded(self, statuses: dict[tuple[int, int], str | None], **data: object) -> None:
        # Once per batch of outcomes, on the completer's thread; jobs asked to stop
        # that a give-back or the shutdown ended cancelled come from other threads.
        # A run whose outcome the fence refused (status None) is not one we recorded.
        with self._lock:
            self.done += sum(1 for status in statuses.values() if status is not None)

    def heartbeat_timers(self) -> list[Timer]:
        return [self.renewal]

    def maintenance_timers(self) -> list[Timer]:
        return [Timer("forget gone workers", self.config.reap_interval, self.forget)]

    def beat(self) -> None:
        """Write the row (at start), or renew it. A failure of the registry is
        logged and never stops the worker: the row is only for people to read."""
        if self._left:
            return
        try:
            RegisteredWorker.objects.register(
                self.entry,
                running=len(self.ledger.running()),
                done=self.done,
                starting=not self._registered,
                using=self.config.database,
                lock_pid=self.lock_pid(),
            )
        except Exception as exc:
            if is_transient(exc) or schema_problem(exc):
                raise  # the heartbeat thread's guard waits for the database, or stops
            logger.exception("could not write this worker's row in the registry")
            reset_connection(self.config.database)
            return
        self._registered = True
        if self._left:  # leave() came while this wrote (a shutdown past a slow write)
            self._remove()

    def enter(self, fatal: Callable[[str], None]) -> None:
        """Write the row at start, on the claim loop's thread before it claims: a job of
        this worker's never shows as running on a worker the registry does not list
        (the heartbeat thread's first round came after the first jobs on a busy host).
        Written, its first renewal comes a heartbeat interval later (it came at once: a
        second statement for nothing). A failure leaves it to the heartbeat thread's
        first round, at once; but the registry's table missing or out of date is
        ``fatal``: the worker stops before it claims anything (the heartbeat's first
        round stopped it, its first jobs claimed and given back)."""
        try:
            self.beat()
        except Exception as exc:
            reset_connection(self.config.database)
            if problem := schema_problem(exc, self.config.database):
                fatal(problem)
                return
            logger.warning(
                "could not write this worker's row in the registry yet: %s", first_line(exc)
            )
            return
        if self._registered:  # (not if beat() logged an error of another kind)
            self.renewal.due = time.monotonic() + self.renewal.interval

    def forget(self) -> None:
        forgotten = RegisteredWorker.objects.forget(using=self.config.database)
        if forgotten:
            shown = ", ".join(map(wording.shown, forgotten))  # ids in rows, perhaps by hand
            logger.info("forgot workers gone for over an hour: %s", shown)

    def leave(self) -> None:
        """Remove the row as the worker exits (best effort: a row left behind is
        shown as gone, then forgotten)."""
        self._left = True  # (before the statement: a write under way takes the row out too)
        self._remove()

    def _remove(self) -> None:
        try:
            RegisteredWorker.objects.leave(self.config.worker_id, using=self.config.database)
        except Exception as exc:
            reset_connection(self.config.database)
            logger.warning("could not remove this worker from the registry: %s", first_line(exc))
