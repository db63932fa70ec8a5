"""A worker started against a database it cannot use: waiting cannot create a
database or fix a role, so those end it at once; a server down at start is waited
for (a --burst worker for a few seconds)."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

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

    def connect(client: socket.socket) -> None:
        upstream = socket.create_connection(to)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()

    return serve(server, connect)


def serve(server: socket.socket, handle: Callable[[socket.socket], None]) -> socket.socket:
    """Hand each connection ``server`` accepts to ``handle``, in a thread of its own,
    until the server is closed; returns the server."""

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(client,), daemon=True).start()

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


def refusing(severity: str, code: str, words: str) -> socket.socket:
    """A server on a free port that answers every connection's startup packet as
    PostgreSQL refuses one: an ErrorResponse (``severity``, SQLSTATE ``code``,
    ``words``), then the connection closed."""
    server = socket.create_server(("127.0.0.1", 0))

    def read(client: socket.socket, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = client.recv(size - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def answer(client: socket.socket) -> None:
        with client, contextlib.suppress(OSError):
            while True:
                length, request = struct.unpack("!ii", read(client, 8))
                read(client, length - 8)
                if request not in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                    break
                client.sendall(b"N")  # not here: the startup packet follows
            fields = [(b"S", severity), (b"V", severity), (b"C", code), (b"M", words)]
            body = b"".join(key + value.encode() + b"\0" for key, value in fields) + b"\0"
            client.sendall(b"E" + struct.pack("!i", len(body) + 4) + body)

    return serve(server, answer)


def through(server: socket.socket, db_url: str) -> str:
    host_port = server_of(db_url).rpartition("@")[2]
    return db_url.replace(host_port, f"127.0.0.1:{server.getsockname()[1]}", 1)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("28000", 'role "pgqueue_worker" is not permitted to log in'),
        ("42501", 'permission denied for database "pgqueue"'),
    ],
    ids=["nologin", "no-connect-privilege"],
)
def test_a_role_refused_for_good_ends_the_worker_at_once(
    db_url: str, code: str, words: str
) -> None:
    """A role without LOGIN, or without CONNECT on the database, was waited for as
    a server still starting up: for ever without --burst."""
    server = refusing("FATAL", code, words)
    worker = WorkerProcess(through(server, db_url), "--no-listen")
    try:
        assert worker.wait(8) == 1, worker.output
    finally:
        worker.kill()
        server.close()
    assert "cannot reach the database: connection failed: " in worker.output, worker.output
    assert f"FATAL:  {words}\n" in worker.output, worker.output
    assert "Traceback" not in worker.output


@pytest.mark.parametrize(
    ("severity", "code", "words"),
    [
        ("FATAL", "57P03", "the database system is starting up"),
        ("FATAL", "57P03", "the database system is shutting down"),
        ("FATAL", "57P03", "the database system is in recovery mode"),
        ("FATAL", "53300", "sorry, too many clients already"),
        (
            "FATAL",
            "53300",
            "remaining connection slots are reserved for roles with the SUPERUSER attribute",
        ),
        ("FATAL", "55000", 'database "pgqueue" is not currently accepting connections'),
        ("ERROR", "08P01", "pgbouncer cannot connect to server"),
        # In another language than English the words are not known: waited for.
        ("FATAL", "3D000", "Datenbank »pgqueue« existiert nicht"),
    ],
)
def test_a_server_that_may_let_the_worker_in_later_is_waited_for(
    db_url: str, severity: str, code: str, words: str
) -> None:
    """A server starting up, shutting down, in recovery, full, or a PgBouncer that
    cannot reach it: a --burst worker tries for 5 s (one without, for ever)."""
    server = refusing(severity, code, words)
    worker = WorkerProcess(through(server, db_url), "--burst", "--no-listen")
    try:
        worker.wait_for_output("cannot reach the database yet, trying for 5s: ", 8)
        assert worker.wait(15) == 1, worker.output
    finally:
        worker.kill()
        server.close()
    assert words in worker.output, worker.output
