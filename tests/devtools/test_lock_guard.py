"""A test that fails holding a row lock on a raw connection no longer hangs the run
(devtools/lock_guard.py): an inner pytest session on this server shows it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from tests.devtools.conftest import ROOT, inner_pytest

pytestmark = pytest.mark.django_db(transaction=True)

#: The inner session: its first test fails while a connection it keeps holds a row
#: lock (as a traceback keeps one); the flush after it, TRUNCATE, waited for ever.
LEAKING = """
import psycopg
import pytest

from django_pgqueue.models import Job
from tests.conftest import db_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)
KEPT: list[psycopg.Connection] = []


def test_fails_holding_a_row_lock(db_url: str) -> None:
    job = Job.objects.enqueue("tests.testapp.tasks.add", args=[1, 2])
    holder = psycopg.connect(db_url)
    KEPT.append(holder)
    holder.execute("SELECT 1 FROM pgqueue_job WHERE id = %s FOR UPDATE", [job.pk])
    assert job.pk is None, "failed while holding the row lock"


def test_runs_next_on_a_flushed_database() -> None:
    assert not Job.objects.exists()
    with pytest.raises(psycopg.OperationalError, match="terminat"):
        KEPT[0].execute("SELECT 1")
"""


def test_a_session_left_holding_a_row_lock_is_ended_before_the_flush(
    db_url: str, tmp_path: Path
) -> None:
    """Without the guard the inner run hangs in its first flush (the subprocess
    times out); with it, the run ends: the test that left the session fails at its
    teardown too, naming the session, and the next test finds the tables flushed."""
    (tmp_path / "test_leaking.py").write_text(LEAKING)
    ours = urlsplit(db_url)
    inner = ours.path.lstrip("/") + "_leak"  # a database of its own on this server
    server = urlunsplit(ours._replace(path="/postgres"))
    try:
        run = subprocess.run(
            inner_pytest(
                *("-p", "no:randomly"),  # in the file's order: the leak, then the next test
                *("-q", str(tmp_path / "test_leaking.py")),
            ),
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": server, "PGQUEUE_TEST_DATABASE": inner},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired as hung:
        said = hung.stdout.decode(errors="replace") if isinstance(hung.stdout, bytes) else ""
        pytest.fail(f"the inner run hung (its flush waits for the lock):\n{said}")
    finally:
        with psycopg.connect(server, autocommit=True) as admin:  # left if it hung
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(inner))
            )
    out = run.stdout
    assert run.returncode == 1, out
    assert "1 failed, 1 passed, 1 error" in out, out
    assert "ERROR at teardown of test_fails_holding_a_row_lock" in out, out
    assert "the test left sessions holding or waiting for locks" in out, out
    assert "'SELECT 1 FROM pgqueue_job WHERE id = $1 FOR UPDATE'" in out, out
