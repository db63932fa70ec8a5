"""Issue 4 as a user meets it: Django's Tasks API on PgQueueBackend, run by
``manage.py runworker --burst``, with the example shop's tasks and ``manage.py check``.
(Issue 5, the admin, is in test_contract_admin_and_backend.py.)"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend import options
from django_pgqueue.backend.compat import (
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgqueue.models import Job
from example_project.shop.tasks import build_report, charge_card, send_newsletter
from tests.conftest import status_counts
from tests.integration.test_contract_admin_and_backend import burst, get_result
from tests.testapp.djtasks import pgq

pytestmark = pytest.mark.django_db(transaction=True)


# -- issue 4: the Tasks backend under a real worker ---------------------------------------------


@pytest.fixture
def heard() -> Iterator[list[tuple[str, str, str]]]:
    """(signal, result id, status) for every Tasks signal, as it was sent."""
    seen: list[tuple[str, str, str]] = []

    def receiver(signal: Any, sender: type, task_result: TaskResult[Any, Any], **kw: Any) -> None:
        name = {task_enqueued: "enqueued", task_started: "started", task_finished: "finished"}
        seen.append((name[signal], task_result.id, str(task_result.status)))

    for signal in (task_enqueued, task_started, task_finished):
        signal.connect(receiver)
    yield seen
    for signal in (task_enqueued, task_started, task_finished):
        signal.disconnect(receiver)


def test_the_shops_tasks_retry_die_and_succeed_under_runworker(
    heard: list[tuple[str, str, str]],
) -> None:
    newsletter = send_newsletter.enqueue(7)
    card = charge_card.enqueue(41)
    report = build_report.using(priority=5).enqueue(0.2)
    later = send_newsletter.using(run_after=timezone.now() + dt.timedelta(hours=1)).enqueue(8)
    # A burst exits when nothing is ready: bursts until the retries (0.1 s apart) are
    # spent, never the job deferred by an hour.
    deadline = time.monotonic() + 30
    while Job.objects.filter(status__in=["queued", "running"]).exclude(pk=later.id).exists():
        assert time.monotonic() < deadline, status_counts()
        burst()
    assert status_counts() == {"done": 2, "dead": 1, "queued": 1}
    assert get_result(later.id).status == TaskResultStatus.READY

    sent = async_to_sync(task_backends["default"].aget_result)(newsletter.id)
    assert (sent.status, sent.return_value, sent.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        "newsletter 7 sent on attempt 3",
        3,
    )
    assert [e.exception_class_path for e in sent.errors] == [
        "example_project.shop.tasks.MailServerBusy"
    ] * 2
    assert len(sent.worker_ids) == 3
    assert sent.enqueued_at is not None
    assert sent.started_at is not None
    assert sent.last_attempted_at is not None
    assert sent.finished_at is not None
    assert sent.enqueued_at < sent.started_at <= sent.last_attempted_at < sent.finished_at

    failed = get_result(card.id)
    assert (failed.status, failed.attempts, len(failed.errors)) == (TaskResultStatus.FAILED, 3, 3)
    assert failed.errors[-1].exception_class_path == "example_project.shop.tasks.PaymentDeclined"
    assert "card declined by the issuer" in failed.errors[-1].traceback
    assert get_result(report.id).return_value == "report built in 0.2s"

    ids = {newsletter.id: "newsletter", card.id: "card", report.id: "report", later.id: "later"}
    by_job: dict[str, list[tuple[str, str]]] = {}
    for signal, pk, status in heard:
        by_job.setdefault(ids[pk], []).append((signal, status))
    assert by_job["report"] == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]
    assert by_job["newsletter"] == [
        ("enqueued", "READY"),
        *[("started", "RUNNING"), ("finished", "FAILED")] * 2,  # this attempt's outcome
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]
    assert by_job["card"][-1] == ("finished", "FAILED")
    assert by_job["later"] == [("enqueued", "READY")]


def test_a_rolled_back_block_leaves_no_job_and_a_committed_one_reads_back() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        send_newsletter.enqueue(1)
        raise RuntimeError("rolled back")
    assert Job.objects.count() == 0
    with transaction.atomic():
        result = send_newsletter.enqueue(2)
    assert result.id == str(Job.objects.get().pk)
    assert get_result(result.id).status == TaskResultStatus.READY


@pytest.mark.parametrize("result_id", ["999999999", "abc", "", "1.5", "-1"])
def test_unknown_or_malformed_ids_raise_task_result_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(task_backends["default"].aget_result)(result_id)


def test_the_extras_read_naturally_beside_using_and_land_on_the_row() -> None:
    task = options(
        send_newsletter,
        max_attempts=5,
        unique_key="news:9",
        concurrency_key="mailer",
        backoff=12,
    ).using(priority=3)
    first, second = task.enqueue(9), task.enqueue(9)
    assert first.id == second.id  # the live unique_key returns the live job
    row = Job.objects.get()
    assert (row.max_attempts, row.unique_key, row.concurrency_key, row.backoff, row.priority) == (
        5,
        "news:9",
        "mailer",
        12,
        3,
    )
    using = pgq(send_newsletter).using(max_attempts=2, unique_key="news:10").enqueue(10)
    assert Job.objects.get(pk=int(using.id)).max_attempts == 2


def test_options_in_settings_set_max_attempts_and_backoff() -> None:
    tasks = {
        "default": {
            "BACKEND": "django_pgqueue.backend.PgQueueBackend",
            "QUEUES": ["default", "emails", "payments", "reports"],
            "OPTIONS": {"MAX_ATTEMPTS": 4, "BACKOFF": 7},
        }
    }
    with override_settings(TASKS=tasks):
        charge_card.enqueue(1)
    row = Job.objects.get()
    assert (row.max_attempts, row.backoff) == (4, 7)


def test_the_long_report_outlives_its_lease_on_heartbeats_under_a_reaper() -> None:
    report = build_report.enqueue(2.5)
    settings = {"BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2, "LEASE": 1, "REAP_INTERVAL": 0.2}
    with override_settings(PGQUEUE=settings):
        burst()
    row = Job.objects.get()
    assert (row.status, row.attempts, len(row.worker_ids), row.errors) == ("done", 1, 1, [])
    assert get_result(report.id).return_value == "report built in 2.5s"


def check_errors() -> list[str]:
    """``manage.py check``'s errors of django-pgqueue, as their ids."""
    with pytest.raises(SystemCheckError) as raised:
        call_command("check", verbosity=0)
    return sorted(set(re.findall(r"\(django_pgqueue\.(E\d+)\)", str(raised.value))))


def test_manage_py_check_reports_unknown_options_and_the_app_missing() -> None:
    entry = settings.TASKS["default"]
    tasks = {"default": {**entry, "OPTIONS": {"RETRIES": 2, "MAX_ATTEMPTS": 0, "BACKOFF": -1}}}
    with override_settings(TASKS=tasks):
        assert check_errors() == ["E103", "E104", "E107"]
    apps = [app for app in settings.INSTALLED_APPS if app != "django_pgqueue"]
    with override_settings(INSTALLED_APPS=apps):
        assert "E101" in check_errors()
    call_command("check", verbosity=0)  # and the suite's own settings pass


def test_aenqueue_called_from_sync_code_joins_its_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        result = async_to_sync(send_newsletter.aenqueue)(3)
        assert Job.objects.filter(pk=int(result.id)).exists()
        raise RuntimeError("rolled back")
    assert Job.objects.count() == 0
