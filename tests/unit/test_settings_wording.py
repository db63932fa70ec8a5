"""What a mistake in PGQUEUE is told. ``BACKOFF`` was told it meant ``BACKOFF_MAX``,
the one of three keys difflib happened to pick; ``CONCURRENCY_KEY``, an option of
each job, that it meant ``CONCURRENCY`` (worker threads), ``run_after`` that it
meant ``PRUNE_AFTER``; and ``manage.py check`` reported only the first of several
problems, so each fix and rerun showed the next."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf
from django_pgqueue.backend import PgQueueBackend
from django_pgqueue.checks import check_settings


def told(raw: dict[str, object]) -> str:
    with override_settings(PGQUEUE=raw), pytest.raises(ImproperlyConfigured) as raised:
        conf.get()
    said, _, known = str(raised.value).partition("; known keys: ")
    assert known.startswith("ASYNC_COMMIT, BACKOFF_BASE"), str(raised.value)
    return said


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (
            {"BACKOFF": 2},
            "'BACKOFF' (did you mean 'BACKOFF_BASE', 'BACKOFF_JITTER' or 'BACKOFF_MAX'?)",
        ),
        (
            {"backoff": 2},
            "'backoff' (did you mean 'BACKOFF_BASE', 'BACKOFF_JITTER' or 'BACKOFF_MAX'?)",
        ),
        ({"PRUNE": 9}, "'PRUNE' (did you mean 'PRUNE_AFTER' or 'PRUNE_INTERVAL'?)"),
        ({"HEARTBEAT": 9}, "'HEARTBEAT' (did you mean 'HEARTBEAT_INTERVAL'?)"),
        (
            {"BACKOFF": 2, "Lease": 5},
            "'BACKOFF', 'Lease' (did you mean 'BACKOFF_BASE', 'BACKOFF_JITTER' or "
            "'BACKOFF_MAX' for 'BACKOFF', 'LEASE' for 'Lease'?)",
        ),
        # What was right stays so.
        ({"LEASE_SECONDS": 5}, "'LEASE_SECONDS' (did you mean 'LEASE'?)"),
        ({"concurrency": 5}, "'concurrency' (did you mean 'CONCURRENCY'?)"),
        ({"max_attempts": 5}, "'max_attempts' (did you mean 'MAX_ATTEMPTS'?)"),
        ({"TIMEOUT": 5}, "'TIMEOUT' (did you mean 'JOB_TIMEOUT'?)"),
    ],
)
def test_a_key_that_begins_several_is_told_every_one(raw: dict[str, object], said: str) -> None:
    assert told(raw) == f"PGQUEUE has unknown key(s) {said}"


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (
            {"CONCURRENCY_KEY": "account"},
            "'CONCURRENCY_KEY' (concurrency_key is an option of each job, not a setting: "
            "give it when enqueueing, as in .using(concurrency_key=...))",
        ),
        (
            {"run_after": 60},
            "'run_after' (run_after is an option of each job, not a setting: give it when "
            "enqueueing, as in .using(run_after=...))",
        ),
        (
            {"PRIORITY": 5, "concurrency_key": "a", "LEASE_SECONDS": 5},
            "'LEASE_SECONDS', 'PRIORITY', 'concurrency_key' (did you mean 'LEASE'?) "
            "(concurrency_key and priority are options of each job, not settings: give "
            "them when enqueueing, as in .using(concurrency_key=..., priority=...))",
        ),
        # A job's queue is DEFAULT_QUEUE's business, not only QUEUES' (a worker's).
        ({"QUEUE": "emails"}, "'QUEUE' (did you mean 'DEFAULT_QUEUE' or 'QUEUES'?)"),
        ({"queue_name": "emails"}, "'queue_name' (did you mean 'DEFAULT_QUEUE' or 'QUEUES'?)"),
    ],
)
def test_an_option_of_each_job_is_told_where_it_goes(raw: dict[str, object], said: str) -> None:
    assert told(raw) == f"PGQUEUE has unknown key(s) {said}"


def test_the_backends_options_follow_the_same_rule() -> None:
    backend = PgQueueBackend("pgq", {"BACKEND": "x", "OPTIONS": {"MAX": 5}})
    assert [m.msg for m in backend.check() if m.id == "django_pgqueue.E103"] == [
        "TASKS['pgq']['OPTIONS'] has unknown key(s) 'MAX' (did you mean 'MAX_ATTEMPTS'?)."
    ]


def e001(raw: object) -> list[str]:
    with override_settings(PGQUEUE=raw):
        return [str(m.msg) for m in check_settings() if m.id == "django_pgqueue.E001"]


def test_check_reports_every_problem_of_pgqueue() -> None:
    lease = (
        "PGQUEUE['LEASE'] = 'x': expected a number of seconds greater than 0 (at most ten years)"
    )
    concurrency = "PGQUEUE['CONCURRENCY'] = 0: expected a whole number from 1 to 1,000"
    assert e001({"LEASE": "x", "CONCURRENCY": 0}) == [lease, concurrency]
    (unknown, bad) = e001({"BOGUS": 1, "LEASE": "x"})
    assert unknown.startswith("PGQUEUE has unknown key(s) 'BOGUS'; known keys: "), unknown
    assert bad == lease
    # A rule between two keys, each valid alone, beside a bad third.
    assert e001({"LEASE": 10, "HEARTBEAT_INTERVAL": 10, "CONCURRENCY": 0}) == [
        "PGQUEUE['HEARTBEAT_INTERVAL'] = 10: expected fewer seconds than LEASE (10), or "
        "leases lapse between renewals",
        concurrency,
    ]
    # Compared with LEASE as given, not with its default (60).
    assert e001({"LEASE": 120, "HEARTBEAT_INTERVAL": 90, "CONCURRENCY": 0}) == [concurrency]
    assert e001([("LEASE", 5)]) == ["PGQUEUE must be a dict, not list"]
    assert e001({"LEASE": 5}) == []


def test_at_run_time_the_first_problem_is_raised_as_before() -> None:
    with (
        override_settings(PGQUEUE={"LEASE": "x", "CONCURRENCY": 0}),
        pytest.raises(ImproperlyConfigured) as raised,
    ):
        conf.get()
    assert str(raised.value) == (
        "PGQUEUE['LEASE'] = 'x': expected a number of seconds greater than 0 (at most ten years)"
    )


@pytest.mark.parametrize("lease", ["120", 0.01, -5])
def test_a_bad_lease_is_no_measure_for_the_heartbeat_interval(lease: object) -> None:
    """HEARTBEAT_INTERVAL was compared with LEASE's default (60) when the LEASE given
    was not valid: E001 told 90 to be below LEASE (60), a LEASE nobody wrote, and
    fixing LEASE to the 120 meant made that error go away. Its own rule still holds."""
    (bad_lease,) = e001({"LEASE": lease})
    assert e001({"LEASE": lease, "HEARTBEAT_INTERVAL": 90}) == [bad_lease]
    assert e001({"LEASE": lease, "HEARTBEAT_INTERVAL": 0, "CONCURRENCY": 0}) == [
        bad_lease,
        "PGQUEUE['HEARTBEAT_INTERVAL'] = 0: expected a number of seconds greater than 0 "
        "(at most ten years)",
        "PGQUEUE['CONCURRENCY'] = 0: expected a whole number from 1 to 1,000",
    ]
