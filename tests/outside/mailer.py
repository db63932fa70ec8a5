"""A task under a name of its own outside every installed app ("mailer.send"), in a
module only PGQUEUE["TASK_MODULES"] brings in: a project's ``mysite/mailer.py``."""

from __future__ import annotations

from django_pgqueue import task


@task(name="mailer.send", queue="emails", max_attempts=3)
def send(x: int) -> int:
    return x * 3
