"""The rules between keys of ``PGQUEUE``: one declaration, which both ``conf.get()``
(``Settings.__post_init__``, raising the first broken one) and system check E001
(``conf_problems``, telling every problem) read."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

#: ``conf.Settings``, which this module may not import (``conf`` imports it).
Settings = Any


@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule between keys: ``key`` is the one blamed when it is broken, compared with
    ``compared_with``; ``holds`` says whether valid settings keep it, ``expected``
    what ``key`` should have been (after ``expected`` in the message)."""

    key: str
    compared_with: tuple[str, ...]
    holds: Callable[[Settings], bool]
    expected: Callable[[Settings], str]


RULES = (
    Rule(
        "HEARTBEAT_INTERVAL",
        ("LEASE",),
        lambda s: s.HEARTBEAT_INTERVAL is None or s.HEARTBEAT_INTERVAL < s.LEASE,
        lambda s: f"fewer seconds than LEASE ({s.LEASE:g}), or leases lapse between renewals",
    ),
)


def broken(settings: Settings) -> Rule | None:
    """The first rule of :data:`RULES` that ``settings`` (each key valid alone) break."""
    return next((rule for rule in RULES if not rule.holds(settings)), None)


def compared_with(key: str) -> tuple[str, ...]:
    """The keys that a rule compares ``key`` with (none for most keys)."""
    return tuple(k for rule in RULES if rule.key == key for k in rule.compared_with)
