"""An embedded server lives no longer than the process that owns it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devtools.conftest import ROOT, alive, child_env, kill_server, postmaster_pid
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
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=ROOT, env=child_env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    data_dir = Path(owner.stdout.readline().strip())
    assert_gone_after_sigkill(owner, data_dir)
