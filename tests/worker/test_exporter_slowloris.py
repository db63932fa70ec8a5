"""The metrics port against a client that sends its request a byte at a time, each
byte within IDLE_TIMEOUT of the last (slowloris): the bound was per read, so such a
client held a server thread for as long as it kept dripping. Reading a request, up
to the end of its headers, now has one deadline, IDLE_TIMEOUT from the connection."""

from __future__ import annotations

import select
import socket
import time

import pytest

from django_pgqueue.monitoring import exporter
from tests.worker.test_exporter import exported, fetch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: The bound in these tests (the default is 10 s).
BOUND = 1.0
#: A byte each this often: half the bound, so no single wait ever reaches it.
DRIP = BOUND / 2
#: How long a test drips before it calls the connection held for ever.
PATIENCE = 15.0


def drip_until_closed(base: str, head: bytes) -> float:
    """Send ``head`` whole, then one header byte every DRIP seconds until the server
    closes the connection; the seconds from the connection to its close."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=PATIENCE) as conn:
        conn.sendall(head)
        while time.monotonic() - started < PATIENCE:
            try:
                conn.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - started
            readable, _, _ = select.select([conn], [], [], DRIP)  # the server's close
            if readable:
                try:
                    said = conn.recv(1)
                except ConnectionResetError:
                    said = b""
                assert said == b"", f"the server answered a request it never got whole: {said!r}"
                return time.monotonic() - started
    raise AssertionError(f"a client sending a byte every {DRIP}s held the connection {PATIENCE}s")


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"", id="request-line"),
        pytest.param(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Drip: ", id="headers"),
    ],
)
def test_a_request_dripped_a_byte_at_a_time_is_closed_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch, head: bytes
) -> None:
    monkeypatch.setattr(exporter, "IDLE_TIMEOUT", BOUND)
    with exported(poll_interval=0.1) as (_running, _exporter, base):
        took = drip_until_closed(base, head)
        assert BOUND <= took < BOUND + 5 * DRIP + 2.0  # the deadline, not PATIENCE
        assert fetch(f"{base}/healthz")[0] == 200  # and the server keeps serving


def test_a_request_sent_within_the_deadline_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporter, "IDLE_TIMEOUT", 4.0)
    with exported(poll_interval=0.1) as (_running, _exporter, base):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=PATIENCE) as conn:
            for part in (b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
                conn.sendall(part)
                select.select([conn], [], [], 0.2)  # a slow but whole request
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200 OK\r\n"), answer[:80]
