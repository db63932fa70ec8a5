"""The web tier's metrics view: the queue gauges, from the shared snapshot."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_pgqueue.models import Job, QueueGauge
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def gauges(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_view_serves_every_queue_and_status_with_the_oldest_ready_age() -> None:
    add.using(queue="mail").enqueue(1, 1)
    add.using(queue="mail").enqueue(1, 2)
    add.using(queue="pdf").enqueue(1, 3)
    Job.objects.claim("w", queues=["pdf"])
    response = Client().get(reverse("django_pgqueue:metrics"))
    assert response.status_code == 200
    found = gauges(response.content.decode())
    assert found[("pgqueue_queue_jobs", (("queue", "mail"), ("status", "queued")))] == 2
    assert found[("pgqueue_queue_jobs", (("queue", "pdf"), ("status", "running")))] == 1
    # Every status of a known queue, 0 when it has none: a drained backlog reads 0.
    for status in ("queued", "done", "dead", "cancelled"):
        assert found[("pgqueue_queue_jobs", (("queue", "pdf"), ("status", status)))] == 0
    assert found[("pgqueue_queue_oldest_ready_age_seconds", (("queue", "mail"),))] >= 0
    assert found[("pgqueue_queue_oldest_ready_age_seconds", (("queue", "pdf"),))] == 0
    assert found[("pgqueue_queue_gauges_age_seconds", ())] == 0
    assert QueueGauge.objects.count() == 2  # the snapshot others read


def test_a_second_scrape_serves_the_same_numbers() -> None:
    add.using(queue="mail").enqueue(1, 1)
    Job.objects.filter(pk=add.using(queue="mail").enqueue(1, 2).pk).update(status="done")
    scrapes = [
        gauges(Client().get(reverse("django_pgqueue:metrics")).content.decode()) for _ in range(2)
    ]
    for found in scrapes:  # the second reads the snapshot, and adds nothing to it
        assert found[("pgqueue_queue_jobs", (("queue", "mail"), ("status", "done")))] == 1
        assert found[("pgqueue_queue_jobs", (("queue", "mail"), ("status", "queued")))] == 1


def test_the_view_says_which_queues_are_paused() -> None:
    add.using(queue="mail").enqueue(1, 1)
    add.using(queue="pdf").enqueue(1, 2)
    Job.objects.pause_queue("mail")
    Job.objects.pause_queue("empty")  # paused before it has any job
    found = gauges(Client().get(reverse("django_pgqueue:metrics")).content.decode())
    assert {
        labels[0][1]: value
        for (name, labels), value in found.items()
        if name == "pgqueue_queue_paused"
    } == {"mail": 1, "pdf": 0, "empty": 1}
    Job.objects.resume_queue("mail")
    found = gauges(Client().get(reverse("django_pgqueue:metrics")).content.decode())
    assert found[("pgqueue_queue_paused", (("queue", "mail"),))] == 0


def test_openmetrics_when_asked_for_and_only_get() -> None:
    add.enqueue(1, 1)
    client = Client()
    response = client.get("/pgqueue/metrics", HTTP_ACCEPT="application/openmetrics-text")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().endswith("# EOF\n")
    assert client.post("/pgqueue/metrics").status_code == 405


def test_head_is_answered_as_get_is() -> None:
    # HTTP's servers must take HEAD as they take GET (RFC 9110, 9.1), as the
    # worker's own /metrics does: an uptime check that sends HEAD is not refused.
    response = Client().head("/pgqueue/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
