"""The job model, found with a clear error when the app is not installed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from django_pgqueue import wording

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: What every way in says when the app is missing from INSTALLED_APPS.
NOT_INSTALLED = wording.NOT_INSTALLED


def require_installed() -> None:
    """ImproperlyConfigured saying what to add when the app is not installed (Django's
    own error, "Model class ... doesn't declare an explicit app_label", names neither
    the app nor the fix)."""
    if apps.ready and "django_pgqueue" not in apps.app_configs:  # one dict lookup
        raise ImproperlyConfigured(NOT_INSTALLED)


def job_model() -> type[Job]:
    """The Job model, or ImproperlyConfigured saying what to add (require_installed)."""
    require_installed()
    from django_pgqueue.models import Job  # callers run before the app registry is ready

    return Job
