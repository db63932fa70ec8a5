"""Real worker subprocesses (``manage.py runworker``) against the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_pgqueue.models import Job

# absolute(), not resolve(): under tox the tests are symlinks into a tree without
# the package, and worker subprocesses must start there to import the wheel.
ROOT = Path(__file__).absolute().parents[2]


class WorkerProcess:
    """A ``runworker`` (or other command) subprocess whose output is read as it comes."""

    def __init__(
        self, db_url: str, *args: str, env: dict[str, str] | None = None, command: str = "runworker"
    ) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", command, "--settings=tests.settings", *args],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": db_url, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self._lines)

    def wait_for_output(self, text: str, timeout: float = 20.0) -> float:
        """Wait until ``text`` appears in the output; the seconds it took."""
        start = time.monotonic()
        with self._changed:
            while text not in "".join(self._lines):
                left = timeout - (time.monotonic() - start)
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"{text!r} not in the worker's output after "
                        f"{time.monotonic() - start:.1f}s:\n{self.output}"
                    )
                self._changed.wait(min(left, 0.2))
        return time.monotonic() - start

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(5)
            self._close()
            raise AssertionError(f"worker did not exit within {timeout}s:\n{self.output}") from None
        self._reader.join(5)
        self._close()
        return self.proc.returncode

    def _close(self) -> None:
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.wait(10)


@pytest.fixture
def start_worker(db_url: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``runworker`` (or ``command=...``) subprocesses; any left running are killed."""
    started: list[WorkerProcess] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        command: str = "runworker",
        **kwargs: tuple[str, ...],
    ) -> WorkerProcess:
        worker = WorkerProcess(db_url, *args, *kwargs.get("args", ()), env=env, command=command)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.kill()
        else:  # exited by itself, never waited for: its output pipe is closed here,
            # not left to the garbage collector, whose ResourceWarning fails a later test
            worker.wait(10)


def django_command(
    db_url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m django ARGS`` on the server ``db_url``, to its end (tests.settings
    unless ``env`` names other settings)."""
    settings = [] if env and "DJANGO_SETTINGS_MODULE" in env else ["--settings=tests.settings"]
    return subprocess.run(
        [sys.executable, "-m", "django", *args, *settings],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": db_url, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def running_count() -> int:
    return Job.objects.running().count()
