"""The nights clocks change on, for the tests that walk cron ticks across them
(test_clock_changes, test_spec): one table of zones and days, one way to
parametrize a test over them."""

from __future__ import annotations

import datetime as dt
import itertools
import zoneinfo
from collections.abc import Iterable

import pytest

from django_pgqueue.periodic.spec import ScheduleSpec, parse

#: The two nights of a zone's year, as they stand in the test ids.
CHANGES = ("fall-back", "spring-forward")

#: zone -> the local days of 2026 its clocks go back and forward. Lord Howe moves
#: them by half an hour at 02:00; Chatham by an hour at 03:45 and 02:45.
CLOCK_CHANGES = {
    "America/New_York": {"fall-back": (2026, 11, 1), "spring-forward": (2026, 3, 8)},
    "Australia/Lord_Howe": {"fall-back": (2026, 4, 5), "spring-forward": (2026, 10, 4)},
    "Europe/Berlin": {"fall-back": (2026, 10, 25), "spring-forward": (2026, 3, 29)},
    "Europe/Paris": {"fall-back": (2026, 10, 25), "spring-forward": (2026, 3, 29)},
    "Pacific/Chatham": {"fall-back": (2026, 4, 5), "spring-forward": (2026, 9, 27)},
}


def across_clock_changes(crons: Iterable[str], zones: Iterable[str]) -> pytest.MarkDecorator:
    """Parametrize a test's ``cron``, ``zone`` and ``change`` (one of CHANGES) over
    every expression, on each night of each zone (ids ``cron-zone-change``)."""
    return pytest.mark.parametrize(
        ("cron", "zone", "change"), list(itertools.product(crons, sorted(zones), CHANGES))
    )


def change_day(zone: str, change: str) -> dt.datetime:
    """The local midnight that starts the day of ``zone``'s ``change``."""
    return dt.datetime(*CLOCK_CHANGES[zone][change], tzinfo=zoneinfo.ZoneInfo(zone))


def cron_spec(cron: str, zone: str) -> ScheduleSpec:
    """A schedule of ``cron`` in ``zone``."""
    return parse("s", {"task": "a.b", "cron": cron, "timezone": zone})
