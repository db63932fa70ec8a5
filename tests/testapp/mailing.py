"""A task under a name of its own ("mailer.deliver", no module of any app), in a
module of an installed app that is not its tasks.py: a worker imports neither
this module at start nor, for that path, a module named "mailer"."""

from __future__ import annotations

from django_pgqueue import task


@task(name="mailer.deliver", queue="emails", max_attempts=2)
def deliver(x: int) -> int:
    return x * 5
