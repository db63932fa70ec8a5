"""System checks, ids ``django_pgqueue.E00x``; the database rule the Tasks backend's
E102 shares (see ``django_pgqueue.backend.checks``)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_pgqueue import conf

#: Why the job table's database must be the one the application writes to.
POSTGRESQL_HINT = (
    "Use PostgreSQL for the database your application writes to: a job is enqueued in "
    "the caller's transaction only on that same database. PGQUEUE['DATABASE'] can name "
    "a separate PostgreSQL database instead, but then every job commits on its own, apart "
    "from your data: a request that rolls back still leaves its job behind, and a worker "
    "can run a job before the data it needs is committed."
)


def database_problem() -> tuple[str, str | None] | None:
    """(message, hint) if the job table's database is missing or not PostgreSQL; None
    when it is fine (or PGQUEUE itself is invalid, which E001 reports)."""
    try:
        explicit = conf.get().DATABASE
    except ImproperlyConfigured:
        return None
    alias = conf.database()
    where = (
        f"PGQUEUE['DATABASE'] = {alias!r}"
        if explicit is not None
        else f"the database the routers pick for jobs (db_for_write), {alias!r},"
    )
    if alias not in connections:
        return (
            f"{where} is not in DATABASES",
            "Name an alias of DATABASES in PGQUEUE['DATABASE'].",
        )
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return (f"django-pgqueue needs PostgreSQL, but {where} is {vendor}", POSTGRESQL_HINT)
    return None


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: PGQUEUE is invalid. E002: the job table's database is missing or not
    PostgreSQL."""
    if not apps.is_installed("django_pgqueue"):
        return []  # imported by the Tasks backend without the app: E101 says so
    try:
        conf.get()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="django_pgqueue.E001")]
    problem = database_problem()
    if problem is None:
        return []
    message, hint = problem
    return [checks.Error(message, hint=hint, id="django_pgqueue.E002")]
