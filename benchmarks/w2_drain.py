"""W2 drain: N no-op jobs pre-enqueued, one ``runworker --burst`` process.

Throughput runs from the moment the process is started (so Django's start-up is
paid) to the last job's ``done_at``; worker CPU is the process's own rusage
(utime + stime, start-up included); database CPU is the server's processes'.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks import baseline
from benchmarks.common import (
    ROOT,
    SETTINGS,
    DatabaseCpu,
    Outcome,
    Process,
    Row,
    Scale,
    Target,
    connect,
    cpu_meter,
    db_url,
    reset_jobs,
    settle,
    writes,
)

RATE_TARGET = 10_000
CPU_TARGET_MS = 0.1
# --concurrency (threads, and jobs a claim may take), then with --prefetch (jobs claimed
# ahead of free threads) when this runworker has it.
SWEEP: tuple[tuple[str, ...], ...] = tuple(("--concurrency", str(c)) for c in (4, 10, 32, 100))
PREFETCH_SWEEP: tuple[tuple[str, ...], ...] = (
    ("--concurrency", "4", "--prefetch", "60"), ("--concurrency", "10", "--prefetch", "100"),
    ("--concurrency", "32", "--prefetch", "200"))
ENQUEUE_CHUNK = 10_000


@dataclasses.dataclass(frozen=True)
class Drain:
    rate: float  # jobs/s
    worker_ms: float  # worker CPU ms per job
    db_ms: float | None  # database CPU ms per job
    wall: float  # process start to exit, seconds
    per_claim: float = 0.0  # jobs per claim statement (claims share one now())
    per_complete: float = 0.0  # jobs per complete statement


def enqueue_noops(n: int) -> None:
    from benchmarks.benchapp.tasks import noop
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec

    reset_jobs()
    for start in range(0, n, ENQUEUE_CHUNK):
        count = min(ENQUEUE_CHUNK, n - start)
        Job.objects.enqueue_many([JobSpec.build(noop) for _ in range(count)])
    with connect() as conn:
        conn.execute("VACUUM ANALYZE pgqueue_job")
    settle()


def last_done() -> tuple[float, int, int, int]:
    """(epoch of the last done_at, jobs done, claim statements, complete statements).

    Times are on the database clock (the same host's). Every job of one claim has
    that statement's now() as attempted_at, and of one complete, as done_at.
    """
    with connect() as conn:
        row = conn.execute("SELECT extract(epoch FROM max(done_at))::float8, count(*), "
                           "count(DISTINCT attempted_at), count(DISTINCT done_at) "
                           "FROM pgqueue_job WHERE status = 'done'").fetchone()
    assert row is not None
    return float(row[0] or 0.0), int(row[1]), int(row[2]), int(row[3])


def ours(n: int, *flags: str) -> Drain:
    """Drain ``n`` fresh no-op jobs with one ``runworker --burst`` process."""
    enqueue_noops(n)
    db = DatabaseCpu()
    db_before = db.seconds()
    worker = Process.start("runworker", "--burst", "-v", "0", *flags)
    worker.wait(progress=writes("pgqueue_job"))
    wall = time.time() - worker.started
    db_after = db.seconds()
    worker.check()
    finished, done, claims, completes = last_done()
    if done != n:
        raise RuntimeError(f"runworker {' '.join(flags)} left {n - done} of {n} jobs undone")
    db_ms = (db_after - db_before) / n * 1000 if db_after and db_before is not None else None
    return Drain(n / (finished - worker.started), worker.cpu / n * 1000, db_ms, wall,
                 n / max(claims, 1), n / max(completes, 1))


def base(n: int, ready_index: str = baseline.READY_INDEX) -> Drain:
    """The article's design: eight threads, one connection each, claim one, mark done."""
    url = db_url()
    baseline.setup(url, ready_index)
    baseline.enqueue_generated(url, n)
    with connect() as conn:
        conn.execute("VACUUM ANALYZE jobs613")
    settle()
    with cpu_meter() as cpu:
        run = baseline.drain(url)
    done = baseline.counts(url).get("done", 0)
    if done != n:
        raise RuntimeError(f"baseline drain left {n - done} of {n} jobs undone")
    db = cpu["db"]
    return Drain(n / run.elapsed, (cpu["self"] or 0.0) / n * 1000,
                 db / n * 1000 if db is not None else None, run.elapsed)


def startup() -> tuple[float, float]:
    """(wall s, CPU s) of ``runworker --burst`` on an empty queue: Django's start and stop."""
    reset_jobs()
    worker = Process.start("runworker", "--burst", "-v", "0")
    worker.wait()
    worker.check()
    return time.time() - worker.started, worker.cpu


def has_prefetch() -> bool:
    helper = subprocess.run([sys.executable, "-m", "django", "runworker", "--help"],
                            capture_output=True, text=True, cwd=ROOT, check=False,
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS})
    return "--prefetch" in helper.stdout


def sweep(n: int) -> tuple[tuple[str, ...], list[tuple[tuple[str, ...], Drain]]]:
    """Try each setting on a smaller drain; the fastest is the 'best settings'."""
    candidates = SWEEP + (PREFETCH_SWEEP if has_prefetch() else ())
    results = [(flags, ours(n, *flags)) for flags in candidates]
    best = max(results, key=lambda item: item[1].rate)[0]
    return best, results


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    n = scale.drain_jobs
    the_base = base(n)
    fixed_base = base(n, baseline.READY_INDEX_FIXED)
    default = ours(n)
    best, tried = sweep(scale.sweep_jobs)
    tuned = ours(n, *best)
    boot_wall, boot_cpu = startup()
    facts["best_flags"] = best
    shown = " ".join(best)
    reset_jobs()
    label = f"{n:,} no-op jobs, one `runworker`"
    rows: list[Row] = []
    for name, drain, peer_key in ((f"{label}, default settings", default, "w2"),
                                  (f"{label}, `{shown}`", tuned, "")):
        rows += [
            Row("W2 drain", name, "jobs/s", drain.rate, the_base.rate,
                facts.get(f"{peer_key}_rate") if peer_key else None, Target(">=", RATE_TARGET),
                f"peer: one `db_worker --batch` on {scale.peer_drain_jobs:,} jobs"
                if peer_key else ""),
            Row("W2 drain", "worker CPU per job", "ms", drain.worker_ms, the_base.worker_ms,
                facts.get(f"{peer_key}_cpu") if peer_key else None, Target("<=", CPU_TARGET_MS)),
            Row("W2 drain", "database CPU per job", "ms", drain.db_ms, the_base.db_ms,
                facts.get(f"{peer_key}_db_cpu") if peer_key else None),
        ]
    lines = [f"**W2 settings sweep** ({scale.sweep_jobs:,} jobs each; a claim takes up to the "
             "free threads plus the prefetch):", "",
             "| runworker flags | jobs/s | worker CPU ms/job | DB CPU ms/job | process wall s "
             "| jobs per claim | jobs per complete |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    runs = [*((" ".join(flags), d) for flags, d in tried), ("default, full run", default),
            (f"{shown}, full run", tuned)]
    lines += [f"| {c} | {d.rate:,.0f} | {d.worker_ms:.3f} | "
              f"{'n/a' if d.db_ms is None else f'{d.db_ms:.3f}'} | {d.wall:.2f} "
              f"| {d.per_claim:.1f} | {d.per_complete:.1f} |" for c, d in runs]
    lines += ["", f"The baseline with its ready index on `({baseline.READY_INDEX_FIXED})` instead "
              f"of the article's `({baseline.READY_INDEX})` (so the claim need not sort every "
              f"ready job sharing a run_at): {fixed_base.rate:,.0f} jobs/s, worker CPU "
              f"{fixed_base.worker_ms:.3f} ms/job, database CPU "
              f"{'n/a' if fixed_base.db_ms is None else f'{fixed_base.db_ms:.3f}'} ms/job."]
    steady = [(d.worker_ms * n / 1000 - boot_cpu) / n * 1000 for d in (default, tuned)]
    lines += ["", f"Start-up and exit of `runworker --burst` on an empty queue: {boot_wall:.2f} s "
              f"wall, {boot_cpu:.2f} s CPU. Without it, worker CPU per job is {steady[0]:.3f} ms "
              f"(default) and {steady[1]:.3f} ms (`{shown}`)."]
    return Outcome(rows, ["\n".join(lines).rstrip() + "\n"])
