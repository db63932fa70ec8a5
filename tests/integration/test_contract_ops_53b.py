"""Issue 16 as an operator meets its edges: a metrics address given without a port,
``queuestats --check`` against a database that hangs (a lock it queues behind, a
server that accepts connections and never answers), and a ``--burst`` worker that
starts against such a server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.worker.conftest import ROOT, django_command

pytestmark = pytest.mark.django_db(transaction=True)


def no_answer(seconds: str) -> str:
    return (
        f"the database did not answer the health check within {seconds}s (--timeout): "
        "a lock it waits for, or a server that hangs"
    )


def run_check(url: str, *args: str, bound: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """``queuestats --check ARGS`` on ``url``, and the seconds it took; a run past
    ``bound`` (the check hangs) fails the test rather than waiting for it."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "django", "queuestats", "--check", *args],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"},
            capture_output=True,
            text=True,
            timeout=bound,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"queuestats --check {' '.join(args)} still ran after {bound}s"
        ) from None
    return done, time.monotonic() - started


@pytest.fixture
def locked(db_url: str) -> Iterator[Callable[[str], None]]:
    """Hold ACCESS EXCLUSIVE locks, in a transaction left open, on the tables named
    (what a migration, or a stray ``LOCK TABLE``, does to every read of them)."""
    with psycopg.connect(db_url, autocommit=False) as blocker:

        def lock(table: str) -> None:
            blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # held once it returns

        yield lock
        blocker.rollback()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A libpq URL of a server that accepts connections and never says a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # closed: the test is over
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"postgres://postgres@127.0.0.1:{listener.getsockname()[1]}/shop"
    listener.close()
    thread.join(5)
    for conn in accepted:
        conn.close()


# -- runworker --metrics-addr without a port ----------------------------------------


def test_a_metrics_address_without_a_port_is_refused_on_the_command_line(db_url: str) -> None:
    """It was ignored: the worker ran, served no metrics and said nothing, and the
    probe set up for it failed for a reason nobody could see."""
    done = django_command(db_url, "runworker", "--burst", "--metrics-addr", "0.0.0.0")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "CommandError: runworker: --metrics-addr needs a port: give --metrics-port (or set "
        "PGQUEUE['METRICS_PORT']); without one the worker serves no metrics\n"
    )
    with pytest.raises(CommandError) as refused:
        call_command("runworker", burst=True, metrics_addr="127.0.0.1")
    assert refused.value.returncode == 2
    assert str(refused.value).startswith("runworker: --metrics-addr needs a port")


def test_a_metrics_address_with_the_port_from_the_settings_is_served(db_url: str) -> None:
    done = django_command(
        db_url,
        "runworker",
        "--burst",
        "--metrics-addr",
        "127.0.0.1",
        env={"PGQUEUE_TEST_PGQUEUE": '{"METRICS_PORT": 0}'},
    )
    assert done.returncode == 0, done.stderr
    assert "serving metrics on http://127.0.0.1:" in done.stderr
