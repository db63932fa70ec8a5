"""W2 drain: N no-op jobs pre-enqueued, one ``runworker --burst --concurrency 8`` process.

The Tasks path (jobs naming a ``django.tasks`` task, run through the backend's
invoke with its signals and their log lines) and the direct API run alternately,
``drain_repeats`` times each. Throughput runs from the moment the process is
started (so Django's start-up is paid) to the last job's ``done_at``; worker CPU
is the process's own rusage (utime + stime, start-up included); database CPU is
the server's processes'. A sweep of the direct API's settings follows.
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
    QUIET_TASK_LOGS,
    ROOT,
    SETTINGS,
    WITHOUT_TASK_LOGS,
    DatabaseCpu,
    Outcome,
    Process,
    Row,
    Scale,
    Target,
    connect,
    cpu_meter,
    db_url,
    peer_values,
    reset_jobs,
    settle,
    writes,
)

SLOTS = ("--concurrency", "8")
VS_DIRECT = 0.8  # Tasks path jobs/s ÷ the direct API's
VS_PGQUEUER = 2.5  # Tasks path jobs/s ÷ PgQueuer's
CPU_TARGET_MS = 0.15  # Tasks path worker CPU per job
# --concurrency (threads, and jobs a claim may take), then with --prefetch (jobs claimed
# ahead of free threads) when this runworker has it.
SWEEP: tuple[tuple[str, ...], ...] = tuple(("--concurrency", str(c)) for c in (4, 10, 32, 100))
PREFETCH_SWEEP: tuple[tuple[str, ...], ...] = (
    ("--concurrency", "4", "--prefetch", "60"),
    ("--concurrency", "10", "--prefetch", "100"),
    ("--concurrency", "32", "--prefetch", "200"),
)
ENQUEUE_CHUNK = 10_000


@dataclasses.dataclass(frozen=True)
class Drain:
    rate: float  # jobs/s
    worker_ms: float  # worker CPU ms per job
    db_ms: float | None  # database CPU ms per job
    wall: float  # process start to exit, seconds
    per_claim: float = 0.0  # jobs per claim statement (claims share one now())
    per_complete: float = 0.0  # jobs per complete statement


def task_path(tasks_path: bool, name: str) -> str:
    """The dotted path jobs name: the ``django.tasks`` task's, or the direct API's."""
    from benchmarks.benchapp import framework_tasks, tasks

    module = framework_tasks if tasks_path else tasks
    target = getattr(module, name)
    return str(target.module_path if tasks_path else target.path)


def enqueue_noops(n: int, task: str | None = None) -> None:
    """n no-op jobs (the direct API's unless ``task`` names another), then VACUUM ANALYZE.

    Set-up, not measured: the rows are the ones ``task.enqueue()`` would write.
    """
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec

    path = task or task_path(False, "noop")
    reset_jobs()
    for start in range(0, n, ENQUEUE_CHUNK):
        count = min(ENQUEUE_CHUNK, n - start)
        Job.objects.enqueue_many([JobSpec.build(path) for _ in range(count)])
    with connect() as conn:
        conn.execute("VACUUM ANALYZE pgqueue_job")
    settle()


def last_done() -> tuple[float, int, int, int]:
    """(epoch of the last done_at, jobs done, claim statements, complete statements).

    Times are on the database clock (the same host's). Every job of one claim has
    that statement's now() as attempted_at, and of one complete, as done_at.
    """
    with connect() as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM max(done_at))::float8, count(*), "
            "count(DISTINCT attempted_at), count(DISTINCT done_at) "
            "FROM pgqueue_job WHERE status = 'done'"
        ).fetchone()
    assert row is not None
    return float(row[0] or 0.0), int(row[1]), int(row[2]), int(row[3])


def ours(n: int, *flags: str, tasks_path: bool = False, env: dict[str, str] | None = None) -> Drain:
    """Drain ``n`` fresh no-op jobs with one ``runworker --burst`` process."""
    enqueue_noops(n, task_path(tasks_path, "noop"))
    db = DatabaseCpu()
    db_before = db.seconds()
    worker = Process.start("runworker", "--burst", "-v", "0", *flags, env=env)
    worker.wait(progress=writes("pgqueue_job"))
    wall = time.time() - worker.started
    db_after = db.seconds()
    worker.check()
    finished, done, claims, completes = last_done()
    if done != n:
        raise RuntimeError(f"runworker {' '.join(flags)} left {n - done} of {n} jobs undone")
    db_ms = (db_after - db_before) / n * 1000 if db_after and db_before is not None else None
    return Drain(
        n / (finished - worker.started),
        worker.cpu / n * 1000,
        db_ms,
        wall,
        n / max(claims, 1),
        n / max(completes, 1),
    )


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
    return Drain(
        n / run.elapsed,
        (cpu["self"] or 0.0) / n * 1000,
        db / n * 1000 if db is not None else None,
        run.elapsed,
    )


def startup() -> tuple[float, float]:
    """(wall s, CPU s) of ``runworker --burst`` on an empty queue: Django's start and stop."""
    reset_jobs()
    worker = Process.start("runworker", "--burst", "-v", "0")
    worker.wait()
    worker.check()
    return time.time() - worker.started, worker.cpu


def has_prefetch() -> bool:
    helper = subprocess.run(
        [sys.executable, "-m", "django", "runworker", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS},
    )
    return "--prefetch" in helper.stdout


def sweep(n: int) -> tuple[tuple[str, ...], list[tuple[tuple[str, ...], Drain]]]:
    """Try each setting on a smaller drain; the fastest is the 'best settings'."""
    candidates = SWEEP + (PREFETCH_SWEEP if has_prefetch() else ())
    results = [(flags, ours(n, *flags)) for flags in candidates]
    best = max(results, key=lambda item: item[1].rate)[0]
    return best, results


def peer_jobs(facts: dict[str, Any], n: int) -> str:
    """How many jobs each peer drained (the slow ones drain fewer: their rate is flat)."""
    counts = [
        f"{int(v):,} ({name})" for name, v in peer_values(facts, "w2_jobs").items() if v is not None
    ]
    return ", ".join([f"{n:,} (ours, the reference)", *counts])


def headline(n: int, repeats: int) -> tuple[Drain, Drain]:
    """(Tasks path, direct API) with ``--concurrency 8``: alternating runs, medians."""
    runs: dict[bool, list[Drain]] = {True: [], False: []}
    for i in range(repeats):
        for tasks_path in (True, False) if i % 2 == 0 else (False, True):
            runs[tasks_path].append(ours(n, *SLOTS, tasks_path=tasks_path))

    def middle(drains: list[Drain]) -> Drain:
        ordered = sorted(drains, key=lambda d: d.rate)
        return ordered[(len(ordered) - 1) // 2]

    return middle(runs[True]), middle(runs[False])


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    n = scale.drain_jobs
    the_base = base(n)
    fixed_base = base(n, baseline.READY_INDEX_FIXED)
    tasks_run, direct_run = headline(n, scale.drain_repeats)
    # What the Tasks path costs beyond Django's own two log lines per job.
    quiet_run = ours(n, *SLOTS, tasks_path=True, env=QUIET_TASK_LOGS)
    best, tried = sweep(scale.sweep_jobs)
    tuned = ours(n, *best)
    boot_wall, boot_cpu = startup()
    facts["best_flags"] = best
    shown = " ".join(best)
    reset_jobs()
    slots = " ".join(SLOTS)
    rows = [
        Row(
            "W2 drain",
            f"{n:,} no-op jobs, one worker, `{slots}`",
            "jobs/s",
            {
                "tasks": tasks_run.rate,
                "direct": direct_run.rate,
                "ref": the_base.rate,
                **peer_values(facts, "w2_rate"),
            },
            (Target(">=", VS_DIRECT, of="direct"), Target(">=", VS_PGQUEUER, of="pgqueuer")),
            f"`runworker --burst {slots}`, otherwise defaults, median of "
            f"{scale.drain_repeats} alternating runs; reference: the article's 8 threads; "
            "PgQueuer: its QueueManager in drain mode, `max_concurrent_tasks=8, batch_size=4` "
            "(the largest batch it allows with 8), Procrastinate: `worker --concurrency 8 "
            "--one-shot`, django-tasks-db: one `db_worker --batch` (one job at a time); "
            f"jobs drained: {peer_jobs(facts, n)}",
        ),
        Row(
            "W2 drain",
            "worker CPU per job",
            "ms",
            {
                "tasks": tasks_run.worker_ms,
                "direct": direct_run.worker_ms,
                "ref": the_base.worker_ms,
                **peer_values(facts, "w2_cpu"),
            },
            (Target("<=", CPU_TARGET_MS),),
        ),
        Row(
            "W2 drain",
            f"the same, {WITHOUT_TASK_LOGS}",
            "jobs/s",
            {"tasks": quiet_run.rate},
        ),
        Row(
            "W2 drain",
            "worker CPU per job, without those log lines",
            "ms",
            {"tasks": quiet_run.worker_ms},
        ),
        Row(
            "W2 drain",
            "database CPU per job",
            "ms",
            {
                "tasks": tasks_run.db_ms,
                "direct": direct_run.db_ms,
                "ref": the_base.db_ms,
                **peer_values(facts, "w2_db_cpu"),
            },
        ),
        Row(
            "W2 drain",
            f"{n:,} no-op jobs, direct API at the sweep's best, `{shown}`",
            "jobs/s",
            {"direct": tuned.rate, "ref": the_base.rate},
        ),
        Row(
            "W2 drain",
            "worker CPU per job, at those settings",
            "ms",
            {"direct": tuned.worker_ms, "ref": the_base.worker_ms},
        ),
    ]
    lines = [
        f"**W2 settings sweep** (the direct API, {scale.sweep_jobs:,} jobs each; a claim "
        "takes up to the free threads plus the prefetch):",
        "",
        "| runworker flags | jobs/s | worker CPU ms/job | DB CPU ms/job | process wall s "
        "| jobs per claim | jobs per complete |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    runs = [
        *((" ".join(flags), d) for flags, d in tried),
        (f"{slots}, Tasks path, full run", tasks_run),
        (f"{slots}, direct API, full run", direct_run),
        (f"{shown}, full run", tuned),
    ]
    lines += [
        f"| {c} | {d.rate:,.0f} | {d.worker_ms:.3f} | "
        f"{'n/a' if d.db_ms is None else f'{d.db_ms:.3f}'} | {d.wall:.2f} "
        f"| {d.per_claim:.1f} | {d.per_complete:.1f} |"
        for c, d in runs
    ]
    lines += [
        "",
        f"The baseline with its ready index on `({baseline.READY_INDEX_FIXED})` instead "
        f"of the article's `({baseline.READY_INDEX})` (so the claim need not sort every "
        f"ready job sharing a run_at): {fixed_base.rate:,.0f} jobs/s, worker CPU "
        f"{fixed_base.worker_ms:.3f} ms/job, database CPU "
        f"{'n/a' if fixed_base.db_ms is None else f'{fixed_base.db_ms:.3f}'} ms/job.",
    ]
    steady = [
        (d.worker_ms * n / 1000 - boot_cpu) / n * 1000 for d in (tasks_run, direct_run, tuned)
    ]
    lines += [
        "",
        f"Start-up and exit of `runworker --burst` on an empty queue: {boot_wall:.2f} s "
        f"wall, {boot_cpu:.2f} s CPU. Without it, worker CPU per job is {steady[0]:.3f} ms "
        f"(Tasks path, `{slots}`), {steady[1]:.3f} ms (direct API, `{slots}`) and "
        f"{steady[2]:.3f} ms (direct API, `{shown}`).",
    ]
    return Outcome(rows, ["\n".join(lines).rstrip() + "\n"])
