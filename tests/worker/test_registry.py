"""The worker registry with real worker processes: a row while a worker runs, none
after it exits, and a killed worker shown as gone before its jobs' leases expire."""

from __future__ import annotations

import datetime as dt
import io
import json
import signal
from collections.abc import Callable

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.queue.presence import Registration, lock_key
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, running_count, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


def registered(worker_id: str) -> RegisteredWorker | None:
    return RegisteredWorker.objects.filter(pk=worker_id).first()


def test_a_worker_registers_itself_and_leaves_when_it_exits(start_worker: Start) -> None:
    tracked.enqueue("reg-1", sleep=0.01)
    worker = start_worker(
        "--worker-id",
        "w-clean",
        "--queues",
        "default,mail",
        "--concurrency",
        "3",
        "--lease",
        "3",
    )
    wait_for(
        lambda: (row := registered("w-clean")) is not None and row.jobs_done == 1,
        20,
        "the row to count the job done",
    )
    row = registered("w-clean")
    assert row is not None
    assert (row.pid, row.queues, row.concurrency) == (worker.proc.pid, ["default", "mail"], 3)
    assert row.schedules  # it runs the scheduler
    assert row.alive_at(timezone.now())
    assert row.version
    assert row.lock_key == lock_key("w-clean")  # its session holds the id's lock
    assert row.lock_pid
    first_seen = row.last_seen
    wait_for(
        lambda: registered("w-clean").last_seen > first_seen,  # type: ignore[union-attr]
        10,
        "a heartbeat to renew the row",
    )
    assert registered("w-clean").started_at == row.started_at  # type: ignore[union-attr]
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert registered("w-clean") is None


def test_the_row_keeps_the_id_lock_key_with_the_session_process_holding_it() -> None:
    entry = Registration("w-lock", "h", 1, None, 1, "x", gone_after=10)
    RegisteredWorker.objects.register(entry, starting=True)
    row = registered("w-lock")
    assert row is not None
    assert (row.lock_key, row.lock_pid) == (None, None)  # no session (behind a pooler)
    RegisteredWorker.objects.register(entry, lock_pid=4242)
    row = registered("w-lock")
    assert row is not None
    assert (row.lock_key, row.lock_pid) == (lock_key("w-lock"), 4242)
    # Whether that process still holds it is the scheduler's question (pg_locks is
    # read there, not on every heartbeat): tests/periodic/test_scheduler.py.
    RegisteredWorker.objects.register(entry)
    row = registered("w-lock")
    assert row is not None
    assert (row.lock_key, row.lock_pid) == (None, None)


def test_a_killed_worker_shows_as_gone_with_its_job_before_the_lease_expires(
    start_worker: Start,
) -> None:
    job = tracked.enqueue("victim", sleep=60)
    victim = start_worker("--worker-id", "w-victim", "--lease", "6")  # heartbeat every 2 s
    wait_for(lambda: running_count() == 1, 20, "the victim to run the job")
    wait_for(lambda: registered("w-victim") is not None, 10, "the victim's row")
    victim.kill()  # SIGKILL: nothing runs, the row stays
    took = wait_for(
        lambda: not registered("w-victim").alive_at(timezone.now()),  # type: ignore[union-attr]
        10,
        "the victim to be shown as gone",
    )
    assert took <= 4.0 + 0.5  # (heartbeat + lease) / 2 after its last heartbeat at most
    job.refresh_from_db()
    assert job.status == "running"
    assert job.locked_until is not None
    assert job.locked_until > timezone.now()  # its lease still holds: not yet reapable
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    text = out.getvalue()
    assert "w-victim" in text
    assert "gone" in text
    assert (
        "running on gone workers (1; the reaper returns them once their leases expire): "
        f"#{job.pk} on w-victim"
    ) in text
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    assert f'"running_on_gone_workers": [\n    {job.pk}\n  ]' in out.getvalue()


def test_a_bounded_worker_registers_that_it_runs_no_scheduler(start_worker: Start) -> None:
    tracked.enqueue("bounded", sleep=3)
    worker = start_worker("--worker-id", "w-bounded", "--max-jobs", "1")
    wait_for(lambda: running_count() == 1, 20, "the bounded worker to run its job")
    wait_for(lambda: registered("w-bounded") is not None, 10, "its row")
    assert registered("w-bounded").schedules is False  # type: ignore[union-attr]
    assert worker.wait(20) == 0  # its one job done, it exits


def test_a_gone_workers_running_count_is_what_the_table_still_holds() -> None:
    """Its last heartbeat said 3; once the reaper has given its jobs back it runs
    none, whatever that heartbeat said. A live worker's count is its own."""
    past = timezone.now() - dt.timedelta(minutes=5)
    for worker_id, alive_until in (
        ("w-gone", past),
        ("w-alive", timezone.now() + dt.timedelta(minutes=1)),
    ):
        RegisteredWorker.objects.create(
            id=worker_id,
            hostname="h",
            pid=1,
            concurrency=4,
            version="0",
            alive_until=alive_until,
            jobs_running=3,
        )
    tracked.enqueue("left", sleep=0)
    (claimed,) = Job.objects.claim("w-gone")

    def running() -> dict[str, int]:
        out = io.StringIO()
        call_command("queuestats", "--json", stdout=out)
        return {w["id"]: w["jobs_running"] for w in json.loads(out.getvalue())["workers"]}

    assert running() == {"w-gone": 1, "w-alive": 3}
    Job.objects.release("w-gone", [claimed.key])  # as the reaper would, in the end
    assert running() == {"w-gone": 0, "w-alive": 3}
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    (line,) = [row for row in out.getvalue().splitlines() if row.startswith("w-gone")]
    assert line.split()[:6] == ["w-gone", "gone", "*", "4", "0", "0"]


def test_rows_gone_for_over_an_hour_are_forgotten_by_a_running_worker(start_worker: Start) -> None:
    RegisteredWorker.objects.create(
        id="long-gone",
        hostname="h",
        pid=1,
        concurrency=1,
        version="0",
        alive_until=timezone.now() - dt.timedelta(hours=2),
    )
    RegisteredWorker.objects.create(
        id="recently-gone",
        hostname="h",
        pid=2,
        concurrency=1,
        version="0",
        alive_until=timezone.now() - dt.timedelta(minutes=5),
    )
    worker = start_worker("--worker-id", "w-forgetter")
    wait_for(lambda: registered("long-gone") is None, 20, "the old row to be forgotten")
    assert registered("recently-gone") is not None
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert set(RegisteredWorker.objects.values_list("id", flat=True)) == {"recently-gone"}
    assert Job.objects.count() == 0
