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

#: The longest name the pause table holds (pgqueue_queue.name).
MAX_NAME = 64


def pause(name: str, alias: str) -> bool:
    """Pause queue ``name``; True if it was not paused already."""
    row = runner.fetch_one(
        "pause_queue", {"name": validation.QUEUE(name), **notify_params()}, alias
    )
    return bool(row["changed"])


def resume(name: str, alias: str) -> bool:
    """Resume queue ``name`` and wake its workers; True if it was paused.

    A paused queue is resumed whatever its name: a row of the pause table written
    by an older version or by hand may hold one that today's rule refuses, and
    SQL was then the only way to resume it. A name the rule refuses that is not
    paused is refused (:class:`InvalidJob`), as :func:`pause` refuses it.
    """
    if not validation.QUEUE.is_valid(name) and not pausable(name, alias):
        validation.QUEUE(name)  # raises
    row = runner.fetch_one("resume_queue", {"name": name, **notify_params()}, alias)
    return bool(row["changed"])


def pausable(name: object, alias: str) -> bool:
    """Whether ``name`` is a queue :func:`resume` takes: one today's rule allows, or
    one that is paused (only a string the table can hold is looked up)."""
    if validation.QUEUE.is_valid(name):
        return True
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        return False
    if not validation.storable(name):
        return False
    return runner.fetch_one("queue_paused", {"name": name}, alias)["paused"] is True


def paused(alias: str) -> dict[str, dt.datetime]:
    """The paused queues, by name, with the moment each was paused."""
    bounds = {"earliest": validation.EARLIEST, "latest": validation.LATEST}
    return {row["name"]: row["paused_at"] for row in runner.fetch("paused_queues", bounds, alias)}
