"""A job's line to its worker, without a worker: the stop request, seen or not, and an
async task's coroutine cancelled from another thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from django_pgqueue import Cancel, Snooze, current_job
from django_pgqueue.control import RunningJob, run_coroutine, running
from django_pgqueue.exceptions import InvalidJob
from tests.unit.test_ledger import job


def test_cancel_requested_is_seen_only_when_read_after_the_request() -> None:
    control = RunningJob(job(7))
    assert (control.id, control.attempt, control.cancel_requested) == (7, 1, False)
    assert not control.stopped_by_request  # it looked, but there was nothing to see
    assert control.request_cancel("operator")
    assert not control.request_cancel("again")  # told once; the first reason stays
    assert not control.stopped_by_request  # not read yet: it may finish anyway
    assert (control.cancel_requested, control.cancel_reason) == (True, "operator")
    assert control.stopped_by_request


def test_current_job_is_the_job_made_current_and_none_outside() -> None:
    assert current_job() is None
    control = RunningJob(job())
    with running(control):
        assert current_job() is control
    assert current_job() is None


def test_a_stop_request_cancels_a_running_coroutine_at_its_await() -> None:
    control = RunningJob(job())
    started = threading.Event()
    outcome: list[BaseException | str] = []

    async def sleeps() -> str:
        assert current_job() is control  # the context reaches the coroutine
        started.set()
        await asyncio.sleep(30)
        return "finished"

    def run() -> None:
        with running(control):
            try:
                outcome.append(run_coroutine(sleeps, (), {}))
            except BaseException as exc:
                outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(10)
    control.request_cancel("operator")
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome[0], asyncio.CancelledError)
    assert control.stopped_by_request


def test_a_coroutine_asked_to_stop_before_it_starts_is_cancelled_at_its_first_await() -> None:
    control = RunningJob(job())
    control.request_cancel("early")

    async def quick() -> str:
        await asyncio.sleep(0)
        return "done"

    with running(control), pytest.raises(asyncio.CancelledError):
        run_coroutine(quick, (), {})
    assert run_coroutine(quick, (), {}) == "done"  # outside a job: a plain call


def test_snooze_checks_its_seconds_and_cancel_keeps_its_reason() -> None:
    assert Snooze(1.5).seconds == 1.5
    assert str(Snooze(60)) == "snoozed for 60s"
    with pytest.raises(InvalidJob, match="Snooze seconds -1 must be a number of seconds"):
        Snooze(-1)
    for huge in (10**400, float("inf"), float("nan")):  # 10**400 raised OverflowError
        with pytest.raises(InvalidJob, match="must be a number of seconds from 0 to"):
            Snooze(huge)
    assert (Cancel("gone").reason, Cancel().reason, str(Cancel())) == ("gone", None, "")


def test_a_cancel_subclass_that_skips_cancels_init_still_has_a_reason() -> None:
    """Its ``reason`` raised AttributeError in the executor, and the pool's fallback
    buried the job dead instead of cancelling it."""

    class OrderGone(Cancel):
        def __init__(self, order_id: int) -> None:
            Exception.__init__(self, order_id)

    assert OrderGone(7).reason is None
