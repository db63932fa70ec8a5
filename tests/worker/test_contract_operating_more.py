"""Issue 16 (operating it) driven further, with real ``runworker`` processes: what a
scrape serves while the database hangs or the worker drains, and the type and
labels of every metric the observability page names."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import psycopg
import pytest

from django_pgqueue.models import Job
from tests.testapp.tasks import add
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.scrape import base_url, scrape, value

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def healthz(base: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def succeeded(base: str) -> float:
    found = scrape(base)
    return value(
        found, "pgqueue_jobs_completed_total", queue="default", task=add.path, outcome="succeeded"
    )


def test_a_scrape_answers_while_the_database_hangs(start_worker: Start, db_url: str) -> None:
    """A scrape read the pause table on the request's thread, with no bound: while a
    statement on it waited (a lock; a network black hole, where even the connection
    hangs) /metrics answered nothing, and each scrape left one more thread behind, so
    the worker's own counters were lost exactly when the database was in trouble."""
    add.enqueue(1, 1)
    worker = start_worker("--metrics-port", "0", "--no-listen", "--poll-interval", "0.2")
    base = base_url(worker)
    wait_for(lambda: succeeded(base) == 1, 20, "the run to be counted")
    with psycopg.connect(db_url, autocommit=False) as blocker:
        # What a migration of the pause table (or a black-holed network) does to a read.
        blocker.execute("LOCK TABLE pgqueue_queue IN ACCESS EXCLUSIVE MODE")
        for _ in range(3):  # none waits for the read another left hanging
            started = time.monotonic()
            assert succeeded(base) == 1
            assert time.monotonic() - started < 3.0
        assert healthz(base)[0] == 200  # /healthz never read the database
    Job.objects.pause_queue("default")  # once the database answers, scrapes read it again
    wait_for(
        lambda: value(scrape(base), "pgqueue_queue_paused", queue="default") == 1,
        10,
        "a scrape to read the pause",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


AGE = ("pgqueue_queue_gauges_age_seconds", frozenset())


def test_the_gauges_age_is_served_before_a_refresh_succeeds_and_on_an_empty_table(
    start_worker: Start, db_url: str
) -> None:
    """The age was served only with rows to serve: a worker whose refreshes failed
    from its start (here a lock holds them) served no age at all, so the documented
    alert on it (PgqueueGaugesStale: min(...) > 120) could never fire; and on a
    table without jobs the gauges computed a moment ago had no age either."""
    assert not Job.objects.exists()
    with psycopg.connect(db_url, autocommit=False) as blocker:
        blocker.execute("LOCK TABLE pgqueue_queue_gauge IN ACCESS EXCLUSIVE MODE")
        worker = start_worker("--metrics-port", "0", "--no-listen")
        base = base_url(worker)
        wait_for(lambda: scrape(base).get(AGE, 0.0) >= 2, 10, "the age to grow while it waits")
    # The refresh goes through: nothing to count, and the gauges were computed now.
    wait_for(lambda: scrape(base).get(AGE, 99.0) < 2, 10, "the age of a refresh just done")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
