"""A worker is in the registry before it runs anything: ``queuestats`` never shows
a job running on a worker it does not list. In-process workers on the test database."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.db import OperationalError, connection

from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.queue import presence as queue_presence
from django_pgqueue.worker.housekeeping import Housekeeping
from django_pgqueue.worker.services import RunAgainIn
from tests.testapp.tasks import mark
from tests.worker.conftest import wait_for
from tests.worker.inprocess import WorkerThread, worker_thread

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_worker_is_registered_before_its_first_job_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row was written by the heartbeat thread's first round, while the claim
    loop already ran jobs: on a loaded host a job was running, its worker not yet
    listed (seen in CI, by the test of the testing guide's queuestats --json). Here
    the heartbeat thread's first round is held until the job has started."""
    held, release = threading.Event(), threading.Event()
    renew = Housekeeping.heartbeat

    def held_heartbeat(self: Housekeeping) -> RunAgainIn | None:
        held.set()
        release.wait(10)
        return renew(self)

    monkeypatch.setattr(Housekeeping, "heartbeat", held_heartbeat)
    with worker_thread(worker_id="reg-first", concurrency=1, poll_interval=5) as worker:
        try:
            job = mark.enqueue("reg-first", sleep=0.2)
            worker.wait("started")
            assert held.is_set()  # the heartbeat thread is still in its first round
            row = RegisteredWorker.objects.filter(pk="reg-first").first()
            assert row is not None
            assert (row.queues, row.concurrency) == (None, 1)  # every queue
        finally:
            release.set()
        worker.wait("recorded")
    assert job.pk


def test_a_worker_without_its_registry_table_stops_before_it_claims(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The registry's table gone (dropped, or its migration faked): the row written at
    start failed, was said to be written later ("yet"), and the claim loop claimed and
    started jobs until the heartbeat's first round met the same error and stopped the
    worker, which gave them back. It stops now before it claims anything."""
    job = mark.enqueue("reg-missing")
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgqueue_worker RENAME TO pgqueue_worker_away")
    try:
        with caplog.at_level(logging.INFO, logger="django_pgqueue"):
            worker = WorkerThread(worker_id="reg-missing", concurrency=1, poll_interval=5)
            assert worker.start().join(15) == 1
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pgqueue_worker_away RENAME TO pgqueue_worker")
    assert worker.recorder.count("claimed") == 0
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if "registry yet" in line], said
    assert any(
        line.startswith("stopping: the job table is missing or older")
        and '"pgqueue_worker" does not exist' in line
        for line in said
    ), said
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.locked_by) == ("queued", 0, None)


def counted_writes(monkeypatch: pytest.MonkeyPatch, fail_first: bool = False) -> list[str]:
    """The names of the threads that wrote the registry row, one entry a statement; the
    first raises a lost connection's error instead, with ``fail_first``."""
    writes: list[str] = []
    real = queue_presence.register

    def register(*args: Any, **kwargs: Any) -> None:
        if fail_first and not writes:
            writes.append(threading.current_thread().name)
            raise OperationalError("server closed the connection unexpectedly")
        real(*args, **kwargs)
        writes.append(threading.current_thread().name)  # once written

    monkeypatch.setattr(queue_presence, "register", register)
    return writes


def test_the_registry_row_is_written_once_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row written on the claim loop's thread before its first claim was written
    again at once by the heartbeat thread's first round: two statements at every
    start where one did. The first renewal now comes a heartbeat interval later."""
    writes = counted_writes(monkeypatch)
    worker = WorkerThread(worker_id="reg-once", concurrency=1, lease=60, heartbeat_interval=20)
    began = time.monotonic()
    worker.start()
    try:
        worker.wait("heartbeat")  # the heartbeat thread's first round: its first timer
        heartbeat = worker.worker.heartbeat
        wait_for(lambda: heartbeat.last_ok > began, 10, "the heartbeat's first round to end")
        assert writes == ["test-worker"]
        row = RegisteredWorker.objects.get(pk="reg-once")
        assert (row.concurrency, row.last_seen) == (1, row.started_at)
    finally:
        assert worker.stop() == 0
    assert writes == ["test-worker"]
    assert not RegisteredWorker.objects.filter(pk="reg-once").exists()


def test_a_row_not_written_at_start_is_written_by_the_heartbeat_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start whose write failed (the connection lost) leaves the row to the heartbeat
    thread's first round, which comes at once, not a heartbeat interval later."""
    writes = counted_writes(monkeypatch, fail_first=True)
    with worker_thread(worker_id="reg-late", concurrency=1, lease=60, heartbeat_interval=20):
        wait_for(lambda: len(writes) == 2, 10, "the heartbeat thread's write")
        assert writes == ["test-worker", "pgqueue-heartbeat"]
        row = RegisteredWorker.objects.get(pk="reg-late")
        assert row.concurrency == 1
    assert writes == ["test-worker", "pgqueue-heartbeat"]


def test_a_write_that_outlasts_the_shutdown_does_not_leave_the_row_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shutdown waits 2 s for the heartbeat thread; a registry write still under way
    then (a slow statement) committed after the worker had removed its row, so the
    row stayed, listed as alive, until it aged out. The write now takes it out again."""
    held, calls = threading.Event(), []
    real = queue_presence.register

    def register(*args: Any, **kwargs: Any) -> None:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:  # at start: lost, so the heartbeat thread writes it at once
            raise OperationalError("server closed the connection unexpectedly")
        if len(calls) == 2:
            held.wait(30)  # a slow statement, past the shutdown's wait
        real(*args, **kwargs)

    monkeypatch.setattr(queue_presence, "register", register)
    worker = WorkerThread(worker_id="reg-slow", concurrency=1, lease=60, heartbeat_interval=20)
    worker.start()
    try:
        wait_for(lambda: len(calls) == 2, 10, "the heartbeat thread's write to begin")
    finally:
        assert worker.stop() == 0  # it left, the write still held
    assert not RegisteredWorker.objects.filter(pk="reg-slow").exists()
    held.set()
    worker.worker.heartbeat.join(10)
    assert not worker.worker.heartbeat.is_alive()
    assert calls == ["test-worker", "pgqueue-heartbeat"]
    assert not RegisteredWorker.objects.filter(pk="reg-slow").exists()
