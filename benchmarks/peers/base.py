"""What the peers' subprocesses share: the command line, timing a drain, W4's pacing."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from benchmarks import jobbody
from benchmarks.common import QUICK, DatabaseCpu, Process, Scale, connect, settle, writes
from benchmarks.w4_latency import GAP, WAIT_FOR_DONE, Committed, percentiles, pickups

Step = Callable[[Scale], dict[str, float]]
SLOTS = 8  # jobs a worker runs at once, as `runworker --concurrency 8`


def log(name: str, message: str) -> None:
    print(f"[{name} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(name: str, steps: dict[str, Step], setup: Callable[[], None] | None = None) -> None:
    """Parse ``--only``/``--quick``, run the steps, print their figures as JSON."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.peers ({name})")
    parser.add_argument("--only", default=",".join(steps))
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    scale = QUICK if options.quick else Scale()
    if setup is not None:
        setup()
    figures: dict[str, float] = {}
    for step in options.only.split(","):
        log(name, f"{step}: running")
        figures.update(steps[step](scale))
    print(json.dumps(figures))


def table_has(table: str) -> bool:
    with connect() as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()
    return bool(row and row[0])


def epochs(sql: str) -> tuple[float, float, int]:
    """A (first, last, count) query's row, with epochs as floats."""
    with connect() as conn:
        row = conn.execute(sql.encode()).fetchone()
    if row is None or row[0] is None or row[1] is None:
        raise RuntimeError(f"no finished jobs ({sql.split()[0]} returned nothing)")
    return float(row[0]), float(row[1]), int(row[2])


def drain(n: int, args: tuple[str, ...], progress_table: str, finished: str) -> dict[str, float]:
    """Run the peer's worker (``python args``) over ``n`` queued jobs until it exits.

    ``finished`` is a query of (first start, last done, jobs done) on the database
    clock. Jobs/s run from the process's start to the last job done, as ours do.
    """
    vacuum(progress_table)
    db = DatabaseCpu()
    before = db.seconds()
    worker = Process.spawn(*args)
    worker.wait(timeout=900, progress=writes(progress_table))
    after = db.seconds()
    worker.check()
    _, last, done = epochs(finished)
    if done != n:
        raise RuntimeError(f"{worker.name} finished {done} of {n} jobs:\n{worker.output()[-2000:]}")
    out = {"w2_rate": n / (last - worker.started), "w2_cpu": worker.cpu / n * 1000}
    if before is not None and after is not None:
        out["w2_db_cpu"] = (after - before) / n * 1000
    return out


def lab(args: tuple[str, ...], progress_table: str, finished: str, n: int) -> float:
    """W3: the peer's worker over ``n`` queued 2 ms jobs; first start to last done, ms."""
    vacuum(progress_table)
    worker = Process.spawn(*args)
    worker.wait(progress=writes(progress_table))
    worker.check()
    first, last, done = epochs(finished)
    if done != n:
        raise RuntimeError(f"{worker.name} finished {done} of {n} lab jobs")
    return (last - first) * 1000


def vacuum(table: str) -> None:
    with connect() as conn:
        conn.execute(f"VACUUM ANALYZE {table}".encode())
    settle()


async def paced(n: int, enqueue: Callable[[str], Awaitable[str]]) -> Committed:
    """The asyncio twin of ``w4_latency.paced``: when each key's enqueue committed."""
    returned: dict[str, tuple[float, str]] = {}
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * GAP - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        key = f"w4-{i}"
        xid = await enqueue(key)
        returned[key] = (time.time(), xid)
    return Committed.of(returned)


Enqueue = Callable[[str], Awaitable[str]]


def pickup(
    n: int, args: tuple[str, ...], enqueuer: Callable[[], AbstractAsyncContextManager[Enqueue]]
) -> dict[str, float]:
    """W4: an idle worker (``python args``), n jobs GAP apart; latency percentiles.

    ``enqueuer()`` opens the peer's client and yields a function that enqueues one
    job, recording its key, in a transaction of its own, and returns its xid.
    """
    from benchmarks.w4_latency import wait_for_lines

    async def session() -> Committed:
        async with enqueuer() as enqueue:
            await enqueue("warm")  # the worker is up and idle once this ran
            if not await asyncio.to_thread(wait_for_lines, {"warm"}):
                raise RuntimeError(f"{worker.name} never ran a job:\n{worker.output()[-2000:]}")
            await asyncio.sleep(0.5)
            return await paced(n, enqueue)

    jobbody.clear()
    worker = Process.spawn(*args)
    try:
        committed = asyncio.run(session())
        started = wait_for_lines(set(committed.returned), WAIT_FOR_DONE)
    finally:
        worker.stop()
    return percentiles(pickups(committed, started))
