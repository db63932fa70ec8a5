"""``runworker --reload``'s parent and the SIGTERMs it holds while its child starts
(the child says on a pipe when its handlers are in): a second SIGTERM still means
"stop now"."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from tests.worker.conftest import WorkerProcess
from tests.worker.test_first_hour import SCHEDULED, Start, start_reloading, the_child_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc for the child"),
]
__all__ = ["start_reloading"]  # the fixture

#: A tasks module whose import takes a while: the child's handlers are not in yet.
SLOW_IMPORT = "import time\ntime.sleep({seconds})\n" + SCHEDULED.format(answer=8)


def starting(start_reloading: Start, tmp_path: Path, seconds: float) -> WorkerProcess:
    """A ``runworker --reload`` whose child is importing a tasks module for ``seconds``."""
    (tmp_path / "rs_slow_tasks.py").write_text(SLOW_IMPORT.format(seconds=seconds))
    worker = start_reloading("rs_slow_tasks")
    the_child_of(worker.proc.pid)
    time.sleep(1.0)  # Django's setup done, the import under way
    return worker


def test_a_second_sigterm_stops_a_child_still_starting_at_once(
    start_reloading: Start, tmp_path: Path
) -> None:
    """Both SIGTERMs were held until the child's handlers were in: a child whose
    start hangs (a tasks module's import waiting on the network) kept the parent
    running whatever it was sent."""
    worker = starting(start_reloading, tmp_path, 60)
    worker.signal(signal.SIGTERM)
    time.sleep(0.3)
    assert worker.proc.poll() is None  # the first waits for the child's handlers
    worker.signal(signal.SIGTERM)
    assert worker.wait(5) == 128 + signal.SIGTERM, worker.output


def test_two_sigterms_held_still_mean_stop_now(start_reloading: Start, tmp_path: Path) -> None:
    """Two SIGTERMs held for a starting child were sent on back to back once its
    handlers were in, where they merged into one (a signal pending is not counted
    twice): a graceful stop, status 0, not the stop now the second asked for."""
    worker = starting(start_reloading, tmp_path, 3)
    worker.signal(signal.SIGTERM)
    time.sleep(0.2)
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 128 + signal.SIGTERM, worker.output


def ctrl_c(worker: WorkerProcess) -> None:
    """What a terminal's Ctrl-C sends: SIGINT to the parent and to its child."""
    child = the_child_of(worker.proc.pid)
    worker.signal(signal.SIGINT)
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signal.SIGINT)


def test_ctrl_c_while_the_child_starts_stops_it_once_it_can(
    start_reloading: Start, tmp_path: Path
) -> None:
    """The child ignores SIGINT until its handlers are in (it inherits the parent's
    SIG_IGN), and the parent left Ctrl-C to the child: one pressed in the child's
    first second or so was lost, and the worker ran on."""
    worker = starting(start_reloading, tmp_path, 3)
    ctrl_c(worker)
    assert worker.wait(15) == 0, worker.output  # a graceful stop, once it could
    assert "Traceback" not in worker.output
    assert "SIGINT: finishing running jobs" in worker.output


def test_a_second_ctrl_c_stops_a_child_still_starting_at_once(
    start_reloading: Start, tmp_path: Path
) -> None:
    worker = starting(start_reloading, tmp_path, 60)
    ctrl_c(worker)
    time.sleep(0.3)
    assert worker.proc.poll() is None  # the first waits for the child's handlers
    ctrl_c(worker)
    assert worker.wait(5) == 128 + signal.SIGINT, worker.output


def test_ctrl_c_once_the_child_runs_is_one_graceful_stop(
    start_reloading: Start, tmp_path: Path
) -> None:
    """The parent leaves a Ctrl-C to the child once the child's handlers are in (the
    terminal sent the child its own): passing it on as well would be a second."""
    (tmp_path / "rs_plain_tasks.py").write_text(SCHEDULED.format(answer=9))
    worker = start_reloading("rs_plain_tasks")
    worker.wait_for_output("watching for code changes with")
    ctrl_c(worker)
    assert worker.wait(15) == 0, worker.output
