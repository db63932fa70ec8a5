"""Issue 16 (operating it) driven further, with real ``runworker`` processes: what a
scrape serves while the database hangs or the worker drains, and the type and
labels of every metric the observability page names."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_pgqueue.models import Job
from django_pgqueue.records import JobStatus
from tests.testapp.tasks import add, always_fails, mark
from tests.worker.conftest import WorkerProcess, running_count, wait_for
from tests.worker.scrape import base_url, documented, scrape, value

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


AGE: tuple[str, frozenset[tuple[str, str]]] = ("pgqueue_queue_gauges_age_seconds", frozenset())


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


def test_every_documented_metric_is_served_with_its_type_and_labels(start_worker: Start) -> None:
    """Read from a real worker, every metric of the page's table, as its type, with
    its labels and only those, and label values among those the page lists."""
    table = documented()
    assert len(table) == 13, table
    add.enqueue(1, 1)
    always_fails.enqueue("types")  # max_attempts=2: retried, then dead
    worker = start_worker("--metrics-port", "0", "--no-listen", "--poll-interval", "0.2")
    base = base_url(worker)
    wait_for(lambda: Job.objects.filter(status__in=["done", "dead"]).count() == 2, 20, "the runs")
    wait_for(
        lambda: (
            value(
                scrape(base),
                "pgqueue_jobs_completed_total",
                queue="default",
                task=always_fails.path,
                outcome="dead",
            )
            == 1
        ),
        10,
        "the burial to be counted",
    )
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    served = {family.name: family for family in text_string_to_metric_families(text)}
    values = {
        "outcome": {"succeeded", "retried", "dead", "cancelled", "released"},
        "result": {"returned", "buried", "cancelled"},
        "status": set(JobStatus.values),
        "queue": {"default"},
        "task": {add.path, always_fails.path},
    }
    for name, (kind, labels) in table.items():
        family = served[name.removesuffix("_total")]
        assert family.type == kind, name
        assert family.samples, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample)
            for label, seen in sample.labels.items():
                assert label == "le" or seen in values[label], (name, sample)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_scrape_during_a_drain_shows_the_runs_left_and_a_healthy_stopping_worker(
    start_worker: Start,
) -> None:
    """SIGTERM with jobs running: until they end, /metrics counts them running and
    /healthz answers 200 with ``stopping`` (a stopping worker's loop has ended, which
    is not stuck), and the worker ends them before it exits."""
    jobs = [mark.enqueue(f"drain-{i}", sleep=8) for i in range(2)]
    worker = start_worker("--metrics-port", "0", "--concurrency", "2", "--no-listen")
    base = base_url(worker)
    wait_for(lambda: running_count() == 2, 20, "both runs to start")
    wait_for(lambda: value(scrape(base), "pgqueue_jobs_running") == 2, 10, "the gauge to show them")
    worker.signal(signal.SIGTERM)
    worker.wait_for_output("finishing running jobs")
    status, detail = healthz(base)
    assert (status, detail["status"], detail["stopping"]) == (200, "ok", True), detail
    found = scrape(base)
    assert value(found, "pgqueue_jobs_running") == 2
    assert value(found, "pgqueue_worker_slots") == 2
    assert worker.wait(30) == 0
    assert {Job.objects.get(pk=job.pk).status for job in jobs} == {"done"}


class Cut:
    """A TCP relay to the test database that can be cut: while cut, the connections
    it relays are closed and new ones closed at once (a database gone away)."""

    def __init__(self, db_url: str) -> None:
        parts = urlsplit(db_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = parts._replace(
            netloc=f"{parts.netloc.rsplit('@', 1)[0]}@127.0.0.1:{self.listener.getsockname()[1]}"
        ).geturl()
        self.cut = False
        self.sockets: list[socket.socket] = []
        # A connection being opened as the relay is cut is cut too, not left working
        # (its server side was opened after down() shut the others).
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = None if self.cut else socket.create_connection(self.target)
            except OSError:
                server = None
            with self._lock:
                if server is None or self.cut:
                    for end in (client, server):
                        if end is not None:
                            end.close()
                    continue
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for end in (a, b):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        with self._lock:
            self.cut = True
            ends = list(self.sockets)
        for end in ends:
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        self.cut = False

    def close(self) -> None:
        """Cut, and close every socket: one left to the garbage collector warns
        (ResourceWarning) in whichever later test collects it, and fails that test."""
        self.down()
        self.listener.close()
        for end in self.sockets:
            end.close()


@contextmanager
def relayed(db_url: str) -> Iterator[Cut]:
    cut = Cut(db_url)
    try:
        yield cut
    finally:
        cut.close()


def test_healthz_fails_while_the_database_is_away_and_recovers_with_it(
    start_worker: Start, db_url: str
) -> None:
    """The page: a database outage as long as the heartbeat's limit fails /healthz
    (a heartbeat failing at once ages it as one that hangs), and /metrics answers
    meanwhile; once the database is back, /healthz is 200 again."""
    with relayed(db_url) as relay:
        worker = start_worker(
            "--metrics-port", "0", "--lease", "3", "--no-listen", env={"DATABASE_URL": relay.url}
        )
        base = base_url(worker)
        wait_for(lambda: healthz(base)[0] == 200, 10, "a healthy worker")
        limit = healthz(base)[1]["heartbeat"]["limit"]  # type: ignore[index]
        assert limit == 2.0  # (heartbeat 1 s + lease 3 s) / 2
        relay.down()
        took = wait_for(lambda: healthz(base)[0] == 503, 15, "/healthz to fail")
        assert took <= limit + 3.0
        status, detail = healthz(base)
        assert (status, detail["heartbeat"]["ok"]) == (503, False), detail  # type: ignore[index]
        assert value(scrape(base), "pgqueue_worker_slots") == 10  # the worker's own, served
        relay.up()
        wait_for(lambda: healthz(base)[0] == 200, 20, "/healthz to recover")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
