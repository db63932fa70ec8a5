"""The first hour of a new user, a fourth pass: messages that named neither the task
nor the likely mistake. What the commands print is in
tests/worker/test_first_hour_fourth.py.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgqueue.backend.compat import InvalidTask, task
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.models import Job
from tests.testapp import djtasks
from tests.testapp.contextless import note

pytestmark = pytest.mark.django_db

CONTEXT_HINT = (
    "; its first parameter is 'context', which is passed a TaskContext only when the "
    "task is declared with @task(takes_context=True)"
)


def test_a_context_parameter_without_takes_context_is_named_at_enqueue() -> None:
    """``def note(context, text)`` declared with a bare ``@task``: the call fills
    ``context`` itself, so ``note.enqueue("hi")`` was "missing a required argument:
    'text'", though the user had passed the text."""
    with pytest.raises(InvalidJobArguments) as raised:
        note.enqueue("hi")  # type: ignore[call-arg]
    assert str(raised.value) == (
        "arguments do not match the task's signature note(context, text): missing a "
        f"required argument: 'text'{CONTEXT_HINT} (tests.testapp.contextless.note)"
    )
    assert Job.objects.count() == 0


def test_a_task_that_takes_context_is_not_told_to_take_it() -> None:
    with pytest.raises(InvalidJobArguments) as raised:
        djtasks.check_context.enqueue()  # type: ignore[call-arg]
    assert str(raised.value) == (
        "arguments do not match the task's signature check_context(context, attempt): "
        "missing a required argument: 'attempt' (tests.testapp.djtasks.check_context)"
    )


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


def test_a_queue_refused_beside_another_unknown_key_still_says_to_set_queues() -> None:
    """QUEUES left out, and an unknown key that is no QUEUES misspelt (an option
    written beside BACKEND): the message named only that key's fix, after which the
    queue was refused all the same."""
    entry = {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "MAX_ATTEMPTS": 5}
    with override_settings(TASKS={"default": entry}), pytest.raises(InvalidTask) as raised:
        djtasks.noop_task.using(queue_name="emails")
    assert str(raised.value) == (
        "Queue 'emails' is not valid for backend. Task tests.testapp.djtasks.noop_task uses "
        "it, and TASKS['default'] sets no QUEUES, so it has Django's default, ['default']: "
        "set its QUEUES to ['default', 'emails']. TASKS['default'] has unknown key(s) "
        "'MAX_ATTEMPTS' (put MAX_ATTEMPTS in TASKS['default']['OPTIONS'])."
    )


def test_an_option_written_beside_backend_is_told_to_go_in_options() -> None:
    """``TASKS = {"default": {"BACKEND": ..., "MAX_ATTEMPTS": 5}}``: E109 and enqueue
    said only "unknown key(s) 'MAX_ATTEMPTS'", a key the backend does read, in
    OPTIONS."""
    entry = {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": []}
    tasks = {"default": {**entry, "MAX_ATTEMPTS": 5, "backoff": 2}}
    with override_settings(TASKS=tasks), pytest.raises(InvalidTask) as raised:
        djtasks.noop_task.enqueue()
    assert str(raised.value) == (
        "TASKS['default'] has unknown key(s) 'MAX_ATTEMPTS', 'backoff' (put BACKOFF and "
        "MAX_ATTEMPTS in TASKS['default']['OPTIONS']) (django_pgqueue.E109)"
    )
    assert Job.objects.count() == 0
