"""Embedded servers of the tests' own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.embedded_pg import EmbeddedPostgres


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    """A fresh embedded server, not the session's database (which may not be embedded)."""
    started = EmbeddedPostgres()
    try:
        started.start()
        yield started
    finally:
        started.destroy()
