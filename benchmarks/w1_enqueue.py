"""W1 enqueue: N jobs with a small JSON payload, one per transaction, and in bulk."""

from __future__ import annotations

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
    reset_jobs,
    settle,
)

BULK_TARGET = 100_000


def payload(i: int) -> dict[str, Any]:
    return {"user_id": i, "email": f"user{i}@example.com", "plan": "pro"}


BLOCKS = 4  # single enqueues run in interleaved blocks, so load spikes hit every variant


def _rate(n: int, run: Callable[[], None], repeats: int, before: Callable[[], None]) -> float:
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
        for name in names[block % len(names):] + names[:block % len(names)]:
            start = time.perf_counter()
            variants[name](range(block * size, (block + 1) * size))
            spent[name] += time.perf_counter() - start
    return {name: size * BLOCKS / seconds for name, seconds in spent.items()}


def singles(scale: Scale) -> dict[str, float]:
    """One job per transaction: ours in autocommit and in atomic(), the baseline's INSERT."""
    from django.db import transaction

    from benchmarks.benchapp.tasks import noop

    reset_jobs()
    baseline.setup(db_url())
    settle()
    with connect() as conn:

        def ours(jobs: range) -> None:
            for i in jobs:
                noop.enqueue(**payload(i))  # Django's autocommit: the statement is the transaction

        def ours_atomic(jobs: range) -> None:
            for i in jobs:
                with transaction.atomic():
                    noop.enqueue(**payload(i))

        def base(jobs: range) -> None:
            for i in jobs:
                baseline.enqueue_one(conn, json.dumps(payload(i)))

        return interleaved(scale.enqueue_jobs,
                           {"ours": ours, "atomic": ours_atomic, "base": base})


def bulks(scale: Scale) -> tuple[float, float]:
    """(ours, baseline) jobs/s of one statement enqueuing every job; median of repeats."""
    from benchmarks.benchapp.tasks import noop
    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec

    url, n = db_url(), scale.enqueue_jobs

    def ours() -> None:
        Job.objects.enqueue_many([JobSpec.build(noop, (), payload(i)) for i in range(n)])

    def reset_base() -> None:
        baseline.setup(url)
        settle()

    with connect() as conn:

        def base() -> None:
            baseline.enqueue_bulk(conn, [json.dumps(payload(i)) for i in range(n)])

        base_rate = _rate(n, base, scale.repeats, reset_base)
    return _rate(n, ours, scale.repeats, reset_jobs), base_rate


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    single = singles(scale)
    base_single, our_single, our_atomic = single["base"], single["ours"], single["atomic"]
    our_bulk, base_bulk = bulks(scale)
    reset_jobs()
    n = f"{scale.enqueue_jobs:,}"
    return Outcome([
        Row("W1 enqueue", f"{n} jobs, one per transaction", "jobs/s", our_single, base_single,
            facts.get("w1_single"), Target(">=", 0.9, of_baseline=True),
            "`noop.enqueue(**payload)` in autocommit; baseline: autocommit INSERT; "
            f"the variants ran interleaved, {BLOCKS} blocks each"),
        Row("W1 enqueue", f"{n} jobs, each in `atomic()`", "jobs/s", our_atomic, base_single,
            facts.get("w1_atomic"), None, "BEGIN + INSERT + COMMIT: two more round trips"),
        Row("W1 enqueue", f"{n} jobs, bulk", "jobs/s", our_bulk, base_bulk,
            facts.get("w1_bulk"), Target(">=", BULK_TARGET),
            "`enqueue_many(JobSpec.build(...))`, one statement; baseline: INSERT … unnest"),
    ])
