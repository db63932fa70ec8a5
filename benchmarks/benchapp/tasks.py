"""django-pgqueue tasks for the benchmarks."""

from __future__ import annotations

import time

from django_pgqueue import task


@task
def noop(*args: object, **kwargs: object) -> None:
    """W1 and W2: the job's own cost is nil, so the queue's cost is what is measured."""


@task
def stamp() -> float:
    """W4: the wall-clock time the job started (same host clock as the enqueuer)."""
    return time.time()


@task
def sleep_ms(ms: float) -> None:
    """W3: a job that takes ``ms`` milliseconds."""
    time.sleep(ms / 1000)
