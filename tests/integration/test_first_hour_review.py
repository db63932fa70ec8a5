"""A new user's first hour, from the built wheel: the answers that review found
missing, each pinned where the mistake is made.

``runworker --queues default`` beside a task on ``emails``: the banner listed the
task as if the worker ran it, and its jobs waited without a word. A task renamed
while jobs of its old name were queued: they were buried as "'shop.tasks.old' is
not a registered task", with nothing saying why or what to do.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from django_pgqueue.worker.banner import banner
from django_pgqueue.worker.config import WorkerConfig
from tests.conftest import status_counts
from tests.testapp.tasks import add

NOT_SERVED = "  . tests.testapp.tasks.add  (queue default, which this worker does not serve)\n"


@pytest.mark.django_db(transaction=True)
def test_the_banner_marks_a_task_whose_queue_the_worker_does_not_serve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waiting = add.enqueue(1, 2)  # queue "default"
    call_command("runworker", "--burst", "--no-listen", "--queues", "emails")
    output = "\n".join(caplog.messages) + "\n"
    assert "[queues]\n  . emails\n[tasks] " in output
    assert NOT_SERVED in output, output
    assert status_counts() == {"queued": 1}  # what the note warns of
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempts) == ("queued", 0)


def test_a_task_on_a_served_queue_or_every_queue_has_no_note() -> None:
    served = "  . tests.testapp.tasks.add  (queue default)"
    for queues in (None, ["default"], ["emails", "default"]):
        lines = banner(WorkerConfig.from_settings(queues=queues)).splitlines()
        assert served in lines, (queues, lines)
    lines = banner(WorkerConfig.from_settings(queues=["emails"])).splitlines()
    assert NOT_SERVED.rstrip("\n") in lines
    assert served not in lines


@pytest.mark.django_db
def test_a_job_of_a_renamed_task_is_buried_saying_why_and_how_to_keep_the_old_path() -> None:
    old = add.enqueue(2, 3).id  # queued as add_numbers, the name add had before a rename
    Job.objects.filter(pk=old).update(task="tests.testapp.tasks.add_numbers")
    ran = run_jobs()
    assert (ran.done, ran.dead) == ([], [old])
    buried = Job.objects.get(pk=old)
    assert (buried.status, buried.attempts) == ("dead", 1)
    assert buried.last_error == (
        "django_pgqueue.exceptions.UnknownTask: 'tests.testapp.tasks.add_numbers' is not "
        "a registered task: 'tests.testapp.tasks' holds nothing by that name. Renamed or "
        "removed since the job was enqueued? Keep a task at the old path until its queued "
        "jobs have run (`@task(name='tests.testapp.tasks.add_numbers')` with "
        "django_pgqueue.task, `add_numbers = <the task>` in 'tests.testapp.tasks' with "
        "django.tasks)"
    )
    # A path whose module holds something by that name, not a task, keeps its message.
    other = add.enqueue(1, 1).id
    Job.objects.filter(pk=other).update(task="tests.testapp.tasks.record")
    assert run_jobs().dead == [other]
    assert Job.objects.get(pk=other).last_error == (
        "django_pgqueue.exceptions.UnknownTask: 'tests.testapp.tasks.record' is not a "
        "registered task"
    )
