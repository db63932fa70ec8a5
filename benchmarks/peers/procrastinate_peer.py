"""Procrastinate (psycopg 3) as a peer: its schema, ``defer_async``, its worker.

The schema is applied with Procrastinate's own ``schema --apply``; the worker is
its CLI, ``python -m procrastinate --app benchmarks.peers.procrastinate_peer.app
worker --concurrency 8`` (``--one-shot`` for the drains), everything else its
default (LISTEN/NOTIFY, a 5 s fallback poll, INFO logging, a psycopg pool of its
default size). Its concurrency runs coroutines, so the tasks are ``async def``
(Procrastinate's docs advise against concurrency with blocking sync tasks): the
job body is the shared one, and the 2 ms job awaits ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import procrastinate

from benchmarks.common import DB_URL_ENV, Scale, connect, settle
from benchmarks.jobbody import record
from benchmarks.peers import base
from benchmarks.w1_enqueue import payload
from benchmarks.w4_latency import XID

MODULE = __name__  # imported by name (benchmarks.peers.__main__), never run as __main__
APP = f"{MODULE}.app"
WORKER = ("-m", "procrastinate", "--app", APP, "worker", "--concurrency", str(base.SLOTS))
DRAIN = (*WORKER, "--one-shot")
JOBS = "procrastinate_jobs"
DONE = (
    "SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started'))::float8, "
    "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded'))::float8, "
    "count(*) FILTER (WHERE type = 'succeeded') FROM procrastinate_events"
)
CHUNK = 10_000

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(DB_URL_ENV, ""))
)


# The shared job body. Registered by call rather than as decorators: mypy runs
# where Procrastinate may not be installed, and an untyped decorator is an error.
async def _noop(**kwargs: object) -> None:
    record("job")


async def _stamp(key: str) -> None:
    record(key)


async def _sleep_ms(ms: float) -> None:
    record("sleep")
    await asyncio.sleep(ms / 1000)


noop = app.task(name="noop")(_noop)
stamp = app.task(name="stamp")(_stamp)
sleep_ms = app.task(name="sleep_ms")(_sleep_ms)


def setup() -> None:
    if not base.table_has(JOBS):
        import subprocess

        subprocess.run(
            [sys.executable, "-m", "procrastinate", "--app", APP, "schema", "--apply"],
            check=True,
            capture_output=True,
        )


def reset() -> None:
    with connect() as conn:
        conn.execute("TRUNCATE procrastinate_jobs, procrastinate_workers CASCADE")
    settle()


async def _defer_many(task: Any, kwargs: list[dict[str, Any]]) -> None:
    async with app.open_async():
        for start in range(0, len(kwargs), CHUNK):
            await task.batch_defer_async(*kwargs[start : start + CHUNK])


def w1(scale: Scale) -> dict[str, float]:
    n = scale.enqueue_jobs

    async def singles() -> float:
        async with app.open_async():
            start = time.perf_counter()
            for i in range(n):
                await noop.defer_async(**payload(i))
            return n / (time.perf_counter() - start)

    async def bulk() -> float:
        async with app.open_async():
            start = time.perf_counter()
            await noop.batch_defer_async(*[payload(i) for i in range(n)])
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
    n = scale.peer_drain_jobs
    reset()
    asyncio.run(_defer_many(noop, [{} for _ in range(n)]))
    out = base.drain(n, DRAIN, JOBS, DONE)
    out["w2_jobs"] = n
    reset()
    return out


def w3(scale: Scale) -> dict[str, float]:
    n, spans = scale.lab_jobs, []
    for _ in range(scale.repeats):
        reset()
        asyncio.run(_defer_many(sleep_ms, [{"ms": 2.0} for _ in range(n)]))
        spans.append(base.lab(DRAIN, JOBS, DONE, n))
    reset()
    return {"w3_ms": statistics.median(spans)}


def w4(scale: Scale) -> dict[str, float]:
    import psycopg

    @contextlib.asynccontextmanager
    async def enqueuer() -> AsyncIterator[base.Enqueue]:
        async with (
            app.open_async(),
            await psycopg.AsyncConnection.connect(os.environ[DB_URL_ENV]) as conn,
        ):

            async def enqueue(key: str) -> str:
                async with conn.transaction():
                    # `connection=`: the job is deferred on this connection, in its transaction.
                    await stamp.configure(connection=conn).defer_async(key=key)
                    row = await (await conn.execute(XID)).fetchone()
                return str(row[0] if row else "")

            yield enqueue

    reset()
    out = base.pickup(scale.latency_jobs, WORKER, enqueuer)
    reset()
    return out


STEPS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4}
