"""restart() and crash(): what the reliability tests do to the database."""

from __future__ import annotations

import psycopg
import pytest

from devtools.embedded_pg import EmbeddedPostgres
from tests.devtools.conftest import alive, postmaster_pid

pytestmark = pytest.mark.slow

RECOVERY = "automatic recovery in progress"  # the server's word for "I crashed"


def log_after(server: EmbeddedPostgres, offset: int) -> str:
    return server.log_file.read_text()[offset:]


def test_crash_restart_recovers_committed_rows(server: EmbeddedPostgres) -> None:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")  # the server's default is off
        conn.execute("CREATE TABLE crash_test (n int)")
        conn.execute("INSERT INTO crash_test VALUES (1)")
    pid = postmaster_pid(server.data_dir)
    with psycopg.connect(server.url, autocommit=True) as cut:
        offset = len(server.log_file.read_text())
        server.restart(down_for=0.2, mode="immediate")
        assert not alive(pid)
        with pytest.raises(psycopg.OperationalError):
            cut.execute("SELECT 1")
    assert RECOVERY in log_after(server, offset)
    with psycopg.connect(server.url) as conn:
        assert conn.execute("SELECT n FROM crash_test").fetchall() == [(1,)]


def test_crash_then_start(server: EmbeddedPostgres) -> None:
    pid = postmaster_pid(server.data_dir)
    offset = len(server.log_file.read_text())
    server.crash()
    assert not alive(pid)
    server.start()
    assert RECOVERY in log_after(server, offset)


def test_a_fast_restart_is_clean(server: EmbeddedPostgres) -> None:
    offset = len(server.log_file.read_text())
    server.restart()
    assert RECOVERY not in log_after(server, offset)
    with psycopg.connect(server.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
