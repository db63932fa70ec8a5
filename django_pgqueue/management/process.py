"""The worker as a process: its signals and exit bound.

:class:`ExitGuard` turns SIGTERM/SIGINT into a graceful, then an urgent, stop with
a bounded exit (``--reload``'s processes are :mod:`~django_pgqueue.management.reload`'s).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType

from django_pgqueue.worker.runner import Worker
from django_pgqueue.worker.shutdown import MARGIN, URGENT
from django_pgqueue.worker.waker import Waker

logger = logging.getLogger("django_pgqueue")


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
                held = self.worker.ledger.held_ids()
                logger.error(
                    "shutdown overran its bound (a statement hangs): exiting now; %s",
                    f"jobs {held} were held and may not have been given back: the reaper "
                    "returns those once their leases expire"
                    if held
                    else "no job was held",
                )
                logging.shutdown()
                os._exit(self.status(1))
