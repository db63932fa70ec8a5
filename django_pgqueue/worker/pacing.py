"""How many of a worker's job threads run jobs back to back: the pool's *width*.

Python runs one thread at a time (the GIL). A job that waits (on the database,
the network, a sleep) lets the others run, so jobs that wait want many threads;
a job that keeps the interpreter busy gains nothing from a second thread, and
loses: every time a thread makes a system call (opens a file, writes a log line,
reads a socket) another runnable thread takes the GIL, and taking turns costs two
thread switches. Eight threads running short busy jobs spend more time handing
the GIL over than running them.

So the pool runs jobs on as many threads as they can use (``--concurrency`` is
the most, never exceeded):

- **Width follows the jobs.** For each job the pool measures its wall time and
  its thread's CPU time; their ratio says how many such jobs fit in the time one
  of them runs (a job that waits 9 ms for each 1 ms of work: ten). The width is
  that ratio, rounded, over the recent jobs (a low quantile of the last
  ``SAMPLES``, because taking turns only ever adds wall time: the least contended
  runs are the truest). It starts at 1 and rises after the first job that waits.
- **A slow job never holds the others up.** A thread counts toward the width
  only for ``HANDOFF`` after it started its job; past that the job is taken to be
  blocked, and an idle thread (one of them watches while jobs wait) takes the
  next job. So a waiting job starts within about ``HANDOFF`` of the jobs ahead of
  it stalling, whatever the width.
- **Work outside the GIL gets every thread.** When the process used more than
  ``PARALLEL`` CPUs over a ``WINDOW`` (C code that releases the GIL: hashing,
  image work), the width is the whole pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: After this long in one job, a thread's job may be blocked: it stops counting.
HANDOFF = 0.002
#: Recent jobs whose wall/CPU ratios set the width.
SAMPLES = 16
#: The process's CPU use is measured over windows this long (seconds).
WINDOW = 0.1
#: CPUs used above which the jobs run outside the GIL (1 is all the GIL allows).
PARALLEL = 1.3
#: A job's CPU time is at least this (seconds), so that a ratio stays finite.
MIN_CPU = 1e-6


class Pacing:
    """The width of one pool; :meth:`observe` is called once per job, by the
    pool, under its lock."""

    def __init__(
        self,
        size: int,
        process_cpu: Callable[[], float] = time.process_time,
        handoff: float = HANDOFF,
    ) -> None:
        self.size = size
        self.width = 1
        self.handoff = handoff
        self._process_cpu = process_cpu
        self._ratios: list[float] = []  # the last SAMPLES jobs' wall/CPU, oldest first
        self._window_start = time.monotonic()
        self._cpu_start = process_cpu()
        self._parallel = False

    def observe(self, wall: float, cpu: float, now: float) -> None:
        """A job ran ``wall`` seconds, ``cpu`` of them on its thread's CPU."""
        ratios = self._ratios
        ratios.append(wall / max(cpu, MIN_CPU))
        if len(ratios) > SAMPLES:
            del ratios[0]
        if now - self._window_start >= WINDOW:
            used = self._process_cpu()
            self._parallel = (used - self._cpu_start) / (now - self._window_start) > PARALLEL
            self._window_start, self._cpu_start = now, used
        if self._parallel:
            self.width = self.size
        else:
            low = sorted(ratios)[len(ratios) // 4]
            self.width = max(1, min(self.size, round(low)))
