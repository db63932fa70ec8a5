"""Names read from a job row, as the worker's text log lines print them."""

from __future__ import annotations

import logging

import pytest

from django_pgqueue.records import ClaimedJob
from django_pgqueue.wording import shown
from django_pgqueue.worker.executor import cancel_outcome


def test_an_ordinary_name_prints_as_it_is_and_one_with_a_control_character_as_its_repr() -> None:
    assert shown("shop.tasks.send_receipt") == "shop.tasks.send_receipt"
    assert shown("boutique.tâches.reçu ok") == "boutique.tâches.reçu ok"
    assert shown("a\nb") == "'a\\nb'"
    assert shown("a\rb\x1b[31m") == "'a\\rb\\x1b[31m'"
    assert shown("a\u2028b") == "'a\\u2028b'"  # a line break to some log viewers


def test_a_cancel_reason_written_by_hand_cannot_forge_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = ClaimedJob(
        id=7, run=1, task="t.t\nforged", args=[], kwargs={}, queue="default", priority=0,
        attempt=1, max_attempts=3, concurrency_key=None, unique_key=None,
    )  # fmt: skip
    with caplog.at_level(logging.INFO, "django_pgqueue"):
        outcome = cancel_outcome(job, "stop\nERROR job 8 forged")
    assert caplog.messages == [
        "job 7 ('t.t\\nforged') cancelled on attempt 1: 'stop\\nERROR job 8 forged'"
    ]
    assert outcome.message == "stop\nERROR job 8 forged"  # stored as given
