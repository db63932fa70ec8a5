"""A paused queue whose name today's rule refuses (a pause written by an older version
or by hand) is resumed by ``resumequeue``, ``Job.objects.resume_queue()`` and the
admin's Resume: SQL was the only way. A refused name that is not paused is refused
as before, and pausing keeps refusing it."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job, Queue
from tests.integration.test_admin import URL
from tests.integration.test_admin_job_control import PAUSE, RESUME, messages, staff
from tests.testapp.tasks import add
from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = "a queue name (1-64 letters, digits, _ . : -)"


def paused_by_hand(*names: str) -> None:
    Queue.objects.bulk_create(Queue(name=name, paused_at=timezone.now()) for name in names)


def test_the_api_resumes_a_paused_queue_whatever_its_name() -> None:
    paused_by_hand("old queue", "emails/eu")
    assert Job.objects.resume_queue("old queue") is True
    assert Job.objects.resume_queue("emails/eu") is True
    assert Job.objects.paused_queues() == []
    # No longer paused: refused as before, as pause_queue() refuses it.
    for call in (Job.objects.resume_queue, Job.objects.pause_queue):
        with pytest.raises(InvalidJob) as refused:
            call("old queue")
        assert str(refused.value) == f"queue 'old queue' is not a valid {EXPECTED[2:]}"
    with pytest.raises(InvalidJob):
        Job.objects.resume_queue("x" * 65)  # longer than any name the table holds
    with pytest.raises(InvalidJob):
        Job.objects.resume_queue("nul\x00")
    assert Job.objects.paused_queues() == []


def test_resumequeue_resumes_a_paused_queue_whatever_its_name(db_url: str) -> None:
    paused_by_hand("emails/eu", "default")
    done = django_command(db_url, "resumequeue", "emails/eu")
    assert (done.returncode, done.stdout, done.stderr) == (0, "resumed queue 'emails/eu'\n", "")
    assert Job.objects.paused_queues() == ["default"]


def test_resumequeue_refuses_a_bad_name_that_is_not_paused_before_resuming_any(
    db_url: str,
) -> None:
    paused_by_hand("default")
    Queue.objects.create(name="emails/eu")  # a row, resumed already
    for bad in ("emails/eu", "x y"):
        done = django_command(db_url, "resumequeue", "default", bad)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            f"CommandError: resumequeue: argument NAME: expected {EXPECTED}, got {bad!r}\n"
        )
    assert Job.objects.paused_queues() == ["default"]
    done = django_command(db_url, "pausequeue", "emails/eu")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"CommandError: pausequeue: argument NAME: expected {EXPECTED}, got 'emails/eu'\n"
    )


def test_the_admin_resumes_a_paused_queue_whatever_its_name() -> None:
    add.enqueue(1, 1)
    paused_by_hand("old queue")
    operator = staff("operator", "view_job", "pause_queue")
    page = operator.get(URL).content.decode()
    assert 'action="/admin/django_pgqueue/job/queues/old%20queue/resume/"' in page
    assert operator.post(PAUSE.format("old queue")).status_code == 404
    response = operator.post(RESUME.format("old queue"), follow=True)
    assert messages(response) == ["Resumed queue 'old queue'."]
    assert Job.objects.paused_queues() == []
    assert "queues/old%20queue/" not in response.content.decode()  # no button any more
    assert operator.post(RESUME.format("old queue")).status_code == 404
