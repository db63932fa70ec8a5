"""The peer: W1-W4 for django-tasks-db (Django's reference database backend) and ``db_worker``.

Run by the runner as ``python -m benchmarks.peer --only W1,W2 [--quick]`` under
``benchmarks.peer_settings``; prints its figures as one JSON object on the last
line of stdout. Tasks are ``django.tasks`` tasks (``benchapp/peer_tasks.py``),
enqueued with ``task.enqueue()``, Django's public API.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from benchmarks.common import (
    PEER_SETTINGS,
    QUICK,
    DatabaseCpu,
    Process,
    Scale,
    connect,
    percentile,
    settle,
    writes,
)
from benchmarks.w1_enqueue import payload
from benchmarks.w4_latency import XID, paced

WORKER = ("db_worker", "-v", "0", "--no-reload")
TABLE = "django_tasks_database_dbtaskresult"


def log(message: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def reset() -> None:
    with connect() as conn:
        conn.execute(f"TRUNCATE {TABLE}".encode())
    settle()


def w1(scale: Scale) -> dict[str, float]:
    from django.db import transaction

    from benchmarks.benchapp.peer_tasks import noop

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
    with connect() as conn:
        conn.execute(f"VACUUM ANALYZE {TABLE}".encode())
    settle()


def span() -> tuple[float, float, int]:
    """(first start, last finish, successful jobs): epochs on the database clock."""
    with connect() as conn:
        row = conn.execute(
            f"SELECT extract(epoch FROM min(started_at))::float8, "
            f"extract(epoch FROM max(finished_at))::float8, "
            f"count(*) FILTER (WHERE status = 'SUCCESSFUL') FROM {TABLE}".encode()).fetchone()
    assert row is not None
    return float(row[0]), float(row[1]), int(row[2])


def w2(scale: Scale) -> dict[str, float]:
    from benchmarks.benchapp.peer_tasks import noop

    n = scale.peer_drain_jobs
    enqueue(n, noop)
    db = DatabaseCpu()
    before = db.seconds()
    worker = Process.start(*WORKER, "--batch", "--no-startup-delay", settings=PEER_SETTINGS)
    worker.wait(timeout=900, progress=writes(TABLE))
    after = db.seconds()
    worker.check()
    _, last, done = span()
    if done != n:
        raise RuntimeError(f"db_worker left {n - done} of {n} jobs")
    out = {"w2_rate": n / (last - worker.started), "w2_cpu": worker.cpu / n * 1000}
    if before is not None and after is not None:
        out["w2_db_cpu"] = (after - before) / n * 1000
    return out


def w3(scale: Scale) -> dict[str, float]:
    """8 ``db_worker --batch`` processes (db_worker runs one job at a time)."""
    from benchmarks.benchapp.peer_tasks import sleep_ms

    n = scale.lab_jobs
    enqueue(n, sleep_ms, 2.0)
    workers = [Process.start(*WORKER, "--batch", "--no-startup-delay", settings=PEER_SETTINGS)
               for _ in range(8)]
    for worker in workers:
        worker.wait(progress=writes(TABLE))
        worker.check()
    first, last, done = span()
    if done != n:
        raise RuntimeError(f"db_worker left {n - done} of {n} lab jobs")
    return {"w3_ms": (last - first) * 1000}


def w4(scale: Scale) -> dict[str, float]:
    """One idle ``db_worker`` with its defaults (it polls every second)."""
    from django.db import connection, transaction
    from django_tasks_db.models import DBTaskResult

    from benchmarks.benchapp.peer_tasks import stamp

    def enqueue() -> tuple[str, str]:
        with transaction.atomic():
            result = stamp.enqueue()
            with connection.cursor() as cursor:
                cursor.execute(XID)
                (xid,) = cursor.fetchone() or ("",)
        return str(result.id), xid

    reset()
    worker = Process.start(*WORKER, settings=PEER_SETTINGS)
    try:
        warm = stamp.enqueue()
        deadline = time.monotonic() + 30
        while DBTaskResult.objects.filter(id=warm.id, status="SUCCESSFUL").count() == 0:
            if time.monotonic() > deadline:
                raise RuntimeError("db_worker never ran a job")
            time.sleep(0.05)
        time.sleep(0.5)
        committed = paced(scale.latency_jobs, enqueue)
        deadline = time.monotonic() + 60
        while True:
            rows = dict(DBTaskResult.objects.filter(id__in=list(committed), status="SUCCESSFUL")
                        .values_list("id", "return_value"))
            if len(rows) == len(committed) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        worker.stop()
    started = {str(key): float(value) for key, value in rows.items()}
    lat = [(started[str(k)] - t) * 1000 for k, t in committed.items()]
    return {f"w4_p{q}": percentile(lat, q) for q in (50, 95, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer")
    parser.add_argument("--only", default="W1,W2,W3,W4")
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    scale = QUICK if options.quick else Scale()
    figures: dict[str, float] = {}
    steps = {"W1": w1, "W2": w2, "W3": w3, "W4": w4}
    for name in options.only.split(","):
        log(f"{name}: running")
        figures.update(steps[name](scale))
    reset()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
