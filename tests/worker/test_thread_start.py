"""A worker that cannot start one of its threads (``RuntimeError: can't start new
thread`` under a limit on processes or memory) exits with an error saying so, its
registry row removed, the worker id's lock let go and the threads it had started
stopped. In-process workers on the test database, ``Thread.start`` failing for one
named thread as a process limit would make it; and ``runworker`` under a real
``prlimit --nproc``."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from django_pgqueue.models import Job, RegisteredWorker
from tests.testapp.tasks import mark
from tests.worker.conftest import ROOT
from tests.worker.inprocess import WorkerThread

pytestmark = [pytest.mark.django_db(transaction=True)]


def refuse_to_start(monkeypatch: pytest.MonkeyPatch, name: str) -> list[threading.Thread]:
    """``Thread.start`` raises for the thread called ``name``, as it does when no
    thread can be had; the worker's threads that did start."""
    real = threading.Thread.start
    started: list[threading.Thread] = []

    def start(self: threading.Thread) -> None:
        if self.name == name:
            raise RuntimeError("can't start new thread")
        real(self)
        if self.name.startswith("pgqueue-"):
            started.append(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return started


@pytest.mark.parametrize(
    ("refused", "first_ones"),
    [
        ("pgqueue-heartbeat", ["pgqueue-completer", "pgqueue-maintenance"]),
        ("pgqueue-scheduler", ["pgqueue-completer", "pgqueue-maintenance", "pgqueue-heartbeat"]),
        ("pgqueue-job-2", ["pgqueue-job-0", "pgqueue-job-1"]),
    ],
)
def test_a_thread_that_cannot_start_ends_the_worker_cleanly(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    refused: str,
    first_ones: list[str],
) -> None:
    """The RuntimeError went up through ``Worker.run`` (runworker printed a traceback)
    and left the registry row written at start behind, listed as a live worker
    until it aged out, with the threads already started still running (the
    heartbeat renewing that row), and in a process that lives on (as here) the
    worker id's lock held. Now the worker stops the threads it started, removes
    its row, lets go of the id and exits 1, logging why."""
    job = mark.enqueue("never-claimed")
    started = refuse_to_start(monkeypatch, refused)
    with caplog.at_level(logging.INFO, logger="django_pgqueue"):
        worker = WorkerThread(worker_id="no-thread", concurrency=4, poll_interval=5)
        assert worker.start().join(15) == 1
    monkeypatch.undo()
    names = [thread.name for thread in started]
    assert [name for name in first_ones if name not in names] == []
    assert refused not in names
    for thread in started:
        thread.join(5)
    assert [thread.name for thread in started if thread.is_alive()] == []
    assert not RegisteredWorker.objects.filter(pk="no-thread").exists()
    assert worker.recorder.count("claimed") == 0
    what = "job threads" if refused.startswith("pgqueue-job-") else f"thread {refused}"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert said == [
        f"could not start the worker's {what}: RuntimeError: can't start new thread "
        "(a limit on processes or threads, or memory?); stopping"
    ]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.locked_by) == ("queued", 0, None)
    # The id is free: a worker of the same id starts, runs the job and exits.
    again = WorkerThread(worker_id="no-thread", concurrency=1, burst=True, listen=False)
    assert again.start().join(15) == 0
    assert Job.objects.get(pk=job.pk).status == "done"


def tasks_of(uid: int) -> int:
    """Threads of every process of ``uid``: what RLIMIT_NPROC counts."""
    count = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == uid:
                count += len(list((proc / "task").iterdir()))
        except OSError:  # gone meanwhile
            continue
    return count


@pytest.mark.slow
def test_runworker_under_a_process_limit_exits_with_an_error_and_no_row(db_url: str) -> None:
    """A real ``prlimit --nproc`` on ``runworker`` (as the nobody user: root is
    exempt from the limit), which lets it start a few threads and no more: it printed
    a traceback and left its row in the registry, alive, for the heartbeat's lease."""
    setpriv, prlimit = shutil.which("setpriv"), shutil.which("prlimit")
    if os.geteuid() != 0 or setpriv is None or prlimit is None:
        pytest.skip("needs root, setpriv and prlimit to run a worker under another user")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no nobody user")
    job = mark.enqueue("never-claimed")
    # The main thread and three service threads: the fourth (of five, and the job
    # threads) cannot start. It reads this checkout as nobody through DAC overrides.
    limit = tasks_of(nobody.pw_uid) + 4
    caps = "+dac_read_search,+dac_override"
    command = [
        *(setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"),
        *(f"--inh-caps={caps}", f"--ambient-caps={caps}", prlimit, f"--nproc={limit}"),
        *(sys.executable, "-m", "django", "runworker", "--burst", "--worker-id", "nproc"),
        "--settings=tests.settings",
    ]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": db_url, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Traceback" not in said, said
    assert "RuntimeError: can't start new thread (a limit on processes or threads" in said, said
    assert not RegisteredWorker.objects.filter(pk="nproc").exists()
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.locked_by) == ("queued", 0, None)
