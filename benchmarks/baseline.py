"""The baseline: the design article's queue, statement for statement, in plain psycopg.

One table (``jobs613``), a single-statement lease claim (``update ... where id =
(select ... limit 1 for update skip locked) returning``), one ``update ... done``
per job, and eight threads with a connection each, as the article's goroutines.
Its jobs run the same body as every other row's (``benchmarks.jobbody``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from benchmarks.jobbody import record

# The article's schema, verbatim. Its ready index is on (run_at) alone while the claim
# orders by (run_at, id): jobs enqueued in one statement share run_at, so every claim
# sorts all of them. READY_INDEX_FIXED is the variant W2 also reports.
SCHEMA = (
    "DROP TABLE IF EXISTS jobs613",
    """CREATE TABLE jobs613 (
        id bigserial PRIMARY KEY,
        payload text NOT NULL,
        status text NOT NULL DEFAULT 'queued',
        attempts int NOT NULL DEFAULT 0,
        run_at timestamptz NOT NULL DEFAULT now(),
        locked_until timestamptz,
        done_at timestamptz
    )""",
    "CREATE INDEX jobs613_ready ON jobs613 ({ready}) WHERE status = 'queued'",
)
READY_INDEX = "run_at"
READY_INDEX_FIXED = "run_at, id"
CLAIM = """
    UPDATE jobs613 SET status = 'running', attempts = attempts + 1,
                       locked_until = now() + %s::interval
    WHERE id = (SELECT id FROM jobs613 WHERE status = 'queued' AND run_at <= now()
                ORDER BY run_at, id LIMIT 1 {lock})
    RETURNING id, payload, attempts"""
DONE = "UPDATE jobs613 SET status = 'done', done_at = now(), locked_until = NULL WHERE id = %s"
FAIL = (
    "UPDATE jobs613 SET status = 'queued', run_at = now() + interval '50 milliseconds', "
    "locked_until = NULL WHERE id = %s"
)
BURY = "UPDATE jobs613 SET status = 'dead', locked_until = NULL WHERE id = %s"
LEASE = "5000 milliseconds"
WORKERS = 8

Job = tuple[int, str, int]


def setup(url: str, ready_index: str = READY_INDEX) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement.format(ready=ready_index).encode())


def enqueue_generated(url: str, n: int) -> None:
    """The article's Enqueue: n rows generated server-side."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs613 (payload) SELECT 'job ' || i FROM generate_series(1, %s) AS i", [n]
        )


def enqueue_one(conn: psycopg.Connection[Any], payload: str) -> None:
    """One job, its own transaction (autocommit)."""
    conn.execute("INSERT INTO jobs613 (payload) VALUES (%s)", [payload])


def enqueue_bulk(conn: psycopg.Connection[Any], payloads: Sequence[str]) -> None:
    """Many jobs in one statement, the payloads sent as one array."""
    conn.execute("INSERT INTO jobs613 (payload) SELECT unnest(%s::text[])", [list(payloads)])


def claim(conn: psycopg.Connection[Any], skip_locked: bool = True) -> Job | None:
    lock = "FOR UPDATE SKIP LOCKED" if skip_locked else "FOR UPDATE"
    row = conn.execute(CLAIM.format(lock=lock).encode(), [LEASE]).fetchone()
    return (int(row[0]), str(row[1]), int(row[2])) if row else None


def count(conn: psycopg.Connection[Any], where: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM jobs613 WHERE {where}".encode()).fetchone()
    return int(row[0]) if row else 0


def counts(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM jobs613 GROUP BY status").fetchall())


@dataclasses.dataclass
class LabRun:
    elapsed: float
    processed: Counter[int] = dataclasses.field(default_factory=Counter)
    failures: int = 0
    early_quits: int = 0
    done: int = 0


def drain(
    url: str,
    *,
    job_ms: float = 0.0,
    skip_locked: bool = True,
    flaky: str | None = None,
    workers: int = WORKERS,
) -> LabRun:
    """The article's lab loop: ``workers`` threads claim, run and mark done until empty.

    A job whose payload is ``flaky`` fails on its first two attempts (the article's
    "job 7"). A worker that finds nothing while more than ten jobs are ready counts
    as an early quit, as in the article.
    """
    lock = threading.Lock()
    run = LabRun(elapsed=0.0)

    def work() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while (job := claim(conn, skip_locked)) is not None:
                record(job[1])
                if job_ms:
                    time.sleep(job_ms / 1000)
                failed = flaky is not None and job[1] == flaky and job[2] < 3
                with lock:
                    run.processed[job[0]] += 1
                    run.failures += failed
                conn.execute(FAIL if failed else DONE, [job[0]])
            if count(conn, "status = 'queued' AND run_at <= now()") > 10:
                with lock:
                    run.early_quits += 1

    start = time.perf_counter()
    run_threads(work, workers)
    if flaky is not None:
        # Retried jobs are ready again after their delay: drain once more, as the article does.
        time.sleep(0.08)
        with psycopg.connect(url, autocommit=True) as conn:
            while (job := claim(conn, skip_locked)) is not None:
                run.processed[job[0]] += 1
                conn.execute(DONE, [job[0]])
    run.elapsed = time.perf_counter() - start
    return run


def run_threads(work: Callable[[], None], count: int) -> None:
    """Run ``work`` on ``count`` threads at once and wait for them all."""
    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def hold_style(
    url: str, *, jobs: int, job_ms: float, skip_locked: bool, workers: int = WORKERS
) -> LabRun:
    """The lock-while-working design: the row lock, held for the job's length, is the claim."""
    setup(url)
    enqueue_generated(url, jobs)
    lock_clause = "FOR UPDATE SKIP LOCKED" if skip_locked else "FOR UPDATE"
    select = f"SELECT id FROM jobs613 WHERE status = 'queued' ORDER BY id LIMIT 1 {lock_clause}"
    guard = threading.Lock()
    run = LabRun(elapsed=0.0)

    def work() -> None:
        with psycopg.connect(url) as conn:
            while True:
                row = conn.execute(select.encode()).fetchone()
                if row is None:
                    conn.rollback()
                    conn.autocommit = True
                    if count(conn, "status = 'queued'") > 0:
                        with guard:
                            run.early_quits += 1
                    return
                time.sleep(job_ms / 1000)  # the job runs while the row is locked
                conn.execute("UPDATE jobs613 SET status = 'done' WHERE id = %s", [row[0]])
                conn.commit()
                with guard:
                    run.done += 1

    start = time.perf_counter()
    run_threads(work, workers)
    run.elapsed = time.perf_counter() - start
    return run


def poller(
    url: str, stop: threading.Event, started: dict[str, float], poll_interval: float = 0.1
) -> None:
    """An idle article worker: claim, and sleep ``poll_interval`` when nothing is ready.

    ``started`` gets each job's payload and the time its body started.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            job = claim(conn)
            if job is None:
                time.sleep(poll_interval)
                continue
            started[job[1]] = record(job[1])
            conn.execute(DONE, [job[0]])
