"""Schedule entries checked as settings are read, and the instants they tick at
(no database)."""

from __future__ import annotations

import datetime as dt
import itertools
import zoneinfo

import pytest
from cronsim import CronSim
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf
from django_pgqueue.exceptions import InvalidSchedule
from django_pgqueue.periodic.spec import MAX_TICKS, ScheduleSpec, parse, parse_all
from tests.periodic.clock_nights import across_clock_changes, change_day, cron_spec

PARIS = zoneinfo.ZoneInfo("Europe/Paris")
UTC = dt.UTC


def paris(year: int, month: int, day: int, hour: int) -> dt.datetime:
    return dt.datetime(year, month, day, hour, tzinfo=PARIS)


def nightly() -> ScheduleSpec:
    return parse(
        "nightly", {"task": "shop.tasks.report", "cron": "30 2 * * *", "timezone": "Europe/Paris"}
    )


def test_a_spring_forward_day_runs_a_0230_job_once_at_0300() -> None:
    # 2026-03-29, Europe/Paris: 02:00 jumps to 03:00, so 02:30 never happens.
    ticks = nightly().between(paris(2026, 3, 28, 12), paris(2026, 3, 30, 12), 10)
    assert [t.astimezone(PARIS).isoformat() for t in ticks] == [
        "2026-03-29T03:00:00+02:00",  # as Debian cron: at once after the jump
        "2026-03-30T02:30:00+02:00",
    ]


def test_a_fall_back_day_runs_a_0230_job_once() -> None:
    # 2026-10-25, Europe/Paris: 03:00 falls back to 02:00, so 02:30 happens twice.
    ticks = nightly().between(paris(2026, 10, 24, 12), paris(2026, 10, 26, 12), 10)
    assert [t.astimezone(PARIS).isoformat() for t in ticks] == [
        "2026-10-25T02:30:00+02:00",  # the first 02:30 only
        "2026-10-26T02:30:00+01:00",
    ]


def test_an_hourly_cron_counts_real_hours_across_the_fall_back() -> None:
    hourly = parse("hourly", {"task": "a.b", "cron": "0 * * * *", "timezone": "Europe/Paris"})
    start = dt.datetime(2026, 10, 24, 22, tzinfo=UTC)
    ticks = hourly.between(start, start + dt.timedelta(hours=6), 20)
    assert ticks == [start + dt.timedelta(hours=h) for h in range(1, 7)]


def test_cron_ticks_forward_and_backward_agree() -> None:
    spec = parse("q", {"task": "a.b", "cron": "*/15 * * * *", "timezone": "UTC"})
    moment = dt.datetime(2026, 12, 1, 10, 7, 30, tzinfo=UTC)
    assert spec.next_after(moment) == dt.datetime(2026, 12, 1, 10, 15, tzinfo=UTC)
    at = dt.datetime(2026, 12, 1, 10, 15, tzinfo=UTC)
    assert next(spec.at_or_before(at)) == at  # a tick at the very moment is included
    assert next(spec.after(at)) == dt.datetime(2026, 12, 1, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("nickname", "after"),
    [
        ("@hourly", dt.datetime(2026, 12, 1, 11, tzinfo=UTC)),
        ("@daily", dt.datetime(2026, 12, 2, tzinfo=UTC)),
        ("@midnight", dt.datetime(2026, 12, 2, tzinfo=UTC)),
        ("@weekly", dt.datetime(2026, 12, 6, tzinfo=UTC)),  # a Sunday
        ("@monthly", dt.datetime(2027, 1, 1, tzinfo=UTC)),
        ("@yearly", dt.datetime(2027, 1, 1, tzinfo=UTC)),
        ("@annually", dt.datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_cron_nicknames_tick_as_cron_reads_them(nickname: str, after: dt.datetime) -> None:
    spec = parse("n", {"task": "a.b", "cron": nickname, "timezone": "UTC"})
    assert spec.expression == nickname  # listed as written
    moment = dt.datetime(2026, 12, 1, 10, 7, 30, tzinfo=UTC)
    assert spec.next_after(moment) == after
    assert next(spec.at_or_before(after)) == after


def test_every_ticks_at_multiples_of_its_seconds_since_the_epoch() -> None:
    spec = parse("ping", {"task": "a.b", "every": 30})
    moment = dt.datetime(2026, 12, 1, 10, 0, 10, 500, tzinfo=UTC)
    assert spec.next_after(moment) == dt.datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)
    assert spec.between(moment, moment + dt.timedelta(minutes=1), 10) == [
        dt.datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC),
        dt.datetime(2026, 12, 1, 10, 1, tzinfo=UTC),
    ]
    assert spec.expression == "every 30s"
    assert parse("p", {"task": "a.b", "every": dt.timedelta(minutes=5)}).every == 300.0
    monthly = parse("p", {"task": "a.b", "every": dt.timedelta(days=30)})
    assert monthly.expression == "every 2592000s"  # not 2.592e+06s
    assert parse("p", {"task": "a.b", "every": 1.0000001}).expression == "every 1.0000001s"


def test_between_keeps_the_newest_ticks_up_to_its_limit() -> None:
    spec = parse("ping", {"task": "a.b", "every": 1})
    end = dt.datetime(2026, 12, 1, tzinfo=UTC)
    ticks = spec.between(end - dt.timedelta(days=2), end, MAX_TICKS)
    assert len(ticks) == MAX_TICKS
    assert ticks[-1] == end
    assert ticks[0] == end - dt.timedelta(seconds=MAX_TICKS - 1)


def test_defaults_time_zone_from_django() -> None:
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        assert parse("n", {"task": "a.b", "cron": "0 3 * * *"}).timezone == "Asia/Tokyo"


#: Every minute, hour and day listed: a valid cron expression of 319 chars.
LISTS = (range(60), range(24), range(1, 32))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"task": "a.b"}, "give one of 'cron'"),
        ({"task": "a.b", "cron": "0 3 * * *", "every": 5}, "give one of 'cron'"),
        ({"task": "a.b", "cron": "61 * * * *"}, "'cron' = '61 \\* \\* \\* \\*' is not a valid"),
        ({"task": "a.b", "cron": "0 3 * *"}, "is not a valid cron expression"),
        ({"task": "a.b", "every": 0.5}, "'every' = 0.5: expected a number of seconds"),
        ({"task": "a.b", "every": True}, "'every' = True"),
        ({"task": "a.b", "every": 5, "timezone": "Mars/Olympus"}, "not a known time zone"),
        # A directory of the zone database, not a zone: was an IsADirectoryError.
        ({"task": "a.b", "every": 5, "timezone": "America"}, "not a known time zone"),
        ({"task": "a.b", "cron": "0 3 * * *", "timezone": "America"}, "not a known time zone"),
        ({"task": "a.b", "every": 5, "kwarg": {}}, "unknown key\\(s\\) 'kwarg'"),
        ({"task": "nodots", "every": 5}, "'task' = 'nodots'"),
        ({"every": 5}, "'task' = None"),
        ({"task": "a.b", "every": 5, "args": "x"}, "'args' = 'x': expected a list"),
        ({"task": "a.b", "every": 5, "kwargs": [1]}, "'kwargs' = \\[1\\]"),
        ({"task": "a.b", "every": 5, "queue": "a b"}, "queue 'a b' is not a valid queue name"),
        ({"task": "a.b", "every": 5, "priority": 500}, "priority 500 must be"),
        ({"task": "a.b", "every": 5, "max_attempts": 0}, "max_attempts 0 must be"),
        ({"task": "a.b", "every": 5, "enabled": "no"}, "'enabled' = 'no'"),
        ({"task": "a.b", "every": 5, "catch_up": "some"}, "'catch_up' = 'some': expected one of"),
        # Valid, but longer than the schedule table stores: every schedule of the
        # worker stopped, its scheduler failing on the row again and again.
        (
            {"task": "a.b", "cron": " ".join(",".join(map(str, r)) for r in LISTS) + " * *"},
            "is longer than 255 chars",
        ),
    ],
)
def test_a_bad_entry_is_refused_with_its_name(entry: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSchedule, match=rf"^PGQUEUE\['PERIODIC'\]\['nightly'\]: .*{message}"):
        parse("nightly", entry)


def test_settings_refuse_a_bad_entry_as_improperly_configured() -> None:
    with (
        override_settings(PGQUEUE={"PERIODIC": {"ping": {"task": "a.b", "every": -1}}}),
        pytest.raises(ImproperlyConfigured, match=r"PGQUEUE\['PERIODIC'\]\['ping'\]: 'every' = -1"),
    ):
        conf.get()
    with pytest.raises(InvalidSchedule, match="expected a dict of schedule names"):
        parse_all([{"task": "a.b", "every": 1}])
    with pytest.raises(InvalidSchedule, match="key '': expected a schedule name"):
        parse_all({"": {"task": "a.b", "every": 1}})


def test_every_bad_entry_is_named_not_only_the_first() -> None:
    with pytest.raises(InvalidSchedule) as refused:
        parse_all(
            {
                "a": {"task": "a.b", "cron": "61 * * * *"},
                "fine": {"task": "a.b", "every": 60},
                "b": {"task": "a.b", "every": -1},
            }
        )
    lines = str(refused.value).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "PGQUEUE['PERIODIC']['a']",
        "PGQUEUE['PERIODIC']['b']",
    ]


def test_settings_give_the_entries_in_order() -> None:
    periodic = {
        "b": {"task": "a.b", "every": 60, "catch_up": "all", "enabled": False},
        "a": {
            "task": "a.b",
            "cron": "0 3 * * 1",
            "timezone": "UTC",
            "args": [1],
            "kwargs": {"k": 2},
        },
    }
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        b, a = conf.get().schedules
    assert (b.name, b.catch_up, b.enabled) == ("b", "all", False)
    assert (a.name, a.args, a.kwargs, a.expression) == ("a", (1,), {"k": 2}, "0 3 * * 1")


def _forward(spec: ScheduleSpec, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The ticks in (start, end] as the scheduler waits for them, one after another."""
    return list(itertools.takewhile(lambda t: t <= end, spec.after(start)))


@pytest.mark.parametrize(
    ("cron", "zone", "start", "end"),
    [
        # The autumn night's repeated hour, up to a whole second of the second 02:30:
        # the step past the end second was taken in local time, which dropped fold
        # and started an hour earlier (02:30 CEST), losing the hour's ticks.
        ("* * * * *", "Europe/Paris", (2026, 10, 25, 1, 28), (2026, 10, 25, 1, 30)),
        ("*/5 * * * *", "Europe/Paris", (2026, 10, 25, 0, 0), (2026, 10, 25, 1, 0)),
        # Lord Howe moves its clocks by half an hour: looking back, cronsim counted
        # the repeated 01:30 that looking forward skips (so it was enqueued an hour
        # after it was due).
        ("30 * * * *", "Australia/Lord_Howe", (2026, 4, 4, 12, 0), (2026, 4, 4, 17, 0)),
        ("30 2 * * *", "Europe/Paris", (2026, 3, 28, 22, 0), (2026, 3, 29, 22, 0)),
        # Chatham's 03:45 becomes 02:45: looking back, cronsim stuck at the second
        # 02:45 (14:00 UTC) for ever. From before it, the scheduler looped without
        # end; from the next day, it enqueued that 02:45 (which the forward walk
        # skips) 23 hours late.
        ("*/15 2 * * *", "Pacific/Chatham", (2025, 4, 5, 12, 0), (2025, 4, 5, 13, 30)),
        ("*/15 2 * * *", "Pacific/Chatham", (2025, 4, 5, 13, 0), (2025, 4, 6, 13, 15)),
        ("*/15 2 * * *", "Pacific/Chatham", (2025, 4, 4, 0, 0), (2025, 4, 7, 0, 0)),
    ],
)
@pytest.mark.timeout(30)
def test_the_ticks_between_two_moments_are_the_ticks_the_scheduler_waits_for(
    cron: str, zone: str, start: tuple[int, int, int, int, int], end: tuple[int, int, int, int, int]
) -> None:
    spec = cron_spec(cron, zone)
    begin, until = dt.datetime(*start, tzinfo=UTC), dt.datetime(*end, tzinfo=UTC)
    expected = _forward(spec, begin, until)
    assert expected
    assert spec.between(begin, until, 100) == expected
    assert spec.between(begin, until, 2) == expected[-2:]
    assert next(spec.at_or_before(until)) == expected[-1]


def test_a_name_the_schedule_table_cannot_store_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match=r"key 'a\\x00b': expected a schedule name .* no NUL"):
        parse("a\x00b", {"task": "a.b", "every": 5})


#: Zones whose clocks change by an hour, and Lord Howe's by half an hour.
ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe")
#: cron expression -> its period
PERIODS = {
    "0 * * * *": dt.timedelta(hours=1),
    "30 * * * *": dt.timedelta(hours=1),
    "*/15 * * * *": dt.timedelta(minutes=15),
    "30 2 * * *": dt.timedelta(days=1),
    "30 1 * * *": dt.timedelta(days=1),
}


#: Lord Howe's clock shows 01:30 twice when it goes back, and 02:30 just after it
#: jumps forward: '30 * * * *' ticks then, which cronsim's walk from days before skips.
SHOWN_AGAIN = {
    ("30 * * * *", "Australia/Lord_Howe", "spring-forward"): [
        dt.datetime(2026, 10, 3, 15, 30, tzinfo=UTC)
    ],
    ("30 * * * *", "Australia/Lord_Howe", "fall-back"): [dt.datetime(2026, 4, 4, 15, tzinfo=UTC)],
}


@across_clock_changes(sorted(PERIODS), ZONES)
@pytest.mark.timeout(60)
def test_looking_back_finds_the_ticks_looking_forward_gives_across_a_clock_change(
    cron: str, zone: str, change: str
) -> None:
    # Looking back was cronsim's reverse walk. In a repeated hour (Berlin's second
    # 02:00-03:00) the latest tick of '30 2 * * *' it found was the day before's,
    # not the first 02:30 an hour ago; at Lord Howe it found the second 01:30,
    # which the forward walk skips (and between(..., 1), catch_up='latest', took).
    spec = cron_spec(cron, zone)
    tz = zoneinfo.ZoneInfo(zone)
    day = change_day(zone, change)
    # The ticks as cron walks forward, from a midnight far from any clock change.
    walk = CronSim(cron, day - dt.timedelta(days=4))
    truth = [
        t.astimezone(UTC)
        for t in itertools.takewhile(lambda t: t < day + dt.timedelta(days=2), walk)
    ]
    # Where cronsim's walk leaves out a time the clock shows (see test_clock_changes).
    truth = sorted({*truth, *SHOWN_AGAIN.get((cron, zone, change), ())})
    # Every ten minutes of real time (a repeated hour's both showings), and the
    # microsecond before: from 22:00 the evening before to about 06:00.
    evening = day.astimezone(UTC) - dt.timedelta(hours=2)
    for step in range(8 * 6):
        for moment in (evening + dt.timedelta(minutes=10 * step, microseconds=d) for d in (-1, 0)):
            due = [t for t in truth if t <= moment]
            newest = list(itertools.islice(spec.at_or_before(moment), 2))
            assert newest == due[:-3:-1], moment.astimezone(tz)
            window = [t for t in due if t > moment - dt.timedelta(days=2)]
            assert spec.between(moment - dt.timedelta(days=2), moment, 2) == window[-2:]
            if any(t > moment - PERIODS[cron] for t in due):
                assert newest[0] > moment - PERIODS[cron], moment.astimezone(tz)
            assert spec.next_after(moment) == min(t for t in truth if t > moment)


def test_the_next_tick_does_not_depend_on_the_second_one_looks() -> None:
    # At 01:59:59 (+11:00) cronsim's forward walk gave Lord Howe's second 01:30
    # (15:00 UTC), which a walk from a second earlier skipped. The clock shows
    # 01:30 again then: it is the next tick from either second.
    spec = cron_spec("30 * * * *", "Australia/Lord_Howe")
    for second in (dt.datetime(2026, 4, 4, 14, 59, 58), dt.datetime(2026, 4, 4, 14, 59, 59)):
        assert spec.next_after(second.replace(tzinfo=UTC)) == dt.datetime(
            2026, 4, 4, 15, tzinfo=UTC
        )


def test_catch_up_latest_takes_no_tick_that_catch_up_all_leaves_out() -> None:
    # Lord Howe's 01:30 (+11:00), 14:30 UTC, was enqueued; every worker down until
    # 15:20. catch_up='latest' (between(..., 1)) took the second 01:30 (+10:30,
    # 15:00 UTC), a tick 'all' and the running scheduler skipped. Now the clock's
    # second 01:30 is a tick to all of them (as Paris's second 02:30 of an hourly job).
    spec = cron_spec("30 * * * *", "Australia/Lord_Howe")
    start, end = (
        dt.datetime(2026, 4, 4, 14, 30, 1, tzinfo=UTC),
        dt.datetime(2026, 4, 4, 15, 20, tzinfo=UTC),
    )
    second = [dt.datetime(2026, 4, 4, 15, tzinfo=UTC)]
    assert spec.between(start, end, 1) == spec.between(start, end, MAX_TICKS + 1) == second
