"""The first hour of a new user, a fourth pass: messages that named neither the task
nor the likely mistake. What the commands print is in
tests/worker/test_first_hour_fourth.py.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgqueue.backend.compat import InvalidTask, task
from tests.testapp import djtasks

pytestmark = pytest.mark.django_db


def test_djangos_own_refusal_of_a_declaration_names_the_task() -> None:
    """Django's "Task takes context but does not have a first argument of 'context'."
    named no task: with many, and through E005 or a worker's start, there was no
    telling which."""
    with pytest.raises(InvalidTask) as raised:
        task(takes_context=True)(djtasks.noop_task.func)
    assert str(raised.value) == (
        "Task takes context but does not have a first argument of 'context'. "
        "(task 'tests.testapp.djtasks.noop_task')"
    )


def test_a_queue_refused_by_the_default_queues_says_queues_is_not_set() -> None:
    """QUEUES left out is Django's ["default"]: the message said "TASKS['default']
    ['QUEUES'] is ['default']", a setting the user never wrote, and "add it there"."""
    with (
        override_settings(TASKS={"default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend"}}),
        pytest.raises(InvalidTask) as raised,
    ):
        djtasks.noop_task.using(queue_name="emails")
    assert str(raised.value) == (
        "Queue 'emails' is not valid for backend. Task tests.testapp.djtasks.noop_task uses "
        "it, and TASKS['default'] sets no QUEUES, so it has Django's default, ['default']: "
        "set its QUEUES to ['default', 'emails']."
    )
