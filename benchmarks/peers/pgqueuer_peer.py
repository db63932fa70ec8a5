"""PgQueuer (asyncpg) as a peer: its ``pgq install`` schema, ``Queries.enqueue``, its worker.

The worker is PgQueuer's QueueManager started as ``pgq run`` starts it
(``benchmarks.peers.pgqueuer_worker``, which says why not through the command
itself), with 8-way concurrency as PgQueuer spells it: ``max_concurrent_tasks=8``
(the worker's cap on running jobs), which PgQueuer requires to be at least twice
``batch_size``, so batches of 4; everything else is its default (LISTEN/NOTIFY,
durable tables, INFO logging). Entrypoints must be coroutines: the job body is
the shared one, and the 2 ms job awaits ``asyncio.sleep``, PgQueuer's way to run
eight at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from benchmarks.common import DB_URL_ENV, Scale, connect, settle
from benchmarks.jobbody import record
from benchmarks.peers import base
from benchmarks.w1_enqueue import payload
from benchmarks.w4_latency import XID

WORKER = ("-m", "benchmarks.peers.pgqueuer_worker")
DRAIN = (*WORKER, "--drain")
LOG = "pgqueuer_log"
DONE = (
    "SELECT extract(epoch FROM min(created) FILTER (WHERE status = 'picked'))::float8, "
    "extract(epoch FROM max(created) FILTER (WHERE status = 'successful'))::float8, "
    "count(*) FILTER (WHERE status = 'successful') FROM pgqueuer_log"
)
CHUNK = 10_000


@contextlib.asynccontextmanager
async def create() -> AsyncIterator[Any]:
    """The factory ``pgq run`` calls: a PgQueuer with the benchmark's three entrypoints."""
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job

    conn = await asyncpg.connect(os.environ[DB_URL_ENV])
    pgq = PgQueuer(AsyncpgDriver(conn))

    # The shared job body. Registered by call rather than as decorators: mypy runs
    # where PgQueuer may not be installed, and an untyped decorator is an error.
    async def noop(job: Job) -> None:
        record("job")

    async def stamp(job: Job) -> None:
        record((job.payload or b"").decode())

    async def sleep_ms(job: Job) -> None:
        record("sleep")
        await asyncio.sleep(float(job.payload or b"0") / 1000)

    for entrypoint in (noop, stamp, sleep_ms):
        pgq.entrypoint(entrypoint.__name__)(entrypoint)
    try:
        yield pgq
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def queries() -> AsyncIterator[Any]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(os.environ[DB_URL_ENV])
    try:
        yield Queries(AsyncpgDriver(conn))
    finally:
        await conn.close()


def setup() -> None:
    if not base.table_has("pgqueuer"):
        import subprocess

        subprocess.run(
            [sys.executable, "-m", "pgqueuer", "--pg-dsn", os.environ[DB_URL_ENV], "install"],
            check=True,
            capture_output=True,
        )


def reset() -> None:
    with connect() as conn:
        conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
    settle()


async def _enqueue_many(entrypoint: str, payloads: list[bytes | None]) -> None:
    async with queries() as q:
        for start in range(0, len(payloads), CHUNK):
            chunk = payloads[start : start + CHUNK]
            await q.enqueue([entrypoint] * len(chunk), chunk, [0] * len(chunk))


def w1(scale: Scale) -> dict[str, float]:
    n = scale.enqueue_jobs

    async def singles() -> float:
        async with queries() as q:
            start = time.perf_counter()
            for i in range(n):
                await q.enqueue("noop", json.dumps(payload(i)).encode(), 0)
            return n / (time.perf_counter() - start)

    async def bulk() -> float:
        async with queries() as q:
            start = time.perf_counter()
            await q.enqueue(
                ["noop"] * n, [json.dumps(payload(i)).encode() for i in range(n)], [0] * n
            )
            return n / (time.perf_counter() - start)

    reset()
    single = asyncio.run(singles())
    rates = []
    for _ in range(scale.repeats):
        reset()
        rates.append(asyncio.run(bulk()))
    reset()
    return {"w1_single": single, "w1_bulk": statistics.median(rates)}


def w2(scale: Scale) -> dict[str, float]:
    n = scale.drain_jobs
    reset()
    asyncio.run(_enqueue_many("noop", [None] * n))
    out = base.drain(n, DRAIN, LOG, DONE)
    out["w2_jobs"] = n
    reset()
    return out


def w3(scale: Scale) -> dict[str, float]:
    n, spans = scale.lab_jobs, []
    for _ in range(scale.repeats):
        reset()
        asyncio.run(_enqueue_many("sleep_ms", [b"2"] * n))
        spans.append(base.lab(DRAIN, LOG, DONE, n))
    reset()
    return {"w3_ms": statistics.median(spans)}


def w4(scale: Scale) -> dict[str, float]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    @contextlib.asynccontextmanager
    async def enqueuer() -> AsyncIterator[base.Enqueue]:
        conn = await asyncpg.connect(os.environ[DB_URL_ENV])
        q = Queries(AsyncpgDriver(conn))

        async def enqueue(key: str) -> str:
            async with conn.transaction():
                await q.enqueue("stamp", key.encode(), 0)
                return str(await conn.fetchval(XID))

        try:
            yield enqueue
        finally:
            await conn.close()

    reset()
    out = base.pickup(scale.latency_jobs, WORKER, enqueuer)
    reset()
    return out


STEPS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4}
