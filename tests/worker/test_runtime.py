"""A running worker, in process: pickup latency, heartbeats, poison rows, job timeouts,
leaked transactions, concurrency keys. Each test waits on the worker's events."""

from __future__ import annotations

import json
import re
import threading
import time
from functools import partial
from typing import Any

import pytest
from django.db import connection

from django_pgqueue.backend import options
from django_pgqueue.backend.compat import TaskResult, TaskResultStatus, task_finished
from django_pgqueue.models import Job
from django_pgqueue.records import ClaimedJob, JobSpec, Outcome, RunOutcome
from django_pgqueue.signals import job_finished
from tests.conftest import run_counts, status_counts
from tests.testapp import djtasks
from tests.testapp.tasks import add, leaks_transaction, mark, snoozes, tracked
from tests.worker.conftest import wait_for
from tests.worker.inprocess import WorkerThread, worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def started_at(label: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM started) FROM testapp_run WHERE label = %s", [label]
        )
        row = cursor.fetchone()
    return float(row[0])


def intervals(prefix: str) -> dict[str, tuple[float, float]]:
    """label -> (started, finished) of each recorded run, as epoch seconds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT label, extract(epoch FROM started), extract(epoch FROM finished) "
            "FROM testapp_run WHERE label LIKE %s",
            [prefix + "%"],
        )
        return {label: (float(a), float(b)) for label, a, b in cursor.fetchall()}


def has_run(label: str) -> bool:
    return run_counts(label) != {}


def pickup_delays(worker: WorkerThread, count: int) -> list[float]:
    """Enqueue jobs one at a time into an idle worker; seconds from commit to start."""
    delays = []
    for n in range(count):
        idle = worker.recorder.count("idle")
        worker.wait("idle", idle + 1)  # it looked, found nothing, and went to sleep
        label = f"pickup-{n}"
        mark.enqueue(label)  # autocommit: this returns after the commit
        committed = time.time()
        wait_for(partial(has_run, label), 10, f"{label} to start")
        delays.append(started_at(label) - committed)
    return delays


def test_idle_worker_picks_up_a_job_within_100ms_of_commit() -> None:
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")  # polling alone would take up to 5 s
        delays = pickup_delays(worker, 5)
    assert max(delays) < 0.1, delays


def test_a_notification_nested_past_what_python_reads_does_not_stop_the_listener() -> None:
    """Someone else's message on the channel: JSON nested deeper than Python's decoder
    goes raised RecursionError, which dropped the session (and its id lock) and
    restarted the listener thread. (Python 3.13's decoder goes deeper than a NOTIFY
    payload, at most 8,000 bytes, can nest: there this shows only that a foreign
    message is ignored.)"""
    with worker_thread(poll_interval=5) as worker:
        worker.wait("listening")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify('pgqueue_jobs', %s)", ['{"a":' + "[" * 3000 + "]" * 3000 + "}"]
            )
        delays = pickup_delays(worker, 2)  # still woken by NOTIFY: the same listener
        assert worker.recorder.count("listening") == 1
    assert max(delays) < 0.1, delays


def test_without_notifications_the_poll_picks_up_within_the_interval() -> None:
    with worker_thread(listen=False, poll_interval=0.5) as worker:
        delays = pickup_delays(worker, 4)
    assert max(delays) < 0.5 + 0.25, delays  # one poll interval, plus claim and start
    assert min(delays) > 0.0


def test_a_long_job_with_a_short_lease_survives_thanks_to_the_heartbeat() -> None:
    tracked.enqueue("long-haul", sleep=3.0)
    # A reaper every 0.2 s: without renewals the lease would lapse and the job be taken back.
    with worker_thread(
        lease=1.0, heartbeat_interval=1 / 3, burst=True, reap_interval=0.2
    ) as worker:
        assert worker.join(30) == 0
    assert worker.recorder.count("heartbeat", lambda d: bool(d["kept"])) >= 5
    assert worker.recorder.count("reaped") >= 10
    job = Job.objects.get()
    assert (job.status, job.attempts, job.errors) == ("done", 1, [])
    assert run_counts("long-haul") == {"long-haul": 1}


def test_poison_rows_are_buried_and_the_worker_keeps_going() -> None:
    with connection.cursor() as cursor:
        for task, args in [
            ("os.system", '["touch /tmp/pgqueue-pwned"]'),
            ("tests.testapp.tasks.record", '["not-a-task"]'),
            ("tests.testapp.tasks.add", '"not a list"'),
            ("tests.testapp.tasks.add", "[1, 2, 3]"),
        ]:
            cursor.execute(
                "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
                "VALUES (%s, %s::jsonb, '{}', '[]', '[]')",
                [task, args],
            )
    good = add.enqueue(20, 22)
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    assert status_counts() == {"dead": 4, "done": 1}
    assert Job.objects.get(pk=good.pk).result == 42
    errors = sorted(Job.objects.dead().values_list("last_error", flat=True))
    assert any("'os' is not in an installed app" in e for e in errors)
    assert any("'tests.testapp.tasks.record' is not a registered task" in e for e in errors)
    assert any("malformed arguments" in e for e in errors)
    assert any("do not match the task's signature" in e for e in errors)
    assert all(job.attempts == 1 for job in Job.objects.dead())
    assert run_counts() == {}


def test_an_undecodable_row_is_buried_alone_and_its_batch_mates_run() -> None:
    """Python cannot read some JSON PostgreSQL stores (a 5,000-digit number, nesting
    past the recursion limit); such a row used to crash the worker after the claim
    committed, stranding its whole batch as running."""
    labels = [f"mate-{n}" for n in range(6)]
    Job.objects.enqueue_many(JobSpec.build(mark, [label]) for label in labels)
    # Deeper than Python's JSON decoder goes on any supported version (about 1,500
    # levels on 3.12, 10,000 on 3.13), and shallow enough for PostgreSQL's stack.
    deep = "[" * 11_000 + "]" * 11_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    with connection.cursor() as cursor:
        for args in ("[1e5000]", deep):
            cursor.execute(
                "INSERT INTO pgqueue_job (task, args, kwargs, max_attempts, errors, "
                "worker_ids) VALUES ('tests.testapp.tasks.noop', %s::jsonb, '{}', 9, "
                "'[]', '[]')",
                [args],
            )
    with worker_thread(burst=True, concurrency=8) as worker:
        assert worker.join(30) == 0
    assert worker.recorder.count("claimed") >= 1
    assert status_counts() == {"done": 6, "dead": 2}
    assert run_counts("mate-") == dict.fromkeys(labels, 1)
    # (Only these columns: Django itself cannot decode those arguments either.)
    for attempts, error in Job.objects.dead().values_list("attempts", "last_error"):
        assert attempts == 1  # buried at once, not retried nine times
        assert "the stored arguments cannot be decoded" in error
        assert error.startswith("django_pgqueue.worker.executor.UndecodableJob:")


def test_a_job_past_its_timeout_keeps_its_concurrency_key_until_its_thread_returns() -> None:
    """The first version freed the key (and the lease) at the timeout, while the job's
    thread still ran: the next job of the key started beside it."""
    mark.using(concurrency_key="k", max_attempts=1).enqueue("slow", sleep=2.0)
    mark.using(concurrency_key="k").enqueue("quick", sleep=0.2)
    with worker_thread(job_timeout=0.5, concurrency=2, burst=True) as worker:
        worker.wait("started")
        time.sleep(1.0)  # past the timeout, the slow job still running
        assert Job.objects.running().count() == 1  # the row keeps the key: quick waits
        assert worker.recorder.count("started") == 1
        assert worker.join(30) == 0
    runs = intervals("")
    assert runs["slow"][1] <= runs["quick"][0], runs  # never at the same time
    slow = Job.objects.get(args=["slow"])
    assert slow.status == "dead"
    assert slow.last_error.startswith("django_pgqueue.exceptions.JobTimeout: job ran 2.")
    assert "past the worker's job timeout of 0.5s" in slow.last_error
    assert Job.objects.get(args=["quick"]).status == "done"


def test_a_tasks_run_that_returns_past_the_timeout_is_reported_as_it_is_recorded() -> None:
    """``task_finished`` said SUCCESSFUL (and Django logged ``state=SUCCESSFUL``) for a
    run the worker then recorded as failed with a JobTimeout."""
    finished: list[tuple[str, list[str]]] = []

    def on_finished(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        finished.append((task_result.status, [e.exception_class_path for e in task_result.errors]))

    late = options(djtasks.stops_when_asked, max_attempts=1).enqueue(seconds=0.8)
    on_time = djtasks.stops_when_asked.enqueue(seconds=0.0)
    task_finished.connect(on_finished)
    try:
        with worker_thread(job_timeout=0.3, concurrency=2, burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        task_finished.disconnect(on_finished)
    timeout = "django_pgqueue.exceptions.JobTimeout"
    assert sorted(finished) == [
        (TaskResultStatus.FAILED, [timeout]),
        (TaskResultStatus.SUCCESSFUL, []),
    ]
    late.refresh()
    on_time.refresh()
    assert (late.status, [e.exception_class_path for e in late.errors]) == (
        TaskResultStatus.FAILED,
        [timeout],
    )
    assert on_time.status == TaskResultStatus.SUCCESSFUL


def test_a_slow_receiver_after_a_run_in_time_does_not_make_the_run_late(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The task returned in time and task_finished said so; a receiver then kept the
    thread past the timeout. The timer warned that the run "will be recorded as
    failed" (and a shutdown then would have recorded it so) while the row ended done."""

    def slow(sender: type, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        time.sleep(0.8)

    quick = djtasks.stops_when_asked.enqueue(seconds=0.0)
    task_finished.connect(slow)
    try:
        with worker_thread(job_timeout=0.3, burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        task_finished.disconnect(slow)
    quick.refresh()
    assert quick.status == TaskResultStatus.SUCCESSFUL
    assert not [r for r in caplog.records if "exceeded the job timeout" in r.getMessage()]


def test_a_plain_run_is_reported_and_recorded_by_one_timeout_decision() -> None:
    """The same for the direct API's job_finished: a run that returned at once was
    recorded as timed out when a slow receiver kept its thread past the timeout, and
    job_finished said "succeeded" for a run the worker then recorded as timed out."""
    seen: list[tuple[str, RunOutcome, str | None]] = []

    def slow(sender: Any, job: ClaimedJob, outcome: RunOutcome, **kwargs: Any) -> None:
        exception = kwargs["exception"]
        seen.append((job.args[0], outcome, type(exception).__name__ if exception else None))
        if job.args[0] == "quick":
            time.sleep(0.8)

    mark.using(max_attempts=1).enqueue("late", sleep=0.6)
    mark.enqueue("quick")
    job_finished.connect(slow)
    try:
        with worker_thread(job_timeout=0.3, concurrency=2, burst=True) as worker:
            assert worker.join(30) == 0
    finally:
        job_finished.disconnect(slow)
    assert sorted(seen) == [
        ("late", RunOutcome.DEAD, "JobTimeout"),
        ("quick", RunOutcome.SUCCEEDED, None),
    ]
    assert dict(Job.objects.values_list("args__0", "status")) == {"late": "dead", "quick": "done"}


def test_a_task_that_leaves_a_transaction_open_fails_and_its_thread_keeps_working() -> None:
    leaks_transaction.enqueue("leaked")
    Job.objects.enqueue_many(JobSpec.build(mark, [f"after-{n}"]) for n in range(3))
    options(djtasks.leaks_transaction, max_attempts=1).enqueue()
    djtasks.calculate_meaning_of_life.enqueue()
    with worker_thread(burst=True, concurrency=1) as worker:  # one thread for all of them
        assert worker.join(30) == 0
    leaked = Job.objects.get(task=leaks_transaction.path)
    assert leaked.status == "dead"  # max_attempts=1
    assert leaked.last_error.startswith(
        "django_pgqueue.jobdb.TransactionLeftOpen: the task "
        "returned inside a transaction on 'default'"
    )
    assert run_counts("leaked") == {}  # its write was rolled back, not lost silently
    assert run_counts("after-") == {f"after-{n}": 1 for n in range(3)}
    framework_leak = Job.objects.get(task=djtasks.leaks_transaction.module_path)
    assert framework_leak.status == "dead"
    assert Job.objects.get(task=djtasks.calculate_meaning_of_life.module_path).result == 42
    assert status_counts() == {"dead": 2, "done": 4}


def test_an_idle_workers_one_job_is_recorded_without_the_completers_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing else of the worker's running or waiting, no outcome could share
    the statement: the completer writes at once instead of lingering. The linger
    is made a minute long here, so waiting for it could only time out."""
    from django_pgqueue.worker import completer

    monkeypatch.setattr(completer, "LINGER", 60.0)
    monkeypatch.setattr(completer, "LINGER_BUSY", 120.0)
    with worker_thread() as running:
        running.wait("listening")
        job = add.enqueue(2, 3)
        running.wait("recorded", timeout=20.0, where=lambda d: d["succeeded"] == 1)
        job.refresh_from_db()
        assert (job.status, job.result) == ("done", 5)
        assert status_counts() == {"done": 1}


def test_burst_claims_again_when_an_outcome_written_during_its_claim_made_a_job_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A snooze (or a retry without backoff) makes its job ready the moment its
    outcome is written. If that write commits while a claim runs, the claim finds
    nothing and the worker's books are empty when it returns: burst mode used to
    exit there, leaving the job queued. The interleaving is forced here: each
    outcome's write waits for a claim begun while it was pending, and that claim
    answers only once the write is recorded."""
    from django_pgqueue.worker.completer import Completer

    worker = WorkerThread(burst=True)
    raced = threading.Event()
    real_claim, real_write = Job.objects.claim, Completer._write

    def claim(*args: Any, **kwargs: Any) -> list[ClaimedJob]:
        recorded = worker.recorder.count("recorded")
        pending = worker.worker.completer.pending
        if pending:
            raced.set()
        jobs = real_claim(*args, **kwargs)
        if pending and not jobs:
            worker.wait("recorded", recorded + 1)
        return jobs

    def write(self: Completer, batch: list[Outcome]) -> None:
        assert raced.wait(10), "no claim began while the outcome was pending"
        raced.clear()
        real_write(self, batch)

    monkeypatch.setattr(Job.objects, "claim", claim)
    monkeypatch.setattr(Completer, "_write", write)
    job = snoozes.enqueue("raced", times=2)
    assert worker.start().join(30) == 0
    job.refresh_from_db()
    assert (job.status, job.result, job.snoozes) == ("done", 3, 2)
    assert run_counts() == {"raced": 3}


def test_a_tasks_framework_job_with_a_malformed_error_history_still_runs() -> None:
    """A hand-written history that is not a list of entries failed every attempt of
    a Tasks-framework job before its task started (AttributeError building the
    RUNNING result), until it was dead; a direct task ran regardless."""
    with connection.cursor() as cursor:
        for task, errors in [
            # (A constraint keeps the history a list: its entries are not checked.)
            ("tests.testapp.djtasks.echo", '[1, "x", null, {"exception": "ValueError"}]'),
            ("tests.testapp.djtasks.echo", "[[], {}]"),
            ("tests.testapp.tasks.noop", '[1, "x", null]'),
        ]:
            cursor.execute(
                "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
                "VALUES (%s, '[1, 2]', '{}', %s::jsonb, '[]')",
                [task, errors],
            )
    with worker_thread(burst=True) as worker:
        assert worker.join(30) == 0
    assert status_counts() == {"done": 3}
    results = sorted(map(str, Job.objects.values_list("result", flat=True)))
    assert results == ["None", "{'args': [1, 2], 'kwargs': {}}", "{'args': [1, 2], 'kwargs': {}}"]


def test_a_worker_run_in_a_test_thread_as_the_docs_show() -> None:
    """docs/tasks.md, "Testing": the worker's classes from ``django_pgqueue.worker``,
    run in a thread of the test and waited on through its events."""
    from django.db import connections

    from django_pgqueue.worker import Events, Worker, WorkerConfig

    events = Events()
    started = threading.Event()
    events.subscribe("started", lambda job: started.set())
    recorded: list[dict[str, Any]] = []
    events.subscribe("recorded", lambda **data: recorded.append(data))
    worker = Worker(WorkerConfig.from_settings(queues=["emails"], concurrency=2), events)
    status: list[int] = []

    def run() -> None:
        try:
            status.append(worker.run())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    result = djtasks.pgq(djtasks.echo).using(queue_name="emails").enqueue(42)
    assert started.wait(10)
    wait_for(lambda: sum(r["succeeded"] for r in recorded) == 1, 10, "the job to be recorded")
    worker.request_stop()
    thread.join(30)
    assert not thread.is_alive()
    assert status == [0]
    assert Job.objects.get(pk=int(result.id)).status == "done"


def test_a_job_is_not_charged_for_a_connection_closed_while_its_thread_sat_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server (idle_session_timeout, pg_terminate_backend) or a proxy closed a job
    thread's kept connection between two jobs, while the worker's own went on: the
    next job's first query failed, and with one attempt it was buried."""
    from django_pgqueue import jobdb

    monkeypatch.setattr(jobdb, "IDLE_CHECK", 0.0)  # the test need not sit out a second
    first = mark.enqueue("idle-first")
    with worker_thread(concurrency=1) as worker:
        wait_for(lambda: run_counts("idle-first") == {"idle-first": 1}, 20, "the first job")
        worker.wait("recorded")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND query LIKE 'INSERT INTO testapp_run%%'"
            )
            assert [row[0] for row in cursor.fetchall()] == [True]  # the job thread's
        second = mark.using(max_attempts=1).enqueue("idle-second")
        wait_for(lambda: Job.objects.get(pk=second.pk).status != "queued", 20, "the second job")
        wait_for(lambda: Job.objects.get(pk=second.pk).status != "running", 20, "its outcome")
    row = Job.objects.get(pk=second.pk)
    assert (row.status, row.attempts, row.last_error) == ("done", 1, "")
    assert Job.objects.get(pk=first.pk).status == "done"
    assert run_counts("idle-") == {"idle-first": 1, "idle-second": 1}


def test_outcomes_a_failing_completer_could_not_write_are_said_to_go_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The completer thread failing on a bug (not the database) ends the worker, which
    gives the runs back: its line said "the database is unreachable: the reaper
    returns them", wrong on both counts."""
    from django_pgqueue.worker.completer import Completer

    def write(self: Completer, batch: list[Outcome]) -> None:
        raise RuntimeError("a bug in the completer")

    monkeypatch.setattr(Completer, "_write", write)
    jobs = [add.enqueue(i, 1) for i in range(3)]
    caplog.set_level("INFO", logger="django_pgqueue")
    worker = WorkerThread(concurrency=3).start()
    assert worker.join(30) == 1
    (line,) = [r.getMessage() for r in caplog.records if "could not record" in r.getMessage()]
    # Those that had returned (a run still going at the crash is given back as one).
    listed = re.match(r"could not record the outcomes of jobs \[([\d, ]+)\]: ", line)
    assert listed, line
    assert {int(i) for i in listed[1].split(", ")} <= {job.pk for job in jobs}, line
    assert "unreachable" not in line, line
    assert "given back" in line, line
    assert status_counts() == {"queued": 3}  # given back, as the line says
