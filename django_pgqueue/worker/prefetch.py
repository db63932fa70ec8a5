"""How many jobs a worker claims beyond its free threads.

A fixed number (``--prefetch N``), or, by default, one that follows the jobs:
the worker keeps a moving average of how long its jobs run, and claims ahead
as many as its threads can start within ``TARGET_WAIT``:
``width * TARGET_WAIT / average``, at most ``MAX_PER_THREAD`` per thread, where
the width is how many threads run jobs back to back (``pacing.py``; all of
them for jobs that wait, fewer for jobs that keep the interpreter busy, which
would take turns at it anyway).
Short jobs (milliseconds) get a deep prefetch, so a thread never waits for a
claim round trip between two jobs; jobs of a second or longer get none, so no job
waits in one worker behind long ones while another worker could run it. Until
the first job has finished it claims no more than its threads. A prefetched job's
lease is renewed while it waits, and its job timeout counts from its start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: How long a prefetched job may expect to wait for a thread, in seconds.
TARGET_WAIT = 0.05
#: The deepest prefetch, per thread.
MAX_PER_THREAD = 8
#: Weight of the newest duration in the moving average.
SMOOTHING = 0.2


class Prefetch:
    def __init__(
        self, concurrency: int, fixed: int | None, width: Callable[[], int] | None = None
    ) -> None:
        self.concurrency = concurrency
        self.fixed = fixed
        self._width = width or (lambda: concurrency)
        self._average: float | None = None
        self._limit = 0 if fixed is None else fixed  # read on every job: kept ready
        self._lock = threading.Lock()

    @property
    def adaptive(self) -> bool:
        return self.fixed is None

    def limit(self) -> int:
        """Jobs to hold beyond the threads right now."""
        return self._limit

    def observe(self, seconds: float) -> None:
        """A job ran for ``seconds`` (from its start, not its claim)."""
        if self.fixed is not None:
            return
        with self._lock:
            average = self._average
            average = seconds if average is None else average + SMOOTHING * (seconds - average)
            self._average = average
            deepest = MAX_PER_THREAD * self.concurrency
            self._limit = (
                deepest
                if average <= 0
                else min(deepest, int(self._width() * TARGET_WAIT / average))
            )

    def describe(self) -> str:
        return "auto" if self.fixed is None else str(self.fixed)
