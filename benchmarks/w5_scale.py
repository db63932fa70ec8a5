"""W5 scale: claim latency as finished rows pile up, and a long drain's throughput.

Claim latency: the table holds 0, 100k and 1M finished rows (inserted in bulk,
then VACUUM ANALYZE, as autovacuum would leave them) plus a backlog of ready
jobs; one claimer claims one job, marks it done, and again; the claim call's
time is recorded (Python to Python, through ``Job.objects.claim``; the baseline
through psycopg). The long drain starts from an empty table and runs one
``runworker --burst``, with the migration's autovacuum settings on the table;
throughput is read per tenth of the jobs from ``done_at``, with the dead tuples
and autovacuum runs sampled from ``pg_stat_user_tables`` meanwhile.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks import baseline
from benchmarks.common import (
    Outcome,
    Process,
    Row,
    Scale,
    Target,
    connect,
    db_url,
    execute,
    median,
    percentile,
    reset_jobs,
    settle,
    writes,
)
from benchmarks.w2_drain import enqueue_noops

BACKLOG = 100  # ready jobs left over after the claims
WARMUP = 100  # claims not timed: connection, plan and buffer caches settle first
WINDOWS = 10
DEFAULT_FLAGS = ("--concurrency", "32")  # when W2 did not pick the best settings
FINISHED_SQL = {
    "pgqueue_job": """INSERT INTO pgqueue_job (task, args, kwargs, queue, priority, status,
            attempts, max_attempts, run_at, last_error, errors, worker_ids, locked_by,
            started_at, attempted_at, done_at, result)
        SELECT 'benchmarks.benchapp.tasks.noop', '[]', '{}', 'default', 0, 'done', 1, 3, t, '',
               '[]', '["bench"]', 'bench', t, t, t, 'null'
        FROM generate_series(1, %s) AS i, LATERAL (SELECT now() - interval '1 day') AS x (t)""",
    "jobs613": """INSERT INTO jobs613 (payload, status, attempts, run_at, done_at)
        SELECT 'job ' || i, 'done', 1, now() - interval '1 day', now() - interval '1 day'
        FROM generate_series(1, %s) AS i""",
}


def add_finished(table: str, n: int) -> None:
    with connect() as conn:
        if n:
            conn.execute(FINISHED_SQL[table].encode(), [n])
        conn.execute(f"VACUUM ANALYZE {table}".encode())
    settle()


def claims_ours(n: int) -> list[float]:
    from benchmarks.benchapp.tasks import noop
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec, Success

    Job.objects.enqueue_many([JobSpec.build(noop) for _ in range(WARMUP + n + BACKLOG)])
    times = []
    for _ in range(WARMUP + n):
        start = time.perf_counter()
        (job,) = Job.objects.claim("bench-w5", limit=1, lease=60)
        times.append((time.perf_counter() - start) * 1000)
        Job.objects.complete("bench-w5", [Success(job.id, job.run, "null")])
    execute("DELETE FROM pgqueue_job WHERE status = 'queued'")
    return times[WARMUP:]


def claims_base(n: int) -> list[float]:
    times = []
    with connect() as conn:
        conn.execute(
            "INSERT INTO jobs613 (payload) SELECT 'job' FROM generate_series(1, %s)",
            [WARMUP + n + BACKLOG],
        )
        for _ in range(WARMUP + n):
            start = time.perf_counter()
            job = baseline.claim(conn)
            times.append((time.perf_counter() - start) * 1000)
            assert job is not None
            conn.execute(baseline.DONE, [job[0]])
        conn.execute("DELETE FROM jobs613 WHERE status = 'queued'")
    return times[WARMUP:]


def claim_latency(scale: Scale) -> dict[int, tuple[list[float], list[float]]]:
    """{finished rows: (our claim ms, baseline claim ms)}."""
    reset_jobs()
    baseline.setup(db_url())
    out: dict[int, tuple[list[float], list[float]]] = {}
    have = 0
    for size in scale.finished_rows:
        add_finished("pgqueue_job", size - have)
        add_finished("jobs613", size - have)
        have = size
        out[size] = (claims_ours(scale.claims), claims_base(scale.claims))
    return out


def sample_stats(stop: threading.Event, samples: list[tuple[int, int]]) -> None:
    """(n_dead_tup, autovacuum_count) of pgqueue_job, twice a second."""
    with connect() as conn:
        while not stop.wait(0.5):
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables "
                "WHERE relname = 'pgqueue_job'"
            ).fetchone()
            if row:
                samples.append((int(row[0]), int(row[1])))


def long_drain(
    n: int, flags: tuple[str, ...]
) -> tuple[list[float], list[tuple[int, int]], float, float]:
    """(jobs/s per tenth of the jobs, stats samples, overall jobs/s, second half ÷ first)."""
    enqueue_noops(n)
    stop, samples = threading.Event(), list[tuple[int, int]]()
    sampler = threading.Thread(target=sample_stats, args=(stop, samples))
    sampler.start()
    try:
        worker = Process.start("runworker", "--burst", "-v", "0", *flags)
        worker.wait(timeout=900, progress=writes("pgqueue_job"))
        worker.check()
    finally:
        stop.set()
        sampler.join()
    with connect() as conn:
        done = [
            float(r[0])
            for r in conn.execute(
                "SELECT extract(epoch FROM done_at)::float8 FROM pgqueue_job "
                "WHERE status = 'done' ORDER BY done_at"
            ).fetchall()
        ]
    if len(done) != n:
        raise RuntimeError(f"long drain left {n - len(done)} of {n} jobs undone")
    size = n // WINDOWS
    edges = [done[0], *(done[min(n - 1, (i + 1) * size)] for i in range(WINDOWS))]
    rates = [size / max(edges[i + 1] - edges[i], 1e-6) for i in range(WINDOWS)]
    half = n // 2
    first, second = half / (done[half] - done[0]), (n - half) / (done[-1] - done[half])
    return rates, samples, n / (done[-1] - worker.started), second / first


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    latency = claim_latency(scale)
    flags = tuple(facts.get("best_flags", DEFAULT_FLAGS))
    rates, samples, overall, sag = long_drain(scale.big_drain_jobs, flags)
    reset_jobs()
    execute("DROP TABLE IF EXISTS jobs613")
    empty = scale.finished_rows[0]
    rows = []
    for size, (ours, base) in latency.items():
        rows.append(
            Row(
                "W5 scale",
                f"claim latency, {size:,} finished rows: median",
                "ms",
                {"direct": median(ours), "ref": median(base)},
            )
        )
    largest = scale.finished_rows[-1]
    ours_ratio = median(latency[largest][0]) / median(latency[empty][0])
    base_ratio = median(latency[largest][1]) / median(latency[empty][1])
    rows.append(
        Row(
            "W5 scale",
            f"claim latency at {largest:,} ÷ at {empty:,} finished rows",
            "ratio",
            {"direct": ours_ratio, "ref": base_ratio},
            (Target("<=", 1.2, subject="direct"),),
        )
    )
    rows.append(
        Row(
            "W5 scale",
            f"{scale.big_drain_jobs:,}-job drain, jobs/s of the second half ÷ the first",
            "ratio",
            {"direct": sag},
            (Target(">=", 0.9, subject="direct"),),
        )
    )
    rows.append(
        Row(
            "W5 scale",
            f"{scale.big_drain_jobs:,}-job drain, overall",
            "jobs/s",
            {"direct": overall},
        )
    )
    lines = [
        f"**W5 claim latency** ({scale.claims:,} claims of one job each; ms):",
        "",
        "| finished rows | ours p50 | ours p95 | baseline p50 | baseline p95 |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {size:,} | {median(o):.3f} | {percentile(o, 95):.3f} | {median(b):.3f} | "
        f"{percentile(b, 95):.3f} |"
        for size, (o, b) in latency.items()
    ]
    most_dead = max((s[0] for s in samples), default=0)
    vacuums = (samples[-1][1] - samples[0][1]) if samples else 0
    lines += [
        "",
        f"**W5 long drain** (`runworker --burst {' '.join(flags)}`, "
        f"{scale.big_drain_jobs:,} jobs): jobs/s per tenth of the jobs: "
        + ", ".join(f"{r:,.0f}" for r in rates)
        + f". Dead tuples peaked at {most_dead:,}; autovacuum ran {vacuums} times "
        "on pgqueue_job during the drain.",
    ]
    return Outcome(rows, ["\n".join(lines) + "\n"])
