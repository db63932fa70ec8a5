"""Embedded servers of the tests' own, and the processes around them, from /proc."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.embedded_pg import EmbeddedPostgres

ROOT = Path(__file__).absolute().parents[2]  # see tests/worker/conftest.py


def inner_pytest(*args: str) -> list[str]:
    """The command line of a pytest run inside a test, with this project's configuration."""
    config = ("-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT))
    return [sys.executable, "-m", "pytest", *config, *args]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    """A fresh embedded server, not the session's database (which may not be embedded)."""
    started = EmbeddedPostgres()
    try:
        started.start()
        yield started
    finally:
        started.destroy()


def child_env(**extra: str) -> dict[str, str]:
    """Our environment for a child process, without the session's database."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "PGQUEUE_EMBEDDED_OWNER_PID")
    }
    return {**env, **extra}


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited and unreaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that contain ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline and alive(int(entry.name)):
                found.append(cmdline)
    return found


def kill_server(data_dir: Path) -> None:
    """Stop a server a failing test left behind (SIGQUIT: an immediate shutdown)."""
    try:
        pid = postmaster_pid(data_dir)
    except (OSError, ValueError, IndexError):
        return
    if alive(pid):
        os.kill(pid, signal.SIGQUIT)
