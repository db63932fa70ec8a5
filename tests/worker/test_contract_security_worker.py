"""The worker's metrics port as something any local process (or, with
``--metrics-addr 0.0.0.0``, anyone on the network) can connect to: idle and
half-sent requests, oversized headers, and what a scrape shows of the jobs."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from django_pgqueue.models import Job
from django_pgqueue.monitoring import exporter
from tests.testapp.tasks import mark
from tests.worker.conftest import wait_for
from tests.worker.test_exporter import exported, fetch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


#: Seconds a test waits on the server's threads: they share two busy cores with the
#: worker's, so only an answer that never comes is told by a bound, and a long one.
PATIENCE = 30.0


def connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=PATIENCE)


def test_idle_and_half_sent_connections_do_not_hold_up_a_scrape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A scrape held up behind them would wait for the server to drop them, after
    # IDLE_TIMEOUT: made much longer than the wait allowed here, a hold-up cannot be
    # taken for a slow answer on a loaded machine (a bound of 3 s could, either way).
    monkeypatch.setattr(exporter, "IDLE_TIMEOUT", 4 * PATIENCE)
    with exported(poll_interval=0.1) as (_running, _exporter, base):
        idle = [connect(base) for _ in range(3)]
        half = connect(base)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        try:
            for path in ("/metrics", "/healthz"):
                started = time.monotonic()
                with urllib.request.urlopen(f"{base}{path}", timeout=PATIENCE) as response:
                    assert response.status == 200, path
                assert time.monotonic() - started < PATIENCE, path
        finally:
            for conn in (*idle, half):
                conn.close()


def test_oversized_headers_are_refused_and_the_server_keeps_serving() -> None:
    with exported(poll_interval=0.1) as (_running, _exporter, base):
        many = connect(base)
        many.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: y\r\n" % i for i in range(200))
            + b"\r\n"
        )
        assert many.recv(64).startswith(b"HTTP/1.0 431")
        many.close()
        long_line = connect(base)
        long_line.sendall(b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")
        assert long_line.recv(64).startswith(b"HTTP/1.0 414")
        long_line.close()
        assert fetch(f"{base}/healthz")[0] == 200


def test_a_scrape_shows_no_job_arguments_or_results() -> None:
    with exported(poll_interval=0.1) as (_running, _exporter, base):
        job = mark.enqueue("pgq-secret-argument")
        wait_for(lambda: Job.objects.filter(pk=int(job.id), status="done").exists(), 20, "the job")
        status, text = fetch(f"{base}/metrics")
        assert status == 200
        assert "tests.testapp.tasks.mark" in text  # the task is named, as a label
        assert "pgq-secret-argument" not in text
        assert "pgq-secret-argument" not in fetch(f"{base}/healthz")[1]


def test_an_idle_connection_is_closed_after_the_idle_timeout(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Each connection holds a thread of the server: never closed, the idle
    # connections of a client that opens and forgets them pile up threads for ever.
    monkeypatch.setattr(exporter, "IDLE_TIMEOUT", 0.5)
    with exported(poll_interval=0.1) as (_running, _exporter, base):
        # Before the connections: each server thread's 0.5 s starts after it (a clock
        # read after the last send could come later than a thread's start, on a
        # loaded machine, and find a connection closed sooner than 0.5 s after it).
        started = time.monotonic()
        idle = [connect(base) for _ in range(5)]
        half = connect(base)
        half.sendall(b"GET /metrics HTTP/1.1\r\n")
        for conn in (*idle, half):
            conn.settimeout(PATIENCE)
            try:
                assert conn.recv(1) == b"", "the server wrote to an idle connection"
            except TimeoutError:
                pytest.fail(f"the server kept an idle connection open for {PATIENCE} s")
            finally:
                conn.close()
        # Closed after the idle timeout, not at once; the bound above tells "never".
        assert time.monotonic() - started >= 0.5
        assert fetch(f"{base}/healthz")[0] == 200
    assert "Traceback" not in capfd.readouterr().err
