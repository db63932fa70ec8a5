"""The worker's side: claim jobs under a lease, renew it, record outcomes, give runs back.

Every write is fenced on (id, token, worker): a run whose lease expired (and whose
job may have been claimed again, by anyone) can no longer change the row. The
token is the claim's, chosen by the worker (:func:`next_token`) and written to
``lease_token``; ``ClaimedJob.run`` carries it.
"""

from __future__ import annotations

import json
import operator
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

from django.db import IntegrityError, connections, transaction

from django_pgqueue import sql, validation, wording
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.records import (
    ClaimedJob,
    Failure,
    JobStatus,
    Renewal,
    Success,
    claimed_job,
)
from django_pgqueue.sql import runner, variant

ONE_RUNNING_PER_KEY = "pgqueue_job_one_running_per_key"
#: The most jobs one claim statement takes.
MAX_CLAIM = 1024
_decode = json.JSONDecoder().decode
_job_id = operator.attrgetter("job_id")
_tokens = threading.Lock()
_last_token = 0


#: What heartbeat(), renew() and release() accept: (id, run) pairs, or the ClaimedJobs
#: that claim() returned.
Runs = Iterable[Sequence[int] | ClaimedJob]


def run_keys(runs: Runs) -> list[tuple[int, int]]:
    """The (id, run) keys of ``runs``: pairs (tuples, or lists read back from JSON) or
    ClaimedJobs; InvalidJob for anything else."""
    keys = []
    for run in runs:
        key = run.key if isinstance(run, ClaimedJob) else run
        if not (
            isinstance(key, tuple | list)
            and len(key) == 2
            and all(validation.run_key_part(v) for v in key)
        ):
            raise InvalidJob(
                f"expected (id, run) pairs, or the ClaimedJobs that claim() returned, not {run!r}"
            )
        keys.append((key[0], key[1]))
    return keys


def next_token() -> int:
    """A claim token this process never handed out before: the clock in nanoseconds,
    or one more than the last token if the clock has not moved on (or went back)."""
    global _last_token
    with _tokens:
        _last_token = max(_last_token + 1, time.time_ns())
        return _last_token


def _decoded(row: dict[str, Any]) -> ClaimedJob:
    """The claimed row as a job; a row whose JSON Python cannot read (a number
    with more digits than it converts, nesting past the recursion limit) carries
    the reason in ``problem`` instead of failing the batch it came with."""
    problem = None
    args, kwargs = row["args"], row["kwargs"]
    try:
        # Most calls pass no keyword arguments, many no positional ones either.
        args = [] if args == "[]" else _decode(args)
        kwargs = {} if kwargs == "{}" else _decode(kwargs)
    except (ValueError, RecursionError) as exc:
        args, kwargs = [], {}
        problem = f"the stored arguments cannot be decoded: {type(exc).__name__}: {exc}"
    except TypeError:  # SQL NULL, once someone dropped the column's NOT NULL
        empty = [name for name in ("args", "kwargs") if row[name] is None]
        args, kwargs = [], {}
        verb = "are" if len(empty) > 1 else "is"
        problem = f"the stored arguments are missing: {wording.joined(empty, 'and')} {verb} NULL"
    # The claim returns exactly ClaimedJob's fields, by name: a column added,
    # dropped or renamed on one side only fails here, loudly.
    row["args"], row["kwargs"], row["problem"] = args, kwargs, problem
    return claimed_job(row)


#: How many times a claim refused by pgqueue_job_one_running_per_key is retried.
CLAIM_TRIES = 64


def batch_size(free: int) -> int:
    """The claim a worker with ``free`` slots makes: the largest power of two that
    fits (at most MAX_CLAIM), so that its connection prepares few variants."""
    return 1 << (max(1, min(free, MAX_CLAIM)).bit_length() - 1)


def claim(
    worker: str, limit: int, queues: Sequence[str] | None, lease: float, alias: str
) -> list[ClaimedJob]:
    """Lease up to ``limit`` ready jobs to ``worker`` in one statement, committed at once."""
    params = {
        "worker": worker,
        "lease": lease,
        "token": next_token(),
        "commit": runner.commit_mode(),
    }
    # Serving chosen queues: one index range per queue (see queries.sql). The
    # limit and the queues are written into the statement, for the planner (the
    # worker asks in powers of two, batch_size(): a dozen variants at most).
    name = "claim_queues" if queues else "claim"
    text = variant(
        name,
        limit=max(1, min(limit, MAX_CLAIM)),
        # A queue named twice would be read twice, and its jobs fill the limit twice.
        queues=tuple(dict.fromkeys(validation.QUEUE(q) for q in queues)) if queues else None,
    )
    # Each refusal means another claim took a key first, and the next snapshot sees
    # it running: n claimers racing for the jobs of the same keys need up to n - 1
    # tries. Five were too few for 16 (some came back empty with jobs ready, which a
    # --burst worker takes for an empty queue).
    for _ in range(CLAIM_TRIES):
        try:
            if connections[alias].in_atomic_block:
                # Inside the caller's transaction a failed statement would
                # doom it: a savepoint keeps the retry below possible.
                with transaction.atomic(using=alias):
                    rows = runner.fetch(name, params, alias, text=text)
            else:
                rows = runner.fetch(name, params, alias, text=text)  # autocommit: one round trip
            break
        except IntegrityError as exc:
            # Another claim took a job of the same concurrency_key between our
            # snapshot and our update: the unique index refused ours. Try again
            # with a fresh snapshot, which sees that job running.
            if ONE_RUNNING_PER_KEY not in str(exc):
                raise
    else:
        return []
    # RETURNING comes in the join's order, not the candidates': with other table
    # statistics (a few thousand rows analysed) the planner hashes and returns them
    # by id. The worker starts jobs in the order given, so restore the claim's.
    # (A NULL priority, its NOT NULL dropped by hand, sorts as 0 rather than fail
    # the whole batch: the statement already committed it.)
    rows.sort(key=lambda row: (-(row["priority"] or 0), row["run_at"], row["id"]))
    return [_decoded(row) for row in rows]


class Recorded(NamedTuple):
    """A batch's ids done, {id: new status} of the rest recorded, and the ids whose
    rows another transaction held locked (skipped: to write again later)."""

    done: set[int]
    failed: dict[int, str]
    busy: set[int]


def record(
    worker: str, successes: Sequence[Success], failures: Sequence[Failure], alias: str
) -> Recorded:
    """Record a batch of outcomes, all or none (a retried batch must not find half of
    it written): two statements share a transaction, one is atomic alone (and two
    round trips cheaper). Rows locked elsewhere are skipped (``busy``): waiting for
    none, the two cannot be one side of a deadlock."""
    with transaction.atomic(using=alias) if successes and failures else nullcontext():
        done, busy = _complete(worker, successes, alias, wait=False)
        failed, busy_failing = _fail(worker, failures, alias, wait=False)
    return Recorded(done, failed, busy | busy_failing)


def complete(worker: str, successes: Sequence[Success], alias: str) -> set[int]:
    """Mark runs done with their results; the ids recorded (the rest were fenced out)."""
    return _complete(worker, successes, alias, wait=True)[0]


def _complete(
    worker: str, successes: Sequence[Success], alias: str, *, wait: bool
) -> tuple[set[int], set[int]]:
    if not successes:
        return set(), set()
    successes = sorted(successes, key=_job_id)
    rows = runner.fetch(
        "complete",
        {
            "worker": worker,
            "commit": runner.commit_mode(),
            "ids": [s.job_id for s in successes],
            "runs": [s.run for s in successes],
            "results": [s.result for s in successes],
        },
        alias,
        text=sql.waiting("complete") if wait else None,
    )
    busy = {row["id"] for row in rows if row["busy"]}
    return {row["id"] for row in rows} - busy, busy


def fail(worker: str, failures: Sequence[Failure], alias: str) -> dict[int, str]:
    """Record the runs that did not succeed (failed: retry later or dead; snoozed;
    cancelled); {id: new status} of those recorded."""
    return _fail(worker, failures, alias, wait=True)[0]


def _fail(
    worker: str, failures: Sequence[Failure], alias: str, *, wait: bool
) -> tuple[dict[int, str], set[int]]:
    if not failures:
        return {}, set()
    failures = sorted(failures, key=_job_id)
    rows = runner.fetch(
        "fail",
        {
            "worker": worker,
            "commit": runner.commit_mode(),
            "ids": [f.job_id for f in failures],
            "runs": [f.run for f in failures],
            "delays": [float(f.delay) for f in failures],  # psycopg: one type a list
            "exceptions": [f.exception for f in failures],
            "messages": [f.message for f in failures],
            "tracebacks": [f.traceback for f in failures],
            "finals": [f.final for f in failures],
            "cancels": [f.cancel for f in failures],
            "snoozes": [f.snooze for f in failures],
        },
        alias,
        text=sql.waiting("fail") if wait else None,
    )
    return (
        {row["id"]: row["status"] for row in rows if not row["busy"]},
        {row["id"] for row in rows if row["busy"]},
    )


def heartbeat(worker: str, runs: Sequence[tuple[int, int]], lease: float, alias: str) -> Renewal:
    """Extend the leases ``worker`` holds on these (id, run) pairs: those still held,
    those asked to stop (with the reason); rows locked elsewhere are skipped (busy)."""
    if not runs:
        return Renewal(set(), {})
    runs = sorted(runs)
    rows = runner.fetch(
        "heartbeat",
        {
            "worker": worker,
            "commit": runner.commit_mode(),
            "ids": [r[0] for r in runs],
            "runs": [r[1] for r in runs],
            "lease": lease,
        },
        alias,
    )
    return Renewal(
        {(row["id"], row["run"]) for row in rows if row["kept"]},
        {(row["id"], row["run"]): row["cancel_reason"] for row in rows if row["cancel_requested"]},
        {(row["id"], row["run"]) for row in rows if row["paused"]},
        # (Not kept and asked to stop: lost, its job cancelled by a reaper meanwhile.)
        {(row["id"], row["run"]) for row in rows if not (row["kept"] or row["cancel_requested"])},
    )


def expire_orphans(worker: str, alias: str) -> list[int]:
    """End the leases of the runs ``worker`` still holds in the table, when a worker
    that holds the id's lock starts (so none of them is its own): the ids."""
    return sorted(row["id"] for row in runner.fetch("expire_orphans", {"worker": worker}, alias))


def release(
    worker: str,
    runs: Sequence[tuple[int, int]],
    reason: str | None,
    alias: str,
    *,
    wait: bool = True,
) -> dict[int, str | None]:
    """Put running jobs (id, run) back in the queue without spending the attempt;
    ``reason`` None (runs that never started) adds nothing to their error history.
    The jobs this worker still held, each with its status now: ``queued``, or
    ``cancelled`` for one an operator had asked to stop. With ``wait=False`` a run
    whose row another transaction holds locked is skipped, its status None."""
    if not runs:
        return {}
    runs = sorted(runs)
    rows = runner.fetch(
        "release",
        {
            "worker": worker,
            "commit": runner.commit_mode(),
            "ids": [r[0] for r in runs],
            "runs": [r[1] for r in runs],
            "reason": reason,
        },
        alias,
        text=sql.waiting("release") if wait else None,
    )
    return {row["id"]: row["status"] for row in rows}


__all__ = [
    "MAX_CLAIM",
    "ONE_RUNNING_PER_KEY",
    "JobStatus",
    "Recorded",
    "batch_size",
    "claim",
    "complete",
    "fail",
    "heartbeat",
    "next_token",
    "release",
]
