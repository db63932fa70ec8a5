"""The command-line types at their bounds: the top value each takes, and one past it
refused with the bound named (the settings take the same bounds)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf, validation
from django_pgqueue.management import arguments


def test_the_top_values_are_taken() -> None:
    assert arguments.concurrency("1000") == validation.MAX_CONCURRENCY == 1000
    assert arguments.positive_seconds("315360000") == validation.MAX_DELAY  # ten years
    assert arguments.prefetch("2147483647") == validation.MAX_COUNT
    assert arguments.prefetch(" AUTO ") == "auto"
    assert arguments.duration("520w") <= validation.MAX_DELAY


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        (arguments.concurrency, "1001", "expected a whole number from 1 to 1,000, got '1001'"),
        (arguments.positive_seconds, "315360001", "at most ten years"),
        (arguments.prefetch, "2147483648", "expected auto or a whole number from 0 to 2,147,"),
        (arguments.prefetch, "-1", "expected auto or a whole number from 0 to 2,147,483,647"),
    ],
)
def test_one_past_the_top_names_the_bound(
    kind: Callable[[str], object], value: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        kind(value)


def test_the_settings_take_the_same_bounds() -> None:
    with override_settings(PGQUEUE={"CONCURRENCY": 1000, "PREFETCH": validation.MAX_COUNT}):
        assert (conf.get().CONCURRENCY, conf.get().PREFETCH) == (1000, validation.MAX_COUNT)
    with (
        override_settings(PGQUEUE={"CONCURRENCY": 1001}),
        pytest.raises(ImproperlyConfigured, match="a whole number from 1 to 1,000"),
    ):
        conf.get()
    with (
        override_settings(PGQUEUE={"PREFETCH": validation.MAX_COUNT + 1}),
        pytest.raises(ImproperlyConfigured, match="from 0 to 2,147,483,647"),
    ):
        conf.get()
