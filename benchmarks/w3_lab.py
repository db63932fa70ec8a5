"""W3 the article's lab: 1,000 jobs of 2 ms on 8 workers (ideal 250 ms), and its table.

django-pgqueue runs it as ``runworker --burst --concurrency 8``, on the Tasks
path and on the direct API (timed from the first claim to the last job done, both
on the database clock, so the process's start-up is left out as the article's
in-process goroutines have none), and as 8 claimer threads on the public API in
this process (timed like the baseline). The peers time first start to last done
from their own tables.
"""

from __future__ import annotations

from typing import Any

from benchmarks import baseline
from benchmarks.common import (
    QUIET_TASK_LOGS,
    WITHOUT_TASK_LOGS,
    Outcome,
    Process,
    Row,
    Scale,
    Target,
    connect,
    db_url,
    median,
    peer_values,
    settle,
    writes,
)
from benchmarks.report import X
from benchmarks.w2_drain import task_path

JOB_MS = 2.0
HOLD_JOB_MS = 10.0
WORKERS = 8
TARGET_MS = 300
# The article's printed results (Go 1.25.6, pgx, PostgreSQL 18.6, a laptop).
ARTICLE = {
    ("lease", True): "1.3 s",
    ("lease", False): "930 ms",
    ("hold", True): "360 ms (2 early quits)",
    ("hold", False): "2.63 s",
}


def enqueue_sleeps(n: int, tasks_path: bool = False) -> None:
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec

    path = task_path(tasks_path, "sleep_ms")
    with connect() as conn:
        conn.execute("TRUNCATE pgqueue_job RESTART IDENTITY")
    Job.objects.enqueue_many([JobSpec.build(path, [JOB_MS]) for _ in range(n)])
    settle()


def span(n: int) -> tuple[float, float]:
    """(first claim to last done, seconds; last done as epoch) on the database clock."""
    with connect() as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM max(done_at) - min(attempted_at))::float8, "
            "extract(epoch FROM max(done_at))::float8, count(*) FILTER (WHERE status = 'done') "
            "FROM pgqueue_job"
        ).fetchone()
    assert row is not None
    if row[2] != n:
        raise RuntimeError(f"lab left {n - int(row[2])} of {n} jobs undone")
    return float(row[0]), float(row[1])


def ours_worker(
    n: int, *flags: str, tasks_path: bool = False, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(first claim to last done, process start to last done), in ms."""
    enqueue_sleeps(n, tasks_path)
    worker = Process.start(
        "runworker", "--burst", "-v", "0", "--concurrency", str(WORKERS), *flags, env=env
    )
    worker.wait(progress=writes("pgqueue_job"))
    worker.check()
    elapsed, last = span(n)
    return elapsed * 1000, (last - worker.started) * 1000


def ours_threads(n: int) -> float:
    """8 claimer threads on Job.objects (claim 1, execute, complete), in ms."""
    from devtools.lab import run_claimers

    enqueue_sleeps(n)
    elapsed = run_claimers(WORKERS, lease=5.0)
    span(n)  # checks every job is done
    return elapsed * 1000


def base(n: int) -> float:
    url = db_url()
    baseline.setup(url)
    baseline.enqueue_generated(url, n)
    settle()
    run = baseline.drain(url, job_ms=JOB_MS)
    if baseline.counts(url).get("done") != n:
        raise RuntimeError("baseline lab left jobs undone")
    return run.elapsed * 1000


def article_table(lab_jobs: int, hold_jobs: int) -> str:
    """The article's four lines, run again with the article's code shape."""
    url = db_url()
    lines = [
        "**W3 the article's table, reproduced** (plain psycopg, 8 threads; the article "
        "ran Go on a laptop):",
        "",
        "| design | SKIP LOCKED | this run | the article | jobs done | run more than once "
        "| workers that quit with jobs left |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for skip in (True, False):
        baseline.setup(url)
        baseline.enqueue_generated(url, lab_jobs)
        settle()
        lab = baseline.drain(url, job_ms=JOB_MS, skip_locked=skip, flaky="job 7")
        twice = sum(1 for runs in lab.processed.values() if runs > 1)
        lines.append(
            f"| lease, {lab_jobs} {X} 2 ms | {skip} | {lab.elapsed * 1000:.0f} ms "
            f"| {ARTICLE[('lease', skip)]} | {baseline.counts(url).get('done', 0)} "
            f"| {twice} (job 7 failed {lab.failures}{X}) | {lab.early_quits} |"
        )
    for skip in (True, False):
        hold = baseline.hold_style(url, jobs=hold_jobs, job_ms=HOLD_JOB_MS, skip_locked=skip)
        lines.append(
            f"| hold the row lock, {hold_jobs} {X} 10 ms | {skip} "
            f"| {hold.elapsed * 1000:.0f} ms | {ARTICLE[('hold', skip)]} | {hold.done} "
            f"| 0 | {hold.early_quits} |"
        )
    ideal = hold_jobs * HOLD_JOB_MS / WORKERS
    lines += [
        "",
        f"Ideal: {lab_jobs * JOB_MS / WORKERS:.0f} ms for the lease lab (which also "
        f"waits out job 7's two 50 ms retries and an 80 ms pause), {ideal:.0f} ms for the "
        "hold-the-lock runs.",
    ]
    return "\n".join(lines) + "\n"


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    n, repeats = scale.lab_jobs, scale.repeats
    the_base = median([base(n) for _ in range(repeats)])
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for i in range(repeats):  # alternating, so load from elsewhere hits both
        for tasks_path in (True, False) if i % 2 == 0 else (False, True):
            runs[tasks_path].append(ours_worker(n, tasks_path=tasks_path))
    claim_to_done = {k: median([r[0] for r in v]) for k, v in runs.items()}
    # What Django's two log lines per job cost the Tasks path here.
    quiet = median(
        [ours_worker(n, tasks_path=True, env=QUIET_TASK_LOGS)[0] for _ in range(repeats)]
    )
    start_to_done = {k: median([r[1] for r in v]) for k, v in runs.items()}
    # Prefetch: a freed thread starts the next 2 ms job at once, while the claim
    # for the one after runs alongside.
    prefetched = median([ours_worker(n, "--prefetch", str(WORKERS))[0] for _ in range(repeats)])
    threads = median([ours_threads(n) for _ in range(repeats)])
    section = article_table(scale.lab_jobs, scale.hold_jobs)
    with connect() as conn:
        conn.execute("TRUNCATE pgqueue_job RESTART IDENTITY")
    ideal = n * JOB_MS / WORKERS
    label = f"{n:,} jobs of 2 ms on 8 slots (ideal {ideal:.0f} ms), `runworker --concurrency 8`"
    return Outcome(
        [
            Row(
                "W3 lab",
                f"{label}, first start to last done",
                "ms",
                {
                    "tasks": claim_to_done[True],
                    "direct": claim_to_done[False],
                    "ref": the_base,
                    **peer_values(facts, "w3_ms"),
                },
                (Target("<=", TARGET_MS),),
                f"median of {repeats}; defaults otherwise; reference: the article's 8 threads; "
                "PgQueuer: `max_concurrent_tasks=8, batch_size=4`, Procrastinate: "
                "`--concurrency 8` (both with `await asyncio.sleep(0.002)`: their concurrency is "
                "asyncio's), django-tasks-db: 8 `db_worker` processes; peers from their own "
                "tables, first pick to last success",
            ),
            Row(
                "W3 lab",
                f"the same, {WITHOUT_TASK_LOGS}",
                "ms",
                {"tasks": quiet, "direct": claim_to_done[False]},
            ),
            Row(
                "W3 lab",
                "the same, direct API with `--prefetch 8`",
                "ms",
                {"direct": prefetched, "ref": the_base},
            ),
            Row(
                "W3 lab",
                "the same, from `runworker` process start",
                "ms",
                {"tasks": start_to_done[True], "direct": start_to_done[False], "ref": the_base},
            ),
            Row(
                "W3 lab",
                "the same, 8 claimer threads on `Job.objects`",
                "ms",
                {"direct": threads, "ref": the_base},
                note="`devtools.lab.run_claimers`: claim 1, execute, complete, per thread",
            ),
        ],
        [section],
    )
