"""W6 queues: a queue's claim never pays for another queue's backlog.

A worker serves queue ``emails``, which holds 10 ready jobs, while queue ``bulk``
holds 0, then 100k, then 1M ready jobs, older than the emails (a backlog
enqueued earlier, so first in the claim's priority, run_at, id order). Each
``Job.objects.claim(worker, limit=1, queues=["emails"])`` is timed, Python to
Python; the job is then completed and another emails job enqueued, untimed, so
10 stay ready. An idle worker's poll of the queue ``empty`` is timed the same
way. The bulk rows are written by INSERT ... SELECT generate_series, then VACUUM
ANALYZE. Each case stops after ``queue_claims`` claims or ``queue_budget``
seconds of claiming, whichever comes first, so a slow claim cannot stall the run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import (
    Outcome,
    Row,
    Scale,
    Target,
    connect,
    median,
    percentile,
    reset_jobs,
    settle,
)
from benchmarks.w2_drain import task_path

READY = 10  # emails jobs kept ready
WARMUP = 10  # claims not timed: plan and buffer caches settle first
TARGET = 1.2  # the largest backlog's median ÷ the empty backlog's
WORKER = "bench-w6"
BULK_SQL = """INSERT INTO pgqueue_job (task, args, kwargs, queue, priority, status, attempts,
        max_attempts, run_at, created_at, last_error, errors, worker_ids)
    SELECT %s, '[]', '{}', 'bulk', 0, 'queued', 0, 3, t, t, '', '[]', '[]'
    FROM generate_series(1, %s) AS i, LATERAL (SELECT now() - interval '1 hour') AS x (t)"""


def add_backlog(n: int) -> None:
    with connect() as conn:
        if n:
            conn.execute(BULK_SQL, [task_path(False, "noop"), n])
        conn.execute("VACUUM ANALYZE pgqueue_job")
    settle()


def index_reads() -> dict[str, int]:
    """Index entries read so far, by index of pgqueue_job (this session's counts
    flushed first, so they include the calls just made)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connect() as conn:
        rows = conn.execute(
            "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes "
            "WHERE relname = 'pgqueue_job'"
        ).fetchall()
    return {str(name): int(count) for name, count in rows}


def most_read(before: dict[str, int], after: dict[str, int], calls: int) -> tuple[float, str]:
    """(index entries read per call, over all indexes; the index read most)."""
    deltas = {name: after.get(name, 0) - count for name, count in before.items()}
    top = max(deltas, key=lambda name: deltas[name], default="")
    return sum(deltas.values()) / calls, top


def timed(
    step: Callable[[], float], limit: int, budget: float
) -> tuple[list[float], tuple[float, str]]:
    """(ms of each call, (index entries read per call, the index read most)) over at
    most ``limit`` calls or ``budget`` seconds of timed calls, after WARMUP untimed
    ones. ``step`` returns the seconds of its own timed part."""
    for _ in range(WARMUP):
        step()
    times: list[float] = []
    before = index_reads()
    while len(times) < limit and sum(times) < budget * 1000:
        times.append(step() * 1000)
    return times, most_read(before, index_reads(), len(times))


@dataclasses.dataclass(frozen=True)
class Case:
    """One backlog's timings (ms) and index tuples read per call."""

    claims: list[float]
    polls: list[float]
    claim_reads: tuple[float, str]  # index entries read per call, the index read most
    poll_reads: tuple[float, str]

    def of(self, kind: str) -> list[float]:
        return self.claims if kind == "claim" else self.polls


def measure(scale: Scale) -> Case:
    """Timed claims of an emails job, then idle polls of the empty queue."""
    from django_pgqueue.models import Job
    from django_pgqueue.records import Success

    path = task_path(False, "noop")

    def claim() -> float:
        start = time.perf_counter()
        (job,) = Job.objects.claim(WORKER, limit=1, queues=["emails"], lease=60)
        elapsed = time.perf_counter() - start
        Job.objects.complete(WORKER, [Success(job.id, job.run, "null")])
        Job.objects.enqueue(path, queue="emails")  # READY stay ready
        return elapsed

    def poll() -> float:
        start = time.perf_counter()
        claimed = Job.objects.claim(WORKER, limit=1, queues=["empty"], lease=60)
        elapsed = time.perf_counter() - start
        if claimed:
            raise RuntimeError("the empty queue had a job")
        return elapsed

    claims, claim_reads = timed(claim, scale.queue_claims, scale.queue_budget)
    polls, poll_reads = timed(poll, scale.queue_claims, scale.queue_budget)
    return Case(claims, polls, claim_reads, poll_reads)


def reads(read: tuple[float, str]) -> str:
    return f"{read[0]:,.0f} (`{read[1]}`)" if read[1] else f"{read[0]:,.0f}"


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec

    reset_jobs()
    path = task_path(False, "noop")
    Job.objects.enqueue_many([JobSpec.build(path, queue="emails") for _ in range(READY)])
    results: dict[int, Case] = {}
    have = 0
    for size in scale.queue_backlogs:
        add_backlog(size - have)
        have = size
        results[size] = measure(scale)
    reset_jobs()
    empty, largest = scale.queue_backlogs[0], scale.queue_backlogs[-1]
    rows = []
    for kind, what in (
        ("claim", "claim of one `emails` job (10 ready)"),
        ("poll", "idle poll of the empty queue `empty`"),
    ):
        for size, case in results.items():
            rows.append(
                Row(
                    "W6 queues",
                    f"{what}, `bulk` holding {size:,} ready: median",
                    "ms",
                    {"direct": median(case.of(kind))},
                )
            )
        ratio = median(results[largest].of(kind)) / median(results[empty].of(kind))
        rows.append(
            Row(
                "W6 queues",
                f"{kind} latency at {largest:,} ÷ at {empty:,} `bulk` jobs",
                "ratio",
                {"direct": ratio},
                (Target("<=", TARGET, subject="direct"),),
                "`Job.objects.claim(worker, limit=1, queues=[...])`, Python to Python; "
                "the Tasks path's worker claims through the same call"
                if kind == "claim"
                else "",
            )
        )
    lines = [
        f"**W6** (per backlog: up to {scale.queue_claims:,} calls or "
        f"{scale.queue_budget:g} s of them, after {WARMUP} untimed; ms, and the index "
        "entries each call read (a claim with its complete and re-enqueue), from "
        "`pg_stat_user_indexes`, with the index read most):",
        "",
        "| `bulk` ready jobs | claims timed | claim p50 | claim p95 | index entries read "
        "per claim | polls timed | poll p50 | poll p95 | index entries read per poll |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {size:,} | {len(c.claims):,} | {median(c.claims):.3f} | "
        f"{percentile(c.claims, 95):.3f} | {reads(c.claim_reads)} | {len(c.polls):,} | "
        f"{median(c.polls):.3f} | {percentile(c.polls, 95):.3f} | {reads(c.poll_reads)} |"
        for size, c in results.items()
    ]
    return Outcome(rows, ["\n".join(lines) + "\n"])
