"""W4 pickup latency: an idle worker, jobs enqueued 20 ms apart, commit to job start.

Each job records ``time.time()`` as its first act (the task returns it, and it
is stored as the job's result). The enqueue's commit time is the server's commit
timestamp of the enqueuing transaction (``track_commit_timestamp``, which the
runner turns on for the embedded server), read on the same host's clock; on a
server without it, the client's clock when the commit returned is used instead.
Each enqueue is its own transaction. The baseline is the article's worker: 8
threads that poll every 100 ms ("an idle worker that polls every 100ms"), no NOTIFY.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from benchmarks import baseline
from benchmarks.common import (
    Outcome,
    Process,
    Row,
    Scale,
    Target,
    connect,
    db_url,
    percentile,
    reset_jobs,
)

GAP = 0.020
TARGETS = {50: 1.0, 95: 3.0}
WAIT_FOR_DONE = 30.0


XID = "SELECT pg_current_xact_id()::text"


def paced[K](n: int, enqueue: Callable[[], tuple[K, str]]) -> dict[K, float]:
    """Call ``enqueue`` n times, GAP apart; returns {job id: commit time}.

    ``enqueue`` commits one job and returns its id and its transaction's id.
    """
    returned: dict[K, tuple[float, str]] = {}
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * GAP - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        job_id, xid = enqueue()
        returned[job_id] = (time.time(), xid)
    return commit_times(returned)


def commit_times[K](returned: dict[K, tuple[float, str]]) -> dict[K, float]:
    """The server's commit timestamps if it tracks them, else the client's return times."""
    with connect() as conn:
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
        if not row or row[0] != "on":
            return {key: t for key, (t, _) in returned.items()}
        xids = [xid for _, xid in returned.values()]
        stamps = dict(conn.execute(
            "SELECT x, extract(epoch FROM pg_xact_commit_timestamp("
            "(x::bigint %% 4294967296)::text::xid))::float8 FROM unnest(%s::text[]) AS x",
            [xids]).fetchall())
    return {key: float(stamps[xid]) for key, (_, xid) in returned.items()}


def latencies[K](committed: dict[K, float], started: dict[K, float]) -> list[float]:
    missing = set(committed) - set(started)
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(committed)} jobs never started")
    return [(started[job_id] - t) * 1000 for job_id, t in committed.items()]


def _results(ids: set[int]) -> tuple[dict[int, float], dict[int, float]]:
    """({id: task start}, {id: claim start}) of the jobs once they are all done."""
    from django_pgqueue.models import Job

    deadline = time.monotonic() + WAIT_FOR_DONE
    while True:
        rows = Job.objects.filter(id__in=ids, status="done").values_list(
            "id", "result", "attempted_at")
        if len(rows) == len(ids) or time.monotonic() > deadline:
            return ({job_id: float(value or 0.0) for job_id, value, _ in rows},
                    {job_id: at.timestamp() for job_id, _, at in rows if at})
        time.sleep(0.05)


def ours(n: int) -> tuple[list[float], list[float]]:
    """runworker with default settings (LISTEN/NOTIFY, 2 s poll as the fallback)."""
    from django.db import connection, transaction

    from benchmarks.benchapp.tasks import stamp

    def enqueue() -> tuple[int, str]:
        with transaction.atomic():
            job = stamp.enqueue()
            with connection.cursor() as cursor:
                cursor.execute(XID)
                (xid,) = cursor.fetchone() or ("",)
        return job.id, xid

    reset_jobs()
    worker = Process.start("runworker", "-v", "0")
    try:
        warm = stamp.enqueue()  # wait for the worker to be up and idle
        if not _results({warm.id})[0]:
            raise RuntimeError(f"runworker never ran a job:\n{worker.output()[-2000:]}")
        time.sleep(0.5)
        committed = paced(n, enqueue)
        started, claimed = _results(set(committed))
    finally:
        worker.stop()
    return latencies(committed, started), latencies(committed, claimed)


def base(n: int) -> list[float]:
    url = db_url()
    baseline.setup(url)
    stop = threading.Event()
    started: dict[int, float] = {}
    threads = [threading.Thread(target=baseline.poller, args=(url, stop, started))
               for _ in range(baseline.WORKERS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        with psycopg.connect(url, autocommit=True) as conn:

            def enqueue() -> tuple[int, str]:
                row = conn.execute("INSERT INTO jobs613 (payload) VALUES ('stamp') "
                                   "RETURNING id, pg_current_xact_id()::text").fetchone()
                assert row is not None
                return int(row[0]), str(row[1])

            committed = paced(n, enqueue)
        deadline = time.monotonic() + WAIT_FOR_DONE
        while len(started) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return latencies(committed, dict(started))


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    n = scale.latency_jobs
    the_base, (our, to_claim) = base(n), ours(n)
    with connect() as conn:
        conn.execute("TRUNCATE pgqueue_job RESTART IDENTITY")
    rows = []
    for q in (50, 95, 99):
        target = Target("<=", TARGETS[q]) if q in TARGETS else None
        rows.append(Row("W4 pickup", f"{n} jobs 20 ms apart, idle `runworker`: p{q}", "ms",
                        percentile(our, q), percentile(the_base, q), facts.get(f"w4_p{q}"),
                        target))
    with connect() as conn:
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
    clock = ("the server's commit timestamps" if row and row[0] == "on"
             else "the client's clock when the commit returned")
    detail = (f"**W4** min/max enqueue-commit-to-start: django-pgqueue {min(our):.2f}/"
              f"{max(our):.2f} ms, baseline (8 threads polling every 100 ms) "
              f"{min(the_base):.2f}/{max(the_base):.2f} ms; commit times from {clock}. "
              f"Of django-pgqueue's median, {percentile(to_claim, 50):.2f} ms is commit to the "
              "claim statement's start (NOTIFY delivery, the worker waking), the rest the "
              "claim's round trip and commit and the hand-over to a job thread.\n")
    return Outcome(rows, [detail])
