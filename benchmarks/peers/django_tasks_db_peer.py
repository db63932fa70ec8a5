"""django-tasks-db (Django's reference database backend) as a peer, with ``db_worker``.

Run under ``benchmarks.peer_settings`` (its own database). Its tasks are the
Tasks path's own (``benchapp/framework_tasks.py``), enqueued with
``task.enqueue()``, Django's public API; ``db_worker`` runs one job at a time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async

from benchmarks.common import PEER_SETTINGS, DatabaseCpu, Process, Scale, connect, settle, writes
from benchmarks.peers import base
from benchmarks.w1_enqueue import payload
from benchmarks.w4_latency import XID

WORKER = ("db_worker", "-v", "0", "--no-reload")
TABLE = "django_tasks_database_dbtaskresult"
SPAN = (
    f"SELECT extract(epoch FROM min(started_at))::float8, "
    f"extract(epoch FROM max(finished_at))::float8, "
    f"count(*) FILTER (WHERE status = 'SUCCESSFUL') FROM {TABLE}"
)


def reset() -> None:
    with connect() as conn:
        conn.execute(f"TRUNCATE {TABLE}".encode())
    settle()


def w1(scale: Scale) -> dict[str, float]:
    from django.db import transaction

    from benchmarks.benchapp.framework_tasks import noop

    n, out = scale.enqueue_jobs, {}
    for key, atomic in (("w1_single", False), ("w1_atomic", True)):
        reset()
        start = time.perf_counter()
        for i in range(n):
            if atomic:
                with transaction.atomic():
                    noop.enqueue(**payload(i))
            else:
                noop.enqueue(**payload(i))
        out[key] = n / (time.perf_counter() - start)
    reset()
    return out  # no bulk API: w1_bulk stays n/a


def enqueue(n: int, task: Any, *args: Any) -> None:
    from django.db import transaction

    reset()
    with transaction.atomic():
        for _ in range(n):
            task.enqueue(*args)
    base.vacuum(TABLE)


def w2(scale: Scale) -> dict[str, float]:
    from benchmarks.benchapp.framework_tasks import noop

    n = scale.peer_drain_jobs
    enqueue(n, noop)
    db = DatabaseCpu()
    before = db.seconds()
    worker = Process.start(*WORKER, "--batch", "--no-startup-delay", settings=PEER_SETTINGS)
    worker.wait(timeout=900, progress=writes(TABLE))
    after = db.seconds()
    worker.check()
    _, last, done = base.epochs(SPAN)
    if done != n:
        raise RuntimeError(f"db_worker left {n - done} of {n} jobs")
    out = {"w2_rate": n / (last - worker.started), "w2_cpu": worker.cpu / n * 1000, "w2_jobs": n}
    if before is not None and after is not None:
        out["w2_db_cpu"] = (after - before) / n * 1000
    return out


def w3(scale: Scale) -> dict[str, float]:
    """8 ``db_worker --batch`` processes (db_worker runs one job at a time)."""
    from benchmarks.benchapp.framework_tasks import sleep_ms

    n = scale.lab_jobs
    enqueue(n, sleep_ms, 2.0)
    workers = [
        Process.start(*WORKER, "--batch", "--no-startup-delay", settings=PEER_SETTINGS)
        for _ in range(base.SLOTS)
    ]
    for worker in workers:
        worker.wait(progress=writes(TABLE))
        worker.check()
    first, last, done = base.epochs(SPAN)
    if done != n:
        raise RuntimeError(f"db_worker left {n - done} of {n} lab jobs")
    return {"w3_ms": (last - first) * 1000}


def w4(scale: Scale) -> dict[str, float]:
    """One idle ``db_worker`` with its defaults (it polls every second)."""
    from django.db import connection, transaction

    from benchmarks.benchapp.framework_tasks import stamp

    def enqueue_sync(key: str) -> str:
        with transaction.atomic():
            stamp.enqueue(key)
            with connection.cursor() as cursor:
                cursor.execute(XID)
                (xid,) = cursor.fetchone() or ("",)
        return str(xid)

    @contextlib.asynccontextmanager
    async def enqueuer() -> AsyncIterator[base.Enqueue]:
        # One thread for every enqueue: Django's connection stays that thread's.
        yield sync_to_async(enqueue_sync, thread_sensitive=True)

    reset()
    out = base.pickup(scale.latency_jobs, ("-m", "django", *WORKER), enqueuer)
    reset()
    return out


def setup() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


STEPS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4}
