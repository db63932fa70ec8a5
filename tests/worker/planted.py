"""Job rows written by hand (SQL), as anyone with database access could, and their
outcome read without the model (whose JSONField may not read a planted column)."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection


def plant(task: str, args: Any, **columns: Any) -> int:
    """Insert a job row of ``task`` with ``args`` (and any other ``columns``)."""
    return insert({"task": task, "args": json.dumps(args), "max_attempts": 3, **columns})


def insert(values: dict[str, Any]) -> int:
    """Insert a job row of exactly these column ``values``; its id."""
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO pgqueue_job ({names}) VALUES ({marks}) RETURNING id",
            list(values.values()),
        )
        return int(cursor.fetchone()[0])


def outcome(job_id: int) -> tuple[str, int, str | None]:
    """Status, attempts and the last error's exception."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, attempts, errors -> -1 ->> 'exception' FROM pgqueue_job WHERE id = %s",
            [job_id],
        )
        status, attempts, exception = cursor.fetchone()
        return str(status), int(attempts), exception


def last_message(job_id: int) -> str | None:
    """The last error's message."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT errors -> -1 ->> 'message' FROM pgqueue_job WHERE id = %s", [job_id])
        return cursor.fetchone()[0]  # type: ignore[no-any-return]
