"""System checks of a PgQueueBackend, ids ``django_pgqueue.E1xx``.

Django runs them through its own ``tasks`` check for every configured alias.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_pgqueue import conf
from django_pgqueue.backend.compat import TASKS_APP

if TYPE_CHECKING:
    from django_pgqueue.backend.core import PgQueueBackend


def check_backend(backend: PgQueueBackend) -> list[checks.CheckMessage]:
    """Everything that would make the backend fail at its first enqueue."""
    name = f"TASKS[{backend.alias!r}]"
    errors: list[checks.CheckMessage] = []
    if not apps.is_installed("django_pgqueue"):
        errors.append(checks.Error(
            f"{name} uses PgQueueBackend, but django_pgqueue is not installed.",
            hint="Add 'django_pgqueue' to INSTALLED_APPS and run migrate.",
            id="django_pgqueue.E101"))
    errors += _check_database(name)
    unknown = sorted(set(backend.options) - backend.known_options)
    if unknown:
        errors.append(checks.Error(
            f"{name}['OPTIONS'] has unknown key(s) {', '.join(map(repr, unknown))}.",
            hint=f"PgQueueBackend reads: {', '.join(sorted(backend.known_options))}.",
            id="django_pgqueue.E103"))
    max_attempts = backend.options.get("MAX_ATTEMPTS")
    if max_attempts is not None and (isinstance(max_attempts, bool)
                                     or not isinstance(max_attempts, int) or max_attempts < 1):
        errors.append(checks.Error(
            f"{name}['OPTIONS']['MAX_ATTEMPTS'] = {max_attempts!r}: expected a whole number "
            "of at least 1.", id="django_pgqueue.E104"))
    backoff = backend.options.get("BACKOFF")
    if backoff is not None and (isinstance(backoff, bool) or not isinstance(backoff, int | float)
                                or not 0 <= backoff < float("inf")):
        errors.append(checks.Error(
            f"{name}['OPTIONS']['BACKOFF'] = {backoff!r}: expected a number of seconds, "
            "0 or more.", id="django_pgqueue.E107"))
    bad_queues = sorted(q for q in backend.queues
                        if not isinstance(q, str) or not conf.QUEUE_NAME_RE.match(q))
    if bad_queues:
        errors.append(checks.Error(
            f"{name}['QUEUES'] has invalid queue name(s) {', '.join(map(repr, bad_queues))}.",
            hint="A queue name is 1-64 letters, digits, _ . : -.",
            id="django_pgqueue.E105"))
    if TASKS_APP is not None and not apps.is_installed(TASKS_APP):
        errors.append(checks.Error(
            f"{name} uses the django-tasks backport, but {TASKS_APP!r} is not installed.",
            hint=f"Add {TASKS_APP!r} to INSTALLED_APPS.", id="django_pgqueue.E106"))
    return errors


def _check_database(name: str) -> list[checks.CheckMessage]:
    try:
        alias = conf.get().DATABASE
    except ImproperlyConfigured:
        return []  # django_pgqueue.E001 reports the settings themselves
    if alias not in connections:
        vendor = f"missing from DATABASES ({alias!r})"
    elif connections[alias].vendor != "postgresql":
        vendor = f"{connections[alias].vendor} ({alias!r})"
    else:
        return []
    return [checks.Error(
        f"{name} uses PgQueueBackend, which needs PostgreSQL, but PGQUEUE['DATABASE'] "
        f"is {vendor}.",
        hint="Point PGQUEUE['DATABASE'] at a PostgreSQL database.",
        id="django_pgqueue.E102")]
