"""Did-you-means that named the wrong thing. The rule for a settings key written with
a word added (``LEASE_SECONDS`` for ``LEASE``) ran wherever a name is matched: on a
task's name (``mark_done`` told it meant ``mark``, another task), a keyword argument
(``b_value`` told it meant ``b``, passed already) and a DATABASES alias
(``default_replica`` told it meant ``default``, where jobs would go to the wrong
database); and a PGQUEUE setting written in a TASKS entry or its OPTIONS
(``BACKOFF_MAX``, ``BACKOFF_JITTER``) was told to be ``BACKOFF``, the first retry's
delay, which would set a delay of 0.5 s, or 600 s, instead of a jitter or a cap.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import django_pgqueue
from django_pgqueue.backend import PgQueueBackend
from django_pgqueue.backend.compat import InvalidTask
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments
from django_pgqueue.models import Job
from django_pgqueue.sql import runner
from tests.testapp import djtasks
from tests.testapp.tasks import add, mark

pytestmark = pytest.mark.django_db


def test_a_task_name_with_a_word_added_is_not_told_it_meant_another_task() -> None:
    """``mark_done`` (a task this worker's code may not have yet) is not ``mark``."""
    with pytest.raises(InvalidJob) as raised:
        django_pgqueue.enqueue("tests.testapp.tasks.mark_done")
    assert str(raised.value) == "'tests.testapp.tasks.mark_done' is not a registered task"
    with pytest.raises(InvalidJob) as typo:  # a typo still is
        django_pgqueue.enqueue("tests.testapp.tasks.mrak")
    assert str(typo.value).endswith("(did you mean 'tests.testapp.tasks.mark'?)")
    assert Job.objects.count() == 0


def test_a_keyword_argument_is_not_told_it_meant_one_passed_already() -> None:
    with pytest.raises(InvalidJobArguments) as added:
        add.enqueue(1, 2, b_value=3)  # type: ignore[call-arg]
    assert "did you mean" not in str(added.value), str(added.value)
    with pytest.raises(InvalidJobArguments) as passed:  # 'label' is the "x"
        mark.enqueue("x", labl="y")  # type: ignore[call-arg]
    assert "did you mean" not in str(passed.value), str(passed.value)
    with pytest.raises(InvalidJobArguments) as typo:  # not passed: the typo meant it
        mark.enqueue(labl="y")  # type: ignore[call-arg]
    assert str(typo.value).startswith(
        "arguments do not match the task's signature mark(label, sleep=0.0): got an "
        "unexpected keyword argument 'labl' (did you mean 'label'?)"
    )
    assert Job.objects.count() == 0


def test_a_database_alias_with_a_word_added_is_not_told_it_meant_another() -> None:
    """``default_replica``, not yet in DATABASES, is not the ``default`` that holds the
    app's own tables: jobs written there would wait for workers that never look."""
    with override_settings(PGQUEUE={"DATABASE": "default_replica"}):
        said = str(runner.missing_database("default_replica"))
    assert "did you mean" not in said, said


def tasks_with(**entry: Any) -> dict[str, Any]:
    return {"default": {**settings.TASKS["default"], **entry}}


def test_a_pgqueue_setting_beside_backend_is_not_told_to_be_backoff() -> None:
    with (
        override_settings(TASKS=tasks_with(BACKOFF_MAX=600, BACKOFF_JITTER=0.5)),
        pytest.raises(InvalidTask) as raised,
    ):
        djtasks.noop_task.enqueue()
    assert str(raised.value) == (
        "TASKS['default'] has unknown key(s) 'BACKOFF_JITTER', 'BACKOFF_MAX' (PGQUEUE "
        "settings, for every backend: set PGQUEUE['BACKOFF_JITTER'] and "
        "PGQUEUE['BACKOFF_MAX'] instead) (django_pgqueue.E109)"
    )
    assert Job.objects.count() == 0


def test_a_pgqueue_setting_in_options_is_not_told_to_be_backoff() -> None:
    options = {"BACKOFF_JITTER": 0.5, "backoff_max": 600, "RETRIES": 2}
    with override_settings(TASKS=tasks_with(OPTIONS=options)), pytest.raises(InvalidTask) as raised:
        djtasks.noop_task.enqueue()
    assert str(raised.value) == (
        "TASKS['default']['OPTIONS'] has unknown key(s) 'BACKOFF_JITTER', 'RETRIES', "
        "'backoff_max' (PGQUEUE settings, for every backend: set PGQUEUE['BACKOFF_JITTER'] "
        "and PGQUEUE['BACKOFF_MAX'] instead): PgQueueBackend reads BACKOFF, MAX_ATTEMPTS "
        "(django_pgqueue.E103)"
    )
    backend = PgQueueBackend("pgq", {"BACKEND": "x", "OPTIONS": {"BACKOFF_JITTER": 0.5}})
    assert [m.msg for m in backend.check() if m.id == "django_pgqueue.E103"] == [
        "TASKS['pgq']['OPTIONS'] has unknown key(s) 'BACKOFF_JITTER' (a PGQUEUE setting, "
        "for every backend: set PGQUEUE['BACKOFF_JITTER'] instead)."
    ]


def test_what_the_word_added_rule_is_for_still_holds() -> None:
    """Settings keys (LEASE_SECONDS is LEASE, in tests/unit/test_conf.py): an option
    written beside BACKEND goes in OPTIONS, BACKOFF_BASE as the backend's BACKOFF."""
    with (
        override_settings(TASKS=tasks_with(MAX_ATTEMPTS_PER_JOB=5, BACKOFF_BASE=2)),
        pytest.raises(InvalidTask) as raised,
    ):
        djtasks.noop_task.enqueue()
    assert str(raised.value) == (
        "TASKS['default'] has unknown key(s) 'BACKOFF_BASE', 'MAX_ATTEMPTS_PER_JOB' (put "
        "BACKOFF and MAX_ATTEMPTS in TASKS['default']['OPTIONS']) (django_pgqueue.E109)"
    )
