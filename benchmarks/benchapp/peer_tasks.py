"""The same tasks for the peer, as ``django.tasks`` tasks (imported under peer settings only)."""

from __future__ import annotations

import time

from django.tasks import task


@task
def noop(*args: object, **kwargs: object) -> None:
    pass


@task
def stamp() -> float:
    return time.time()


@task
def sleep_ms(ms: float) -> None:
    time.sleep(ms / 1000)
