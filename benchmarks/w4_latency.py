"""W4 pickup latency: an idle worker, jobs enqueued 20 ms apart, commit to job start.

Each job's body records ``time.time()`` as its first act, in the job file
(``benchmarks.jobbody``), labelled with a key the enqueuer chose. The enqueue's
commit time is the server's commit timestamp of the enqueuing transaction
(``track_commit_timestamp``, which the runner turns on for the embedded server),
read on the same host's clock; on a server without it, the client's clock when
the commit returned is used instead. Each enqueue is its own transaction. The
Tasks path and the direct API each get an idle ``runworker`` with default
settings. The baseline is the article's worker: 8 threads that poll every 100 ms
("an idle worker that polls every 100ms"), no NOTIFY. The peers measure the same
way in their subprocesses, each with its own LISTEN.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from benchmarks import baseline, jobbody
from benchmarks.common import (
    Outcome,
    Process,
    Row,
    Scale,
    Target,
    connect,
    db_url,
    peer_values,
    percentile,
    reset_jobs,
)

GAP = 0.020
TARGETS = {50: 1.5, 95: 3.0}  # the Tasks path's
WAIT_FOR_DONE = 30.0


XID = "SELECT pg_current_xact_id()::text"


def paced(n: int, enqueue: Callable[[str], str]) -> dict[str, float]:
    """Call ``enqueue(key)`` for n keys, GAP apart; returns {key: commit time}.

    ``enqueue`` commits one job whose body records ``key``, and returns its
    transaction's id.
    """
    returned: dict[str, tuple[float, str]] = {}
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * GAP - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        key = f"w4-{i}"
        xid = enqueue(key)
        returned[key] = (time.time(), xid)
    return commit_times(returned)


def commit_times[K](returned: dict[K, tuple[float, str]]) -> dict[K, float]:
    """The server's commit timestamps if it tracks them, else the client's return times."""
    with connect() as conn:
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
        if not row or row[0] != "on":
            return {key: t for key, (t, _) in returned.items()}
        xids = [xid for _, xid in returned.values()]
        stamps = dict(
            conn.execute(
                "SELECT x, extract(epoch FROM pg_xact_commit_timestamp("
                "(x::bigint %% 4294967296)::text::xid))::float8 FROM unnest(%s::text[]) AS x",
                [xids],
            ).fetchall()
        )
    return {key: float(stamps[xid]) for key, (_, xid) in returned.items()}


def latencies(committed: dict[str, float], started: dict[str, float]) -> list[float]:
    missing = set(committed) - set(started)
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(committed)} jobs never started")
    return [(started[key] - t) * 1000 for key, t in committed.items()]


def wait_for_lines(keys: set[str], timeout: float = WAIT_FOR_DONE) -> dict[str, float]:
    """{key: job start} from the job file, once every key is there (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        started = {label: t for label, t in jobbody.lines() if label in keys}
        if len(started) == len(keys) or time.monotonic() > deadline:
            return started
        time.sleep(0.02)


def _claims(keys: set[str]) -> dict[str, float]:
    """{key: claim statement's start} of the done jobs (their attempted_at)."""
    with connect() as conn:
        rows = conn.execute(
            "SELECT args->>0, extract(epoch FROM attempted_at)::float8 "
            "FROM pgqueue_job WHERE status = 'done'"
        ).fetchall()
    return {str(key): float(at) for key, at in rows if key in keys}


def ours(n: int, tasks_path: bool) -> tuple[list[float], list[float]]:
    """runworker with default settings (LISTEN/NOTIFY, 2 s poll as the fallback)."""
    from django.db import connection, transaction

    from benchmarks.benchapp import framework_tasks, tasks

    stamp: Any = framework_tasks.stamp if tasks_path else tasks.stamp

    def enqueue(key: str) -> str:
        with transaction.atomic():
            stamp.enqueue(key)
            with connection.cursor() as cursor:
                cursor.execute(XID)
                (xid,) = cursor.fetchone() or ("",)
        return str(xid)

    reset_jobs()
    jobbody.clear()
    worker = Process.start("runworker", "-v", "0")
    try:
        stamp.enqueue("warm")  # wait for the worker to be up and idle
        if not wait_for_lines({"warm"}):
            raise RuntimeError(f"runworker never ran a job:\n{worker.output()[-2000:]}")
        time.sleep(0.5)
        committed = paced(n, enqueue)
        started = wait_for_lines(set(committed))
        time.sleep(0.2)  # the last completions are recorded in a batch
        claimed = _claims(set(committed))
    finally:
        worker.stop()
    return latencies(committed, started), latencies(committed, claimed)


def base(n: int) -> list[float]:
    url = db_url()
    baseline.setup(url)
    stop = threading.Event()
    started: dict[str, float] = {}
    threads = [
        threading.Thread(target=baseline.poller, args=(url, stop, started))
        for _ in range(baseline.WORKERS)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        with psycopg.connect(url, autocommit=True) as conn:

            def enqueue(key: str) -> str:
                row = conn.execute(
                    "INSERT INTO jobs613 (payload) VALUES (%s) "
                    "RETURNING pg_current_xact_id()::text",
                    [key],
                ).fetchone()
                assert row is not None
                return str(row[0])

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
    the_base = base(n)
    tasks_run, tasks_to_claim = ours(n, tasks_path=True)
    direct_run, direct_to_claim = ours(n, tasks_path=False)
    with connect() as conn:
        conn.execute("TRUNCATE pgqueue_job RESTART IDENTITY")
    rows = []
    for q in (50, 95, 99):
        target = (Target("<=", TARGETS[q]),) if q in TARGETS else ()
        rows.append(
            Row(
                "W4 pickup",
                f"{n} jobs 20 ms apart, idle worker: p{q}",
                "ms",
                {
                    "tasks": percentile(tasks_run, q),
                    "direct": percentile(direct_run, q),
                    "ref": percentile(the_base, q),
                    **peer_values(facts, f"w4_p{q}"),
                },
                target,
                "enqueue's commit (server timestamp) to the job body's first line; "
                "`runworker` with defaults (LISTEN/NOTIFY); reference: the article's "
                "worker, polling every 100 ms; PgQueuer and Procrastinate LISTEN, "
                "django-tasks-db polls every second"
                if q == 50
                else "",
            )
        )
    with connect() as conn:
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
    clock = (
        "the server's commit timestamps"
        if row and row[0] == "on"
        else "the client's clock when the commit returned"
    )
    detail = (
        f"**W4** min/max enqueue-commit-to-start: Tasks path {min(tasks_run):.2f}/"
        f"{max(tasks_run):.2f} ms, direct API {min(direct_run):.2f}/{max(direct_run):.2f}"
        f" ms, baseline (8 threads polling every 100 ms) {min(the_base):.2f}/"
        f"{max(the_base):.2f} ms; commit times from {clock}. Of the medians, "
        f"{percentile(tasks_to_claim, 50):.2f} ms (Tasks path) and "
        f"{percentile(direct_to_claim, 50):.2f} ms (direct) is commit to the claim "
        "statement's start (NOTIFY delivery, the worker waking), the rest the claim's "
        "round trip and commit, the hand-over to a job thread and, on the Tasks path, "
        "the backend's work before the task's first line.\n"
    )
    return Outcome(rows, [detail])
