"""Issue 16 as an operator meets its edges: a metrics address given without a port,
``queuestats --check`` against a database that hangs (a lock it queues behind, a
server that accepts connections and never answers), and a ``--burst`` worker that
starts against such a server."""

from __future__ import annotations

import io
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
from django.db import connection, transaction

from django_pgqueue.models import Job
from tests.testapp.tasks import add
from tests.worker.conftest import ROOT, WorkerProcess, django_command, wait_for
from tests.worker.scrape import base_url
from tests.worker.test_contract_operating_more import healthz

pytestmark = pytest.mark.django_db(transaction=True)


def no_answer(seconds: str) -> str:
    return (
        f"the database did not answer the health check within {seconds}s (--timeout): "
        "a lock it waits for, or a server that hangs"
    )


def run_stats(url: str, *args: str, bound: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """``queuestats ARGS`` on ``url``, and the seconds it took; a run past ``bound``
    (it hangs) fails the test rather than waiting for it."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "django", "queuestats", *args],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"},
            capture_output=True,
            text=True,
            timeout=bound,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"queuestats {' '.join(args)} still ran after {bound}s") from None
    return done, time.monotonic() - started


def run_check(url: str, *args: str, bound: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """``queuestats --check ARGS``, as :func:`run_stats`."""
    return run_stats(url, "--check", *args, bound=bound)


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


# -- queuestats --check against a database that hangs --------------------------------


@pytest.mark.parametrize("table", ["pgqueue_job", "pgqueue_worker"])
def test_check_fails_within_its_timeout_behind_a_lock(
    db_url: str, locked: Callable[[str], None], table: str
) -> None:
    """It waited behind the lock for ever: checks run every minute piled up, each one
    more connection, and the probe said nothing."""
    locked(table)
    done, took = run_check(db_url, "--timeout", "2", bound=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"CommandError: {no_answer('2')}\n"
    assert took < 10  # Python and Django's start, then 2 s


def test_check_defaults_to_a_ten_second_timeout(db_url: str, locked: Callable[[str], None]) -> None:
    locked("pgqueue_worker")
    done, took = run_check(db_url, bound=40)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"CommandError: {no_answer('10')}\n"
    assert 10 <= took < 20


def test_check_fails_within_its_timeout_on_a_server_that_never_answers(silent_server: str) -> None:
    """Nothing on the server ends a connection attempt that gets no answer: the
    process bounds it."""
    done, took = run_check(silent_server, "--timeout", "2", bound=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"CommandError: {no_answer('2')}\n"
    assert took < 10


def test_check_still_says_ok_and_reports_conditions_with_a_timeout(db_url: str) -> None:
    done, _ = run_check(db_url, "--timeout", "5", bound=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
    add.enqueue(1, 1)  # ready, and no worker serves it
    done, _ = run_check(db_url, "--timeout", "5", bound=30)
    assert done.returncode == 1
    assert done.stdout.startswith("queue default: jobs are ready (the oldest waiting ")
    assert done.stdout.endswith("s) and no live worker serves it\n")


def test_call_command_check_behind_a_lock_raises_within_its_timeout(
    locked: Callable[[str], None],
) -> None:
    """From call_command() the process is not ours to end: the server ends the
    statement, and the caller gets a CommandError, its connection usable."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        (before,) = cursor.fetchone()
    locked("pgqueue_worker")
    started = time.monotonic()
    with pytest.raises(CommandError) as unhealthy:
        call_command("queuestats", check=True, timeout=1, stdout=io.StringIO())
    assert time.monotonic() - started < 5
    assert (unhealthy.value.returncode, str(unhealthy.value)) == (1, no_answer("1"))
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == (before,)


def test_call_command_check_in_a_transaction_leaves_its_statement_timeout_alone() -> None:
    out = io.StringIO()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = '7s'")
        call_command("queuestats", check=True, timeout=3, stdout=out)
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == ("7s",)
    assert out.getvalue() == "ok\n"


def test_timeout_goes_with_every_mode_and_is_above_0(db_url: str) -> None:
    """It went with --check only; the table and --json take it too
    (test_queuestats_timeout)."""
    done = django_command(db_url, "queuestats", "--timeout", "5")
    assert (done.returncode, done.stderr) == (0, "")
    done = django_command(db_url, "queuestats", "--check", "--timeout", "0")
    assert done.returncode == 2
    assert done.stderr.startswith("CommandError: queuestats: argument --timeout: expected a ")


# -- a --burst worker starting against a server that never answers --------------------


def test_a_burst_worker_gives_up_on_a_server_that_never_answers(silent_server: str) -> None:
    """A --burst worker that cannot reach the database at start stops after trying
    for 5 seconds (START_PATIENCE); against a server that accepted its connection
    and never answered it waited for ever, saying nothing, and the cron job that
    starts it piled up."""
    worker = WorkerProcess(silent_server, "--burst")
    started = time.monotonic()
    assert worker.wait(30) == 1
    assert time.monotonic() - started < 15
    assert worker.output.endswith("cannot reach the database: connection timeout expired\n")
    assert Job.objects.count() == 0


# -- /healthz of a worker that starts against a server that never answers ------------


def test_healthz_of_a_worker_held_in_its_start_by_a_silent_server(silent_server: str) -> None:
    """What the observability page says: the claim loop's age counts from the
    worker's start, so a worker held before its first round (a server that accepts
    the connection and never answers) answers 503 once that age passes the loop's
    limit (15 s), and 200 before."""
    worker = WorkerProcess(silent_server, "--metrics-port", "0")
    try:
        base = base_url(worker)
        status, detail = healthz(base)
        assert status == 200, detail
        waited = wait_for(lambda: healthz(base)[0] == 503, 40, "/healthz to answer 503")
        status, detail = healthz(base)
        loop = detail["claim_loop"]
        assert isinstance(loop, dict)
        assert (status, detail["status"], loop["ok"], loop["limit"]) == (503, "stuck", False, 15.0)
        assert loop["age"] > 15.0
        assert waited < 20  # the claim loop's limit, not the heartbeat's (20 s here)
        assert "starting worker" not in worker.output  # still in its start-up
    finally:
        worker.kill()
