"""System checks, ids ``django_pgqueue.E00x``."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_pgqueue import conf


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: PGQUEUE is invalid. E002: its DATABASE is missing or not PostgreSQL."""
    try:
        settings = conf.get()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="django_pgqueue.E001")]
    if settings.DATABASE not in connections:
        return [
            checks.Error(
                f"PGQUEUE['DATABASE'] = {settings.DATABASE!r} is not in DATABASES",
                id="django_pgqueue.E002",
            )
        ]
    vendor = connections[settings.DATABASE].vendor
    if vendor != "postgresql":
        return [
            checks.Error(
                f"django-pgqueue needs PostgreSQL, but database {settings.DATABASE!r} is {vendor}",
                hint="Point PGQUEUE['DATABASE'] at a PostgreSQL database.",
                id="django_pgqueue.E002",
            )
        ]
    return []
