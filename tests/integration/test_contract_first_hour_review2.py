"""A new user's first hour, a second review of issue 13's list: the mistakes it
names, driven again as a user makes them, and the one still answered unclearly.

The bulk call of the Tasks API, ``django_pgqueue.backend.enqueue_many``, given a
task of the direct API (declared with ``@django_pgqueue.task``, so "a function
declared with @task" to its author) said only that it takes "a function declared
with @task": what the user had done. It now says which ``@task``, and where the
direct API's bulk call is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from django_pgqueue import InvalidJobArguments
from django_pgqueue.backend import call, enqueue_many
from django_pgqueue.models import Job
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db


def test_enqueue_many_of_a_direct_api_task_names_the_direct_apis_bulk_call() -> None:
    with pytest.raises(TypeError) as raised:
        enqueue_many(add, [call(1, 2)])  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"enqueue_many() takes a Task (a function declared with @task from django.tasks), "
        f"not {add!r}: this is a django_pgqueue task, whose jobs are enqueued in bulk with "
        "Job.objects.enqueue_many([JobSpec.build(task, args, kwargs), ...])"
    )
    assert Job.objects.count() == 0


def test_enqueue_many_of_a_plain_function_says_to_declare_it() -> None:
    func = djtasks.noop_task.func
    with pytest.raises(TypeError) as raised:
        enqueue_many(func, [call()])  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"enqueue_many() takes a Task (a function declared with @task from django.tasks), "
        f"not {func!r}: decorate the function with @task from django.tasks first"
    )
    with pytest.raises(TypeError) as raised:
        enqueue_many(3, [call()])  # type: ignore[arg-type]
    assert str(raised.value) == (
        "enqueue_many() takes a Task (a function declared with @task from django.tasks), not 3"
    )
    assert Job.objects.count() == 0


# -- issue 13, items 1 and 5: answered at enqueue, on both APIs, in bulk too -----------------


def test_wrong_and_non_json_arguments_are_refused_at_enqueue_on_every_path() -> None:
    """Item 1 (a call that does not fit the signature) and item 5 (non-JSON, named,
    a TypeError) through the single and the bulk calls of both APIs: nothing written."""
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    refusals: list[Callable[[], Any]] = [
        lambda: add.enqueue(1, 2, 3),  # type: ignore[call-arg]
        lambda: djtasks.calculate_meaning_of_life.enqueue(1),  # type: ignore[call-arg]
        lambda: enqueue_many(djtasks.calculate_meaning_of_life, [call(1)]),
        lambda: add.enqueue(when, 1),  # type: ignore[arg-type]
        lambda: djtasks.echo.enqueue(when),
        lambda: enqueue_many(djtasks.echo, [call(k=when)]),
    ]
    messages = []
    for refuse in refusals:
        with pytest.raises(InvalidJobArguments) as raised:
            refuse()
        assert isinstance(raised.value, TypeError)
        messages.append(str(raised.value))
    assert messages[0].startswith("arguments do not match the task's signature add(a, b): ")
    assert messages[1].startswith(
        "arguments do not match the task's signature calculate_meaning_of_life(): "
    )
    assert messages[2].startswith("calls[0] of enqueue_many: arguments do not match ")
    assert messages[3].startswith("args[0] is datetime.datetime ")
    assert "which is not JSON; pass only str, int" in messages[4]
    assert messages[5].startswith("calls[0] of enqueue_many: kwargs['k'] is datetime.datetime ")
    assert status_counts() == {}
