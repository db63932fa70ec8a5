"""A task module no test imports at the top: enqueue by path must find its task's
options whether or not something imported it first."""

from __future__ import annotations

from django_pgqueue import task


@task(queue="emails", max_attempts=4)
def late_task() -> None: ...
