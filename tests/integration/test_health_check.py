"""``queuestats --check``: exit 0 when healthy, 1 with one line per failed condition."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.utils import timezone

from django_pgqueue.models import Job, RegisteredWorker
from tests.testapp.tasks import add
from tests.worker.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def check(*args: str) -> tuple[int, list[str]]:
    """call_command's exit status and lines: a failed check raises CommandError."""
    out = io.StringIO()
    try:
        call_command("queuestats", "--check", *args, stdout=out)
    except CommandError as exc:
        failed: CommandError | None = exc
    else:
        failed = None
    lines = out.getvalue().splitlines()
    if failed is None:
        return 0, lines
    assert str(failed) == f"unhealthy: {'; '.join(lines)}"  # the same lines, in one
    return failed.returncode, lines


def worker(worker_id: str, queues: list[str] | None, *, alive: bool = True) -> None:
    RegisteredWorker.objects.create(
        id=worker_id,
        hostname="host",
        pid=1,
        queues=queues,
        concurrency=4,
        version="0",
        alive_until=timezone.now() + dt.timedelta(minutes=1 if alive else -1),
    )


def ready_since(queue: str, seconds: float) -> None:
    job = add.using(queue=queue).enqueue(1, 1)
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - dt.timedelta(seconds=seconds))


def test_healthy_exits_0() -> None:
    assert check() == (0, ["ok"])  # no jobs, no workers: nothing waits for anyone
    worker("w1", ["mail"])
    worker("w2", None)  # serves every queue
    ready_since("mail", 5)
    ready_since("pdf", 5)
    add.using(queue="later", delay=3600).enqueue(1, 1)  # queued, not ready: needs no worker yet
    assert check("--max-ready-age", "1m", "--max-dead", "0") == (0, ["ok"])


def test_a_queue_with_ready_jobs_and_no_live_worker_fails() -> None:
    worker("w1", ["mail"])
    worker("w2", None, alive=False)  # gone: serves nothing any more
    ready_since("mail", 5)
    ready_since("pdf", 7)
    status, lines = check()
    assert status == 1
    assert len(lines) == 1
    assert lines[0].startswith("queue pdf: jobs are ready (the oldest waiting 7.")
    assert lines[0].endswith("s) and no live worker serves it")


@pytest.mark.parametrize("queues", [[1, None], 1, "null", {"1": 1}])
def test_queues_written_by_hand_not_as_a_list_of_names_serve_no_queue(queues: object) -> None:
    """A ``queues`` that is no list of names (a row written by hand) serves no
    queue, not the queue its JSON spells: ``[1, null]`` does not serve "1"."""
    worker("w1", queues)  # type: ignore[arg-type]
    ready_since("1", 5)
    ready_since("null", 5)
    status, lines = check()
    assert status == 1
    assert [line.split(":")[0] for line in lines] == ["queue 1", "queue null"]


def test_alive_or_gone_is_the_database_clocks_word(
    monkeypatch: pytest.MonkeyPatch, admin_client: Client
) -> None:
    """Workers write alive_until with the database's clock; a host whose clock is a
    minute ahead called them gone (``--check`` failed with "no live worker"), and so
    did queuestats and the admin."""
    worker("w1", ["mail"])  # alive for one more minute
    ready_since("mail", 5)
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + dt.timedelta(minutes=2))
    assert check() == (0, ["ok"])
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    assert " alive " in out.getvalue(), out.getvalue()
    assert " gone " not in out.getvalue()
    page = admin_client.get("/admin/django_pgqueue/registeredworker/").content.decode()
    assert 'class="pgqueue-worker-alive"' in page
    assert "pgqueue-worker-gone" not in page


def test_an_old_ready_job_fails_with_its_queue_and_age() -> None:
    worker("w", None)
    ready_since("mail", 400)
    ready_since("pdf", 10)
    status, lines = check("--max-ready-age", "5m")
    assert status == 1
    assert len(lines) == 1
    assert lines[0].startswith("queue mail: the oldest ready job has waited 40")
    assert lines[0].endswith("s (more than --max-ready-age 300s)")
    # 0: any ready job at all is too old (a job not yet due is not ready).
    status, lines = check("--max-ready-age", "0")
    assert (status, [line.split(":")[0] for line in lines]) == (1, ["queue mail", "queue pdf"])


def test_too_many_dead_jobs_in_the_last_hour_fail() -> None:
    worker("w", None)
    recent = [add.using(queue=q).enqueue(1, 1).pk for q in ("mail", "mail", "pdf")]
    old = add.using(queue="mail").enqueue(1, 1).pk
    Job.objects.filter(pk__in=recent).update(status="dead", done_at=timezone.now())
    Job.objects.filter(pk=old).update(status="dead", done_at=timezone.now() - dt.timedelta(hours=2))
    assert check("--max-dead", "3") == (0, ["ok"])
    assert check("--max-dead", "2") == (
        1,
        ["3 jobs died in the last hour (more than --max-dead 2): mail 2, pdf 1"],
    )


def test_running_jobs_no_reaper_returned_fail() -> None:
    """Every worker is gone: nothing reaps, so jobs whose lease lapsed stay running."""
    job = add.using(queue="mail").enqueue(1, 1)
    Job.objects.claim("gone", limit=1)
    assert check() == (0, ["ok"])  # its lease holds: the worker may still be at it
    Job.objects.filter(pk=job.pk).update(locked_until=timezone.now() - dt.timedelta(seconds=20))
    assert check() == (0, ["ok"])  # within two reap intervals: a reaper will come
    Job.objects.filter(pk=job.pk).update(locked_until=timezone.now() - dt.timedelta(minutes=5))
    assert check() == (
        1,
        [
            "1 running job(s) lost their lease more than 30s ago and no reaper returned "
            "them: is any worker (or reapjobs) running?"
        ],
    )


def test_every_failed_condition_is_its_own_line() -> None:
    ready_since("mail", 600)
    Job.objects.filter(pk=add.enqueue(1, 1).pk).update(status="dead", done_at=timezone.now())
    status, lines = check("--max-ready-age", "60", "--max-dead", "0")
    assert status == 1
    assert [line.split(":")[0] for line in lines] == [
        "queue mail",
        "queue mail",
        "1 job died in the last hour (more than --max-dead 0)",  # one job, not "1 jobs"
    ]


def test_limits_without_check_and_bad_limits_are_one_line_errors() -> None:
    with pytest.raises(CommandError, match="--interval goes with --loop"):
        call_command("reapjobs", "--interval", "5")
    with pytest.raises(CommandError, match="--max-ready-age and --max-dead go with --check"):
        call_command("queuestats", "--max-dead", "1")
    with pytest.raises(CommandError, match="--json and --check exclude each other"):
        call_command("queuestats", "--check", "--json")  # it printed the text lines
    with pytest.raises(CommandError, match="argument --max-dead: expected a whole number"):
        call_command("queuestats", "--check", "--max-dead", "-1")
    with pytest.raises(CommandError, match="argument --max-ready-age: expected a duration"):
        call_command("queuestats", "--check", "--max-ready-age", "soon")


def test_a_failed_check_in_call_command_raises_command_error_not_system_exit() -> None:
    """It raised SystemExit(1), which ends a caller's process (a view, a Celery beat
    task, a test runner) unless it knows to catch what is no Exception."""
    ready_since("mail", 5)
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("queuestats", "--check", stdout=out)
    assert failed.value.returncode == 1
    assert str(failed.value).startswith("unhealthy: queue mail: jobs are ready (the oldest")
    assert out.getvalue().startswith("queue mail: jobs are ready (the oldest")


def test_the_command_line_exit_status_is_what_a_probe_reads(db_url: str) -> None:
    ready_since("mail", 5)
    command = [sys.executable, "-m", "django", "queuestats", "--check", "--settings=tests.settings"]
    env = {**os.environ, "DATABASE_URL": db_url}
    failed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (failed.returncode, failed.stdout.splitlines()[0][:36], failed.stderr) == (
        1,
        "queue mail: jobs are ready (the olde",
        "",  # the lines, and nothing else
    )
    worker("w", ["mail"])
    passed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (passed.returncode, passed.stdout) == (0, "ok\n")


@pytest.mark.parametrize("done_at", ["'infinity'", "now() + interval '2 hours'"])
def test_a_death_ahead_of_the_clock_did_not_happen_in_the_last_hour(done_at: str) -> None:
    """A dead job written by hand with done_at = 'infinity' failed --max-dead for
    ever ("1 job died in the last hour"), and queuestats counted it among the dead
    of the last 24 hours: the workers write done_at with the database's clock, so
    no death they record lies ahead of it."""
    worker("w", None)
    job = add.using(queue="mail").enqueue(1, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE pgqueue_job SET status = 'dead', done_at = {done_at} WHERE id = %s", [job.pk]
        )
    assert check("--max-dead", "0") == (0, ["ok"])
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    assert json.loads(out.getvalue())["dead_last_24h"] == 0
