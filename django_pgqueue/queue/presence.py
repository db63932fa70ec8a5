"""The worker registry's statements: a worker's row written, renewed and removed,
and the rows of workers long gone forgotten."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Sequence

from django_pgqueue import validation
from django_pgqueue.sql import runner

#: Seconds ahead past which a row's alive_until was written by no heartbeat (one
#: writes (HEARTBEAT_INTERVAL + LEASE) / 2 ahead, under LEASE, which is at most
#: validation.MAX_DELAY; a day more, as for leases): a row written by hand
#: (infinity, a year 3000) vouches for no worker, and every reader calls it gone.
UNWRITTEN_ALIVE = validation.MAX_DELAY + 86400.0


@dataclasses.dataclass(frozen=True, slots=True)
class Registration:
    """What a worker says about itself in ``pgqueue_worker``."""

    worker: str
    hostname: str
    pid: int
    queues: Sequence[str] | None
    concurrency: int
    version: str
    #: Seconds after a heartbeat past which the row is shown as gone.
    gone_after: float
    #: Whether it runs the scheduler (a --burst or --max-jobs worker does not).
    schedules: bool = True
    #: The schedules that scheduler runs (those enabled in its settings).
    schedule_names: Sequence[str] = ()


def lock_key(worker_id: str) -> int:
    """The advisory lock key of a worker id: 64 bits of its hash, so that two ids
    sharing a key (a false "in use") is as unlikely as it can be. The worker's
    session holds it while the worker runs (django_pgqueue.worker.session)."""
    digest = hashlib.blake2b(f"django_pgqueue.worker:{worker_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def register(
    entry: Registration,
    running: int,
    done: int,
    *,
    starting: bool,
    alias: str,
    lock_pid: int | None = None,
) -> None:
    """Write (or rewrite) the worker's row: at start (``starting``, which resets
    ``started_at``) and on every heartbeat. With ``lock_pid``, the server process of
    the session holding the id's lock, the row keeps it and the lock's key: the
    scheduler asks the server whether that process still holds it, so a killed
    worker counts as gone at once."""
    runner.fetch(
        "worker_register",
        {
            "worker": entry.worker,
            "hostname": entry.hostname,
            "pid": entry.pid,
            "queues": json.dumps(list(entry.queues)) if entry.queues is not None else None,
            "concurrency": entry.concurrency,
            "version": entry.version,
            "gone_after": entry.gone_after,
            "schedules": entry.schedules,
            "schedule_names": json.dumps(list(entry.schedule_names)),
            "jobs_running": running,
            "jobs_done": done,
            "starting": starting,
            "lock_key": lock_key(entry.worker),
            "lock_pid": lock_pid,
        },
        alias,
    )


def leave(worker: str, alias: str) -> bool:
    """Remove the worker's row; whether there was one."""
    return bool(runner.fetch("worker_leave", {"worker": worker}, alias))


def forget(after: float, alias: str) -> list[str]:
    """Delete the rows of workers gone for more than ``after`` seconds, and those
    whose alive_until no heartbeat wrote (gone since no one can tell when); their ids."""
    params = {"after": after, "beyond": UNWRITTEN_ALIVE}
    return sorted(row["id"] for row in runner.fetch("workers_forget", params, alias))


def database_now(using: str) -> dt.datetime:
    """The database's clock, which writes ``alive_until`` and ``locked_until``: a
    host whose clock is off would call live workers gone, or leases expired."""
    now: dt.datetime = runner.fetch_one("database_now", {}, using)["now"]
    return now
