"""Tasks declared with the Tasks framework's ``@task`` (``django.tasks``, or the
backport on Django 5.2), run by our backend in tests/*/test_backend*.py.

They mirror the tasks of Django's own ``tests/tasks/tasks.py``, plus a few that
show what a pgqueue worker adds (attempts, retries).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.db import transaction

from django_pgqueue import Cancel, Snooze
from django_pgqueue.backend import PgQueueTask, PgQueueTaskContext, options
from django_pgqueue.backend.compat import Task, TaskContext, task


def pgq(declared: Task[Any, Any]) -> PgQueueTask:
    """``declared`` as the PgQueueTask our backend made it: django-stubs types what
    ``@task`` returns as a plain Task, which knows nothing of our options."""
    assert isinstance(declared, PgQueueTask)
    return declared


@task
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task
def calculate_meaning_of_life() -> int:
    return 42


@task
async def add_async(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Returns its arguments: tuples come back as lists, as in Django."""
    return {"args": args, "kwargs": kwargs}


@task
def failing_task_value_error() -> None:
    raise ValueError("This Task failed due to ValueError")


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task
def complex_return_value() -> Any:
    return lambda: 42  # not JSON


@task
def bytes_return_value() -> bytes:
    return b"\xff"  # not UTF-8: Django's normalize_json raises ValueError


class UndecodableMapping(Mapping[str, Any]):
    """A mapping whose values are bytes decoded as read: normalize_json meets the
    UnicodeDecodeError, which takes five arguments, not a message."""

    def __getitem__(self, key: str) -> Any:
        return b"\xff".decode()

    def __iter__(self) -> Iterator[str]:
        return iter(["k"])

    def __len__(self) -> int:
        return 1


@task
def undecodable_mapping_return_value() -> Any:
    return UndecodableMapping()


@task
def deeply_nested_return_value(levels: int) -> Any:
    value: Any = [1]
    for _ in range(levels - 1):
        value = [value]
    return value  # a list, but nested past what the worker decodes


@task(queue_name="queue_1", priority=10)
def on_queue_1() -> str:
    return "queue_1"


@task(takes_context=True)
def get_task_id(context: TaskContext[Any, Any]) -> str:
    return context.task_result.id


@task(takes_context=True)
def check_context(context: TaskContext[Any, Any], attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task(takes_context=True)
def fails_until(context: TaskContext[Any, Any], failures: int) -> dict[str, Any]:
    """Fails on its first ``failures`` attempts; reports what the context said."""
    assert isinstance(context, PgQueueTaskContext)  # what a pgqueue worker passes
    if context.attempt <= failures:
        raise RuntimeError(f"planned failure on attempt {context.attempt}")
    return {
        "attempt": context.attempt,
        "max_attempts": context.max_attempts,
        "is_last_attempt": context.is_last_attempt,
        "worker_ids": context.task_result.worker_ids,
        "errors": [e.exception_class_path for e in context.task_result.errors],
    }


@task
def leaks_transaction() -> None:
    """Enters a transaction.atomic() block and never leaves it (a bug in a task)."""
    transaction.atomic().__enter__()


# -- job control ------------------------------------------------------------------------


@task(takes_context=True)
def stops_when_asked(context: TaskContext[Any, Any], seconds: float = 30.0) -> str:
    """Polls the context's ``cancel_requested``; returns when asked to stop."""
    assert isinstance(context, PgQueueTaskContext)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if context.cancel_requested:
            return "stopped"
        time.sleep(0.005)
    return "finished"


@task
async def sleeps_async(seconds: float = 30.0) -> str:
    await asyncio.sleep(seconds)
    return "finished"


@task
def snoozes_once(marker: str) -> str:
    """Snoozes on its first run (a row in testapp_run marks it), then returns."""
    from tests.testapp.tasks import record, run_counts_of

    if not run_counts_of(marker):
        record(marker)
        raise Snooze(0)
    return "woke"


@task
def cancels_itself() -> None:
    raise Cancel("the order is gone")


@task
def gives_up_late(seconds: float) -> None:
    """Works ``seconds`` (past a short job timeout), then gives up."""
    time.sleep(seconds)
    raise Cancel("gave up late")


@task
def interrupts() -> None:
    raise KeyboardInterrupt("by hand")


@task
def fails_with(error: str) -> None:
    raise ConnectionError(error) if error == "io" else ValueError(error)


# A retry policy declared with the task: every job of it keeps a copy on its row.
fails_with = options(fails_with, max_attempts=3, retry_on=(ConnectionError,))


def _send_receipt(order_id: int) -> int:
    return order_id


#: A Task bound to another name than its function's: workers look for it under
#: ``_send_receipt`` and find the plain function (enqueue refuses it).
send_receipt = task(_send_receipt)


@task
def always_snoozes() -> None:
    """Snoozes every time it runs: past PGQUEUE["MAX_SNOOZES"] its job is buried."""
    raise Snooze(0)


@task
def snoozes_after_a_stop_request() -> None:
    """Told to stop while it runs (as a worker tells a job an operator cancelled),
    then snoozes all the same: the job ends cancelled, not queued again."""
    from django_pgqueue import current_job

    job = current_job()
    assert job is not None
    job.request_cancel("the order is gone")
    raise Snooze(60)


def with_order(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that takes an order's id and passes the task the order (here a
    dict): the wrapper takes other arguments than the function it wraps."""

    @functools.wraps(func)
    def wrapper(order_id: int, *args: Any, **kwargs: Any) -> Any:
        return func({"id": order_id}, *args, **kwargs)

    return wrapper


@task
@with_order
def ship(order: dict[str, Any], express: bool = False) -> list[Any]:
    return [order["id"], express]
