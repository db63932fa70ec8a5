"""The queue's records: a claimed row becomes a ClaimedJob, field by field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from django_pgqueue.records import ClaimedJob, claimed_job


def fields(**changes: Any) -> dict[str, Any]:
    """Every field of ClaimedJob, none left at its default."""
    values: dict[str, Any] = {
        "id": 7,
        "run": 1_700_000_000_000_000_001,
        "task": "tests.testapp.tasks.add",
        "args": [1, 2],
        "kwargs": {"z": 3},
        "queue": "emails",
        "priority": -4,
        "attempt": 2,
        "max_attempts": 5,
        "concurrency_key": "user:1",
        "unique_key": "once",
        "backoff": 1.5,
        "problem": "the stored arguments cannot be decoded",
        "snoozes": 3,
        "enqueued_at": 1.25,
        "run_at": 2.5,
        "started_at": 3.75,
        "attempted_at": 4.0,
        "errors": '[{"attempt": 1}]',
        "worker_ids": '["w1", "w2"]',
        "retry_policy": '{"retry_on": ["builtins.ValueError"]}',
    }
    return {**values, **changes}


def test_claimed_job_makes_what_the_constructor_makes() -> None:
    built = claimed_job(fields())
    assert type(built) is ClaimedJob
    assert built == ClaimedJob(**fields())
    assert dataclasses.asdict(built) == fields()
    assert built.key == (7, 1_700_000_000_000_000_001)


def test_a_claimed_job_is_as_frozen_as_a_constructed_one() -> None:
    built = claimed_job(fields())
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.priority = 9  # type: ignore[misc]
    assert dataclasses.replace(built, priority=9).priority == 9


def test_a_row_with_a_column_missing_or_extra_is_refused_by_name() -> None:
    row = fields()
    del row["retry_policy"]
    with pytest.raises(TypeError, match=r"missing \['retry_policy'\]"):
        claimed_job(row)
    with pytest.raises(TypeError, match=r"unexpected \['colour'\], missing \[\]"):
        claimed_job(fields(colour="red"))
    renamed = fields()
    renamed["attempts"] = renamed.pop("attempt")
    with pytest.raises(TypeError, match=r"unexpected \['attempts'\], missing \['attempt'\]"):
        claimed_job(renamed)
