"""A task under a name of its own (naming no module that exists), in a module of
an installed app that a worker does not import at start unless TASK_MODULES lists
it."""

from __future__ import annotations

from django_pgqueue import task


@task(name="tests.testapp.mail.renamed", queue="emails", max_attempts=7)
def renamed(x: int) -> int:
    return x * 2
