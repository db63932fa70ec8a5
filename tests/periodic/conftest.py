from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

from django_pgqueue.periodic.scheduler import Scheduler
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.services import ConnectionEpoch, Supervision


def clear_of_a_minute_boundary(before: float = 1.0) -> None:
    """The tests' schedules tick on whole minutes. A scheduler's first look enqueues
    the ticks since its schedule's row was created, so a minute falling between the
    two (a few milliseconds) would add a job the test does not expect: start clear
    of it. So too of the two seconds after one: a schedule declared again, or
    switched on, restarts from two seconds ago (schedules_sync), and takes a whole
    minute that fell in them. ``before``: the seconds needed before the next minute
    (more for a test whose looks must all fall before it, on a slow machine)."""
    into = time.time() % 60
    if into > 60.0 - before:
        time.sleep(60 - into + 2.6)
    elif into < 2.5:
        time.sleep(2.6 - into)


@pytest.fixture
def scheduler(transactional_db: None) -> Iterator[Callable[..., Scheduler]]:
    """``scheduler(PERIODIC)``: a worker's scheduler for these schedules, not started:
    the test calls ``step()`` (one look at the schedules) itself."""
    fatal: list[str] = []
    overrides: list[Any] = []

    def make(periodic: dict[str, Any]) -> Scheduler:
        clear_of_a_minute_boundary()
        override = override_settings(PGQUEUE={"PERIODIC": periodic})
        override.enable()
        overrides.append(override)
        supervision = Supervision(fatal=fatal.append, epoch=ConnectionEpoch())
        return Scheduler("default", supervision, Events())

    yield make
    for override in reversed(overrides):
        override.disable()
    connections["default"].close()
    assert fatal == []
