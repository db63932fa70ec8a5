"""Issue 4, reviewed item by item as a user meets it: the example shop's views,
Django's Tasks API on PgQueueBackend, run by ``manage.py runworker --burst``."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import transaction
from django.test import Client

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend import options
from django_pgqueue.backend.compat import TaskResultStatus, task_backends
from django_pgqueue.models import Job
from example_project.shop.models import Order
from example_project.shop.tasks import charge_card, send_newsletter
from tests.conftest import status_counts
from tests.testapp.djtasks import add_async, echo

pytestmark = pytest.mark.django_db(transaction=True)


def burst() -> None:
    call_command("runworker", "--burst", verbosity=0)


def test_a_pending_retry_reads_ready_with_its_error_and_attempt_times() -> None:
    result = send_newsletter.enqueue(issue=7)
    Job.objects.filter(pk=result.id).update(max_attempts=3)
    call_command("runworker", "--burst", "--max-jobs", "1", verbosity=0)
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert len(result.errors) == 1
    assert "attempt 1: 421 try again later" in result.errors[0].traceback
    assert result.last_attempted_at is not None
    assert result.finished_at is None
    assert len(result.worker_ids) == 1


def test_the_always_failing_task_ends_failed_with_every_error() -> None:
    result = options(charge_card, max_attempts=2).enqueue(5)
    Job.objects.filter(pk=result.id).update(backoff=0)
    for _ in range(3):
        burst()
        Job.objects.filter(status="queued").update(run_at=Job.objects.get().created_at)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "example_project.shop.tasks.PaymentDeclined"
    ] * 2
    assert result.finished_at is not None
    assert status_counts() == {"dead": 1}


def test_aenqueue_and_aget_result_run_an_async_task() -> None:
    result = async_to_sync(add_async.aenqueue)(2, 3)
    burst()
    fetched = async_to_sync(task_backends["default"].aget_result)(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 5


def test_aenqueue_inside_a_rolled_back_block_leaves_no_job() -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        async_to_sync(echo.aenqueue)(1)
        raise Boom
    assert Job.objects.count() == 0


@pytest.mark.urls("example_project.urls")
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"total_cents": 100}, ["email"]),
        ({"email": "a@example.com", "total_cents": "lots"}, ["total_cents"]),
        ({"email": "a@example.com", "total_cents": -5}, ["total_cents"]),
        ({"email": "not an address", "total_cents": 100}, ["email"]),
    ],
)
def test_the_order_view_refuses_bad_input_with_a_client_error(
    data: dict[str, Any], expected: list[str]
) -> None:
    response = Client(raise_request_exception=False).post("/orders/", data)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == set(expected)
    assert Order.objects.count() == 0
    assert Job.objects.count() == 0
