"""The management commands: clean one-line errors, and what each prints."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import status_counts
from tests.testapp.tasks import add
from tests.worker.conftest import ROOT, WorkerProcess, django_command, wait_for
from tests.worker.test_joblog import collected

BAD_ARGUMENTS = [
    ("runworker", ["--concurrency", "0"], "argument --concurrency: expected a whole number"),
    ("runworker", ["--concurrency", "many"], "argument --concurrency: expected a whole number"),
    ("runworker", ["--max-jobs", "-5"], "argument --max-jobs: expected a whole number"),
    ("runworker", ["--prefetch", "-1"], "argument --prefetch: expected auto or a whole number"),
    ("runworker", ["--lease", "0"], "argument --lease: expected a number of seconds, at least 0.1"),
    (
        "runworker",
        ["--lease", "1e13"],
        "argument --lease: expected a number of seconds, at least 0.1",
    ),
    ("runworker", ["--concurrency", "100000"], "expected a whole number from 1 to 1,000"),
    ("runworker", ["--worker-id", "w\udcff"], "argument --worker-id: expected a non-empty"),
    ("runworker", ["--shutdown-timeout", "1e300"], "argument --shutdown-timeout: expected"),
    ("reapjobs", ["--loop", "--interval", "1e308"], "argument --interval: expected"),
    ("prunejobs", ["--older-than", "1000000d"], "argument --older-than: expected a duration"),
    ("prunejobs", ["--older-than", "7d", "--batch-size", "99999999999"], "--batch-size"),
    ("runworker", ["--lease", "nan"], "argument --lease: expected a number of seconds"),
    ("runworker", ["--poll-interval", "soon"], "argument --poll-interval: expected a number"),
    ("runworker", ["--shutdown-timeout", "-1"], "argument --shutdown-timeout: expected"),
    ("runworker", ["--job-timeout", "0"], "argument --job-timeout: expected"),
    ("runworker", ["--queues", ","], "argument --queues: expected comma-separated queue names"),
    ("runworker", ["--queues", "a b"], "argument --queues: expected comma-separated"),
    ("runworker", ["--worker-id", " "], "argument --worker-id: expected a non-empty worker id"),
    ("runworker", ["--bogus"], "unrecognized arguments: --bogus"),
    ("reapjobs", ["--interval", "x"], "argument --interval: expected a number of seconds"),
    ("prunejobs", [], "the following arguments are required: --older-than"),
    ("prunejobs", ["--older-than", "0"], "argument --older-than: expected a duration above 0"),
    ("prunejobs", ["--older-than", "7 days"], "argument --older-than: expected a duration"),
    (
        "prunejobs",
        ["--older-than", "7d", "--status", "queued"],
        "argument --status: expected one or more of done, dead, cancelled, comma-separated",
    ),
    ("prunejobs", ["--older-than", "7d", "--batch-size", "0"], "argument --batch-size"),
    ("queuestats", ["--bogus"], "unrecognized arguments: --bogus"),
    ("queuestats", ["--max-dead", "1"], "--max-ready-age and --max-dead go with --check"),
    ("queuestats", ["--check", "--json"], "--json and --check exclude each other"),
    ("queuestats", ["--check", "--max-dead", "-1"], "argument --max-dead: expected"),
    ("reapjobs", ["--interval", "5"], "--interval goes with --loop"),
    ("runworker", ["--metrics-addr", ""], "argument --metrics-addr: expected an address"),
    ("pausequeue", [], "the following arguments are required: NAME"),
    ("pausequeue", ["a b"], "argument NAME: expected a queue name (1-64 letters"),
    # A name no pause can hold (resumequeue takes any paused one: "x/y" is looked up,
    # and these runs have no job table; test_resume_any_paused refuses it).
    ("resumequeue", ["emails", "x" * 65], "argument NAME: expected a queue name"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("command", "args", "message"), BAD_ARGUMENTS)
def test_every_bad_value_is_a_one_line_error(command: str, args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "django", command, "--settings=tests.settings", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # 2, as argparse and Django's own commands exit for a command line they cannot
    # take: queuestats --check keeps 1 for an unhealthy queue.
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"CommandError: {command}: ")
    assert message in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_database_out_of_reach_or_without_the_tables_is_a_one_line_error(db_url: str) -> None:
    unreachable = "postgres://postgres@127.0.0.1:1/nowhere"
    for args in (
        ("queuestats", "--check"),
        ("queuestats",),
        ("prunejobs", "--older-than", "7d"),
        ("reapjobs",),
        ("pausequeue", "emails"),
        ("schedules",),
    ):
        result = django_command(unreachable, *args)
        assert result.returncode == 1, result
        assert result.stderr.startswith("CommandError: cannot reach the database: "), result
        assert "Traceback" not in result.stderr
    # A burst worker is over once the queue is empty: with no database to empty it
    # stops, with one line (it retried for ever). A long-running worker waits for
    # a server that is down instead (test_faults).
    missing = db_url.rsplit("/", 1)[0] + f"/pgqueue_missing_{os.getpid()}"
    for url in (unreachable, missing):
        result = django_command(url, "runworker", "--burst")
        assert result.returncode == 1, result
        (line,) = [
            line for line in result.stderr.splitlines() if "cannot reach the database: " in line
        ]
        assert line.startswith("cannot reach the database: connection failed: "), line
        assert line.endswith("does not exist" if url == missing else "Connection refused"), line
        assert "Traceback" not in result.stderr
    # A database that does not exist ends it at once; a server down at start is
    # tried for a few seconds (tests/worker/test_startup_database.py).
    empty = f"pgqueue_empty_{os.getpid()}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {empty}")
    try:
        result = django_command(db_url.rsplit("/", 1)[0] + f"/{empty}", "queuestats", "--check")
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(
            "CommandError: the job table is missing or older than this version of "
            'django-pgqueue (relation "pgqueue_'
        )
        assert line.endswith("does not exist): run `manage.py migrate`")
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {empty}")


@pytest.mark.slow
def test_a_burst_worker_says_once_that_it_waits_for_a_slow_database() -> None:
    """Each try to reach the database takes longer than the pause between tries (a
    server that accepts, then hangs up after 0.7 s): the "trying for 5s" line was
    only given when the first try took under 0.5 s, so here the worker waited
    in silence."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def hang_up_late() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            time.sleep(0.7)
            conn.close()

    threading.Thread(target=hang_up_late, daemon=True).start()
    try:
        result = django_command(
            f"postgres://postgres@127.0.0.1:{port}/slow", "runworker", "--burst"
        )
    finally:
        server.close()
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    waiting = [line for line in lines if "cannot reach the database yet, trying for 5s: " in line]
    assert len(waiting) == 1, result.stderr
    assert len([line for line in lines if "cannot reach the database: " in line]) == 1, lines


def test_bad_settings_are_a_one_line_error_too() -> None:
    from django.core.management.base import CommandError
    from django.test import override_settings

    with (
        override_settings(PGQUEUE={"LEASE": 3, "HEARTBEAT_INTERVAL": 5}),
        pytest.raises(
            CommandError,
            match=r"PGQUEUE\['HEARTBEAT_INTERVAL'\] = 5: expected "
            r"fewer seconds than LEASE \(3\)",
        ),
    ):
        call_command("runworker", "--burst")
    # A --lease on the command line can undercut a heartbeat the settings allowed.
    with (
        override_settings(PGQUEUE={"HEARTBEAT_INTERVAL": 5}),
        pytest.raises(
            CommandError, match="heartbeat interval 5s must be shorter than the lease 3s"
        ),
    ):
        call_command("runworker", "--burst", "--lease", "3")


def test_a_lease_too_short_to_start_a_job_is_refused_on_the_command_line() -> None:
    """A lease of a few microseconds was taken (it is above 0): the lease lapsed before
    each job could start, and a burst worker gave the job back and claimed it for ever."""
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"--lease: expected .* at least 0\.1 .*got '0\.05'"):
        call_command("runworker", "--burst", "--lease", "0.05")


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["schedules"],
        ["queuestats"],
        ["queuestats", "--check"],
        ["reapjobs"],
        ["prunejobs", "--older-than", "1d"],
        ["pausequeue", "emails"],
    ],
)
def test_bad_settings_with_the_checks_skipped_are_one_line(db_url: str, args: list[str]) -> None:
    """``--skip-checks`` left a bad PGQUEUE to the command's first read of it: a
    traceback from every command but runworker."""
    for pgqueue in (
        {"LEASE": -1},
        {"PERIODIC": {"nightly": {"task": "tests.testapp.tasks.mark", "cron": "61 * * * *"}}},
    ):
        env = {"PGQUEUE_TEST_PGQUEUE": json.dumps(pgqueue)}
        result = django_command(db_url, *args, "--skip-checks", env=env)
        assert result.returncode == 1, result
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("CommandError: PGQUEUE["), line


@pytest.mark.django_db(transaction=True)
def test_a_task_module_that_does_not_exist_stops_the_worker_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django.test import override_settings

    with (
        override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside", "nope.tasks"]}),
        pytest.raises(SystemExit) as stopped,
    ):
        call_command("runworker", "--burst")
    assert stopped.value.code == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [(r.getMessage(), r.exc_info) for r in errors] == [
        (
            "PGQUEUE['TASK_MODULES'] names 'nope.tasks', which cannot be imported: "
            "No module named 'nope'",
            None,
        )
    ]


@pytest.mark.django_db(transaction=True)
def test_a_task_its_backend_refuses_stops_the_worker_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django.test import override_settings

    from tests.unit.test_checks import REFUSED

    with (
        override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.refused"]}),
        pytest.raises(SystemExit) as stopped,
    ):
        call_command("runworker", "--burst")
    assert stopped.value.code == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [(r.getMessage(), r.exc_info) for r in errors] == [(REFUSED, None)]


@pytest.mark.django_db(transaction=True)
def test_runworker_burst_and_max_jobs() -> None:
    Job.objects.enqueue_many(JobSpec.build(add, [i, 1]) for i in range(10))
    call_command("runworker", "--burst", "--max-jobs", "4", "--concurrency", "2", verbosity=0)
    assert status_counts() == {"done": 4, "queued": 6}
    call_command("runworker", "--burst", "--queues", "other", verbosity=0)
    assert status_counts() == {"done": 4, "queued": 6}
    call_command("runworker", "--burst", verbosity=0)
    assert status_counts() == {"done": 10}
    assert sorted(int(str(r)) for r in Job.objects.values_list("result", flat=True)) == list(
        range(1, 11)
    )


@pytest.mark.django_db(transaction=True)
def test_reapjobs_prints_what_it_returned_and_buried() -> None:
    returned = add.enqueue(1, 1)
    buried = add.using(max_attempts=1).enqueue(2, 2)
    Job.objects.claim("gone", limit=2, lease=0.01)
    time.sleep(0.05)
    out = io.StringIO()
    with collected() as log:
        call_command("reapjobs", stdout=out)
    assert out.getvalue() == "returned 1 job to the queue, buried 1\n"
    assert status_counts() == {"queued": 1, "dead": 1}
    # One line per job on the django_pgqueue logger, as a worker's reaper logs them.
    why = "LeaseExpired: the lease expired: worker gone stopped renewing it before recording"
    (warned,) = log.about(returned.pk)
    assert warned.levelno == logging.WARNING
    assert re.fullmatch(
        rf"job {returned.pk} \({add.path}\) failed on attempt 1 of \d+, retrying in "
        rf"[\d.]+s: {why} an outcome",
        warned.getMessage(),
    ), warned.getMessage()
    (erred,) = log.about(buried.pk)
    assert erred.levelno == logging.ERROR
    assert erred.getMessage() == (
        f"job {buried.pk} ({add.path}) buried dead after attempt 1 of 1: {why} an outcome"
    )


def test_reapjobs_loop_prints_each_pass_through_a_pipe_as_it_happens(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """Piped, Python buffers stdout in blocks; a reaper run by a supervisor or in a
    container must still show each pass when it happens, not kilobytes later."""
    # An empty PYTHONUNBUFFERED is unset to Python: stdout is block-buffered.
    reaper = start_worker(
        command="reapjobs", args=("--loop", "--interval", "0.2"), env={"PYTHONUNBUFFERED": ""}
    )
    line = "returned 0 jobs to the queue, buried 0"
    wait_for(lambda: reaper.output.count(line) >= 2, 30, "two passes through the pipe")
    passes = [text for text in reaper.output.splitlines() if text.startswith("returned")]
    assert passes[:2] == [line] * 2
    assert reaper.proc.poll() is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_reapjobs_loop_stops_cleanly_on_sigterm_and_sigint(
    start_worker: Callable[..., WorkerProcess], signum: int
) -> None:
    reaper = start_worker(command="reapjobs", args=("--loop", "--interval", "30"))
    reaper.wait_for_output("returned 0 jobs to the queue")
    reaper.signal(signum)
    assert reaper.wait(10) == 0
    assert reaper.output.splitlines()[-1] == "stopped"
    assert "Traceback" not in reaper.output


@pytest.mark.django_db(transaction=True)
def test_prunejobs_dry_run_then_delete() -> None:
    ids = Job.objects.enqueue_many(JobSpec.build(add, [i, i]) for i in range(6))
    old = timezone.now() - dt.timedelta(days=8)
    Job.objects.filter(pk__in=ids[:3]).update(status="done", done_at=old)
    Job.objects.filter(pk__in=ids[3:5]).update(status="dead", done_at=old)
    out = io.StringIO()
    call_command("prunejobs", "--older-than", "7d", "--dry-run", stdout=out)
    assert out.getvalue() == "would delete 5 jobs (done,dead,cancelled)\n"
    call_command("prunejobs", "--older-than", "7d", "--status", "dead", stdout=out)
    assert out.getvalue().endswith("deleted 2 jobs (dead)\n")
    assert status_counts() == {"done": 3, "queued": 1}


@pytest.mark.django_db(transaction=True)
def test_queuestats_table_and_json() -> None:
    add.using(queue="mail").enqueue(1, 1)
    add.using(queue="mail").enqueue(1, 2)
    add.using(queue="pdf").enqueue(1, 3)
    Job.objects.claim("w", queues=["pdf"])
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert {(q["queue"], q["status"], q["jobs"]) for q in data["queues"]} == {
        ("mail", "queued", 2),
        ("pdf", "running", 1),
    }
    assert data["dead_last_24h"] == 0
    assert data["running_past_lease"] == 0
    assert data["oldest_ready_age_seconds"] >= 0
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    text = out.getvalue()
    assert "mail" in text
    assert "queued" in text
    assert "dead in the last 24h: 0" in text


@pytest.mark.django_db(transaction=True)
def test_call_command_checks_its_values_as_the_command_line_does() -> None:
    """call_command() passes keyword values past argparse's converters: "7d" reached
    prune() as text (an InvalidJob traceback), concurrency=0 made a burst worker
    wait for ever, and queues="a,b" was served as the queues 'a', ',' and 'b'."""
    from django.core.management.base import CommandError

    Job.objects.filter(pk=add.enqueue(1, 2).pk).update(status="done", done_at=timezone.now())
    old = add.enqueue(3, 4)
    Job.objects.filter(pk=old.pk).update(
        status="done", done_at=timezone.now() - dt.timedelta(days=8)
    )
    out = io.StringIO()
    call_command("prunejobs", older_than="7d", stdout=out)
    assert out.getvalue() == "deleted 1 job (done,dead,cancelled)\n"
    bad: list[tuple[dict[str, Any], str]] = [
        ({"concurrency": 0}, "argument --concurrency: expected a whole number"),
        ({"lease": -1}, "argument --lease: expected a number of seconds, at least 0.1"),
        ({"queues": "a,,b c"}, "argument --queues: expected comma-separated queue names"),
        ({"poll_interval": float("nan")}, "argument --poll-interval: expected"),
        # Values of other types: a flag's, a list, a number where text goes, a choice.
        ({"concurrency": True}, "argument --concurrency: expected a whole number"),
        ({"queues": ["bad name"]}, "argument --queues: expected comma-separated queue names"),
        ({"lease": dt.timedelta(seconds=-1)}, "argument --lease: expected a number"),
        ({"verbosity": 5}, "argument -v/--verbosity: 5 is not one of 0, 1, 2, 3"),
        ({"lease": [30]}, r"argument --lease: \[30\] is not a value it takes"),
        ({"queues": []}, r"argument --queues: \[\] is not a value it takes"),
    ]
    for options, message in bad:
        with pytest.raises(CommandError, match=message):
            call_command("runworker", burst=True, **options)
    add.using(queue="b").enqueue(5, 6)
    call_command("runworker", burst=True, queues="a,b", stdout=io.StringIO())
    assert Job.objects.values_list("queue", "status", "result").get(queue="b") == ("b", "done", 11)
    # A list of queues, a timedelta and a number for a text option read as written.
    add.using(queue="c").enqueue(7, 8)
    call_command(
        "runworker",
        burst=True,
        queues=["a", "c"],
        lease=dt.timedelta(seconds=30),
        worker_id=5,
        verbosity="1",  # converted before its choices are checked, as argparse does
        stdout=io.StringIO(),
    )
    assert Job.objects.values_list("status", "worker_ids").get(queue="c") == ("done", ["5"])
    # A repeated --queues adds to the one before (it used to replace it).
    add.using(queue="d").enqueue(1, 1)
    add.using(queue="e").enqueue(2, 2)
    call_command("runworker", "--burst", "--queues", "d", "--queues", "e,d", verbosity=0)
    assert set(Job.objects.filter(queue__in=["d", "e"]).values_list("status", flat=True)) == {
        "done"
    }
    with pytest.raises(CommandError, match="argument --older-than: expected a duration"):
        call_command("prunejobs", older_than="soon")
    # A required option reaches argparse as str(value): a timedelta too.
    out = io.StringIO()
    call_command("prunejobs", older_than=dt.timedelta(days=7), dry_run=True, stdout=out)
    assert out.getvalue() == "would delete 0 jobs (done,dead,cancelled)\n"
    with pytest.raises(CommandError, match=r"argument --status: \[\] is not a value it takes"):
        call_command("prunejobs", older_than="7d", status=[])  # not "every status"
