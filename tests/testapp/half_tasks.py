"""A tasks module that fails to import half-way: a task declared above the error
is declared in a module that never imported, so a worker must not run it."""

import django_pgqueue


@django_pgqueue.task
def early() -> str:
    return "ran, though its module never imported"


MAIL_PROVIDER = MAIL_SETTINGS["provider"]  # type: ignore[name-defined]  # noqa: F821
