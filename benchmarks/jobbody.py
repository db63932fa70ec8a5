"""The one job body every system runs: append a line to a file (open, write, close).

Every row of the table, ours and the peers', runs this same function, so all of
them do the same work per job. The line is ``<label> <time.time()>``: the time
is taken first, so W4 reads each job's start from the file, the same way for
every system. The file is ``BENCH_JOB_FILE`` (the runner sets one per run and
workers inherit it), else the null device.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "BENCH_JOB_FILE"


def path() -> str:
    return os.environ.get(ENV) or os.devnull


def record(label: object) -> float:
    """The job body: append ``label`` and the time it started; returns that time."""
    started = time.time()
    with open(path(), "a") as out:
        out.write(f"{label} {started:.6f}\n")
    return started


def clear() -> None:
    """Empty the job file (before a run whose lines are read back)."""
    if path() != os.devnull:
        Path(path()).write_text("")


def lines() -> list[tuple[str, float]]:
    """(label, start time) of every job run since the last ``clear()``."""
    if path() == os.devnull:
        return []
    out = []
    for line in Path(path()).read_text().splitlines():
        label, _, started = line.rpartition(" ")
        out.append((label, float(started)))
    return out
