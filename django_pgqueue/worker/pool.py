"""Threads that run jobs.

Daemon threads rather than a ThreadPoolExecutor: a job that overruns the
shutdown deadline (or its timeout) cannot be interrupted in Python, and an
executor's threads would keep the process alive until it returned. Such a job
keeps its lease until the worker process ends (docs/guarantees.md).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Literal

from django.db import connections

from django_pgqueue import jobdb
from django_pgqueue.control import RunningJob
from django_pgqueue.records import ClaimedJob, Outcome
from django_pgqueue.worker.executor import execute, failure
from django_pgqueue.worker.services import ConnectionEpoch

logger = logging.getLogger("django_pgqueue")


class JobPool:
    """``size`` threads; each runs one job at a time and reports its outcome.

    ``on_start(job)`` gives the job's control, or False if the job is no longer
    ours to run; ``on_done(job, outcome)`` receives what happened.
    """

    def __init__(
        self,
        size: int,
        on_start: Callable[[ClaimedJob], RunningJob | Literal[False]],
        on_done: Callable[[ClaimedJob, Outcome], None],
        epoch: ConnectionEpoch,
    ) -> None:
        self._jobs: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._on_start = on_start
        self._on_done = on_done
        self._epoch = epoch
        self._threads = [
            threading.Thread(target=self._loop, name=f"pgqueue-job-{n}", daemon=True)
            for n in range(size)
        ]

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
        seen_epoch = self._epoch.value
        while (job := self._jobs.get()) is not None:
            control = self._on_start(job)
            if control is False:
                continue  # given back while it waited
            if self._epoch.value != seen_epoch:
                # The worker lost its database since this thread's last job: its
                # kept connections are likely dead, and not this job's fault.
                seen_epoch = self._epoch.value
                jobdb.drop_all()
            try:
                outcome = execute(job, control)
            except BaseException as exc:
                # execute() turns everything a job does into an outcome; this is
                # the backstop for a bug of ours, so that a thread never dies
                # holding a job whose lease the heartbeat would renew forever.
                logger.exception("job %s: unexpected error running it; burying it", job.id)
                outcome = failure(job, exc, final=True)
            finally:
                try:
                    jobdb.tidy()
                except Exception:
                    logger.exception("job %s: tidying its connections failed", job.id)
                    jobdb.drop_all()
            self._on_done(job, outcome)
        connections.close_all()
