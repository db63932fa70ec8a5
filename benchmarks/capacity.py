"""Capacity of one primary: ``python -m benchmarks.capacity [JOBS] [WORKERS,...] [REPEATS]``.

For each count of ``runworker --burst --concurrency 8`` processes (1, 2, 4, 8)
draining the same backlog of no-op jobs on a durable embedded PostgreSQL 18.6
(fsync on): throughput (first claim to last outcome), the server's CPU seconds
per job (so jobs/s per PostgreSQL core), the server connections each worker
process held at most, the statements' execution time per job and the claim's
share of it (``pg_stat_statements``), with the claim's mean time and jobs per
call. The numbers of docs/operations.md's capacity section come from this. On a
machine others share, read the medians: CPU contention inflates every figure.
Not part of ``make bench``: it restarts the server with ``pg_stat_statements``.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from benchmarks.common import DatabaseCpu, Process, connect, writes
from benchmarks.run import prepare_database
from benchmarks.w2_drain import enqueue_noops, last_done

CLAIM = "%FOR UPDATE OF j SKIP LOCKED%"


def load_pg_stat_statements() -> None:
    from devtools import embedded_pg

    with connect() as conn:
        row = conn.execute("SHOW shared_preload_libraries").fetchone()
        loaded = bool(row and "pg_stat_statements" in str(row[0]))
        if not loaded:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    server = embedded_pg.current()
    if not loaded:
        if server is None:
            sys.exit("load pg_stat_statements in this server, or run with DATABASE_URL unset")
        server.restart()
        from django.db import connections

        connections.close_all()  # the restart ended them
    with connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def peak_connections(stop: threading.Event, out: list[int]) -> None:
    """The most client backends of the benchmark database seen at once (but ours)."""
    with connect() as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()
            out.append(int(row[0]) if row else 0)
            stop.wait(0.05)


def drain(jobs: int, processes: int) -> dict[str, float]:
    enqueue_noops(jobs)
    with connect() as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    db = DatabaseCpu()
    db_before = db.seconds() or 0.0
    stop, seen = threading.Event(), list[int]()
    sampler = threading.Thread(target=peak_connections, args=(stop, seen))
    sampler.start()
    workers = [
        Process.start("runworker", "--burst", "-v", "0", "--concurrency", "8")
        for _ in range(processes)
    ]
    for worker in workers:
        worker.wait(progress=writes("pgqueue_job"))
        worker.check()
    stop.set()
    sampler.join()
    db_seconds = (db.seconds() or 0.0) - db_before
    finished, done, _, _ = last_done()
    with connect() as conn:  # from the first claim: the processes' start-up is not the server's
        first = conn.execute("SELECT extract(epoch FROM min(attempted_at)) FROM pgqueue_job")
        started = float((first.fetchone() or (0.0,))[0])
    if done != jobs:
        raise RuntimeError(f"{processes} workers left {jobs - done} of {jobs} jobs undone")
    with connect() as conn:
        row = conn.execute(
            "SELECT sum(total_exec_time) FILTER (WHERE query LIKE %s), "
            "sum(calls) FILTER (WHERE query LIKE %s), "
            "sum(rows) FILTER (WHERE query LIKE %s), sum(total_exec_time) "
            "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
            "WHERE datname = current_database())",
            [CLAIM, CLAIM, CLAIM],
        ).fetchone()
    assert row is not None
    claim_ms, claims, claimed, all_ms = (float(v or 0) for v in row)
    return {
        "rate": jobs / (finished - started),
        "db_ms": db_seconds / jobs * 1000,
        "per_db_core": jobs / db_seconds if db_seconds else 0.0,
        "worker_ms": sum(worker.cpu for worker in workers) / jobs * 1000,
        "connections": max(seen, default=0) / processes,
        "exec_ms": all_ms / jobs,
        "claim_share": claim_ms / all_ms if all_ms else 0.0,
        "claim_ms": claim_ms / claims if claims else 0.0,
        "per_claim": claimed / claims if claims else 0.0,
    }


def main(argv: list[str]) -> None:
    jobs = int(argv[0]) if argv else 20_000
    counts = [int(n) for n in argv[1].split(",")] if len(argv) > 1 else [1, 2, 4, 8]
    repeats = int(argv[2]) if len(argv) > 2 else 3
    prepare_database()
    load_pg_stat_statements()
    drain(jobs // 4, 1)  # warm the server's caches; not reported
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for _ in range(repeats):  # interleaved, so a busy moment of the machine hits them all
        for processes in counts:
            time.sleep(1)
            runs[processes].append(drain(jobs, processes))
    print(
        f"{jobs:,} no-op jobs, runworker --burst --concurrency 8, durable PostgreSQL, "
        f"{os.cpu_count()} cores shared by the server and the workers; the median of "
        f"{repeats} runs by jobs/s (and the range of jobs/s)\n\n"
        "| workers | jobs/s | server CPU ms/job | jobs/s per server core | worker CPU ms/job "
        "| connections/worker (peak) | statement ms/job | claim share of it | claim ms/call "
        "| jobs/claim |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for processes in counts:
        ordered = sorted(runs[processes], key=lambda r: r["rate"])
        r = ordered[(len(ordered) - 1) // 2]
        print(
            f"| {processes} | {r['rate']:,.0f} ({ordered[0]['rate']:,.0f}-"
            f"{ordered[-1]['rate']:,.0f}) | {r['db_ms']:.3f} | {r['per_db_core']:,.0f} "
            f"| {r['worker_ms']:.3f} | {r['connections']:.1f} | {r['exec_ms']:.3f} "
            f"| {r['claim_share']:.0%} "
            f"| {r['claim_ms']:.2f} | {r['per_claim']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
