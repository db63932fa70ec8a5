"""Rows written by hand (SQL) run by a real ``runworker --burst``: a retry policy the
worker cannot read, and names holding control characters, never make it do the
wrong thing."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection

from django_pgqueue.backend.task import PgQueueTask
from django_pgqueue.models import Job
from tests.testapp import djtasks
from tests.testapp.tasks import retries_io_only
from tests.worker.conftest import django_command
from tests.worker.planted import outcome, plant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def burst(db_url: str) -> str:
    done = django_command(db_url, "runworker", "--burst", "--no-listen", "--concurrency", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


NESTED = "[" * 3000 + "]" * 3000  # past what Python 3.12's JSON decoder reads

#: Policies no worker can read, each with the words its warning gives.
UNREADABLE = {
    "number": ('{"retry_on": 3, "discard_on": []}', "retry_on is not a list of exception paths"),
    "not_an_object": ('["builtins.ValueError"]', "not a JSON object"),
    "not_names": ('{"retry_on": [["builtins.ValueError"]], "discard_on": []}', "retry_on is"),
    "discard_not_a_list": ('{"retry_on": null, "discard_on": 7}', "discard_on is not a list"),
    "not_a_dotted_path": ('{"retry_on": ["ValueError"], "discard_on": []}', "'ValueError'"),
    "control_characters": ('{"retry_on": ["a.b\\nc"], "discard_on": []}', "'a.b\\nc'"),
    "nested": ('{"retry_on": ' + NESTED + "}", "nested too deep"),
    "huge": (
        json.dumps({"retry_on": [f"m{i}.Error" for i in range(20_000)], "discard_on": []}),
        "longer than 65536 characters",
    ),
}


@pytest.mark.parametrize("planted", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_an_unreadable_retry_policy_falls_back_to_the_tasks_own(
    db_url: str, planted: tuple[str, str]
) -> None:
    """It fell back to "retry every exception": a job of a task declared
    ``retry_on=(ConnectionError,)`` was retried after a ValueError. Now the task's
    declared policy decides (a ValueError buries the job at once, a ConnectionError
    is retried), for the direct API and the Tasks path alike, with a warning naming
    the job and why."""
    policy, why = planted
    direct = retries_io_only.path
    tasks_path = djtasks.fails_with.module_path
    buried = plant(direct, ["p-buried", "value"], retry_policy=policy)
    retried = plant(direct, ["p-retried", "io"], retry_policy=policy, backoff=3600)
    buried_tasks = plant(tasks_path, ["value"], retry_policy=policy)
    retried_tasks = plant(tasks_path, ["io"], retry_policy=policy, backoff=3600)
    output = burst(db_url)
    assert outcome(buried) == ("dead", 1, "ValueError"), output
    assert outcome(retried) == ("queued", 1, "ConnectionError"), output
    assert outcome(buried_tasks) == ("dead", 1, "ValueError"), output
    assert outcome(retried_tasks) == ("queued", 1, "ConnectionError"), output
    for job_id, task in [
        (buried, direct),
        (retried, direct),
        (buried_tasks, tasks_path),
        (retried_tasks, tasks_path),
    ]:
        line = next(
            (
                line
                for line in output.splitlines()
                if line.startswith(f"job {job_id} ({task}): its retry_policy cannot be read (")
            ),
            None,
        )
        assert line is not None, output
        assert why in line, line
        assert line.endswith("): its task's own policy applies"), line
        assert output.count(f"job {job_id} ({task}): its retry_policy") == 1, output


def test_the_tasks_result_shows_the_tasks_own_policy_for_an_unreadable_one() -> None:
    """``get_result()`` (and so a running job's TaskResult) gave the default policy
    (``retry_on`` None) for a row whose policy cannot be read, not the one the worker
    applies."""
    job_id = plant(djtasks.fails_with.module_path, ["value"], retry_policy='{"retry_on": 3}')
    task = djtasks.fails_with.get_result(str(job_id)).task
    assert isinstance(task, PgQueueTask)
    assert (task.retry_on, task.discard_on) == ((ConnectionError,), ())
    assert Job.objects.get(pk=job_id).retry_policy == {"retry_on": 3}


FORGED = "\n2026-01-01 00:00:00,000 ERROR job 1 (shop.tasks.pay) forged by a row"


def test_a_name_written_by_hand_cannot_forge_a_log_line(db_url: str) -> None:
    """A task name, an exception message made of the job's arguments or a lease
    holder written into a row with a line break printed a whole extra line: each
    row value a text line prints is shown as its repr once it holds a control
    character (ordinary ones print as they are)."""
    unknown = plant("tests.testapp.tasks.nope" + FORGED, [])
    failing = plant("tests.testapp.tasks.always_fails", ["x" + FORGED], max_attempts=1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, status, attempts, max_attempts, locked_until, "
            "locked_by, started_at) VALUES (%s, 'running', 1, 1, now() - interval '1 hour', "
            "%s, now()) RETURNING id",
            ["tests.testapp.tasks.noop\rx" + FORGED, "w-1" + FORGED],
        )
        (reaped,) = cursor.fetchone()
    output = burst(db_url)  # whose reaper buries the run planted expired
    lines = output.splitlines()
    # A line of its own only in the traceback (exc_info) of the task's own exception.
    after = [lines[i - 1] for i, line in enumerate(lines) if line.startswith(FORGED[1:])]
    assert after == ["ValueError: x"], output
    shown = repr("tests.testapp.tasks.nope" + FORGED)
    assert f"job {unknown} ({shown}) buried dead: it cannot succeed by retrying: " in output
    message = repr(f"x{FORGED}: this task always fails")
    assert (
        f"job {failing} (tests.testapp.tasks.always_fails) buried dead after attempt 1 of 1: "
        f"ValueError: {message}\n" in output
    ), output
    assert (
        f"job {reaped} ({'tests.testapp.tasks.noop\rx' + FORGED!r}) buried dead after attempt 1 "
        f"of 1: LeaseExpired: the lease expired: worker {'w-1' + FORGED!r} stopped renewing it"
        in output
    ), output
    assert [outcome(j)[0] for j in (unknown, failing, reaped)] == ["dead", "dead", "dead"]


def test_a_queue_name_written_by_hand_cannot_forge_a_health_check_line(db_url: str) -> None:
    """``queuestats --check`` printed a row's queue name as it was: a line break in it
    printed a line of the row's choosing (``ok``, what the check prints when healthy)."""
    plant("tests.testapp.tasks.add", [1, 2], queue="q\nok")
    done = django_command(db_url, "queuestats", "--check")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.fullmatch(
        r"queue 'q\\nok': jobs are ready \(the oldest waiting [0-9.]+s\) and no live worker "
        r"serves it\n",
        done.stdout,
    ), done.stdout
    table = django_command(db_url, "queuestats")
    assert "\n'q\\nok'              queued" in table.stdout, table.stdout
    assert "\nok" not in table.stdout, table.stdout
