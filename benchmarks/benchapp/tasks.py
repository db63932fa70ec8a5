"""The direct API's tasks (``django_pgqueue.task``): the engine under the Tasks path.

Each runs the shared job body (``benchmarks.jobbody.record``), as the Tasks-path
tasks in ``framework_tasks`` and every peer's do.
"""

from __future__ import annotations

import time

from benchmarks.jobbody import record
from django_pgqueue import task


@task
def noop(*args: object, **kwargs: object) -> None:
    """W1 and W2: the job body alone, so the queue's own cost is what is measured."""
    record("job")


@task
def stamp(key: str) -> None:
    """W4: the job body, labelled with the enqueuer's key (its start time is read back)."""
    record(key)


@task
def sleep_ms(ms: float) -> None:
    """W3: the job body, then ``ms`` milliseconds."""
    record("sleep")
    time.sleep(ms / 1000)
