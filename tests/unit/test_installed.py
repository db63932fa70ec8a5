"""Under tox the suite must exercise the built wheel, not the source tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import django_pgqueue


@pytest.mark.skipif(not os.environ.get("PGQUEUE_TEST_INSTALLED"), reason="tox only")
def test_the_package_under_test_is_the_installed_wheel() -> None:
    location = Path(django_pgqueue.__file__).resolve()
    assert "site-packages" in location.parts, location
    for shipped in ("sql/queries.sql", "py.typed", "migrations/0006_lease_token_and_error_cap.py"):
        assert (location.parent / shipped).is_file(), shipped
