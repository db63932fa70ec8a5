"""A Tasks-framework task whose first parameter is ``context`` but which is not
declared ``takes_context=True`` (tests/integration/test_first_hour_fourth.py).
Not a ``tasks`` module: no worker's start-up list shows it."""

from __future__ import annotations

from typing import Any

from django_pgqueue.backend.compat import task


@task
def note(context: Any, text: str) -> str:
    return f"{context}: {text}"
