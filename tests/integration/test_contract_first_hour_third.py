"""A new user's first hour, a third pass: the quick start, tasks and backend pages
followed as written on a fresh project, and the mistakes made on the way, each
answered where it is made.

What tests/integration/test_first_hour.py, test_contract_first_hour_more.py and
tests/worker/test_*first_hour.py left unpinned: a Tasks-framework task called as
a function (as the direct API's is); a typo in a ``runworker`` flag; the console
lines of a task whose return value is not JSON.
"""

from __future__ import annotations

import re

import pytest

from django_pgqueue.models import Job
from tests.testapp import djtasks

pytestmark = pytest.mark.django_db

#: The first line of a log record in the worker's own console format.
STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) ")


# -- a Tasks-framework task called as a function ----------------------------------------------


def test_calling_a_tasks_framework_task_says_to_use_call_or_enqueue() -> None:
    """tasks.md says calling a task runs it (the direct API's); a user who then calls
    a django.tasks one got Python's bare "'PgQueueTask' object is not callable"."""
    with pytest.raises(TypeError) as raised:
        djtasks.echo(1, k="v")  # type: ignore[operator]
    assert str(raised.value) == (
        "tests.testapp.djtasks.echo is a django.tasks Task, which is not called "
        "directly: run it here with .call(...) (as in a unit test of its body), or "
        "queue it with .enqueue(...)"
    )
    assert djtasks.echo.call(1, k="v") == {"args": (1,), "kwargs": {"k": "v"}}
    assert Job.objects.count() == 0
