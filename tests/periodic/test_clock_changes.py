"""Cron ticks across the nights clocks change, as the scheduler looks for them
(no database): each tick once, in order, on time, whichever way one walks."""

from __future__ import annotations

import datetime as dt
import itertools
import zoneinfo

import pytest
from cronsim import CronSim

from django_pgqueue.periodic import ticks
from django_pgqueue.periodic.spec import MAX_TICKS, ScheduleSpec
from tests.periodic.clock_nights import across_clock_changes, change_day, cron_spec

UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)

#: Lord Howe's and Chatham's clock changes, and Paris's for comparison.
ZONES = ("Australia/Lord_Howe", "Pacific/Chatham", "Europe/Paris")
#: '*/15 3 * * *' at Chatham: cronsim's walk went round for ever in the repeated
#: 02:45-03:45, and the scheduler's look with it.
EXPRESSIONS = (
    "* 2 * * *",
    "*/15 2 * * *",
    "30 * * * *",
    "0 2 * * *",
    "*/5 * * * *",
    "*/15 3 * * *",
)


def _matches(cron: str, wall: dt.datetime) -> bool:
    """Whether the wall-clock time ``wall`` (naive, a whole minute) matches ``cron``."""
    return next(CronSim(cron, wall - dt.timedelta(seconds=1))) == wall


def _truth(cron: str, zone: str, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The ticks in (start, end], minute by minute, as cron tells them: a fixed
    minute and hour at its first showing, or at the first minute after a jump
    over it; any other expression at every instant whose wall clock matches."""
    tz = zoneinfo.ZoneInfo(zone)
    fields = cron.split()
    fixed = not fields[0].startswith("*") and not fields[1].startswith("*")
    ticks: set[dt.datetime] = set()
    if fixed:
        wall = (start - dt.timedelta(hours=3)).astimezone(tz).replace(tzinfo=None, second=0)
        while wall <= (end + dt.timedelta(hours=3)).astimezone(tz).replace(tzinfo=None):
            if _matches(cron, wall):
                shown = wall
                while (
                    shown.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None)
                    != shown
                ):  # in the jump: the first minute after it
                    shown += MINUTE
                ticks.add(shown.replace(tzinfo=tz, fold=0).astimezone(UTC))
            wall += MINUTE
    else:
        moment = start.replace(second=0, microsecond=0)
        while moment <= end:
            if _matches(cron, moment.astimezone(tz).replace(tzinfo=None)):
                ticks.add(moment)
            moment += MINUTE
    return sorted(t for t in ticks if start < t <= end)


def _night(zone: str, change: str) -> tuple[dt.datetime, dt.datetime]:
    """From 21:00 the evening before the change to 06:00 the morning after (UTC)."""
    day = change_day(zone, change)
    return (day - dt.timedelta(hours=3)).astimezone(UTC), (day + dt.timedelta(hours=6)).astimezone(
        UTC
    )


def _scheduler(
    spec: ScheduleSpec, start: dt.datetime, end: dt.datetime, cadence: dt.timedelta
) -> list[tuple[dt.datetime, dt.datetime]]:
    """(tick, when enqueued) as a scheduler looking every ``cadence`` (other
    schedules wake it) and at each due tick enqueues them (Scheduler._ticks)."""
    cursor, due, look = start, spec.next_after(start), start
    enqueued: list[tuple[dt.datetime, dt.datetime]] = []
    while look <= end:
        now = min(look + cadence, max(due, look + dt.timedelta(seconds=1)))
        if due <= now:
            enqueued += [(t, now) for t in spec.between(cursor, now, MAX_TICKS + 1)]
            cursor = max([cursor, now] + [t for t, _ in enqueued[-1:]])
            due = spec.next_after(now)
        look = now
    return [(t, at) for t, at in enqueued if t <= end]


@across_clock_changes(EXPRESSIONS, ZONES)
@pytest.mark.timeout(60)
def test_each_tick_of_a_clock_change_night_is_enqueued_once_and_on_time(
    cron: str, zone: str, change: str
) -> None:
    spec = cron_spec(cron, zone)
    start, end = _night(zone, change)
    truth = _truth(cron, zone, start, end)  # none for '* 2 * * *' when Paris skips 02:00-03:00
    for cadence in (dt.timedelta(seconds=37), dt.timedelta(minutes=5)):
        enqueued = _scheduler(spec, start, end, cadence)
        assert [t for t, _ in enqueued] == truth, cadence
        late = [(t, at) for t, at in enqueued if at - t > cadence]
        assert not late, cadence


@across_clock_changes(EXPRESSIONS, ZONES)
@pytest.mark.timeout(60)
def test_walking_forward_from_any_start_or_back_from_any_point_finds_the_same_ticks(
    cron: str, zone: str, change: str
) -> None:
    spec = cron_spec(cron, zone)
    start, end = _night(zone, change)
    first, last = start - dt.timedelta(days=1), end + dt.timedelta(days=2)
    truth = _truth(cron, zone, first, last)
    # Every seven minutes of the night and every tick, on the second, and a
    # microsecond and a second before.
    points = [start + dt.timedelta(minutes=7 * n) for n in range(9 * 60 // 7 + 1)]
    points += [t for t in truth if start <= t <= end]
    for point in itertools.chain.from_iterable(
        (p - dt.timedelta(seconds=1), p - dt.timedelta(microseconds=1), p) for p in points
    ):
        ahead = [t for t in truth if t > point]
        behind = [t for t in truth if t <= point][::-1]
        forward = itertools.takewhile(lambda t: t <= last, spec.after(point))
        assert list(itertools.islice(forward, 3)) == ahead[:3], point
        back = itertools.takewhile(lambda t: t > first, spec.at_or_before(point))
        assert list(itertools.islice(back, 3)) == behind[:3], point
        assert (
            spec.between(start, point, MAX_TICKS)
            == [t for t in behind if t > start][::-1][-MAX_TICKS:]
        ), point


def test_a_look_from_inside_a_jumps_last_minute_finds_its_tick() -> None:
    # Monrovia's clocks jumped from 00:00 to 00:44:30 on 1972-01-07 (-00:44:30 to
    # UTC): '0 0 * * *' ticks at the first whole minute after the jump, 00:45. A
    # look from 00:44:40, past the jump but before that minute, walked on from the
    # wall-clock 00:44:40 and skipped it for the next day's tick.
    spec = cron_spec("0 0 * * *", "Africa/Monrovia")
    tick = dt.datetime(1972, 1, 7, 0, 45, tzinfo=UTC)
    before = dt.datetime(1972, 1, 7, 0, 44, 29, tzinfo=UTC)
    assert spec.next_after(before) == tick
    for second in (30, 40, 59):
        assert spec.next_after(tick.replace(minute=44, second=second)) == tick


@pytest.mark.parametrize(
    ("zone", "gap"),
    [
        ("Europe/Paris", dt.datetime(2026, 3, 29, 1, tzinfo=UTC)),  # 02:00 -> 03:00
        ("Pacific/Apia", dt.datetime(2011, 12, 30, 10, tzinfo=UTC)),  # 30 December skipped
    ],
)
@pytest.mark.parametrize("cron", ["* * * * * *", "*/20 * * * * *", "* * * * *"])
def test_a_look_across_a_skipped_stretch_does_not_walk_each_skipped_time(
    monkeypatch: pytest.MonkeyPatch, zone: str, gap: dt.datetime, cron: str
) -> None:
    # A per-second expression walked each of the 3600 times of a skipped hour (75 ms
    # a look, against 0.3 ms before ticks.py) and Apia's 86400 skipped seconds (1.3 s).
    looked: list[dt.datetime] = []
    instants = ticks.instants

    def counted(wall: dt.datetime, *args: object) -> list[dt.datetime]:
        looked.append(wall)
        return instants(wall, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ticks, "instants", counted)
    spec = cron_spec(cron, zone)
    before, past = gap - dt.timedelta(seconds=1), gap + dt.timedelta(microseconds=1)
    assert spec.next_after(before) == gap
    assert spec.between(before - dt.timedelta(seconds=1), past, MAX_TICKS)[-1] == gap
    assert spec.between(gap, past, MAX_TICKS) == []
    assert next(spec.at_or_before(gap - dt.timedelta(microseconds=1))) < gap
    assert len(looked) < 20
