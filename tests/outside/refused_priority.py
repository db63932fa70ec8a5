"""A task refused as it is declared whatever its backend: a priority out of range.
Only the tests that name it in TASK_MODULES import it."""

from __future__ import annotations

from django_pgqueue.backend.compat import task


@task(priority=1000)
def refused() -> None: ...
