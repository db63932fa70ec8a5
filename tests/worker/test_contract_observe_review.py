"""Issue 16's operating surfaces driven as a user would: a real worker's per-job lines
at ``-v 2`` say what each run came to, as the metrics and the database do."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

import pytest

from tests.conftest import status_counts
from tests.testapp.tasks import add, always_fails, gives_up, mark, snoozes
from tests.worker.conftest import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]
FINISHED = re.compile(r"^job (\d+) [\w.]+ (\w+)$", re.MULTILINE)


def test_the_finished_line_at_v2_names_what_each_run_came_to(start_worker: Start) -> None:
    ok = add.enqueue(1, 2)
    fails = always_fails.enqueue("v2-fails")  # max_attempts=2: failed twice, then dead
    snoozed = snoozes.enqueue("v2-snooze", 1)  # snoozes once, then succeeds
    stopped = gives_up.enqueue("v2-stopped")  # raises Cancel: ends cancelled
    late = mark.enqueue("v2-late", sleep=1.5)  # past --job-timeout: recorded as failed
    late.max_attempts = 1
    late.save(update_fields=["max_attempts"])
    worker = start_worker(
        "-v", "2", "--concurrency", "8", "--job-timeout", "0.5", "--no-listen",
        "--poll-interval", "0.1",
    )  # fmt: skip
    wait_for(
        lambda: status_counts() == {"done": 2, "dead": 2, "cancelled": 1}, 30, "every job to end"
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    lines: dict[int, list[str]] = {}
    for job_id, word in FINISHED.findall(worker.output):
        lines.setdefault(int(job_id), []).append(word)
    assert lines == {
        ok.id: ["succeeded"],
        fails.id: ["failed", "failed"],
        snoozed.id: ["snoozed", "succeeded"],
        stopped.id: ["cancelled"],
        late.id: ["failed"],  # the run past the job timeout has its line too
    }, worker.output
