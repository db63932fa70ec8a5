"""A claimed job whose check before its run fails unexpectedly (a bug of ours, or
the Tasks backend's report of a refused run failing on its database read) is buried
with that error, as any unexpected error of a run is, and its thread goes on to the
next job. The check moved from the executor's call (inside the pool's backstop) to
the moment the thread takes the job, outside it: the thread died holding the job,
its slot never freed and its lease renewed until the worker was killed.
Rows planted by hand, run by a real in-process burst worker on the test database."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import OperationalError

from django_pgqueue import signatures
from django_pgqueue.backend import worker as tasks_worker
from tests.conftest import run_counts
from tests.testapp.tasks import mark
from tests.worker.inprocess import WorkerThread
from tests.worker.planted import last_message, outcome, plant

pytestmark = [pytest.mark.django_db(transaction=True)]


real_check = signatures.check_arguments


def check_fails(target: Any, args: Any, kwargs: Any) -> None:
    if len(args) == 4:  # the planted job's
        raise RuntimeError("a bug of ours")
    real_check(target, args, kwargs)


def report_fails(*args: Any, **kwargs: Any) -> None:
    raise OperationalError("server closed the connection unexpectedly")


@pytest.mark.parametrize(
    ("task", "target", "name", "stand_in", "exception", "message"),
    [
        (
            mark.path,
            signatures,
            "check_arguments",
            check_fails,
            "RuntimeError",
            "a bug of ours",
        ),
        (
            "tests.testapp.djtasks.add_async",
            tasks_worker,
            "running_result",
            report_fails,
            "django.db.utils.OperationalError",
            "server closed the connection unexpectedly",
        ),
    ],
    ids=["checking_its_arguments", "reporting_its_refusal"],
)
def test_an_unexpected_error_before_the_run_buries_the_job_and_the_thread_goes_on(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    task: str,
    target: Any,
    name: str,
    stand_in: Any,
    exception: str,
    message: str,
) -> None:
    """The error went up out of the job thread (``Exception in thread pgqueue-job-0``):
    the burst worker never finished (the job held, its slot taken), and the job next
    in line on that one thread never ran."""
    planted = plant(task, [1, 2, 3, 4])
    known = mark.enqueue("after-1")  # queued after: the same (only) thread runs it next
    monkeypatch.setattr(target, name, stand_in)
    running = WorkerThread(burst=True, listen=False, poll_interval=5, concurrency=1, prefetch=0)
    with caplog.at_level(logging.ERROR, logger="django_pgqueue"):
        assert running.start().join(15) == 0
    assert outcome(planted) == ("dead", 1, exception)
    assert last_message(planted) == message
    assert run_counts("after-") == {"after-1": 1}
    started = [data["job"].id for seen, data in running.recorder.seen if seen == "started"]
    assert started == [known.pk]  # the buried one never ran
    said = [r.getMessage() for r in caplog.records if r.name == "django_pgqueue"]
    assert f"job {planted}: unexpected error running it; burying it" in said
