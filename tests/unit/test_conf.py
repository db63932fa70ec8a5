from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf


def test_defaults() -> None:
    with override_settings(PGQUEUE=None):
        settings = conf.get()
    assert (settings.LEASE, settings.MAX_ATTEMPTS, settings.CONCURRENCY) == (60.0, 3, 10)
    assert settings.heartbeat_interval == 20.0


def test_override_is_read_again() -> None:
    with override_settings(PGQUEUE={"LEASE": 9, "QUEUES": ["a", "b"]}):
        assert conf.get().LEASE == 9
        assert conf.get().QUEUES == ("a", "b")
    assert conf.get().LEASE == 30  # tests.settings


def test_a_duration_may_be_a_timedelta() -> None:
    """Every key given in seconds takes a timedelta too; BACKOFF_BASE used to be
    kept as one, for the retry arithmetic to fail on later."""
    durations = {
        f.name
        for f in dataclasses.fields(conf.Settings)
        if f.type in ("float", "float | None") and f.name != "BACKOFF_JITTER"
    }
    assert durations == conf.DURATIONS
    with override_settings(
        PGQUEUE={
            "LEASE": dt.timedelta(minutes=2),
            "BACKOFF_BASE": dt.timedelta(seconds=5),
            "PRUNE_AFTER": dt.timedelta(days=7),
        }
    ):
        settings = conf.get()
        assert (settings.LEASE, settings.BACKOFF_BASE, settings.PRUNE_AFTER) == (
            120.0,
            5.0,
            604800.0,
        )
    with (
        override_settings(PGQUEUE={"LEASE": dt.timedelta(seconds=-1)}),
        pytest.raises(ImproperlyConfigured, match=r"PGQUEUE\['LEASE'\] = -1.0: expected"),
    ):
        conf.get()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"LEASE": 0}, r"PGQUEUE\['LEASE'\] = 0: expected a number of seconds greater than 0"),
        ({"LEASE": "60"}, r"PGQUEUE\['LEASE'\] = '60'"),
        ({"MAX_ATTEMPTS": 0}, r"PGQUEUE\['MAX_ATTEMPTS'\] = 0: expected a whole number"),
        ({"CONCURRENCY": 2.5}, r"PGQUEUE\['CONCURRENCY'\] = 2.5"),
        ({"BACKOFF_JITTER": 2}, r"expected a fraction between 0 and 1"),
        ({"QUEUES": []}, r"PGQUEUE\['QUEUES'\] = \(\)"),
        ({"QUEUES": ["ok", "not ok"]}, r"PGQUEUE\['QUEUES'\]"),
        ({"DEFAULT_QUEUE": ""}, r"PGQUEUE\['DEFAULT_QUEUE'\] = ''"),
        ({"LISTEN_NOTIFY": "yes"}, r"expected True or False"),
        # A known key with a word added, too far for difflib's ratio (0.56).
        (
            {"LEASE_SECONDS": 5},
            r"unknown key\(s\) 'LEASE_SECONDS' \(did you mean 'LEASE'\?\); known keys: ",
        ),
        ({"concurrency": 5}, r"unknown key\(s\) 'concurrency' \(did you mean 'CONCURRENCY'\?\)"),
        (
            {"Lease": 5, "MAX_ATTEMPT": 2},
            r"'Lease', 'MAX_ATTEMPT' \(did you mean 'LEASE' for 'Lease', 'MAX_ATTEMPTS' for",
        ),
        # One pair of brackets: "(a queue name (1-64 letters...))" read badly.
        (
            {"QUEUES": "emails"},
            r"expected None or a non-empty list of queue names \(1-64 letters, digits, _ \. : -\)$",
        ),
        (
            {"LISTEN_DATABASE": ""},
            r"PGQUEUE\['LISTEN_DATABASE'\] = '': expected None, a database alias or a DSN",
        ),
        ({"LISTEN_DATABASE": ["direct"]}, r"PGQUEUE\['LISTEN_DATABASE'\] = \['direct'\]"),
        (
            {"QUEUES": "emails"},
            r"PGQUEUE\['QUEUES'\] = 'emails': expected None or a non-empty list",
        ),
        (
            {"LEASE": 10, "HEARTBEAT_INTERVAL": 10},
            r"PGQUEUE\['HEARTBEAT_INTERVAL'\] = 10: expected fewer seconds than LEASE \(10\)",
        ),
        ([("LEASE", 5)], r"PGQUEUE must be a dict, not list"),
    ],
)
def test_bad_settings_name_the_key(value: object, message: str) -> None:
    with override_settings(PGQUEUE=value), pytest.raises(ImproperlyConfigured, match=message):
        conf.get()


def test_listen_database_is_an_alias_or_none() -> None:
    assert conf.get().LISTEN_DATABASE is None
    with override_settings(PGQUEUE={"LISTEN_DATABASE": "direct"}):
        assert conf.get().LISTEN_DATABASE == "direct"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"queues": "emails"}, r"queues='emails': expected None or a non-empty list of queue"),
        ({"queues": []}, r"queues=\[\]: expected None or a non-empty list of queue"),
        ({"concurrency": 0}, r"concurrency=0: expected a whole number from 1 to 1,000"),
        ({"lease": "30"}, r"lease='30': expected a number of seconds greater than 0"),
        ({"prefetch": -1}, r"prefetch=-1: expected \"auto\" or a whole number"),
        ({"shutdown_timeout": -1}, r"shutdown_timeout=-1: expected a number of seconds, 0 or"),
        ({"listen": "no"}, r"listen='no': expected True or False"),
    ],
)
def test_worker_config_overrides_are_checked_as_their_settings(
    override: dict[str, object], message: str
) -> None:
    """Worker(WorkerConfig.from_settings(...)) is the documented in-process worker: a
    string of queues used to become one queue per letter, a concurrency of 0 a worker
    that never ran a job, and a lease given as a string a TypeError."""
    from django_pgqueue.worker.config import WorkerConfig

    with pytest.raises(ImproperlyConfigured, match=message):
        WorkerConfig.from_settings(**override)


def test_worker_config_overrides_take_lists_and_timedeltas_as_the_settings_do() -> None:
    from django_pgqueue.worker.config import WorkerConfig

    config = WorkerConfig.from_settings(queues=["a", "b", "a"], lease=dt.timedelta(seconds=9))
    assert (config.queues, config.lease, config.heartbeat_interval) == (("a", "b"), 9.0, 3.0)


@pytest.mark.parametrize("lease", [1e-300, 1e-6, 0.05, dt.timedelta(microseconds=1)])
def test_a_lease_too_short_to_start_a_job_is_refused_in_settings(lease: object) -> None:
    """A lease shorter than the moment between claiming a job and starting it
    (1e-300 s rounds to no time at all in PostgreSQL) lapsed before every start:
    a worker gave the job back and claimed it again for ever."""
    with override_settings(PGQUEUE={"LEASE": lease}), pytest.raises(ImproperlyConfigured) as err:
        conf.get()
    assert "PGQUEUE['LEASE']" in str(err.value)
    assert f"at least {conf.MIN_LEASE:g} seconds" in str(err.value)


def test_the_shortest_lease_is_taken() -> None:
    with override_settings(PGQUEUE={"LEASE": conf.MIN_LEASE}):
        assert conf.get().LEASE == conf.MIN_LEASE
