"""The soak's task (tests/worker/test_contract_chaos_53.py). Each run appends its
record to a file outside the database, which survives a server crash: a ``start``
line, a ``tick`` every 50 ms while it works (a run killed with its process leaves
its last tick as the latest moment it was known alive), then an ``end`` line
saying how it ended. Every line names the job, the run's claim token, the
attempt, the process and the time (epoch seconds)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from django_pgqueue import Snooze, current_job, task

TICK = 0.05


def _write(log: str, event: str, **fields: Any) -> None:
    job = current_job()
    assert job is not None
    line = {"ev": event, "job": job.id, "run": job.run, "attempt": job.attempt}
    line |= {"pid": os.getpid(), "t": time.time(), **fields}
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # one write per line: O_APPEND keeps lines of several processes whole
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def _starts(log: str, job_id: int) -> int:
    with open(log) as lines:
        return sum(
            1 for line in lines if '"ev": "start"' in line and json.loads(line)["job"] == job_id
        )


@task(max_attempts=4)
def chaos(log: str, kind: str, seconds: float = 0.0, n: int = 0) -> dict[str, int]:
    """``kind``: ``ok`` works ``seconds`` and returns; ``fail`` fails on its first
    ``n`` attempts; ``always`` always fails; ``snooze`` snoozes on its first ``n``
    runs; ``stoppable`` works ``seconds`` unless asked to stop. The result (and a
    failure's message) names the run, so the row tells which run wrote it."""
    job = current_job()
    assert job is not None
    _write(log, "start", kind=kind)
    if kind == "snooze" and _starts(log, job.id) <= n:
        _write(log, "end", outcome="snooze")
        raise Snooze(0.1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if kind == "stoppable" and job.cancel_requested:
            break
        time.sleep(min(TICK, max(deadline - time.monotonic(), 0)))
        _write(log, "tick")
    if kind == "always" or (kind == "fail" and job.attempt <= n):
        _write(log, "end", outcome="raise")
        raise RuntimeError(f"run {job.run} attempt {job.attempt}: planned failure")
    _write(log, "end", outcome="return")
    return {"run": job.run, "attempt": job.attempt, "pid": os.getpid()}
