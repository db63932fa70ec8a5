"""Tasks of the differential contract (tests/integration/test_contract_backend_differential.py):
the same code, run by PgQueueBackend's worker and by Django's ImmediateBackend."""

from __future__ import annotations

import asyncio
import collections
import enum
from typing import Any

from django.tasks import TaskContext, task, task_backends


@task(takes_context=True)
def context_report(context: TaskContext[Any, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """What the context tells a task about its run (less the id and alias, which
    differ by backend)."""
    result = context.task_result
    return {
        "attempt": context.attempt,
        "status": result.status,
        "attempts": result.attempts,
        "worker_ids": len(result.worker_ids),
        "enqueued": result.enqueued_at is not None,
        "started": result.started_at is not None,
        "last_attempt_is_the_start": result.last_attempted_at == result.started_at,
        "finished_at": result.finished_at,
        "errors": len(result.errors),
        "args": result.args,
        "kwargs": result.kwargs,
        "is_finished": result.is_finished,
        "module_path": result.task.module_path,
    }


@task(takes_context=True)
def reads_itself(context: TaskContext[Any, Any], *args: Any, **kwargs: Any) -> list[str]:
    """The fields where the running result the task was given differs from the one
    ``get_result()`` reads back while it runs (none, on a backend that supports it)."""
    mine = context.task_result
    read = task_backends[mine.backend].get_result(mine.id)
    fields = (
        "id",
        "status",
        "enqueued_at",
        "started_at",
        "finished_at",
        "last_attempted_at",
        "args",
        "kwargs",
        "backend",
        "errors",
        "worker_ids",
        "attempts",
        "task",
    )
    return [name for name in fields if getattr(mine, name) != getattr(read, name)]


@task(takes_context=True)
async def async_context(context: TaskContext[Any, Any], n: int) -> list[Any]:
    return [context.attempt, context.task_result.status, n]


def _local_error() -> type[Exception]:
    class LocalError(Exception):
        pass

    return LocalError


@task
def raises_local() -> None:
    """An exception class no one can import (defined inside a function)."""
    raise _local_error()("local")


class NeedsTwo(Exception):
    """An exception that cannot be unpickled (its __init__ takes two arguments)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}+{b}")


@task
def raises_unpicklable() -> None:
    raise NeedsTwo(1, 2)


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


@task
def raises_bad_str() -> None:
    raise BadStr()


@task
async def raises_async() -> None:
    raise ValueError("async failure")


@task
def raises_system_exit() -> None:
    raise SystemExit(3)


@task
async def raises_cancelled_error() -> None:
    raise asyncio.CancelledError("its own")


class Level(enum.IntEnum):
    HIGH = 3


class Colour(enum.Enum):
    RED = "red"


RETURNED: dict[str, Any] = {
    "tuple": (1, (2, 3)),
    "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
    "range": range(3),
    "intenum": Level.HIGH,
    "bool": True,
    "none": None,
    "float": 1e20,
    "bytes": {"k": [b"ok"]},
    # Neither JSON nor normalised by Django: a TypeError on every backend.
    "enum": Colour.RED,
    "frozenset": frozenset([1]),
    "exception": ValueError("x"),
    # Django's normalize_json keeps these; JSON cannot (a documented difference).
    "int_keys": {1: "a"},
    "nan": float("nan"),
    "nul": "a\x00b",
}


@task
def returns(kind: str) -> Any:
    return RETURNED[kind]
