"""The rules between PGQUEUE's keys (conf_rules) and the per-key normalise step
(conf.normalised) that conf.get() and E001 both read."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf, conf_rules
from django_pgqueue.checks import check_settings


def test_each_rule_names_settings_keys_and_holds_for_the_defaults() -> None:
    keys = {f.name for f in dataclasses.fields(conf.Settings)}
    assert conf_rules.RULES
    for rule in conf_rules.RULES:
        assert {rule.key, *rule.compared_with} <= keys
        assert rule.key not in rule.compared_with
    with override_settings(PGQUEUE=None):
        assert conf_rules.broken(conf.get()) is None


def test_compared_with_is_what_the_rules_declare() -> None:
    assert conf_rules.compared_with("HEARTBEAT_INTERVAL") == ("LEASE",)
    assert conf_rules.compared_with("CONCURRENCY") == ()
    assert conf_rules.compared_with("LEASE") == ()  # compared with, not blamed


def test_settings_raise_the_broken_rule_blaming_its_key() -> None:
    rule = next(rule for rule in conf_rules.RULES if rule.key == "HEARTBEAT_INTERVAL")
    with pytest.raises(ImproperlyConfigured) as raised:
        conf.Settings(LEASE=10, HEARTBEAT_INTERVAL=10)
    expected = rule.expected(conf.Settings(LEASE=10))
    assert str(raised.value) == f"PGQUEUE['HEARTBEAT_INTERVAL'] = 10: expected {expected}"
    assert conf_rules.broken(conf.Settings(LEASE=10, HEARTBEAT_INTERVAL=9)) is None


def test_normalised_gives_a_value_as_the_settings_hold_it() -> None:
    assert conf.normalised("LEASE", dt.timedelta(minutes=2)) == 120.0
    assert conf.normalised("HEARTBEAT_INTERVAL", dt.timedelta(0)) == 0.0
    assert conf.normalised("QUEUES", ["a", "b"]) == ("a", "b")
    assert conf.normalised("TASK_MODULES", ["m"]) == ("m",)
    assert conf.normalised("QUEUES", None) is None
    assert conf.normalised("LEASE", "x") == "x"  # its rule says what is wrong, not this step
    period = dt.timedelta(seconds=5)
    assert conf.normalised("CONCURRENCY", period) is period  # not a duration: as given


def test_a_timedelta_told_by_its_own_rule_only_is_shown_as_seconds() -> None:
    """With LEASE given and not valid, HEARTBEAT_INTERVAL's own rule alone is told, of
    its value as conf.get() holds it (a timedelta as its seconds)."""
    with override_settings(PGQUEUE={"LEASE": "x", "HEARTBEAT_INTERVAL": dt.timedelta(0)}):
        found = [str(m.msg) for m in check_settings() if m.id == "django_pgqueue.E001"]
    assert found[1:] == [
        "PGQUEUE['HEARTBEAT_INTERVAL'] = 0.0: expected a number of seconds greater than 0 "
        "(at most ten years)"
    ]
