"""An embedded server lives no longer than the process that owns it, and only
entry points start one: importing settings (as mypy does) never does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devtools.conftest import (
    ROOT,
    alive,
    child_env,
    inner_pytest,
    kill_server,
    postmaster_pid,
    processes_mentioning,
)
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.slow

OWNER = """
import sys
from devtools.embedded_pg import EmbeddedPostgres

server = EmbeddedPostgres()
server.start()
print(server.data_dir, flush=True)
sys.stdin.read()  # until the test kills us
"""

SESSION = """
import os
import time
from pathlib import Path

from devtools import embedded_pg


def test_wait() -> None:
    Path(os.environ["REPORT_TO"]).write_text(str(embedded_pg.current().data_dir))
    time.sleep(300)  # until the outer test kills us
"""


def assert_gone_after_sigkill(owner: subprocess.Popen[str], data_dir: Path) -> None:
    postmaster = postmaster_pid(data_dir)
    assert alive(postmaster)
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=10)
    try:
        wait_for(lambda: not alive(postmaster), 15, "the server to stop")
        wait_for(lambda: not data_dir.parent.exists(), 15, "its folder to be removed")
    finally:
        kill_server(data_dir)
        shutil.rmtree(data_dir.parent, ignore_errors=True)


def test_the_server_and_its_folder_go_when_the_owner_is_sigkilled() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        cwd=ROOT,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    data_dir = Path(owner.stdout.readline().strip())
    assert_gone_after_sigkill(owner, data_dir)


def test_a_sigkilled_pytest_session_leaves_no_server(tmp_path: Path) -> None:
    (tmp_path / "test_wait.py").write_text(SESSION)
    report = tmp_path / "data_dir"
    session = subprocess.Popen(
        inner_pytest("-q", str(tmp_path / "test_wait.py")),
        cwd=ROOT,
        env=child_env(REPORT_TO=str(report)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: report.exists() or session.poll() is not None,
            60,
            "the session to start its server",
        )
    finally:
        if session.poll() is not None:
            pytest.fail(f"the session ended early:\n{session.communicate()[0]}")
    assert_gone_after_sigkill(session, Path(report.read_text()))


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A TMPDIR the server user could use, unlike pytest's tmp_path (0700 folders above)."""
    folder = Path(tempfile.mkdtemp(prefix="pgqueue-settings-test-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize(
    "module",
    [
        "tests.settings",
        "example_project.settings",
        "benchmarks.settings",
        "benchmarks.peer_settings",
    ],
)
def test_importing_settings_without_database_url_starts_no_server(
    module: str, open_tmp: Path
) -> None:
    probe = (
        f"import importlib, os\n"
        f"try:\n    importlib.import_module({module!r})\n"
        f"except Exception as exc:\n    print('import failed:', exc)\n"
        f"print('DATABASE_URL' in os.environ)\n"
    )
    # A server started on import would put its data directory (and, as root in older
    # versions, a copy of the binaries) in TMPDIR, and export its URL.
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=child_env(TMPDIR=str(open_tmp)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    *messages, exported = done.stdout.strip().splitlines()
    assert exported == "False", done.stdout
    # Those that need a database say so; tests.settings imports (mypy reads it).
    expected = (
        []
        if module == "tests.settings"
        else ["import failed: Set the DATABASE_URL environment variable"]
    )
    assert messages == expected
    assert list(open_tmp.iterdir()) == []
    assert processes_mentioning(str(open_tmp)) == []


def test_the_session_database_is_the_embedded_server_pytest_started() -> None:
    from devtools import embedded_pg

    server = embedded_pg.current()
    if server is None:
        pytest.skip("DATABASE_URL was set: this session has no embedded server")
    assert os.environ["DATABASE_URL"] == server.url
    assert f":{server.password}@" in server.url
    assert alive(postmaster_pid(server.data_dir))
