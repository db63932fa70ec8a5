"""Tasks for tests/integration/test_tasks_peer_parity.py: what django-tasks-db's
own test tasks do that the other test modules' tasks do not."""

from __future__ import annotations

import collections
import enum
import types
from typing import Any, NamedTuple

from django_pgqueue.backend.compat import TaskContext, task


@task(takes_context=True)
async def context_async(context: TaskContext[Any, Any]) -> dict[str, Any]:
    """An async task's context: its own result, refreshed from the queue."""
    before = context.task_result.status
    await context.task_result.arefresh()
    return {
        "id": context.task_result.id,
        "attempt": context.attempt,
        "before": before,
        "refreshed": context.task_result.status,
        "worker_ids": context.task_result.worker_ids,
    }


@task
async def enqueues_another(value: int) -> str:
    """Enqueues a job from an async task, and reads its result back."""
    child = await echo_value.aenqueue(value)
    read = await echo_value.aget_result(child.id)
    return read.id


@task
def echo_value(value: Any) -> Any:
    return value


@task(takes_context=True)
def refreshes_itself(context: TaskContext[Any, Any]) -> dict[str, Any]:
    context.task_result.refresh()
    return {"status": context.task_result.status, "attempts": context.task_result.attempts}


class Point(NamedTuple):
    x: int
    y: int


class Level(enum.IntEnum):
    HIGH = 1


class Colour(enum.StrEnum):
    RED = "red"


#: Values Django's normalize_json turns into JSON, by name.
_VALUES: dict[str, Any] = {
    "range": range(3),
    "namedtuple": Point(1, 2),
    "deque": collections.deque([1, 2]),
    "userlist": collections.UserList([1]),
    "userdict": collections.UserDict(a=1),
    "ordereddict": collections.OrderedDict(b=1, a=2),
    "bytes": b"abc",
    "bytearray": bytearray(b"ab"),
    "memoryview": memoryview(b"ab"),
    "intenum": Level.HIGH,
    "strenum": Colour.RED,
    "tuple_in_dict": {"t": (1, (2, 3))},
    "mappingproxy": types.MappingProxyType({"a": 1}),
}
RETURNED = tuple(_VALUES)


def returned(kind: str) -> Any:
    """The value ``returns(kind)`` returns."""
    return _VALUES[kind]


@task
def returns(kind: str) -> Any:
    """A value Django's normalize_json turns into JSON (ImmediateBackend keeps that)."""
    return returned(kind)
