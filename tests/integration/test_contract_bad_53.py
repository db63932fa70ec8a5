"""Rows planted by hand with values the table's constraints allow but the code
may not expect, run through a real worker (issues 10 and 13: nothing is lost, one
bad row never stops the others, and bad input is never buried later for the
queue's own reasons). What test_bad_input.py, test_contract_first_hour*.py and
test_contract_core*.py left unpinned."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_pgqueue.backend.compat import task_backends
from django_pgqueue.models import Job
from tests.testapp import djtasks
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)


def _plant_errors(history: str) -> int:
    """A Tasks-framework job whose error history is ``history`` (JSON), written by hand."""
    job_id = int(djtasks.echo.enqueue(1).id)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_job SET errors = %s::jsonb WHERE id = %s", [history, job_id])
    return job_id


def test_an_error_history_entry_of_an_odd_shape_never_fails_a_tasks_job(db_url: str) -> None:
    """The history is reported to the task (its TaskResult's errors) before it runs:
    a cancellation entry whose traceback was a list or a number made every run
    fail with AttributeError from the queue's own code, before the task started,
    until the job was buried dead; get_result() raised the same."""
    odd = {
        "cancel_list": '[{"exception": "Cancelled", "traceback": ["x"], "message": 3}]',
        "cancel_number": '[{"exception": "Cancelled", "traceback": 5}]',
        "failure_number": '[{"exception": 7, "traceback": 5, "message": null}]',
        "failure_message": '[{"exception": "ValueError", "traceback": false, "message": [1]}]',
    }
    ids = {name: _plant_errors(history) for name, history in odd.items()}
    good = int(djtasks.echo.enqueue(2).id)

    done = django_command(db_url, "runworker", "--burst")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "AttributeError" not in done.stdout + done.stderr
    rows = dict(Job.objects.values_list("id", "status"))
    assert rows == {**dict.fromkeys(ids.values(), "done"), good: "done"}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    backend = task_backends["default"]
    shown = {
        name: [(e.exception_class_path, e.traceback) for e in backend.get_result(str(i)).errors]
        for name, i in ids.items()
    }
    assert shown == {
        "cancel_list": [("django_pgqueue.control.Cancel", "['x']\nCancelled: 3\n")],
        "cancel_number": [("django_pgqueue.control.Cancel", "5\nCancelled: \n")],
        "failure_number": [("7", "5")],
        "failure_message": [("builtins.ValueError", "ValueError: [1]\n")],
    }
    assert json.loads(json.dumps(shown))  # every traceback is text
