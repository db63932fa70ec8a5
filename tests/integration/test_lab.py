"""The article's lab as a test: real concurrent claimers, exact final counts."""

from __future__ import annotations

import pytest

from devtools.lab import run_claimers
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import always_fails, flaky, mark

pytestmark = pytest.mark.django_db(transaction=True)


def test_eight_claimers_drain_a_thousand_jobs_each_once_except_designed_retries() -> None:
    specs = [JobSpec.build(mark, [f"lab-{n}"], {"sleep": 0.002}) for n in range(998)]
    specs += [
        JobSpec.build(flaky, ["lab-flaky"], {"failures": 2}),
        JobSpec.build(always_fails, ["lab-poison"]),
    ]
    Job.objects.enqueue_many(specs)

    run_claimers(8, lease=10.0)

    assert status_counts() == {"done": 999, "dead": 1}
    runs = run_counts("lab-")
    assert len(runs) == 1000
    assert runs["lab-flaky"] == 3  # failed twice, then succeeded
    assert runs["lab-poison"] == 2  # max_attempts=2, then dead
    assert {label: n for label, n in runs.items() if n != 1} == {"lab-flaky": 3, "lab-poison": 2}
    dead = Job.objects.get(status="dead")
    assert dead.last_error == "ValueError: lab-poison: this task always fails"
    assert [e["attempt"] for e in dead.errors] == [1, 2]
    assert "Traceback (most recent call last)" in dead.errors[-1]["traceback"]
    flaky_job = Job.objects.get(task=flaky.path)
    assert (flaky_job.status, flaky_job.attempts, flaky_job.result) == ("done", 3, "lab-flaky")
    # Every claimer took part: the work was shared, not serialised behind one.
    assert len({w for ids in Job.objects.values_list("worker_ids", flat=True) for w in ids}) == 8
