"""Paused queues: rows of ``pgqueue_queue`` that both claim statements skip.

The pause is kept in the database and read by the claim itself, so it holds for
every worker at once, from the moment it commits; jobs already running finish,
and those a worker claimed ahead and has not started go back (worker/housekeeping).
"""

from __future__ import annotations

import datetime as dt

from django_pgqueue import validation
from django_pgqueue.queue.enqueue import notify_params
from django_pgqueue.sql import runner


def pause(name: str, alias: str) -> bool:
    """Pause queue ``name``; True if it was not paused already."""
    row = runner.fetch_one(
        "pause_queue", {"name": validation.QUEUE(name), **notify_params()}, alias
    )
    return bool(row["changed"])


def resume(name: str, alias: str) -> bool:
    """Resume queue ``name`` and wake its workers; True if it was paused."""
    row = runner.fetch_one(
        "resume_queue", {"name": validation.QUEUE(name), **notify_params()}, alias
    )
    return bool(row["changed"])


def paused(alias: str) -> dict[str, dt.datetime]:
    """The paused queues, by name, with the moment each was paused."""
    bounds = {"earliest": validation.EARLIEST, "latest": validation.LATEST}
    return {row["name"]: row["paused_at"] for row in runner.fetch("paused_queues", bounds, alias)}
