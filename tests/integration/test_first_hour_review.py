"""A new user's first hour, from the built wheel: the answers that review found
missing, each pinned where the mistake is made.

``runworker --queues default`` beside a task on ``emails``: the banner listed the
task as if the worker ran it, and its jobs waited without a word.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

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
