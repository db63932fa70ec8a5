"""Threads that run jobs.

Daemon threads rather than a ThreadPoolExecutor: a job that overruns the
shutdown deadline (or its timeout) cannot be interrupted in Python, and an
executor's threads would keep the process alive until it returned. The jobs of
such threads have been given back to the queue by then, so exiting over them
is safe.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from django.db import connections

from django_pgqueue.queue import ClaimedJob, Failure, Success
from django_pgqueue.worker.executor import execute, failure

Outcome = Success | Failure

logger = logging.getLogger("django_pgqueue")


class JobPool:
    """``size`` threads; each runs one job at a time and reports its outcome."""

    def __init__(self, size: int, on_start: Callable[[ClaimedJob], bool],
                 on_done: Callable[[ClaimedJob, Outcome], None]) -> None:
        self._jobs: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._on_start = on_start
        self._on_done = on_done
        self._threads = [threading.Thread(target=self._loop, name=f"pgqueue-job-{n}",
                                          daemon=True) for n in range(size)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, job: ClaimedJob) -> None:
        self._jobs.put(job)

    def take_waiting(self) -> list[ClaimedJob]:
        """Remove and return the jobs no thread has started (prefetched ones)."""
        waiting: list[ClaimedJob] = []
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return waiting
            if job is not None:
                waiting.append(job)

    def stop(self, timeout: float = 0.0) -> None:
        """Let idle threads exit; wait up to ``timeout`` for each (busy ones may not)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            if not self._on_start(job):
                continue  # given back while it waited
            try:
                outcome = execute(job)
            except BaseException as exc:
                # execute() turns everything a job does into an outcome; this is
                # the backstop for a bug of ours, so that a thread never dies
                # holding a job whose lease the heartbeat would renew forever.
                logger.exception("job %s: unexpected error running it; burying it", job.id)
                outcome = failure(job, exc, final=True)
            finally:
                tidy_connections()
            self._on_done(job, outcome)
        connections.close_all()


def tidy_connections() -> None:
    """Keep this thread's connections for the next job unless they are unfit.

    A request closes its connection when CONN_MAX_AGE is 0; a worker thread
    runs thousands of jobs, and reconnecting (a server process fork) for each
    would cost more than most jobs. So a connection is kept, and closed only if
    a job left a transaction open, an error made it unusable, or a non-zero
    CONN_MAX_AGE says it is too old.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block or not conn.get_autocommit():
            conn.close()
        elif conn.settings_dict.get("CONN_MAX_AGE"):
            conn.close_if_unusable_or_obsolete()
        elif conn.errors_occurred and not conn.is_usable():
            conn.close()
