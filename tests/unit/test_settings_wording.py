"""What a mistake in PGQUEUE is told. ``BACKOFF`` was told it meant ``BACKOFF_MAX``,
the one of three keys difflib happened to pick; ``CONCURRENCY_KEY``, an option of
each job, that it meant ``CONCURRENCY`` (worker threads), ``run_after`` that it
meant ``PRUNE_AFTER``."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf
from django_pgqueue.backend import PgQueueBackend


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
