"""A task under a name of its own, in a module of an installed app that a worker
does not import at start (not its tasks or models module)."""

from __future__ import annotations

from django_pgqueue import task


@task(name="tests.testapp.renamed")
def renamed(x: int) -> int:
    return x * 2
