"""W1 enqueue: N jobs with a small JSON payload, one per transaction, and in one call.

The Tasks path (``task.enqueue()`` of a ``django.tasks`` task) is the headline,
the direct API beside it. The reference for one job per transaction is a plain
psycopg autocommit INSERT of the same row into ``pgqueue_job`` (what the table
itself costs); for the bulk call, a plain psycopg ``executemany`` of those rows
in one transaction. The article's own ``jobs613`` INSERTs get rows of their own.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from typing import Any

from benchmarks import baseline
from benchmarks.common import (
    Outcome,
    Row,
    Scale,
    Target,
    connect,
    db_url,
    median,
    peer_values,
    reset_jobs,
    settle,
)

BLOCKS = 4  # single enqueues run in interleaved blocks, so load spikes hit every variant
SINGLE_TARGET = 0.75  # Tasks path ÷ the plain INSERT
BULK_TARGET = 1.0  # Tasks path bulk ÷ the plain executemany

#: Where the Tasks path's bulk enqueue is expected (the core is adding it). Until
#: it exists the row reads n/a; when it lands with another shape, change
#: ``tasks_bulk`` only.
TASKS_BULK = ("django_pgqueue.backend", "enqueue_many")

# The row django-pgqueue's enqueue writes for these jobs, as one bare INSERT.
PLAIN_INSERT = """INSERT INTO pgqueue_job (task, args, kwargs, queue, priority, status,
        attempts, max_attempts, run_at, last_error, errors, worker_ids)
    VALUES (%s, %s::jsonb, %s::jsonb, 'default', 0, 'queued', 0, 3, now(), '', '[]', '[]')"""


def payload(i: int) -> dict[str, Any]:
    return {"user_id": i, "email": f"user{i}@example.com", "plan": "pro"}


def _rate(n: int, run: Callable[[], object], repeats: int, before: Callable[[], None]) -> float:
    """Median jobs/s of ``repeats`` runs of ``run`` (``before`` resets, untimed)."""
    rates = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        run()
        rates.append(n / (time.perf_counter() - start))
    return median(rates)


def interleaved(n: int, variants: dict[str, Callable[[range], None]]) -> dict[str, float]:
    """jobs/s of each variant, run as BLOCKS blocks of n / BLOCKS, in rotating order."""
    spent = dict.fromkeys(variants, 0.0)
    size = n // BLOCKS
    names = list(variants)
    for block in range(BLOCKS):
        for name in names[block % len(names) :] + names[: block % len(names)]:
            start = time.perf_counter()
            variants[name](range(block * size, (block + 1) * size))
            spent[name] += time.perf_counter() - start
    return {name: size * BLOCKS / seconds for name, seconds in spent.items()}


def singles(scale: Scale) -> dict[str, float]:
    """One job per transaction, every variant interleaved: jobs/s by variant."""
    from django.db import transaction

    from benchmarks.benchapp import framework_tasks, tasks

    reset_jobs()
    baseline.setup(db_url())
    settle()
    path = framework_tasks.noop.module_path
    with connect() as conn, connect() as article:

        def tasks_path(jobs: range) -> None:
            for i in jobs:
                framework_tasks.noop.enqueue(**payload(i))  # autocommit: one transaction

        def tasks_atomic(jobs: range) -> None:
            for i in jobs:
                with transaction.atomic():
                    framework_tasks.noop.enqueue(**payload(i))

        def direct(jobs: range) -> None:
            for i in jobs:
                tasks.noop.enqueue(**payload(i))

        def direct_atomic(jobs: range) -> None:
            for i in jobs:
                with transaction.atomic():
                    tasks.noop.enqueue(**payload(i))

        def plain(jobs: range) -> None:
            for i in jobs:
                conn.execute(PLAIN_INSERT, [path, "[]", json.dumps(payload(i))])

        def article_insert(jobs: range) -> None:
            for i in jobs:
                baseline.enqueue_one(article, json.dumps(payload(i)))

        return interleaved(
            scale.enqueue_jobs,
            {
                "tasks": tasks_path,
                "tasks_atomic": tasks_atomic,
                "direct": direct,
                "direct_atomic": direct_atomic,
                "plain": plain,
                "article": article_insert,
            },
        )


def tasks_bulk() -> Callable[[range], object] | None:
    """The Tasks path's bulk enqueue of ``noop`` jobs, if this django-pgqueue has one."""
    module = importlib.import_module(TASKS_BULK[0])
    enqueue_many = getattr(module, TASKS_BULK[1], None)
    if enqueue_many is None:
        return None
    from benchmarks.benchapp.framework_tasks import noop

    def run(jobs: range) -> object:
        return enqueue_many(noop, [((), payload(i)) for i in jobs])

    return run


def bulks(scale: Scale) -> dict[str, float | None]:
    """jobs/s of one call enqueuing every job, by variant; median of repeats."""
    from benchmarks.benchapp import framework_tasks, tasks
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec

    url, n, repeats = db_url(), scale.enqueue_jobs, scale.repeats
    jobs = range(n)
    path = framework_tasks.noop.module_path

    def direct() -> None:
        Job.objects.enqueue_many([JobSpec.build(tasks.noop, (), payload(i)) for i in jobs])

    def reset_article() -> None:
        baseline.setup(url)
        settle()

    out: dict[str, float | None] = {}
    with connect(autocommit=False) as conn:

        def plain() -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(
                    PLAIN_INSERT, [(path, "[]", json.dumps(payload(i))) for i in jobs]
                )

        def article() -> None:
            with conn.transaction():
                baseline.enqueue_bulk(conn, [json.dumps(payload(i)) for i in jobs])

        out["plain"] = _rate(n, plain, repeats, reset_jobs)
        out["article"] = _rate(n, article, repeats, reset_article)
    out["direct"] = _rate(n, direct, repeats, reset_jobs)
    bulk = tasks_bulk()
    out["tasks"] = _rate(n, lambda: bulk(jobs), repeats, reset_jobs) if bulk else None
    return out


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    single = singles(scale)
    bulk = bulks(scale)
    reset_jobs()
    n = f"{scale.enqueue_jobs:,}"
    return Outcome(
        [
            Row(
                "W1 enqueue",
                f"{n} jobs, one per autocommit transaction",
                "jobs/s",
                {
                    "tasks": single["tasks"],
                    "direct": single["direct"],
                    "ref": single["plain"],
                    **peer_values(facts, "w1_single"),
                },
                (Target(">=", SINGLE_TARGET, of="ref"),),
                "`noop.enqueue(**payload)`; reference: a plain psycopg autocommit INSERT of the "
                f"same row into pgqueue_job; the variants ran interleaved, {BLOCKS} blocks each",
            ),
            Row(
                "W1 enqueue",
                f"{n} jobs, each in `atomic()`",
                "jobs/s",
                {
                    "tasks": single["tasks_atomic"],
                    "direct": single["direct_atomic"],
                    **{
                        k: v
                        for k, v in peer_values(facts, "w1_atomic").items()
                        if k == "django-tasks-db"
                    },
                },
                note="BEGIN + INSERT + COMMIT: two more round trips",
            ),
            Row(
                "W1 enqueue",
                "the article's `jobs613` INSERT, one per transaction",
                "jobs/s",
                {"ref": single["article"]},
            ),
            Row(
                "W1 enqueue",
                f"{n} jobs in one call",
                "jobs/s",
                {
                    "tasks": bulk["tasks"],
                    "direct": bulk["direct"],
                    "ref": bulk["plain"],
                    **peer_values(facts, "w1_bulk"),
                },
                (Target(">=", BULK_TARGET, of="ref"),),
                f"Tasks path: `{'.'.join(TASKS_BULK)}`; direct: "
                "`Job.objects.enqueue_many(JobSpec.build(...))`; reference: psycopg `executemany` "
                "of the plain INSERT in one transaction; PgQueuer: `Queries.enqueue` of lists; "
                "Procrastinate: `batch_defer_async`; django-tasks-db has no bulk API",
            ),
            Row(
                "W1 enqueue",
                f"the article's `jobs613` INSERT … unnest of {n} payloads",
                "jobs/s",
                {"ref": bulk["article"]},
            ),
        ]
    )
