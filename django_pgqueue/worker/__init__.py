"""The worker runtime, one unit per module:

- ``runner``: the :class:`~django_pgqueue.worker.runner.Worker` and its claim loop;
- ``pool`` and ``executor``: the job threads, and running one job to an outcome;
- ``completer``: writes outcomes in batches;
- ``ledger``: the runs a worker holds, under one lock;
- ``listener``: LISTEN/NOTIFY wake-ups;
- ``services``: the supervised thread base and the timers thread (heartbeat,
  reaper, pruner, job timeouts, throughput);
- ``shutdown``: the start-up check and the bounded shutdown;
- ``events`` and ``waker``: what the worker emits, and how it is woken.

``Worker``, ``WorkerConfig`` and ``Events`` are importable from here, to run a worker
in a thread of a test (see "Testing" in the docs); importing this package does not
import them until asked.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_pgqueue.worker.config import WorkerConfig
    from django_pgqueue.worker.events import Events
    from django_pgqueue.worker.runner import Worker

__all__ = ["Events", "Worker", "WorkerConfig"]

_HOMES = {"Worker": "runner", "WorkerConfig": "config", "Events": "events"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
