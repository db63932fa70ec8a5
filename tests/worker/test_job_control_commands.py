"""pausequeue, resumequeue, and what queuestats and prunejobs say of job control."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_pgqueue.models import Job
from tests.conftest import status_counts
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def output(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_pausequeue_and_resumequeue_say_what_they_did() -> None:
    assert output("pausequeue", "emails", "pdf") == "paused queue 'emails'\npaused queue 'pdf'\n"
    assert output("pausequeue", "emails") == "queue 'emails' was paused already\n"
    assert Job.objects.paused_queues() == ["emails", "pdf"]
    assert output("resumequeue", "emails") == "resumed queue 'emails'\n"
    assert output("resumequeue", "emails") == "queue 'emails' was not paused\n"
    assert Job.objects.paused_queues() == ["pdf"]


def test_pausing_a_queue_nothing_names_warns_with_the_likely_one() -> None:
    """A typo pauses a queue no job uses while the real one keeps running: it is
    paused all the same (a queue may be paused before its first job), with a warning."""
    out, err = io.StringIO(), io.StringIO()
    call_command("pausequeue", "emials", "emails", stdout=out, stderr=err)
    assert out.getvalue() == "paused queue 'emials'\npaused queue 'emails'\n"
    assert err.getvalue() == (
        "warning: queue 'emials' is in no TASKS['QUEUES'], is used by no registered task "
        "and no job names it (did you mean 'emails'?)\n"
    )
    assert Job.objects.paused_queues() == ["emails", "emials"]
    add.using(queue="later").enqueue(1, 1)  # a queue with a queued job is known
    err = io.StringIO()
    call_command("pausequeue", "later", stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""


def test_queuestats_shows_the_pause_and_leaves_paused_queues_out_of_the_alert() -> None:
    add.using(queue="mail").enqueue(1, 1)
    add.using(queue="pdf").enqueue(1, 2)
    Job.objects.filter(queue="mail").update(run_at=timezone.now() - dt.timedelta(hours=1))
    Job.objects.pause_queue("mail")
    data = json.loads(output("queuestats", "--json"))
    assert data["paused_queues"] == ["mail"]
    assert {(q["queue"], q["paused"]) for q in data["queues"]} == {("mail", True), ("pdf", False)}
    # The paused queue's hour-old job waits on purpose: the alert number is pdf's.
    assert data["oldest_ready_age_seconds"] < 600
    text = output("queuestats")
    assert "mail (paused)" in text
    assert "; paused queues: mail\n" in text


def test_queuestats_and_prunejobs_know_cancelled_jobs() -> None:
    job = add.enqueue(1, 1)
    Job.objects.cancel([job.pk])
    assert {
        (q["status"], q["jobs"]) for q in json.loads(output("queuestats", "--json"))["queues"]
    } == {("cancelled", 1)}
    Job.objects.filter(pk=job.pk).update(done_at=timezone.now() - dt.timedelta(days=8))
    assert output("prunejobs", "--older-than", "7d", "--status", "cancelled") == (
        "deleted 1 job (cancelled)\n"
    )
    assert status_counts() == {}


def test_prunejobs_takes_status_repeated_as_well_as_comma_separated() -> None:
    """``--status dead --status cancelled`` prunes both: the second does not replace
    the first."""
    dead, cancelled, done = add.enqueue(1, 1), add.enqueue(2, 2), add.enqueue(3, 3)
    Job.objects.filter(pk=dead.pk).update(status="dead")
    Job.objects.cancel([cancelled.pk])
    Job.objects.filter(pk=done.pk).update(status="done")
    Job.objects.update(done_at=timezone.now() - dt.timedelta(days=8))
    args = ("prunejobs", "--older-than", "7d", "--dry-run")
    assert output(*args, "--status", "dead", "--status", "cancelled,dead") == (
        "would delete 2 jobs (dead,cancelled)\n"
    )
    assert output(*args) == "would delete 3 jobs (done,dead,cancelled)\n"
    out = io.StringIO()
    call_command("prunejobs", older_than="7d", status="cancelled", stdout=out)
    assert out.getvalue() == "deleted 1 job (cancelled)\n"
    assert status_counts() == {"dead": 1, "done": 1}


def test_reapjobs_says_how_many_jobs_asked_to_stop_it_cancelled() -> None:
    import time

    add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("gone", lease=0.05)
    Job.objects.cancel([claimed.id], reason="stop")
    time.sleep(0.1)
    assert output("reapjobs") == "returned 0 jobs to the queue, buried 0, cancelled 1\n"
    assert status_counts() == {"cancelled": 1}
