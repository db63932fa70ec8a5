"""Tasks the tests enqueue. Each records its runs in the database, so a test can
count exactly how many times each job ran, even across worker processes."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction

from django_pgqueue import Cancel, Snooze, current_job, task


def record(label: str, *, started: float | None = None) -> None:
    """Append one row per run to testapp_run (created by the tests' migration)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_run (label, started, finished) VALUES (%s, "
            "to_timestamp(%s), clock_timestamp())",
            [label, started if started is not None else time.time()],
        )


def run_counts_of(label: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_run WHERE label = %s", [label])
        (runs,) = cursor.fetchone()
    return int(runs)


@task
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def mark(label: str, sleep: float = 0.0) -> str:
    started = time.time()
    if sleep:
        time.sleep(sleep)
    record(label, started=started)
    return label


@task(max_attempts=3)
def flaky(label: str, failures: int) -> str:
    """Fails ``failures`` times (counted in the database), then succeeds."""
    record(label)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_run WHERE label = %s", [label])
        (runs,) = cursor.fetchone()
    if runs <= failures:
        raise RuntimeError(f"{label}: planned failure {runs} of {failures}")
    return label


@task(max_attempts=2)
def always_fails(label: str) -> None:
    record(label)
    raise ValueError(f"{label}: this task always fails")


@task(max_attempts=5)
def tracked(label: str, sleep: float = 0.0) -> str:
    """Records its start at once (committed), then works: a killed run is still counted."""
    record(label)
    time.sleep(sleep)
    return label


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
def show_synchronous_commit() -> str:
    """What a job's own connection commits with (the project's setting, never relaxed)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        (value,) = cursor.fetchone()
    return str(value)


@task
def raises_interrupt() -> None:
    raise KeyboardInterrupt("by hand")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no message for you")


@task
def raises_unprintable() -> None:
    raise Unprintable


@task(max_attempts=1)
def leaks_transaction(label: str) -> str:
    """Writes inside a transaction.atomic() block it never leaves (a bug in a task)."""
    transaction.atomic().__enter__()
    record(label)
    return label


@task
def whoami(label: str, sleep: float = 0.0) -> int:
    """Records its run and returns the pid of the process that ran it."""
    started = time.time()
    time.sleep(sleep)
    record(label, started=started)
    return os.getpid()


@task
def returns_a_set() -> set[int]:
    return {1}  # not JSON


# -- job control (tests/worker/test_job_control*.py) ------------------------------------


@task
def waits_to_be_stopped(label: str, seconds: float = 30.0, cancel: str | None = None) -> str:
    """Polls ``cancel_requested`` every 5 ms; returns when asked to stop (the job then
    ends cancelled), or raises ``Cancel(cancel)`` if given, or returns after
    ``seconds`` (it finished anyway)."""
    record(label)
    job = current_job()
    assert job is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job.cancel_requested:
            if cancel is not None:
                raise Cancel(cancel)
            return "stopped"
        time.sleep(0.005)
    return "finished"


@task
async def awaits_to_be_stopped(label: str, seconds: float = 30.0) -> str:
    """Awaits; an abort cancels it at its await (CancelledError)."""
    await sync_to_async(record)(label)
    await asyncio.sleep(seconds)
    return "finished"


@task(max_attempts=3)
def snoozes(label: str, times: int, seconds: float = 0.0) -> int:
    """Snoozes until it has run ``times + 1`` times (counted in the database)."""
    record(label)
    runs = run_counts_of(label)
    if runs <= times:
        raise Snooze(seconds)
    return runs


@task(max_attempts=5)
def gives_up(label: str) -> None:
    record(label)
    raise Cancel(f"{label}: nothing left to do")


@task(max_attempts=5)
def gives_up_with(reason: Any) -> None:
    raise Cancel(reason)


@task(max_attempts=3)
def gives_up_late(label: str, seconds: float) -> None:
    """Works ``seconds`` (past a short job timeout), then gives up: ``Cancel``."""
    record(label)
    time.sleep(seconds)
    raise Cancel(f"{label}: nothing left to do")


@task(max_attempts=3, retry_on=(ConnectionError, TimeoutError))
def retries_io_only(label: str, error: str) -> None:
    """Raises ConnectionError (retried) or ValueError (not: it buries the job)."""
    record(label)
    raise ConnectionError(label) if error == "io" else ValueError(label)


@task(max_attempts=3, discard_on=LookupError)
def discards_lookups(label: str, error: str) -> None:
    """Raises KeyError (discarded: buried at once) or RuntimeError (retried)."""
    record(label)
    raise KeyError(label) if error == "lookup" else RuntimeError(label)


@task(unique_key="one-at-a-time")
def one_at_a_time(label: str) -> str:
    """A periodic job that must not pile up: a tick finds the previous job live."""
    record(label)
    return label


@task
def returns_after_a_stop_request(label: str) -> str:
    """Told to stop while it runs (as a worker tells a job an operator cancelled),
    it sees the request and returns: the job ends cancelled."""
    job = current_job()
    assert job is not None
    job.request_cancel("the order is gone")
    assert job.cancel_requested
    record(label)
    return "stopped"


#: In-process worker tests only: a test sets ``GATES[label]`` to let the job return.
GATES: dict[str, threading.Event] = {}


@task
def waits_for_gate(label: str) -> str:
    """Returns once the test opens its gate (or after 30 s)."""
    GATES.setdefault(label, threading.Event()).wait(30)
    return label


@task
def records_then_waits_for_gate(label: str) -> str:
    """Records its run (its thread then keeps a connection), then waits for the gate."""
    record(label)
    GATES.setdefault(label, threading.Event()).wait(30)
    return label


@task(max_attempts=1)
def waits_for_gate_in_transaction(label: str) -> str:
    """Opens a transaction (a statement marked ``label``), says so (the gate
    ``label + ':in'``), waits for the gate (or 30 s), then writes in it."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f'SELECT 1 AS "{label}"')
        GATES.setdefault(label + ":in", threading.Event()).set()
        GATES.setdefault(label, threading.Event()).wait(30)
        record(label)
    return label


@task(max_attempts=3)
def fails_after_gate(label: str) -> None:
    """Raises once the test opens its gate (or after 30 s)."""
    GATES.setdefault(label, threading.Event()).wait(30)
    raise RuntimeError(f"{label} failed")


@task(max_attempts=1)
def runs_sql(label: str, statement: str) -> str:
    """Records its run, then runs ``statement`` on its thread's connection (a task
    that changes its session: SET search_path, SET ROLE, ...) and returns."""
    record(label)
    with connection.cursor() as cursor:
        cursor.execute(statement)
    return label


@task(max_attempts=1)
def closes_its_connection(label: str) -> str:
    """Records its run, then closes its thread's psycopg connection under Django (a
    task that calls connection.connection.close()) and returns."""
    record(label)
    connection.connection.close()
    return label
