"""W4 pickup latency: an idle worker, jobs enqueued 20 ms apart, commit to job start.

Each job's body records ``time.time()`` as its first act, in the job file
(``benchmarks.jobbody``), labelled with a key the enqueuer chose. Two clocks
start each latency, both on this host: the enqueuer's ``time.time()`` when its
commit returned (the judged figure: a job is visible to a worker only once its
commit is flushed, which is just before the commit returns), and the server's
commit timestamp of the enqueuing transaction (``track_commit_timestamp``, which
the runner turns on for the embedded server). The server stamps a commit before
flushing its WAL, so the second adds the enqueuer's own flush to every figure;
on a server that does not track commit timestamps it is left out. Each enqueue
is its own transaction. The Tasks path and the direct API each get an idle
``runworker`` with default settings. The baseline is the article's worker: 8
threads that poll every 100 ms ("an idle worker that polls every 100ms"), no
NOTIFY. The peers measure the same way in their subprocesses, each with its own
LISTEN.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from benchmarks import baseline, jobbody
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
    peer_values,
    percentile,
    reset_jobs,
)

GAP = 0.020
TARGETS = {50: 1.5, 95: 3.0}  # the Tasks path's
WAIT_FOR_DONE = 30.0


XID = "SELECT pg_current_xact_id()::text"
#: What each clock's first row measures (the rows after it share it).
NOTES = {
    "w4_p50": "the enqueue's commit returning (the enqueuer's clock) to the job body's "
    "first line; `runworker` with defaults (LISTEN/NOTIFY); reference: the article's "
    "worker, polling every 100 ms; PgQueuer and Procrastinate LISTEN, django-tasks-db "
    "polls every second",
    "w4_server_p50": "the same jobs, timed from the server's commit timestamp of the "
    "enqueue, taken before the enqueuer's WAL flush",
}


@dataclasses.dataclass(frozen=True)
class Committed:
    """When each key's enqueue committed, by the two clocks."""

    returned: dict[str, float]  # the enqueuer's clock when its commit returned
    server: dict[str, float] | None  # the server's commit timestamps, if it tracks them

    @classmethod
    def of(cls, returned: dict[str, tuple[float, str]]) -> Committed:
        return cls({key: t for key, (t, _) in returned.items()}, server_commit_times(returned))


def paced(n: int, enqueue: Callable[[str], str]) -> Committed:
    """Call ``enqueue(key)`` for n keys, GAP apart; returns when each committed.

    ``enqueue`` commits one job whose body records ``key``, and returns its
    transaction's id.
    """
    returned: dict[str, tuple[float, str]] = {}
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * GAP - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        key = f"w4-{i}"
        xid = enqueue(key)
        returned[key] = (time.time(), xid)
    return Committed.of(returned)


def server_commit_times[K](returned: dict[K, tuple[float, str]]) -> dict[K, float] | None:
    """The server's commit timestamps of the enqueues, or None if it does not track them."""
    with connect() as conn:
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
        if not row or row[0] != "on":
            return None
        xids = [xid for _, xid in returned.values()]
        stamps = dict(
            conn.execute(
                "SELECT x, extract(epoch FROM pg_xact_commit_timestamp("
                "(x::bigint %% 4294967296)::text::xid))::float8 FROM unnest(%s::text[]) AS x",
                [xids],
            ).fetchall()
        )
    return {key: float(stamps[xid]) for key, (_, xid) in returned.items()}


def latencies(committed: dict[str, float], started: dict[str, float]) -> list[float]:
    missing = set(committed) - set(started)
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(committed)} jobs never started")
    return [(started[key] - t) * 1000 for key, t in committed.items()]


def pickups(committed: Committed, started: dict[str, float]) -> dict[str, list[float]]:
    """Latencies (ms) by clock: "returned" always, "server" where it is tracked."""
    out = {"returned": latencies(committed.returned, started)}
    if committed.server is not None:
        out["server"] = latencies(committed.server, started)
    return out


def percentiles(lat: dict[str, list[float]]) -> dict[str, float]:
    """{"w4_p50": ..., "w4_server_p50": ...}: the keys the rows (and the peers) use."""
    return {
        f"w4_{'' if clock == 'returned' else clock + '_'}p{q}": percentile(values, q)
        for clock, values in lat.items()
        for q in (50, 95, 99)
    }


def wait_for_lines(keys: set[str], timeout: float = WAIT_FOR_DONE) -> dict[str, float]:
    """{key: job start} from the job file, once every key is there (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        started = {label: t for label, t in jobbody.lines() if label in keys}
        if len(started) == len(keys) or time.monotonic() > deadline:
            return started
        time.sleep(0.02)


def _claims(keys: set[str]) -> dict[str, float]:
    """{key: claim statement's start} of the done jobs (their attempted_at)."""
    with connect() as conn:
        rows = conn.execute(
            "SELECT args->>0, extract(epoch FROM attempted_at)::float8 "
            "FROM pgqueue_job WHERE status = 'done'"
        ).fetchall()
    return {str(key): float(at) for key, at in rows if key in keys}


def ours(
    n: int, tasks_path: bool, env: dict[str, str] | None = None
) -> tuple[dict[str, list[float]], list[float]]:
    """runworker with default settings (LISTEN/NOTIFY, 2 s poll as the fallback)."""
    from django.db import connection, transaction

    from benchmarks.benchapp import framework_tasks, tasks

    stamp: Any = framework_tasks.stamp if tasks_path else tasks.stamp

    def enqueue(key: str) -> str:
        with transaction.atomic():
            stamp.enqueue(key)
            with connection.cursor() as cursor:
                cursor.execute(XID)
                (xid,) = cursor.fetchone() or ("",)
        return str(xid)

    reset_jobs()
    jobbody.clear()
    worker = Process.start("runworker", "-v", "0", env=env)
    try:
        stamp.enqueue("warm")  # wait for the worker to be up and idle
        if not wait_for_lines({"warm"}):
            raise RuntimeError(f"runworker never ran a job:\n{worker.output()[-2000:]}")
        time.sleep(0.5)
        committed = paced(n, enqueue)
        started = wait_for_lines(set(committed.returned))
        time.sleep(0.2)  # the last completions are recorded in a batch
        claimed = _claims(set(committed.returned))
    finally:
        worker.stop()
    # attempted_at is the server's clock: compared with the server's commit times.
    return pickups(committed, started), latencies(committed.server or committed.returned, claimed)


def base(n: int) -> dict[str, list[float]]:
    url = db_url()
    baseline.setup(url)
    stop = threading.Event()
    started: dict[str, float] = {}
    threads = [
        threading.Thread(target=baseline.poller, args=(url, stop, started))
        for _ in range(baseline.WORKERS)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        with psycopg.connect(url, autocommit=True) as conn:

            def enqueue(key: str) -> str:
                row = conn.execute(
                    "INSERT INTO jobs613 (payload) VALUES (%s) "
                    "RETURNING pg_current_xact_id()::text",
                    [key],
                ).fetchone()
                assert row is not None
                return str(row[0])

            committed = paced(n, enqueue)
        deadline = time.monotonic() + WAIT_FOR_DONE
        while len(started) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return pickups(committed, dict(started))


def run(scale: Scale, facts: dict[str, Any]) -> Outcome:
    n = scale.latency_jobs
    the_base = percentiles(base(n))
    tasks_lat, tasks_to_claim = ours(n, tasks_path=True)
    direct_lat, direct_to_claim = ours(n, tasks_path=False)
    # What Django's log line for task_started costs a pickup.
    quiet = percentiles(ours(n, tasks_path=True, env=QUIET_TASK_LOGS)[0])
    tasks, direct = percentiles(tasks_lat), percentiles(direct_lat)
    with connect() as conn:
        conn.execute("TRUNCATE pgqueue_job RESTART IDENTITY")
    rows = []
    for clock, label in (("", "idle worker"), ("server_", "from the server's commit timestamp")):
        for q in (50, 95, 99):
            key = f"w4_{clock}p{q}"
            if key not in tasks:
                continue
            judged = not clock and q in TARGETS
            rows.append(
                Row(
                    "W4 pickup",
                    f"{n} jobs 20 ms apart, {label}: p{q}",
                    "ms",
                    {
                        "tasks": tasks[key],
                        "direct": direct[key],
                        "ref": the_base.get(key),
                        **peer_values(facts, key),
                    },
                    (Target("<=", TARGETS[q]),) if judged else (),
                    NOTES.get(key, ""),
                )
            )
    rows += [
        Row(
            "W4 pickup",
            f"the same, idle worker, {WITHOUT_TASK_LOGS}: p{q}",
            "ms",
            {"tasks": quiet[f"w4_p{q}"], "direct": direct[f"w4_p{q}"]},
        )
        for q in TARGETS
    ]
    run_lat = tasks_lat["returned"]
    direct_run = direct_lat["returned"]
    detail = (
        f"**W4** min/max from the enqueue's commit returning to the job's start: Tasks "
        f"path {min(run_lat):.2f}/{max(run_lat):.2f} ms, direct API "
        f"{min(direct_run):.2f}/{max(direct_run):.2f} ms. From the commit "
        f"({'the server' if 'server' in tasks_lat else 'the enqueuer'}'s clock) to the "
        f"claim statement's start (NOTIFY delivery, the worker waking), medians: "
        f"{percentile(tasks_to_claim, 50):.2f} ms (Tasks path) and "
        f"{percentile(direct_to_claim, 50):.2f} ms (direct); after it come the claim's "
        "round trip and commit, the hand-over to a job thread and, on the Tasks path, "
        "the backend's work before the task's first line.\n"
    )
    return Outcome(rows, [detail])
