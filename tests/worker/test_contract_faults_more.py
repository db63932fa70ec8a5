"""More of issues 3 and 10's fault paths, with real worker processes: what a job
leaves behind on its thread's connection, rows planted by hand, cut connections
and timeouts from the database's OPTIONS. Exact final states and how many times
each job ran."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import runs_sql, tracked
from tests.worker.conftest import WorkerProcess

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]


@pytest.mark.parametrize(
    "statement",
    [
        "SET search_path TO pg_catalog",
        "SET default_transaction_read_only = on",
        "SELECT set_config('search_path', 'pg_catalog', false)",
    ],
)
def test_a_job_that_changes_its_session_leaves_the_next_jobs_a_clean_one(
    start_worker: Start, statement: str
) -> None:
    runs_sql.enqueue("changer", statement)
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"after-{n}"], {"sleep": 0.05}, max_attempts=1) for n in range(4)
    )
    worker = start_worker("--concurrency", "1", "--burst")
    assert worker.wait(60) == 0, worker.output
    assert status_counts() == {"done": 5}, worker.output
    assert run_counts() == {"changer": 1, **{f"after-{n}": 1 for n in range(4)}}
