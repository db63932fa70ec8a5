"""A differential contract of the Tasks backend (issues 4 and 12): the same task code
and the same calls on ``PgQueueBackend`` and on Django's own backends
(``ImmediateBackend``, ``DummyBackend``), comparing what a user observes. Where the
two differ on purpose, the test says so and docs/backend.md documents it.

Django's ``ImmediateBackend`` runs a task inside ``enqueue()``; here the same task is
enqueued on our backend and run by the worker's own code (``run_jobs()``, or a real
``runworker --burst`` subprocess), then read back with ``refresh()``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_pgqueue.backend.compat import InvalidTask
from tests.testapp import djtasks

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ["default", "queue_1", "emails", "payments", "reports"]
TASKS = {
    "default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": QUEUES},
    "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": QUEUES},
    "dummy": {"BACKEND": "django.tasks.backends.dummy.DummyBackend", "QUEUES": QUEUES},
}
REFERENCES = ("immediate", "dummy")


@pytest.fixture(autouse=True)
def three_backends() -> Iterator[None]:
    """Our backend as "default" beside Django's two, every failure final (the reference
    backends never retry)."""
    pgqueue = {"BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2, "LEASE": 30, "MAX_ATTEMPTS": 1}
    with override_settings(TASKS=TASKS, PGQUEUE=pgqueue):
        yield


def test_the_queue_name_check_reads_the_same_on_every_backend() -> None:
    for alias in ("default", *REFERENCES):
        with pytest.raises(InvalidTask, match=r"^Queue 'nope' is not valid for backend\."):
            djtasks.noop_task.using(backend=alias, queue_name="nope")


def test_a_queue_name_no_queue_can_have_is_not_to_be_added_to_queues() -> None:
    """Not listed and not a valid name: adding it to QUEUES, as the message said, only
    traded this error for E105 and then for enqueue's "not a valid queue name"."""
    with pytest.raises(InvalidTask) as caught:
        djtasks.noop_task.using(queue_name="bad name!")
    assert str(caught.value) == (
        "Queue 'bad name!' is not valid for backend. Task tests.testapp.djtasks.noop_task "
        "uses it, and TASKS['default']['QUEUES'] is ['default', 'emails', 'payments', "
        "'queue_1', 'reports']: rename it: queue 'bad name!' is not a valid queue name "
        "(1-64 letters, digits, _ . : -)."
    )
    with pytest.raises(InvalidTask) as typo:
        djtasks.noop_task.using(queue_name="emails ")
    assert str(typo.value).endswith(
        "did you mean 'emails'? If not, rename it: queue 'emails ' is not a valid queue "
        "name (1-64 letters, digits, _ . : -)."
    )
