from __future__ import annotations

import random

import pytest

from django_pgqueue.backoff import retry_delay


def test_delay_doubles_per_attempt_without_jitter() -> None:
    assert [retry_delay(n, 5, 3600, 0) for n in (1, 2, 3, 4)] == [5, 10, 20, 40]


def test_delay_is_capped() -> None:
    assert retry_delay(30, 5, 3600, 0) == 3600
    rand = random.Random(1)
    assert all(retry_delay(30, 5, 3600, 0.5, rand) <= 3600 for _ in range(1000))


def test_jitter_spreads_delays_within_bounds() -> None:
    rand = random.Random(7)
    delays = [retry_delay(3, 5, 3600, 0.2, rand) for _ in range(2000)]
    assert min(delays) >= 16
    assert max(delays) <= 24
    assert len({round(d, 3) for d in delays}) > 1000
    assert 19 < sum(delays) / len(delays) < 21


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempt_below_one_counts_as_first(attempt: int) -> None:
    assert retry_delay(attempt, 5, 3600, 0) == 5


def test_a_late_attempt_gets_the_cap_not_an_overflow() -> None:
    # max_attempts may be a million; 2.0 ** 1025 raised OverflowError, which failed
    # the reaper's whole batch and buried the job.
    for attempt in (1026, 1101, 1_000_000):
        assert retry_delay(attempt, 1.0, 3600.0, 0.0) == 3600.0
    assert retry_delay(1_000_000, 0.0, 3600.0, 0.5) == 0.0  # no backoff stays none
