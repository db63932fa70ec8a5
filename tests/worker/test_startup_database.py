"""A worker started against a database it cannot use: waiting cannot create a
database or fix a role, so those end it at once; a server down at start is waited
for (a --burst worker for a few seconds)."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tests.worker.conftest import WorkerProcess, django_command

pytestmark = pytest.mark.slow


def server_of(db_url: str) -> str:
    return db_url.rsplit("/", 1)[0]


@pytest.mark.parametrize("burst", [(), ("--burst",)], ids=["long-running", "burst"])
def test_a_database_that_does_not_exist_ends_the_worker_at_once(
    db_url: str, burst: tuple[str, ...]
) -> None:
    """It was tried for 5 s with --burst, and for ever without."""
    worker = WorkerProcess(f"{server_of(db_url)}/pgqueue_missing_{os.getpid()}", *burst)
    started = time.monotonic()
    try:
        assert worker.wait(20) == 1, worker.output
    finally:
        worker.kill()
    took = time.monotonic() - started
    (line,) = [line for line in worker.output.splitlines() if "cannot reach the database" in line]
    assert line.startswith("cannot reach the database: connection failed: "), worker.output
    assert line.endswith(f'FATAL:  database "pgqueue_missing_{os.getpid()}" does not exist'), line
    assert "trying for" not in worker.output
    assert "yet" not in worker.output
    assert "Traceback" not in worker.output
    assert took < 4.0, f"{took:.1f}s:\n{worker.output}"


def test_a_role_that_does_not_exist_ends_the_worker_at_once(db_url: str) -> None:
    scheme, _, rest = db_url.partition("://")
    url = f"{scheme}://pgqueue_nobody:wrong@{rest.rpartition('@')[2]}"
    started = time.monotonic()
    result = django_command(url, "runworker")
    took = time.monotonic() - started
    assert result.returncode == 1, result
    assert 'role "pgqueue_nobody" does not exist' in result.stderr or (
        "password authentication failed" in result.stderr
    ), result.stderr
    assert "cannot reach the database: connection failed: " in result.stderr
    assert "Traceback" not in result.stderr
    assert took < 4.0, f"{took:.1f}s:\n{result.stderr}"


def forward(port: int, to: tuple[str, int]) -> socket.socket:
    """Listen on ``port`` and pass each connection on to ``to``, both ways."""
    server = socket.create_server(("127.0.0.1", port))

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for end in (src, dst):
                end.close()

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(to)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server


def test_a_server_down_at_start_is_still_waited_for(db_url: str) -> None:
    """A --burst worker tries for 5 s (a server still starting up); nothing listens on
    its port at first, then the server does."""
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    host, _, real_port = server_of(db_url).rpartition("@")[2].partition(":")
    url = db_url.replace(f"{host}:{real_port}", f"127.0.0.1:{port}", 1)
    worker = WorkerProcess(url, "--burst", "--no-listen")
    server = None
    try:
        worker.wait_for_output("cannot reach the database yet, trying for 5s: ")
        assert "Connection refused" in worker.output
        server = forward(port, (host, int(real_port)))
        assert worker.wait(30) == 0, worker.output
    finally:
        worker.kill()
        if server is not None:
            server.close()
    assert "burst: nothing ready and nothing running, exiting" in worker.output, worker.output
    assert "cannot reach the database: " not in worker.output
