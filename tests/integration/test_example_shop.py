"""The example shop's views: the order and its job commit together, or neither does."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from django_pgqueue.models import Job
from example_project.shop.models import Order
from tests.conftest import status_counts

pytest.importorskip("django_pgqueue.backend", exc_type=ImportError)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("example_project.urls")]


def test_an_order_commits_with_its_confirmation_job_and_the_worker_confirms_it() -> None:
    response = Client().post("/orders/", {"email": "a@example.com", "total_cents": 1250})
    assert response.status_code == 201
    order = Order.objects.get()
    job = Job.objects.get()
    assert response.json() == {"order": order.pk, "job": str(job.pk)}
    assert (job.task, job.args, job.queue) == (
        "example_project.shop.tasks.send_confirmation",
        [order.pk],
        "emails",
    )

    call_command("runworker", "--burst", verbosity=0)
    order.refresh_from_db()
    assert order.confirmed_at is not None
    assert status_counts() == {"done": 1}
    assert Job.objects.get().result == f"confirmation sent for order {order.pk}"


@override_settings(LOGGING_CONFIG=None)
def test_a_view_that_fails_after_enqueueing_leaves_no_order_and_no_job() -> None:
    response = Client().post("/orders/fail/", {"email": "b@example.com"})
    assert response.status_code == 409
    assert response.json() == {"error": "the last item was sold a moment ago"}
    assert Order.objects.count() == 0
    assert Job.objects.count() == 0


def test_the_example_serves_the_queue_gauges_to_prometheus() -> None:
    Client().post("/orders/", {"email": "c@example.com", "total_cents": 100})
    response = Client().get("/pgqueue/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert 'pgqueue_queue_jobs{queue="emails",status="queued"} 1.0' in response.content.decode()
