"""The design article's lab, as tasks: 2 ms jobs, one that fails twice, one that always fails."""

from __future__ import annotations

import time

from django_pgqueue import task


@task
def work(n: int) -> int:
    time.sleep(0.002)
    return n


@task(max_attempts=3)
def flaky(n: int) -> int:
    """Fails on its first two attempts, then succeeds (the article's "job 7")."""
    from django_pgqueue.models import Job

    time.sleep(0.002)
    attempts = Job.objects.filter(task=flaky.path, args=[n]).values_list("attempts", flat=True)
    if attempts and attempts[0] < 3:
        raise RuntimeError(f"job {n}: planned failure on attempt {attempts[0]}")
    return n


@task(max_attempts=3)
def poison(n: int) -> None:
    raise ValueError(f"job {n} can never succeed: the payment provider rejects it")


@task
def noop() -> None:
    """Does nothing: drains of it measure the queue's own overhead."""


@task
def stamp() -> float:
    """Returns the wall clock at the moment it starts: pickup latency probes use it."""
    return time.time()
