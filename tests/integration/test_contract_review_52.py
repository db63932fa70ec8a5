"""Review of the stop merged after ff55c27: defects reproduced in what it changed."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from django.db import IntegrityError, connection
from django.template import Context, Template
from django.test import Client, override_settings
from prometheus_client.core import GaugeMetricFamily

from django_pgqueue.models import Job
from django_pgqueue.monitoring import exporter
from tests.integration.migrating import migrate
from tests.integration.test_contract_security import JOBS, plant
from tests.integration.test_contract_upgrade import _latest, back_to_latest  # noqa: F401
from tests.testapp import djtasks
from tests.worker.test_exporter import exported


def test_a_tasks_framework_task_passed_to_a_template_renders_as_before() -> None:
    # Django's templates call what is callable: a Task that raised TypeError when
    # called (briefly, this stop) failed the whole page. It is not callable, as
    # Django's own Task is not, and renders as before.
    task = djtasks.noop_task
    rendered = Template("{{ t.name }}|{% if t %}yes{% endif %}|{{ t.queue_name }}").render(
        Context({"t": task})
    )
    assert rendered == "noop_task|yes|default"


class _Big:
    """A collector whose exposition is ``size`` bytes of one gauge's labels."""

    def __init__(self, size: int) -> None:
        self.size = size

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("pgq_review_big", "A large page.", labels=["v"])
        line = "x" * 1000
        for n in range(self.size // 1030):
            family.add_metric([f"{n}{line}"], n)
        yield family


@pytest.mark.django_db(transaction=True)
def test_a_big_metrics_page_to_a_slow_but_steady_reader_is_served_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # IDLE_TIMEOUT bounds a wait between two writes; sendall's timeout bounds the
    # whole page, so a page that takes longer than it to read was cut mid-way.
    monkeypatch.setattr(exporter, "IDLE_TIMEOUT", 0.5)
    with exported(poll_interval=0.1) as (_running, served, base):
        served.registry.register(_Big(12_000_000))
        host, port = base.removeprefix("http://").rsplit(":", 1)
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16_384)
        conn.settimeout(10)
        conn.connect((host, int(port)))
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        received = bytearray()
        started = time.monotonic()
        while chunk := conn.recv(65_536):
            received += chunk
            time.sleep(0.002)  # a slow reader: never idle near IDLE_TIMEOUT
        conn.close()
        took = time.monotonic() - started
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[
            1
        ]
    )
    assert took > 0.5, "the reader was not slower than IDLE_TIMEOUT: the test proves nothing"
    assert len(body) == length


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_latest")
def test_an_upgrade_stopped_by_a_row_0006_refuses_runs_again_once_the_row_is_fixed() -> None:
    # 0006 was atomic: a row its checks refuse rolled it all back, and migrate ran
    # again once the row was fixed. Non-atomic, its columns stayed without the
    # migration recorded, and every later migrate failed on "already exists".
    migrate(("django_pgqueue", "0005_job_backoff"))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
            "VALUES ('tests.testapp.tasks.add', '[1]', '{}', '{\"by\": \"hand\"}', '[]') "
            "RETURNING id"
        )
        ((job_id,),) = cursor.fetchall()
    with pytest.raises(IntegrityError, match=f'"pgqueue_job_errors_is_list" .* job {job_id}:'):
        migrate(_latest())
    with connection.cursor() as cursor:  # nothing changed: 0006 can run again
        cursor.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgqueue_job'::regclass "
            "AND attname IN ('error_count', 'lease_token')"
        )
        assert cursor.fetchall() == [(0,)]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_job SET errors = '[]' WHERE id = %s", [job_id])
    migrate(_latest())
    assert Job.objects.get(pk=job_id).errors == []


@pytest.mark.django_db(transaction=True)
@override_settings(TIME_ZONE="Europe/Berlin")
def test_an_error_entry_whose_time_is_out_of_the_local_range_hides_no_other_entry(
    admin_client: Client,
) -> None:
    # The last moment UTC holds is past the year 9999 in Berlin: converting it
    # raised OverflowError, and the read-only field showed "-" for the whole history.
    real = {"attempt": 1, "exception": "ValueError", "message": "the real one", "traceback": ""}
    late = {"attempt": 2, "time": "9999-12-31T23:59:59+00:00", "exception": "KeyError"}
    job = plant(status="dead", errors=[real, late], error_count=2, last_error="x")
    html = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "<code>ValueError: the real one</code>" in html
    assert (
        "<strong>Attempt 2</strong> at 9999-12-31T23:59:59+00:00: <code>KeyError: </code>" in html
    )
