"""A task declared without ``backend=``, so on TASKS['default']. Only the tests that
name it in TASK_MODULES import it (with TASKS lacking that entry, its import fails)."""

from __future__ import annotations

from django_pgqueue.backend.compat import task


@task
def on_default() -> None: ...
