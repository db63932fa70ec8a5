"""Every problem of ``PGQUEUE`` for system check E001, where ``conf.get()`` raises the
first only."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from django_pgqueue import conf, conf_rules


def settings_problems(first: ImproperlyConfigured) -> list[str]:
    """E001: every problem of PGQUEUE (``conf.get()`` raises ``first``), so that one run
    of check shows them all: the unknown keys, then each key's value as ``conf.get()``
    would say it with the keys before it that are valid (a rule between keys,
    HEARTBEAT_INTERVAL below LEASE, compares with LEASE as given when that is valid,
    or with its default when it is not given; with a LEASE given and not valid, only
    HEARTBEAT_INTERVAL's own rule), as a user fixing one problem per run would see them."""
    raw = getattr(django_settings, "PGQUEUE", None)
    if not isinstance(raw, dict):
        return [str(first)]
    known = [f.name for f in dataclasses.fields(conf.Settings)]
    found: list[str] = []
    if unknown := {key: value for key, value in raw.items() if key not in known}:
        found.append(_problem(unknown) or str(first))
    valid: dict[str, Any] = {}
    for key in (key for key in known if key in raw):  # the order of the settings
        # A rule between keys (conf_rules) compares ``key`` with others: one of those
        # given but not valid is no measure (its default is not what was meant, and
        # fixing it may end the problem), so only the key's own rule is told.
        if any(k in raw and k not in valid for k in conf_rules.compared_with(key)):
            if problem := _own_problem(key, raw[key]):
                found.append(problem)
            continue  # valid or not, no measure for the keys after it
        problem = _problem({**valid, key: raw[key]})
        if problem is None:
            valid[key] = raw[key]
        else:
            found.append(problem)
    return found or [str(first)]


def _problem(raw: dict[str, Any]) -> str | None:
    try:
        conf._build(raw)
    except ImproperlyConfigured as exc:
        return str(exc)
    return None


def _own_problem(key: str, value: Any) -> str | None:
    """What ``key``'s own rule says of ``value``, as ``conf.get()`` would say it."""
    try:
        conf.check_value(key, conf.normalised(key, value))
    except ImproperlyConfigured as exc:
        return str(exc)
    return None
